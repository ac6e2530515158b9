//! `overbook sim`: load a scenario, run its variants (in parallel, one per
//! core), print the comparison and write CSV, JSON and plots.

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use overbook_core::Time;
use overbook_sim::engine::Progress;
use overbook_sim::outcome::RunResult;
use overbook_sim::scenario::{self, PlannedRun, Scenario};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct SimArgs {
    /// A built-in scenario's name (see --list) or a scenario file.
    #[arg(long, short, default_value = "default")]
    scenario: String,
    /// Override a setting of every run, as a dotted key: `--set cluster.nodes=200`,
    /// `--set policy.detector.tolerance=5`. May be repeated.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Seed for the workload generator and kill delays (same seed, same run).
    #[arg(long)]
    seed: Option<u64>,
    /// Replay a trace instead of the generator: its format
    /// (google-2011, google-2019, alibaba-2018, charon-sls).
    #[arg(long, requires = "trace")]
    trace_format: Option<String>,
    /// Files or directories of the trace (with --trace-format).
    #[arg(long, num_args = 1.., requires = "trace_format")]
    trace: Vec<PathBuf>,
    /// Skip and count trace rows that cannot be read, instead of stopping at the first.
    #[arg(long)]
    skip_bad_rows: bool,
    /// Where to write summary.csv, summary.json and plots [default: out/<scenario>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write every task's outcome to tasks-<run>.csv.
    #[arg(long)]
    per_task_csv: bool,
    /// Do not draw plots.
    #[arg(long)]
    no_plots: bool,
    /// Do not draw progress bars.
    #[arg(long)]
    no_progress: bool,
    /// A quick, small version of the scenario (10 nodes, 2 h): for smoke tests.
    #[arg(long)]
    small: bool,
    /// Runs at once [default: the number of cores].
    #[arg(long, value_parser = at_least_one)]
    jobs: Option<usize>,
    /// List the built-in scenarios and exit.
    #[arg(long)]
    list: bool,
    /// With --list: names only, one per line.
    #[arg(long, requires = "list")]
    names: bool,
}

pub fn run(args: SimArgs) -> Result<()> {
    if args.list {
        return list(args.names);
    }
    let mut overrides = Vec::new();
    if args.small {
        overrides.extend(
            ["cluster.nodes=10", "sim.horizon=\"2h\"", "sim.drain=\"2h\""].map(String::from),
        );
    }
    if let Some(seed) = args.seed {
        overrides.push(format!("seed={seed}"));
    }
    if let Some(format) = &args.trace_format {
        overrides.push("workload.kind=\"trace\"".into());
        overrides.push(format!("workload.format={}", toml_string(format)));
        let paths: Vec<String> =
            args.trace.iter().map(|p| toml_string(&p.display().to_string())).collect();
        overrides.push(format!("workload.paths=[{}]", paths.join(", ")));
        if args.skip_bad_rows {
            overrides.push("workload.skip_bad_rows=true".into());
        }
    } else if args.skip_bad_rows {
        bail!("--skip-bad-rows applies to traces: give --trace-format and --trace too");
    }
    overrides.extend(args.set.iter().cloned());
    let scenario = Scenario::load(&args.scenario, &overrides)?;
    overbook_sim::report::check_paper_numbers(&scenario)
        .and_then(|()| overbook_sim::report::check_plots(&scenario))
        .map_err(|e| anyhow::anyhow!("scenario {}: {e}", scenario.name))?;
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("out").join(&scenario.name));

    println!("{} — {}", scenario.name, scenario.title);
    if !scenario.paper.is_empty() {
        println!("reproduces {}", scenario.paper);
    }
    let started = Instant::now();
    let results = run_all(&scenario.runs, args.jobs, !args.no_progress)?;
    let wall = started.elapsed();
    let events: u64 = results.iter().map(|r| r.counters.events).sum();
    println!();
    print!("{}", scenario::render(&scenario, &results));
    let written =
        scenario::write_outputs(&scenario, &results, &out, !args.no_plots, args.per_task_csv)
            .with_context(|| format!("writing results to {}", out.display()))?;
    println!();
    println!(
        "{} runs, {} events in {:.1} s ({:.2} M events/s over {} runs)",
        results.len(),
        events,
        wall.as_secs_f64(),
        events as f64 / wall.as_secs_f64().max(1e-9) / 1e6,
        results.len()
    );
    for p in written {
        println!("wrote {}", p.display());
    }
    Ok(())
}

fn list(names_only: bool) -> Result<()> {
    for (name, _) in scenario::BUILT_IN {
        if names_only {
            println!("{name}");
            continue;
        }
        let s = Scenario::load(name, &[])?;
        println!("{:<24} {} ({}; {} runs)", s.name, s.title, s.paper, s.runs.len());
    }
    Ok(())
}

fn toml_string(s: &str) -> String {
    let escaped: String = s
        .chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c => vec![c],
        })
        .collect();
    format!("\"{escaped}\"")
}

/// Run every planned run, `jobs` at a time, keeping the scenario's order.
fn run_all(runs: &[PlannedRun], jobs: Option<usize>, bars: bool) -> Result<Vec<RunResult>> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = jobs.unwrap_or(cores).clamp(1, runs.len().max(1));
    let multi = MultiProgress::new();
    if !bars {
        multi.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let style =
        ProgressStyle::with_template("{prefix:>24} [{bar:30}] {percent:>3}% sim time {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<RunResult>>>> =
        Mutex::new((0..runs.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(run) = runs.get(i) else { break };
                let end = run.spec.end_time();
                let bar = multi.add(ProgressBar::new(end.as_micros() / 1_000_000));
                bar.set_style(style.clone());
                bar.set_prefix(run.name.clone());
                let mut progress = Bar(bar.clone());
                let result = scenario::execute(run, &mut progress)
                    .with_context(|| format!("run {}", run.name));
                bar.finish_and_clear();
                if let Ok(mut all) = results.lock() {
                    all[i] = Some(result);
                }
            });
        }
    });
    let all = results.into_inner().map_err(|_| anyhow::anyhow!("a simulation thread panicked"))?;
    all.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("a run did not finish"))))
        .collect()
}

struct Bar(ProgressBar);

impl Progress for Bar {
    fn update(&mut self, now: Time, events: u64) {
        self.0.set_position(now.as_micros() / 1_000_000);
        self.0.set_message(format!(
            "{:.1} h, {:.1} M events",
            now.as_secs_f64() / 3600.0,
            events as f64 / 1e6
        ));
    }
}

/// `--jobs`: a count of runs at once, 1 or more.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be 1 or more".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}
