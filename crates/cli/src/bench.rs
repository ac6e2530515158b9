//! `overbook bench`: measurements of overbook itself, reported as numbers with
//! the command that produced them (never as pass/fail thresholds in tests).

use anyhow::{Context, Result};
use clap::Subcommand;
use overbook_sim::scenario::{self, Scenario};
use std::time::Instant;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Simulator speed at Google scale: a day of a 12,500-node cell with about
    /// 600,000 tasks and usage every 5 minutes, under Charon's policy.
    /// Prints wall time, events per second and peak memory.
    Sim {
        /// Override settings of the `scale` scenario (`--set cluster.nodes=1000`).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Sim { set } => bench_sim(&set),
    }
}

fn bench_sim(set: &[String]) -> Result<()> {
    let scenario = Scenario::load("scale", set)?;
    for run in &scenario.runs {
        let started = Instant::now();
        let result =
            scenario::execute(run, &mut ()).with_context(|| format!("run {}", run.name))?;
        let wall = started.elapsed().as_secs_f64();
        let tasks = result.outcomes.len();
        let events = result.counters.events;
        println!("run:              {}", run.name);
        println!("nodes:            {}", result.counters.nodes);
        println!("tasks:            {tasks}");
        println!("simulated time:   {:.1} h", result.counters.horizon.as_secs_f64() / 3600.0);
        println!("events:           {events}");
        println!("wall time:        {wall:.2} s (one core)");
        println!("events/s:         {:.2} M", events as f64 / wall.max(1e-9) / 1e6);
        match peak_rss_kib() {
            Some(kib) => println!("peak RSS:         {:.0} MiB", kib as f64 / 1024.0),
            None => println!("peak RSS:         unknown (no /proc/self/status)"),
        }
    }
    Ok(())
}

/// `VmHWM` of this process: the most resident memory it ever held.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
