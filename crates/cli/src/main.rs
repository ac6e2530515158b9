//! `overbook`: the one binary. `overbook sim` runs the simulator; the node
//! agent's commands (agent, run, status, events, check, demo) come with the
//! agent crate.

mod bench;
mod sim;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Safe memory oversubscription for Linux nodes that run production and
/// best-effort containers side by side.
#[derive(Debug, Parser)]
#[command(name = "overbook", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Simulate a cluster in virtual time and compare memory policies
    /// (runs the built-in `default` scenario when given nothing).
    Sim(sim::SimArgs),
    /// Measure overbook itself.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::run(args),
        Command::Bench(cmd) => bench::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("overbook: {e:#}");
            ExitCode::FAILURE
        }
    }
}
