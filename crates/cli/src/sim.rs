//! `overbook sim`: load a scenario, run its variants (in parallel, one per
//! core), print the comparison and write CSV, JSON and plots.

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use overbook_core::Time;
use overbook_sim::engine::Progress;
use overbook_sim::outcome::RunResult;
use overbook_sim::scenario::{self, PlannedRun, Scenario};
use overbook_sim::tally::Outcomes;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct SimArgs {
    /// A built-in scenario's name (see --list) or a scenario file.
    #[arg(long, short, default_value = "default")]
    scenario: String,
    /// Override a setting, as a dotted key: `--set cluster.nodes=200`,
    /// `--set policy.detector.tolerance=5`. It applies to every run the key
    /// fits (a detector's tolerance, to the variants whose detector has
    /// one); a key no run has is an error. `VARIANT:KEY=VALUE` sets it for
    /// one variant only: `--set charon:policy.detector.tolerance=10`. May
    /// be repeated.
    #[arg(long = "set", value_name = "[VARIANT:]KEY=VALUE")]
    set: Vec<String>,
    /// Seed for the workload generator and kill delays (same seed, same run).
    #[arg(long)]
    seed: Option<u64>,
    /// Replay a trace instead of the generator: its format
    /// (google-2011, google-2019, alibaba-2018, charon-sls).
    #[arg(long, requires = "trace")]
    trace_format: Option<String>,
    /// Files or directories of the trace (with --trace-format), in any
    /// order: each table is sorted by time before the replay, in memory up
    /// to `workload.sort_memory` (512 MiB), beyond it through temporary
    /// files in `workload.spill_dir` (removed after).
    #[arg(long, num_args = 1.., requires = "trace_format")]
    trace: Vec<PathBuf>,
    /// Replay a window of the trace starting this long after its first row
    /// (2h, 3d 4h, or seconds) [default: 0, the first row, whatever its
    /// time], for --for: tasks running then enter with their remaining work
    /// and memory, tasks that ended before are not replayed: --from 2h --for
    /// 6h replays from 2 h to 8 h after the first row. A window past the
    /// trace's last row is an error (see docs/workload.md, Window).
    #[arg(long, value_name = "DURATION", requires = "trace", value_parser = span)]
    from: Option<std::time::Duration>,
    /// The window's length (6h, longer than zero): tasks the trace submits
    /// after it are counted (after horizon), not run; it sets sim.horizon
    /// [default: sim.horizon, 6h].
    #[arg(long = "for", value_name = "DURATION", requires = "trace", value_parser = positive_span)]
    span: Option<std::time::Duration>,
    /// Skip and count trace rows that cannot be read, instead of stopping at the first.
    #[arg(long)]
    skip_bad_rows: bool,
    /// Where to write summary.csv, summary.json and plots [default: out/<scenario>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write every task's outcome to tasks-<run>.csv (the run then keeps
    /// every outcome, 136 bytes a task, where it otherwise keeps only sums
    /// and 32 bytes a job).
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
    /// Load the scenario with every setting given, list the runs it would
    /// make, and exit: nothing is simulated or written.
    #[arg(long)]
    dry_run: bool,
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
        if let Some(from) = args.from {
            overrides.push(format!("workload.from={}", from.as_secs_f64()));
        }
        if let Some(span) = args.span {
            overrides.push(format!("sim.horizon={}", span.as_secs_f64()));
        }
    } else if args.skip_bad_rows {
        bail!("--skip-bad-rows applies to traces: give --trace-format and --trace too");
    }
    let scenario = load(&args.scenario, &overrides, &args.set)?;
    overbook_sim::report::check_paper_numbers(&scenario)
        .and_then(|()| overbook_sim::report::check_plots(&scenario))
        .map_err(|e| anyhow::anyhow!("scenario {}: {e}", scenario.name))?;
    if args.dry_run {
        println!("{} — {}: {} runs", scenario.name, scenario.title, scenario.runs.len());
        for run in &scenario.runs {
            println!(
                "{:<32} {} nodes, {:.1} h",
                run.name,
                run.spec.cluster.nodes,
                run.spec.end_time().as_secs_f64() / 3600.0
            );
        }
        return Ok(());
    }
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("out").join(&scenario.name));

    println!("{} — {}", scenario.name, scenario.title);
    if !scenario.paper.is_empty() {
        println!("reproduces {}", scenario.paper);
    }
    let started = Instant::now();
    let outcomes = if args.per_task_csv { Outcomes::Kept } else { Outcomes::Tallied };
    let results = run_all(&scenario.runs, outcomes, args.jobs, !args.no_progress)?;
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

/// One `--set`: `KEY=VALUE` for every run it fits, or `VARIANT:KEY=VALUE`.
#[derive(Debug)]
struct Setting {
    /// As given on the command line.
    given: String,
    /// The variant it is for; `None`: every run the key fits.
    variant: Option<String>,
    key: String,
    /// `KEY=VALUE`, the scenario's override.
    setting: String,
}

fn parse_setting(given: &str) -> Result<Setting> {
    let Some((key, value)) = given.split_once('=') else {
        bail!("--set {given:?}: expected KEY=VALUE or VARIANT:KEY=VALUE");
    };
    let (variant, key) = match key.split_once(':') {
        Some((variant, key)) => (Some(variant.trim().to_string()), key.trim()),
        None => (None, key.trim()),
    };
    if variant.as_deref() == Some("") {
        bail!("--set {given:?}: the variant before ':' is empty");
    }
    Ok(Setting {
        given: given.to_string(),
        variant,
        key: key.to_string(),
        setting: format!("{key}={value}"),
    })
}

/// Whether a scenario error says the key does not exist where it was set
/// (a detector without a tolerance), as opposed to a bad value.
fn does_not_fit(error: &str, key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key);
    error.contains(&format!("unknown field `{last}`"))
}

/// Load the scenario with `overrides` for every run, then each `--set`
/// where it fits: every run whose settings have the key (or the one
/// variant it names). A key that fits no run is an error naming it.
fn load(name: &str, overrides: &[String], sets: &[String]) -> Result<Scenario> {
    let full = Scenario::load(name, overrides)?;
    if sets.is_empty() {
        return Ok(full);
    }
    let sets: Vec<Setting> = sets.iter().map(|s| parse_setting(s)).collect::<Result<_>>()?;
    let mut variants: Vec<String> = Vec::new();
    for run in &full.runs {
        if !variants.contains(&run.variant) {
            variants.push(run.variant.clone());
        }
    }
    for s in &sets {
        if let Some(v) = &s.variant {
            if !variants.contains(v) {
                bail!(
                    "--set {:?}: scenario {} has no variant {v:?} (its variants: {})",
                    s.given,
                    full.name,
                    variants.join(", ")
                );
            }
        }
    }
    let (text, origin) = scenario_text(name)?;
    let table: toml::Table =
        text.parse().with_context(|| format!("{origin}: not a TOML scenario"))?;
    let mut runs = Vec::new();
    let mut fitted = vec![false; sets.len()];
    let mut why_not: Vec<Option<String>> = vec![None; sets.len()];
    for (vi, variant) in variants.iter().enumerate() {
        let one = one_variant(&table, vi, variant)?;
        let with = |chosen: &[bool]| -> Vec<String> {
            let mut all = overrides.to_vec();
            all.extend(
                sets.iter().zip(chosen).filter(|(_, c)| **c).map(|(s, _)| s.setting.clone()),
            );
            all
        };
        let mut chosen = vec![false; sets.len()];
        // Each setting on top of those that fit before it; again while one
        // more fits (`--set …tolerance=5 --set …kind=constraint-thrashing`).
        loop {
            let mut more = false;
            for (i, s) in sets.iter().enumerate() {
                if chosen[i] || s.variant.as_ref().is_some_and(|v| v != variant) {
                    continue;
                }
                let mut trial = chosen.clone();
                trial[i] = true;
                match Scenario::parse(&one, &origin, &with(&trial)) {
                    Ok(_) => {
                        chosen[i] = true;
                        more = true;
                    }
                    Err(e) if does_not_fit(&e.to_string(), &s.key) => {
                        why_not[i].get_or_insert(e.to_string());
                    }
                    Err(e) => return Err(anyhow::anyhow!("--set {:?}: {e}", s.given)),
                }
            }
            if !more {
                break;
            }
        }
        for (i, s) in sets.iter().enumerate() {
            if s.variant.as_ref() == Some(variant) && !chosen[i] {
                bail!(
                    "--set {:?}: variant {variant} has no setting {}: {}",
                    s.given,
                    s.key,
                    why_not[i].as_deref().unwrap_or("refused")
                );
            }
        }
        let scenario = Scenario::parse(&one, &origin, &with(&chosen))?;
        runs.extend(scenario.runs);
        for (f, c) in fitted.iter_mut().zip(&chosen) {
            *f |= c;
        }
    }
    if let Some(i) = fitted.iter().position(|f| !f) {
        bail!(
            "--set {:?}: no run of scenario {} has the setting {} ({})",
            sets[i].given,
            full.name,
            sets[i].key,
            why_not[i].as_deref().unwrap_or("refused")
        );
    }
    Ok(Scenario { runs, ..full })
}

/// A scenario's text and how errors name it, as `Scenario::load` finds it.
fn scenario_text(name: &str) -> Result<(String, String)> {
    if let Some((n, text)) = scenario::BUILT_IN.iter().find(|(n, _)| *n == name) {
        return Ok(((*text).to_string(), format!("built-in scenario {n:?}")));
    }
    let text = std::fs::read_to_string(name).with_context(|| name.to_string())?;
    Ok((text, name.to_string()))
}

/// The scenario's text with only its `index`th variant (named, so it keeps
/// its name), no baseline (checked on the whole) and no paper numbers.
fn one_variant(table: &toml::Table, index: usize, name: &str) -> Result<String> {
    let mut one = table.clone();
    one.remove("baseline");
    one.remove("paper_numbers");
    if let Some(toml::Value::Array(variants)) = one.get_mut("variants") {
        let mut v = variants.get(index).cloned().context("a variant of the scenario")?;
        if let toml::Value::Table(t) = &mut v {
            t.insert("name".into(), toml::Value::String(name.to_string()));
        }
        *variants = vec![v];
    }
    toml::to_string(&one).context("writing a variant's scenario")
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
fn run_all(
    runs: &[PlannedRun],
    outcomes: Outcomes,
    jobs: Option<usize>,
    bars: bool,
) -> Result<Vec<RunResult>> {
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
                let result = scenario::execute(run, outcomes, &mut progress)
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

    fn sort_hook(&self) -> Option<overbook_sim::trace::SortHook> {
        let bar = self.0.clone();
        Some(Box::new(move |rows, runs| {
            bar.set_message(format!(
                "sorting the trace by time: {:.1} M rows read, {runs} runs written",
                rows as f64 / 1e6
            ));
        }))
    }
}

/// `--from`: a duration, `2h` or seconds.
fn span(s: &str) -> Result<std::time::Duration, String> {
    overbook_sim::units::parse_span(s)
}

/// `--for`: a duration longer than zero.
fn positive_span(s: &str) -> Result<std::time::Duration, String> {
    match span(s)? {
        d if d.is_zero() => Err("the window must be longer than zero".into()),
        d => Ok(d),
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

#[cfg(test)]
mod tests {
    use super::*;
    use overbook_core::detect::DetectorConfig;

    fn tolerance(s: &Scenario, variant: &str) -> Option<f64> {
        let run = s.runs.iter().find(|r| r.variant == variant).expect("the variant runs");
        match run.spec.policy.detector {
            DetectorConfig::ConstraintThrashing { tolerance, .. }
            | DetectorConfig::ProductionFirst { tolerance, .. } => Some(tolerance),
            _ => None,
        }
    }

    fn sets(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn a_setting_applies_to_the_runs_it_fits() {
        let s = load("default", &[], &sets(&["policy.detector.tolerance=5"])).expect("loads");
        let names: Vec<&str> = s.runs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["mercury", "kuber", "charon", "overbook-adaptive", "overbook", "overbook-packed"]
        );
        assert_eq!(tolerance(&s, "mercury"), None);
        assert_eq!(tolerance(&s, "charon"), Some(5.0));
        assert_eq!(tolerance(&s, "overbook-adaptive"), Some(5.0));
        assert_eq!(tolerance(&s, "overbook"), Some(5.0));
        assert_eq!(s.baseline.as_deref(), Some("mercury"));
        assert!(!s.paper_numbers.is_empty());
    }

    #[test]
    fn a_variant_setting_applies_to_that_variant_only() {
        let s = load(
            "default",
            &[],
            &sets(&["policy.detector.tolerance=5", "charon:policy.detector.tolerance=10"]),
        )
        .expect("loads");
        assert_eq!(tolerance(&s, "charon"), Some(10.0));
        assert_eq!(tolerance(&s, "overbook-adaptive"), Some(5.0));
        // Every sweep point of the variant.
        let s = load("charon-loads", &[], &sets(&["charon:policy.detector.tolerance=7"]))
            .expect("loads");
        let charon: Vec<&PlannedRun> = s.runs.iter().filter(|r| r.variant == "charon").collect();
        assert_eq!(charon.len(), 4);
        for run in charon {
            match run.spec.policy.detector {
                DetectorConfig::ConstraintThrashing { tolerance, .. } => {
                    assert_eq!(tolerance, 7.0, "{}", run.name);
                }
                ref other => panic!("{}: {other:?}", run.name),
            }
        }
    }

    #[test]
    fn settings_that_fit_nowhere_or_name_no_variant_are_errors_naming_them() {
        let err = |set: &[&str]| match load("default", &[], &sets(set)) {
            Ok(_) => panic!("{set:?} accepted"),
            Err(e) => format!("{e:#}"),
        };
        let e = err(&["policy.detector.toleranse=5"]);
        assert!(e.contains("policy.detector.toleranse") && e.contains("no run"), "{e}");
        let e = err(&["mercury:policy.detector.tolerance=5"]);
        assert!(e.contains("mercury") && e.contains("policy.detector.tolerance"), "{e}");
        let e = err(&["marcury:cluster.nodes=3"]);
        assert!(e.contains("marcury") && e.contains("charon"), "{e}");
        let e = err(&["policy.detector.tolerance=-2"]);
        assert!(e.contains("tolerance") && e.contains("-2"), "{e}");
        let e = err(&["cluster.nodes"]);
        assert!(e.contains("KEY=VALUE"), "{e}");
    }
}
