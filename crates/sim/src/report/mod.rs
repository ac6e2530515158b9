//! Reports of a scenario's runs: the comparison table on stdout, and
//! `summary.csv`, `summary.json`, per-task CSVs and plots in a directory.
//!
//! Everything is computed from the runs' [`RunResult`]s alone
//! ([`RunSummary::new`]), per class (production, best-effort, critical) and per
//! priority band (004 Table 1: low 0–1, medium 2–8, high 9–11):
//!
//! * a *job* completes when all its tasks completed; its completion time (JCT)
//!   runs from its first task's submission to its last task's end, and is also
//!   004's response time (queueing plus execution). Percentiles are
//!   nearest-rank over completed jobs; JCR is completed jobs / jobs (000 §5.1).
//! * wasted CPU-hours are the CPU time of unsuccessful executions plus
//!   checkpoint overhead (004 §3.3.2): Σ (lost work + checkpoint time) × cores.
//! * energy follows a linear power model in the style of Fan et al. (ISCA
//!   2007): a node draws P(u) = P_idle + (P_peak − P_idle)·u with u its busy
//!   cores / cores, so over the horizon T the cluster uses
//!   nodes·P_idle·T + (P_peak − P_idle)/node_cores · busy core-seconds, with
//!   [`P_IDLE_WATTS`] = 100 W and [`P_PEAK_WATTS`] = 250 W. 004 states no power
//!   curve (it converts "average CPU utilization … to a corresponding wattage"),
//!   so these constants are ours; only ratios between runs mean much.
//!
//! A scenario's `[[paper_numbers]]` may name one of our metrics in `ours`
//! (see [`metrics`]) to print it beside the paper's.

mod csv;
mod draw;
pub mod metrics;
pub mod paper;
mod plots;
pub mod reclaim;
pub mod summary;
mod table;

pub use metrics::Metric;
pub use paper::{check_paper_numbers, paper_rows, Expr, PaperRow};
pub use plots::{check_plots, PLOTS};
pub use summary::{Band, GroupKey, GroupSummary, RunSummary, P_IDLE_WATTS, P_PEAK_WATTS};

use crate::outcome::RunResult;
use crate::scenario::Scenario;
use serde::Serialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Writing a report failed.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {problem}")]
    Other { path: PathBuf, problem: String },
    /// The scenario names a metric, variant, point or plot that does not exist.
    #[error("{0}")]
    Scenario(String),
    /// The results do not line up with the scenario's runs.
    #[error("{results} results for the {runs} runs of scenario {scenario:?}")]
    Mismatch { scenario: String, runs: usize, results: usize },
}

/// Summaries of every run, named as the scenario names them.
/// A grouped bar chart (a bar per series in each category) into `path`,
/// SVG or PNG by its extension: for benchmarks' comparisons outside the
/// simulator (`overbook bench colocation --plot`). With `y_max`, taller
/// bars are cut at it (say so in the title).
pub fn draw_bars(
    path: &Path,
    title: &str,
    y_label: &str,
    y_max: Option<f64>,
    categories: Vec<String>,
    series: Vec<(String, Vec<Option<f64>>)>,
) -> Result<(), String> {
    let series = series.into_iter().map(|(n, vs)| (n, vs, Vec::new())).collect();
    draw_bars_with_intervals(path, title, y_label, y_max, categories, series)
}

/// Lines over a numeric x axis from zero into `path`, SVG or PNG by its
/// extension, each point marked: for benchmarks' scaling curves
/// (`overbook bench sim --grid`).
pub fn draw_lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: Vec<(String, Vec<(f64, f64)>)>,
) -> Result<(), String> {
    let chart = draw::Chart {
        title: title.into(),
        x_label: x_label.into(),
        y_label: y_label.into(),
        y_max: None,
        kind: draw::Kind::Lines(
            series
                .into_iter()
                .map(|(name, points)| draw::Series { name, points, marked: true })
                .collect(),
        ),
    };
    draw::draw_file(path, &chart)
}

/// One series of bars: its name, a value per category, and (maybe empty)
/// an interval per category.
pub type IntervalBars = (String, Vec<Option<f64>>, Vec<Option<[f64; 2]>>);

/// [`draw_bars`] with a 95% interval (or any `[low, high]`) drawn as a
/// whisker on each bar that has one.
pub fn draw_bars_with_intervals(
    path: &Path,
    title: &str,
    y_label: &str,
    y_max: Option<f64>,
    categories: Vec<String>,
    series: Vec<IntervalBars>,
) -> Result<(), String> {
    let cut = |v: Option<f64>| v.map(|x| y_max.map_or(x, |m| x.min(m)));
    let series: Vec<IntervalBars> = series
        .into_iter()
        .map(|(n, vs, ivs)| (n, vs.into_iter().map(cut).collect(), ivs))
        .collect();
    let chart = draw::Chart {
        title: title.into(),
        x_label: String::new(),
        y_label: y_label.into(),
        y_max,
        kind: draw::Kind::Bars {
            categories,
            series: series
                .into_iter()
                .map(|(name, values, intervals)| draw::BarSeries { name, values, intervals })
                .collect(),
        },
    };
    draw::draw_file(path, &chart)
}

pub fn summarize(scenario: &Scenario, results: &[RunResult]) -> Vec<RunSummary> {
    scenario
        .runs
        .iter()
        .zip(results)
        .map(|(run, result)| {
            RunSummary::new(result, run.spec.cluster.node_cores)
                .at_point(&run.name, run.point.as_deref())
        })
        .collect()
}

/// The comparison table printed on stdout.
pub fn render(scenario: &Scenario, results: &[RunResult]) -> String {
    let summaries = summarize(scenario, results);
    let mut out = table::render(scenario, &summaries, &paper_rows(scenario, &summaries));
    if reclaim::shows(scenario, results) {
        out.push_str(&reclaim::render(scenario, results));
    }
    if results.len() != scenario.runs.len() {
        out.push_str(&format!(
            "warning: {} results for {} runs; the table shows the first {}\n",
            results.len(),
            scenario.runs.len(),
            summaries.len()
        ));
    }
    out
}

/// Write summary.csv, summary.json, plots and (if asked) per-task CSVs under
/// `dir`, creating it; returns the files written.
pub fn write_outputs(
    scenario: &Scenario,
    results: &[RunResult],
    dir: &Path,
    plots: bool,
    per_task: bool,
) -> Result<Vec<PathBuf>, ReportError> {
    check_paper_numbers(scenario).map_err(ReportError::Scenario)?;
    check_plots(scenario).map_err(ReportError::Scenario)?;
    if results.len() != scenario.runs.len() {
        return Err(ReportError::Mismatch {
            scenario: scenario.name.clone(),
            runs: scenario.runs.len(),
            results: results.len(),
        });
    }
    std::fs::create_dir_all(dir)
        .map_err(|source| ReportError::Io { path: dir.to_path_buf(), source })?;
    let summaries = summarize(scenario, results);
    let mut written = Vec::new();

    let path = dir.join("summary.csv");
    csv::write_summary(&path, &scenario.name, &summaries)?;
    written.push(path);

    let path = dir.join("summary.json");
    write_json(&path, scenario, &summaries)?;
    written.push(path);

    if reclaim::shows(scenario, results) {
        let path = dir.join("reclaim.csv");
        reclaim::write_csv(&path, scenario, results)?;
        written.push(path);
    }
    if per_task {
        written.extend(write_task_files(scenario, results, dir)?);
    }
    if plots {
        written.extend(plots::write_plots(scenario, &summaries, results, dir)?);
    }
    Ok(written)
}

/// The power model as summary.json states it.
#[derive(Debug, Serialize)]
struct PowerModel {
    idle_watts: f64,
    peak_watts: f64,
    formula: &'static str,
}

#[derive(Debug, Serialize)]
struct SummaryJson<'a> {
    scenario: &'a str,
    title: &'a str,
    paper: &'a str,
    baseline: Option<&'a str>,
    sweep: Option<&'a str>,
    power_model: PowerModel,
    runs: &'a [RunSummary],
    paper_numbers: Vec<PaperRow>,
}

fn write_json(
    path: &Path,
    scenario: &Scenario,
    summaries: &[RunSummary],
) -> Result<(), ReportError> {
    let doc = SummaryJson {
        scenario: &scenario.name,
        title: &scenario.title,
        paper: &scenario.paper,
        baseline: scenario.baseline.as_deref(),
        sweep: scenario.sweep_name.as_deref(),
        power_model: PowerModel {
            idle_watts: P_IDLE_WATTS,
            peak_watts: P_PEAK_WATTS,
            formula: "kWh = (nodes * idle_watts * horizon_s + (peak_watts - idle_watts) / node_cores * busy_core_seconds) / 3.6e6",
        },
        runs: summaries,
        paper_numbers: paper_rows(scenario, summaries),
    };
    let text = serde_json::to_string_pretty(&doc)
        .map_err(|e| ReportError::Other { path: path.to_path_buf(), problem: e.to_string() })?;
    std::fs::write(path, text + "\n")
        .map_err(|source| ReportError::Io { path: path.to_path_buf(), source })
}

/// `tasks-<run>.csv` for every run, with file-safe, distinct names.
fn write_task_files(
    scenario: &Scenario,
    results: &[RunResult],
    dir: &Path,
) -> Result<Vec<PathBuf>, ReportError> {
    let mut used = HashSet::new();
    let mut written = Vec::new();
    for (run, result) in scenario.runs.iter().zip(results) {
        let base = file_stem(&run.name);
        let mut stem = base.clone();
        let mut n = 1;
        while !used.insert(stem.clone()) {
            n += 1;
            stem = format!("{base}-{n}");
        }
        let path = dir.join(format!("tasks-{stem}.csv"));
        if result.outcomes.len() != result.tally.all.tasks {
            return Err(ReportError::Other {
                path,
                problem: format!(
                    "run {:?} kept {} of its {} tasks' outcomes: run it with every outcome kept \
                     (Outcomes::Kept) to write them",
                    run.name,
                    result.outcomes.len(),
                    result.tally.all.tasks
                ),
            });
        }
        csv::write_tasks(&path, &result.outcomes)?;
        written.push(path);
    }
    Ok(written)
}

/// A run name as a file name: `charon@tolerance=5` → `charon_tolerance_5`.
/// Only letters, digits, `-`, `_` and inner `.` survive, so no name escapes the directory.
fn file_stem(run: &str) -> String {
    let stem: String = run
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' })
        .collect();
    let stem = stem.trim_start_matches('.');
    if stem.is_empty() {
        "run".to_string()
    } else {
        stem.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::summary::fixtures::*;

    #[test]
    fn grouped_bars_are_drawn_with_every_category_and_series() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("bars.svg");
        let series = vec![
            ("p99".to_string(), vec![Some(1.0), Some(2.5)]),
            ("work".to_string(), vec![None, Some(2.1)]),
        ];
        let categories = vec!["isolated".into(), "kernel".into()];
        super::draw_bars(&path, "t", "ratio", Some(2.0), categories, series).expect("drawn");
        let svg = std::fs::read_to_string(&path).expect("written");
        for word in ["isolated", "kernel", "p99", "work"] {
            assert!(svg.contains(word), "{word} missing");
        }
    }
    use super::*;
    use overbook_core::Class;

    const SWEPT: &str = r#"
        name = "t"
        title = "test"
        paper = "000"
        baseline = "a"
        plots = ["jct-cdf", "jcr-by-load"]
        [sweep]
        key = "seed"
        name = "seed"
        values = [1, 2]
        labels = ["X1", "X2"]
        [[variants]]
        name = "a"
        [[variants]]
        name = "b"
        [[paper_numbers]]
        variant = "b"
        point = "X2"
        metric = "JCR vs a"
        value = "26% higher"
        source = "000 §5.5"
        ours = "jcr.best-effort / a"
    "#;

    fn swept() -> (Scenario, Vec<RunResult>) {
        let s = Scenario::parse(SWEPT, "t", &[]).unwrap();
        let results = s
            .runs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut tasks = be_jobs(10 + 5 * i as u64);
                tasks.push(task(900, Class::Production, 10, 0, 500));
                tasks[0].completed = i % 2 == 0;
                tasks[1].kills = overbook_core::convert::usize_to_u32(i);
                tasks[1].lost_work = std::time::Duration::from_secs(600).into();
                result(&r.variant, tasks)
            })
            .collect();
        (s, results)
    }

    #[test]
    fn file_stems_are_safe() {
        assert_eq!(file_stem("charon@tolerance=5"), "charon_tolerance_5");
        assert_eq!(file_stem("a/b@X1"), "a_b_X1");
        assert_eq!(file_stem("../x"), "_x");
        assert_eq!(file_stem("adaptive-ssd@1.5"), "adaptive-ssd_1.5");
        assert_eq!(file_stem(""), "run");
    }

    #[test]
    fn render_shows_every_run_ratios_and_the_paper_table() {
        let (s, results) = swept();
        let text = render(&s, &results);
        for run in ["a@X1", "b@X1", "a@X2", "b@X2", "vs a", "Paper vs overbook", "26% higher"] {
            assert!(text.contains(run), "{run} missing from\n{text}");
        }
        // At X2 the first job of each variant failed: b 24 of 25, a 14 of 15.
        let ratio = (24.0 / 25.0) / (14.0 / 15.0);
        assert!(text.contains(&format!("{ratio:.2}x")), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 120), "{text}");
    }

    #[test]
    fn write_outputs_writes_parseable_csv_json_and_plots() {
        let (s, results) = swept();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let written = write_outputs(&s, &results, &out, true, true).unwrap();
        let names: Vec<String> =
            written.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        for expected in [
            "summary.csv",
            "summary.json",
            "tasks-a_X1.csv",
            "tasks-b_X2.csv",
            "jct-cdf.svg",
            "jct-cdf.png",
            "jcr-by-load.png",
            "waste-by-variant.svg",
            "metric-by-point.png",
            "production-harm.svg",
        ] {
            assert!(names.iter().any(|n| n == expected), "{expected} not in {names:?}");
        }
        assert!(written.iter().all(|p| p.exists()));

        let mut rows = ::csv::Reader::from_path(out.join("summary.csv")).unwrap();
        let headers = rows.headers().unwrap().clone();
        let col = |h: &str| headers.iter().position(|x| x == h).unwrap();
        let records: Vec<::csv::StringRecord> = rows.records().map(Result::unwrap).collect();
        // 4 runs × (production, best-effort, low, medium, high).
        assert_eq!(records.len(), 4 * 5);
        let be_b_x2 = records
            .iter()
            .find(|r| &r[col("run")] == "b@X2" && &r[col("group")] == "best-effort")
            .unwrap();
        assert_eq!(be_b_x2[col("jobs")].parse::<usize>().unwrap(), 25);
        assert_eq!(be_b_x2[col("completed_jobs")].parse::<usize>().unwrap(), 24);
        let medium = records.iter().find(|r| &r[col("group")] == "medium").unwrap();
        assert_eq!(&medium[col("jct_p50_s")], "", "an empty group's percentiles are empty");

        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(json["scenario"], "t");
        assert_eq!(json["runs"].as_array().unwrap().len(), 4);
        assert_eq!(json["power_model"]["idle_watts"], 100.0);
        let ours = &json["paper_numbers"][0]["ours"][0];
        assert_eq!(ours["point"], "X2");
        let ratio = (24.0 / 25.0) / (14.0 / 15.0);
        assert!((ours["value"].as_f64().unwrap() - ratio).abs() < 1e-9, "{ours}");

        let tasks = ::csv::Reader::from_path(out.join("tasks-b_X2.csv")).unwrap().into_records();
        assert_eq!(tasks.count(), 26);

        let svg = std::fs::read_to_string(out.join("jct-cdf.svg")).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("<polyline"), "{}", &svg[..200]);
        assert!(svg.contains("CDF of best-effort job completion time at X2"));
        let harm = std::fs::read_to_string(out.join("production-harm.svg")).unwrap();
        assert!(harm.contains("hours its tasks spent thrashing"), "{}", &harm[..200]);
        for png in ["jct-cdf.png", "waste-by-variant.png", "jcr-by-load.png", "production-harm.png"]
        {
            let bytes = std::fs::read(out.join(png)).unwrap();
            assert!(bytes.len() > 1000, "{png}: {} bytes", bytes.len());
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{png} is not a PNG");
        }
    }

    #[test]
    fn write_outputs_refuses_an_unknown_metric_before_writing() {
        let (mut s, results) = swept();
        s.paper_numbers[0].ours = Some("jcr.bogus".into());
        let dir = tempfile::tempdir().unwrap();
        let err = write_outputs(&s, &results, dir.path(), false, false).unwrap_err();
        assert!(matches!(err, ReportError::Scenario(_)), "{err}");
        assert!(err.to_string().contains("jcr.bogus"), "{err}");
        assert!(!dir.path().join("summary.csv").exists());
    }

    #[test]
    fn io_errors_name_the_file() {
        let (s, results) = swept();
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "x").unwrap();
        let err = write_outputs(&s, &results, &blocker.join("sub"), false, false).unwrap_err();
        assert!(matches!(err, ReportError::Io { .. }), "{err}");
        assert!(err.to_string().contains("file"), "{err}");
        let err = write_outputs(&s, &results[..1], dir.path(), false, false).unwrap_err();
        assert!(matches!(err, ReportError::Mismatch { .. }), "{err}");
    }
}
