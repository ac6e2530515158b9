//! `overbook`: the one binary. `overbook sim` runs the simulator; the node
//! agent's commands (agent, run, status, events, check, demo) come with the
//! agent crate. The command line is a library too (`Cli`, `main`), so tests
//! can parse every documented example without running it.

mod bench;
mod huge_pages;
mod node;
mod sim;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Safe memory oversubscription for Linux nodes that run production and
/// best-effort containers side by side.
#[derive(Debug, Parser)]
#[command(name = "overbook", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Simulate a cluster in virtual time and compare memory policies
    /// (runs the built-in `default` scenario when given nothing). Runs on
    /// transparent huge pages where the kernel has them
    /// (OVERBOOK_HUGE_PAGES=0: not).
    Sim(sim::SimArgs),
    /// Measure overbook itself.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Run the node agent (root): watch the containers under the node's
    /// cgroup and preempt best-effort ones when the node thrashes.
    Agent(node::AgentArgs),
    /// Start a command in a new container on this node, admitted by the
    /// agent's launcher (production at once; best-effort when it fits).
    Run(node::RunArgs),
    /// Preempt one best-effort task now, as the policy would (kill,
    /// freeze, freeze-and-swap-out or checkpoint); it resumes when it fits.
    Preempt(node::PreemptArgs),
    /// Restore here a task another node checkpointed into the shared image
    /// store (`[checkpoint] shared = true` on both); it runs here from then on.
    Adopt(node::AdoptArgs),
    /// Show what the running agent sees: every container's class, memory,
    /// fault and refault rates, pressure and state.
    Status(node::StatusArgs),
    /// Show the agent's decisions and their evidence.
    Events(node::EventsArgs),
    /// Say what this host supports and what overbook does without each.
    Check(node::CheckArgs),
    /// Show the agent at work (root): production alone, squeezed by
    /// best-effort hogs, and squeezed with the agent, on a small node
    /// cgroup made for the demo and removed after.
    Demo(node::DemoArgs),
    /// A real memory workload for demos and tests (`anon SIZE [SECONDS]`
    /// or `file PATH SIZE [SECONDS]`).
    #[command(hide = true)]
    Workload(node::WorkloadArgs),
}

/// The `overbook` binary: parse the command line, run it, report an error
/// in one line.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // Not for `bench sim --against`, which only times two others: each
    // gets this command's environment as it was given, and chooses.
    let simulates = match &cli.command {
        Command::Sim(_) => true,
        Command::Bench(bench::BenchCommand::Sim(a)) => a.against.is_none(),
        _ => false,
    };
    if simulates {
        huge_pages::run_again_with_them();
    }
    let prints_only = match &cli.command {
        Command::Sim(_) | Command::Status(_) | Command::Events(_) | Command::Check(_) => true,
        Command::Agent(args) => args.only_checks(),
        _ => false,
    };
    if prints_only {
        // `overbook sim --list | head -1` ends quietly when head has read its line.
        if let Err(e) = overbook_linux::process::end_quietly_on_closed_pipe() {
            eprintln!("overbook: {e}");
        }
    }
    let result = match cli.command {
        Command::Sim(args) => sim::run(args),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Agent(args) => node::agent(args),
        Command::Run(args) => node::run(args),
        Command::Preempt(args) => node::preempt(args),
        Command::Adopt(args) => node::adopt(args),
        Command::Status(args) => node::status(args),
        Command::Events(args) => node::events(args),
        Command::Check(args) => node::check(args),
        Command::Demo(args) => node::demo(args),
        Command::Workload(args) => node::workload(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("overbook: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes in one line, each cause said once: many of the
/// libraries' errors name their cause in their own message too (`{path}:
/// {source}`), and the chain would repeat it (`…: File exists (os error
/// 17): File exists (os error 17)`).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::one_line;
    use anyhow::Context;

    /// An error that names its cause in its message and as its source.
    #[derive(Debug)]
    struct Named {
        path: String,
        source: std::io::Error,
    }

    impl std::fmt::Display for Named {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}: {}", self.path, self.source)
        }
    }

    impl std::error::Error for Named {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::AlreadyExists, "File exists");
        let e = Err::<(), _>(Named { path: "/tmp/t".into(), source: io })
            .context("writing results to /tmp/t")
            .unwrap_err();
        assert_eq!(one_line(&e), "writing results to /tmp/t: /tmp/t: File exists");
        let plain =
            Err::<(), _>(std::io::Error::other("disk full")).context("writing a.csv").unwrap_err();
        assert_eq!(one_line(&plain), "writing a.csv: disk full");
    }
}
