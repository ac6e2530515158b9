//! Plots of a scenario's runs: which to draw, and their data from the run
//! summaries. [`super::draw`] turns each into SVG and PNG.

use super::draw::{draw_file, BarSeries, Chart, Kind, Series};
use super::metrics::{GroupStat, Metric};
use super::summary::{completion_times, GroupKey, RunSummary};
use super::ReportError;
use crate::outcome::RunResult;
use crate::scenario::Scenario;
use std::path::{Path, PathBuf};

/// The plots a scenario may name in `plots`, with what each shows.
pub const PLOTS: [(&str, &str); 6] = [
    ("jct-cdf", "CDF of best-effort job completion time, a line per run (swept: per variant at the highest point)"),
    ("jcr-by-load", "best-effort job completion ratio against the sweep point, a line per variant"),
    ("waste-by-variant", "bars of wasted CPU-hours per variant (grouped by sweep point)"),
    ("waste-by-storage", "the same bars as waste-by-variant, under the name storage scenarios use"),
    ("metric-by-point", "best-effort JCT p95 against the sweep point, a line per variant"),
    ("production-harm", "bars of the hours production's tasks spent thrashing, per variant (grouped by sweep point)"),
];

/// Refuse plot names we cannot draw, listing those we can.
pub fn check_plots(scenario: &Scenario) -> Result<(), String> {
    let unknown: Vec<&str> = scenario
        .plots
        .iter()
        .map(String::as_str)
        .filter(|p| !PLOTS.iter().any(|(name, _)| name == p))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let known: Vec<&str> = PLOTS.iter().map(|(n, _)| *n).collect();
    Err(format!(
        "scenario {:?}: plots: unknown {}; known plots are {}",
        scenario.name,
        unknown.join(", "),
        known.join(", ")
    ))
}

/// The scenario's plots first, then the defaults that apply to it.
pub(super) fn plot_names(scenario: &Scenario) -> Vec<&str> {
    let mut names: Vec<&str> = scenario.plots.iter().map(String::as_str).collect();
    let swept = is_swept(scenario);
    let waste_named = names.contains(&"waste-by-storage");
    let defaults = [
        ("jct-cdf", true),
        ("waste-by-variant", !waste_named),
        ("production-harm", true),
        ("jcr-by-load", swept),
        ("metric-by-point", swept),
    ];
    for (name, wanted) in defaults {
        if wanted && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

fn is_swept(scenario: &Scenario) -> bool {
    scenario.runs.iter().any(|r| r.point.is_some())
}

/// Draw every plot as `<name>.svg` and `<name>.png` under `dir`.
pub(super) fn write_plots(
    scenario: &Scenario,
    summaries: &[RunSummary],
    results: &[RunResult],
    dir: &Path,
) -> Result<Vec<PathBuf>, ReportError> {
    let mut written = Vec::new();
    for name in plot_names(scenario) {
        let chart = build(name, scenario, summaries, results);
        for ext in ["svg", "png"] {
            let path = dir.join(format!("{name}.{ext}"));
            draw_file(&path, &chart)
                .map_err(|problem| ReportError::Other { path: path.clone(), problem })?;
            written.push(path);
        }
    }
    Ok(written)
}
fn build(
    name: &str,
    scenario: &Scenario,
    summaries: &[RunSummary],
    results: &[RunResult],
) -> Chart {
    let be = GroupKey::BEST_EFFORT;
    match name {
        "jct-cdf" => jct_cdf(summaries, results),
        "jcr-by-load" => by_point(
            scenario,
            summaries,
            "Best-effort job completion ratio",
            "best-effort JCR (%)",
            Metric::Group(GroupStat::Jcr, be),
            (100.0, Some(100.0)),
        ),
        "metric-by-point" => {
            let metric = Metric::Group(GroupStat::JctP95, be);
            let max = summaries.iter().filter_map(|s| metric.of(s)).fold(0.0, f64::max);
            let (div, unit) = time_unit(max);
            by_point(
                scenario,
                summaries,
                "Best-effort job completion time, p95",
                &format!("best-effort JCT p95 ({unit})"),
                metric,
                (1.0 / div, None),
            )
        }
        "production-harm" => bars(
            scenario,
            summaries,
            "Production's harm: hours its tasks spent thrashing",
            "production thrashing task-hours",
            |s| Metric::Group(GroupStat::ThrashingTaskHours, GroupKey::PRODUCTION).of(s),
        ),
        _ => bars(
            scenario,
            summaries,
            "Wasted CPU-hours (work lost to kills + checkpoint time)",
            "wasted CPU-hours",
            |s| Some(s.wasted_cpu_hours),
        ),
    }
}

/// Runs and variants in the order they first appear, and the sweep points.
fn grid(summaries: &[RunSummary]) -> (Vec<&str>, Vec<Option<&str>>) {
    let mut variants: Vec<&str> = Vec::new();
    let mut points: Vec<Option<&str>> = Vec::new();
    for s in summaries {
        if !variants.contains(&s.variant.as_str()) {
            variants.push(&s.variant);
        }
        if !points.contains(&s.point.as_deref()) {
            points.push(s.point.as_deref());
        }
    }
    (variants, points)
}

fn find<'a>(
    summaries: &'a [RunSummary],
    variant: &str,
    point: Option<&str>,
) -> Option<&'a RunSummary> {
    summaries.iter().find(|s| s.variant == variant && s.point.as_deref() == point)
}

/// A metric against the sweep point, a line per variant; without a sweep,
/// a bar per variant. `scale` multiplies values; its second part fixes the y top.
fn by_point(
    scenario: &Scenario,
    summaries: &[RunSummary],
    title: &str,
    y_label: &str,
    metric: Metric,
    scale: (f64, Option<f64>),
) -> Chart {
    let (variants, points) = grid(summaries);
    let value = |v: &str, p: Option<&str>| {
        find(summaries, v, p).and_then(|s| metric.of(s)).map(|x| x * scale.0)
    };
    let kind = if is_swept(scenario) {
        let series = variants
            .iter()
            .map(|v| Series {
                marked: false,
                name: v.to_string(),
                points: points
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| value(v, *p).map(|y| (i as f64, y)))
                    .collect(),
            })
            .collect();
        Kind::PointLines { categories: labels(&points), series }
    } else {
        let values = variants.iter().map(|v| value(v, None)).collect();
        Kind::Bars {
            categories: variants.iter().map(|v| v.to_string()).collect(),
            series: vec![BarSeries { name: String::new(), values, intervals: Vec::new() }],
        }
    };
    Chart {
        title: title.to_string(),
        x_label: x_label(scenario),
        y_label: y_label.to_string(),
        y_max: scale.1,
        kind,
    }
}

fn labels(points: &[Option<&str>]) -> Vec<String> {
    points.iter().map(|p| p.unwrap_or("").to_string()).collect()
}

fn x_label(scenario: &Scenario) -> String {
    match &scenario.sweep_name {
        Some(name) if is_swept(scenario) => name.clone(),
        _ => "variant".to_string(),
    }
}

/// Wasted CPU-hours: a bar per variant, grouped by sweep point.
/// A value of every run as bars: a bar per variant, grouped by sweep point.
fn bars(
    scenario: &Scenario,
    summaries: &[RunSummary],
    title: &str,
    y_label: &str,
    value: impl Fn(&RunSummary) -> Option<f64>,
) -> Chart {
    let (variants, points) = grid(summaries);
    let of = |v: &str, p: Option<&str>| find(summaries, v, p).and_then(&value);
    let kind = if is_swept(scenario) {
        let series = variants
            .iter()
            .map(|v| BarSeries {
                name: v.to_string(),
                values: points.iter().map(|p| of(v, *p)).collect(),
                intervals: Vec::new(),
            })
            .collect();
        Kind::Bars { categories: labels(&points), series }
    } else {
        Kind::Bars {
            categories: variants.iter().map(|v| v.to_string()).collect(),
            series: vec![BarSeries {
                name: String::new(),
                values: variants.iter().map(|v| of(v, None)).collect(),
                intervals: Vec::new(),
            }],
        }
    };
    Chart {
        title: title.to_string(),
        x_label: x_label(scenario),
        y_label: y_label.to_string(),
        y_max: None,
        kind,
    }
}

/// The CDF of best-effort JCT per run; for a sweep, per variant at the last point.
fn jct_cdf(summaries: &[RunSummary], results: &[RunResult]) -> Chart {
    let (_, points) = grid(summaries);
    let last = points.last().copied().flatten();
    let chosen: Vec<(&RunSummary, &RunResult)> =
        summaries.iter().zip(results).filter(|(s, _)| s.point.as_deref() == last).collect();
    let times: Vec<(String, Vec<f64>)> = chosen
        .iter()
        .map(|(s, r)| {
            let name = if last.is_some() { s.variant.clone() } else { s.run.clone() };
            (name, completion_times(r.tally.jobs(), GroupKey::BEST_EFFORT))
        })
        .collect();
    let max = times.iter().filter_map(|(_, t)| t.last().copied()).fold(0.0, f64::max);
    let (div, unit) = time_unit(max);
    let series = times
        .into_iter()
        .map(|(name, t)| Series { name, points: cdf_steps(&t, div), marked: false })
        .collect();
    let at = last.map(|p| format!(" at {p}")).unwrap_or_default();
    Chart {
        title: format!("CDF of best-effort job completion time{at}"),
        x_label: format!("job completion time ({unit})"),
        y_label: "fraction of completed jobs".to_string(),
        y_max: Some(1.0),
        kind: Kind::Lines(series),
    }
}

/// At most this many steps per CDF line, so big runs still make small files.
const CDF_STEPS: usize = 1000;

/// The empirical CDF of ascending `sorted` as a step line, x divided by `div`.
fn cdf_steps(sorted: &[f64], div: f64) -> Vec<(f64, f64)> {
    let n = sorted.len();
    let stride = n.div_ceil(CDF_STEPS).max(1);
    let mut points = vec![(0.0, 0.0)];
    let mut below = 0.0;
    // Every stride-th value, and the last one so the line reaches 1.
    for i in (1..=n.div_ceil(stride)).map(|k| (k * stride).min(n) - 1) {
        let x = sorted[i] / div;
        let y = (i + 1) as f64 / n as f64;
        points.push((x, below));
        points.push((x, y));
        below = y;
    }
    points
}

/// A unit for times up to `max_secs`: seconds, minutes or hours.
fn time_unit(max_secs: f64) -> (f64, &'static str) {
    if max_secs >= 10.0 * 3600.0 {
        (3600.0, "h")
    } else if max_secs >= 600.0 {
        (60.0, "min")
    } else {
        (1.0, "s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_steps_end_at_one_and_rise_monotonically() {
        let sorted: Vec<f64> = (1..=2500).map(f64::from).collect();
        let steps = cdf_steps(&sorted, 1.0);
        assert!(steps.len() <= 2 * CDF_STEPS + 3, "{}", steps.len());
        assert_eq!(steps.last().copied(), Some((2500.0, 1.0)));
        assert!(steps.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(
            cdf_steps(&[3.0, 6.0], 3.0),
            vec![(0.0, 0.0), (1.0, 0.0), (1.0, 0.5), (2.0, 0.5), (2.0, 1.0)]
        );
        assert_eq!(cdf_steps(&[], 1.0), vec![(0.0, 0.0)]);
    }

    #[test]
    fn defaults_follow_the_named_plots_without_repeats() {
        let s = Scenario::load("charon-loads", &[]).unwrap();
        assert_eq!(
            plot_names(&s),
            ["jct-cdf", "jcr-by-load", "waste-by-variant", "production-harm", "metric-by-point"]
        );
        let s = Scenario::load("checkpoint-storage", &[]).unwrap();
        assert_eq!(plot_names(&s), ["waste-by-storage", "jct-cdf", "production-harm"]);
    }

    #[test]
    fn unknown_plot_names_are_refused_and_built_in_ones_are_known() {
        for (name, _) in crate::scenario::BUILT_IN {
            check_plots(&Scenario::load(name, &[]).unwrap()).unwrap();
        }
        let mut s = Scenario::load("default", &[]).unwrap();
        s.plots.push("pie".into());
        let err = check_plots(&s).unwrap_err();
        assert!(err.contains("pie") && err.contains("jct-cdf"), "{err}");
    }
}
