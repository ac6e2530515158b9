//! The papers' numbers beside ours: each `[[paper_numbers]]` entry's `ours`
//! is an expression over the metrics of [`super::metrics`]:
//!
//! * `"<metric>"`: the metric of the entry's variant;
//! * `"<metric> / <variant>"`: its ratio to another variant at the same sweep point;
//! * `"1 - <metric> / <variant>"`: the reduction from that variant.
//!
//! Evaluated at the entry's point, or at every point of a sweep when it names none.

use super::metrics::{format_ratio, ratio, Metric};
use super::summary::RunSummary;
use crate::scenario::{PaperNumber, Scenario};
use serde::Serialize;

/// What `ours` says to compute.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// The metric itself.
    Value(Metric),
    /// The metric divided by that of another variant at the same point.
    Ratio { metric: Metric, of: String },
    /// One minus the ratio: how much lower than the other variant.
    Reduction { metric: Metric, of: String },
}

impl Expr {
    pub fn parse(text: &str) -> Result<Expr, String> {
        let text = text.trim();
        let (reduction, rest) = match text.strip_prefix('1') {
            Some(rest) if rest.trim_start().starts_with('-') => {
                (true, rest.trim_start()[1..].trim_start())
            }
            _ => (false, text),
        };
        match rest.split_once('/') {
            Some((metric, of)) => {
                let metric = Metric::parse(metric)?;
                let of = of.trim();
                if of.is_empty() || of.contains(char::is_whitespace) {
                    return Err(format!("{text:?}: expected a variant name after '/'"));
                }
                let of = of.to_string();
                Ok(if reduction {
                    Expr::Reduction { metric, of }
                } else {
                    Expr::Ratio { metric, of }
                })
            }
            None if reduction => {
                Err(format!("{text:?}: write a reduction as \"1 - <metric> / <variant>\""))
            }
            None => Metric::parse(rest).map(Expr::Value),
        }
    }

    /// The other variant it compares against.
    pub fn other_variant(&self) -> Option<&str> {
        match self {
            Expr::Value(_) => None,
            Expr::Ratio { of, .. } | Expr::Reduction { of, .. } => Some(of),
        }
    }

    /// Its value for `run`, looking up the other variant at the same point in `all`.
    pub fn value(&self, run: &RunSummary, all: &[RunSummary]) -> Option<f64> {
        let (metric, of) = match self {
            Expr::Value(m) => return m.of(run),
            Expr::Ratio { metric, of } | Expr::Reduction { metric, of } => (metric, of),
        };
        let other = all.iter().find(|s| &s.variant == of && s.point == run.point)?;
        let ratio = ratio(metric.of(run)?, metric.of(other)?)?;
        Some(if matches!(self, Expr::Reduction { .. }) { 1.0 - ratio } else { ratio })
    }

    pub fn format(&self, v: f64) -> String {
        match self {
            Expr::Value(m) => m.unit().format(v),
            Expr::Ratio { .. } => format_ratio(v),
            Expr::Reduction { .. } if v < 0.0 => format!("{:.1}% higher", -100.0 * v),
            Expr::Reduction { .. } => format!("{:.1}% lower", 100.0 * v),
        }
    }
}

/// One of our numbers beside a paper's: at one sweep point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OursValue {
    pub point: Option<String>,
    pub value: Option<f64>,
    pub text: String,
}

/// A paper number with ours beside it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PaperRow {
    pub variant: Option<String>,
    pub point: Option<String>,
    pub metric: String,
    pub source: String,
    pub paper: String,
    /// The `ours` expression, as written.
    pub expression: Option<String>,
    pub ours: Vec<OursValue>,
}

impl PaperRow {
    /// Ours as one line: `51.0%`, or `X1 0.98x, X2 1.10x` across points.
    pub fn ours_text(&self) -> String {
        match self.ours.as_slice() {
            [] => "-".to_string(),
            [one] if self.point.is_some() || one.point.is_none() => one.text.clone(),
            many => many
                .iter()
                .map(|o| format!("{} {}", o.point.as_deref().unwrap_or(""), o.text))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// Every paper number of the scenario with ours evaluated on `summaries`
/// (one per run, in the scenario's order).
pub fn paper_rows(scenario: &Scenario, summaries: &[RunSummary]) -> Vec<PaperRow> {
    scenario.paper_numbers.iter().map(|n| paper_row(n, summaries)).collect()
}

fn paper_row(n: &PaperNumber, summaries: &[RunSummary]) -> PaperRow {
    let ours = match (&n.ours, &n.variant) {
        (Some(text), Some(variant)) => ours_values(text, variant, n.point.as_deref(), summaries),
        (Some(_), None) => vec![invalid("ours needs a variant")],
        (None, _) => Vec::new(),
    };
    PaperRow {
        variant: n.variant.clone(),
        point: n.point.clone(),
        metric: n.metric.clone(),
        source: n.source.clone(),
        paper: n.value.clone(),
        expression: n.ours.clone(),
        ours,
    }
}

fn invalid(problem: &str) -> OursValue {
    OursValue { point: None, value: None, text: format!("invalid: {problem}") }
}

/// Ours at the paper number's point, or at every point of the variant.
fn ours_values(
    text: &str,
    variant: &str,
    point: Option<&str>,
    summaries: &[RunSummary],
) -> Vec<OursValue> {
    let expr = match Expr::parse(text) {
        Ok(e) => e,
        Err(problem) => return vec![invalid(&problem)],
    };
    summaries
        .iter()
        .filter(|s| s.variant == variant && (point.is_none() || s.point.as_deref() == point))
        .map(|s| {
            let value = expr.value(s, summaries);
            let text = value.map_or_else(|| "-".to_string(), |v| expr.format(v));
            OursValue { point: s.point.clone(), value, text }
        })
        .collect()
}

/// Check every `[[paper_numbers]]` entry of a scenario: its variant and point
/// exist, and `ours` parses and names variants that exist. All problems are
/// listed, one per line.
pub fn check_paper_numbers(scenario: &Scenario) -> Result<(), String> {
    let problems: Vec<String> = scenario
        .paper_numbers
        .iter()
        .enumerate()
        .flat_map(|(i, n)| {
            problems_of(scenario, n)
                .into_iter()
                .map(move |p| format!("paper_numbers[{i}] ({:?}): {p}", n.metric))
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("scenario {:?}:\n{}", scenario.name, problems.join("\n")))
    }
}

fn problems_of(scenario: &Scenario, n: &PaperNumber) -> Vec<String> {
    let has_variant = |v: &str| scenario.runs.iter().any(|r| r.variant == v);
    let variants = || {
        let mut names: Vec<&str> = scenario.runs.iter().map(|r| r.variant.as_str()).collect();
        names.dedup();
        names.join(", ")
    };
    let mut problems = Vec::new();
    if let Some(v) = &n.variant {
        if !has_variant(v) {
            problems.push(format!("variant: no variant named {v:?} (variants: {})", variants()));
        }
    }
    if let Some(p) = &n.point {
        if !scenario.runs.iter().any(|r| r.point.as_deref() == Some(p.as_str())) {
            let mut points: Vec<&str> =
                scenario.runs.iter().filter_map(|r| r.point.as_deref()).collect();
            points.dedup();
            let known = if points.is_empty() { "none".to_string() } else { points.join(", ") };
            problems.push(format!("point: no sweep point labelled {p:?} (points: {known})"));
        }
    }
    if let Some(text) = &n.ours {
        if n.variant.is_none() {
            problems.push("ours: needs a variant to evaluate on".into());
        }
        match Expr::parse(text) {
            Err(problem) => problems.push(format!("ours: {problem}")),
            Ok(expr) => {
                if let Some(other) = expr.other_variant().filter(|o| !has_variant(o)) {
                    problems.push(format!(
                        "ours: {text:?} compares with {other:?}, which is not a variant (variants: {})",
                        variants()
                    ));
                }
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::super::metrics::GroupStat;
    use super::super::summary::fixtures::*;
    use super::super::summary::GroupKey;
    use super::*;
    use crate::scenario::BUILT_IN;

    fn summary(variant: &str, point: Option<&str>, jobs: u64) -> RunSummary {
        let name = match point {
            Some(p) => format!("{variant}@{p}"),
            None => variant.to_string(),
        };
        RunSummary::new(&result(variant, be_jobs(jobs)), 32).at_point(&name, point)
    }

    #[test]
    fn expressions_parse_values_ratios_and_reductions() {
        let jcr = Metric::Group(GroupStat::Jcr, GroupKey::BEST_EFFORT);
        assert_eq!(Expr::parse("jcr.best-effort").unwrap(), Expr::Value(jcr));
        assert_eq!(
            Expr::parse("jcr.best-effort / kuber").unwrap(),
            Expr::Ratio { metric: jcr, of: "kuber".into() }
        );
        assert_eq!(
            Expr::parse("1 - jcr.best-effort/checkpoint-hdd").unwrap(),
            Expr::Reduction { metric: jcr, of: "checkpoint-hdd".into() }
        );
        assert!(Expr::parse("1 - jcr.best-effort").is_err());
        assert!(Expr::parse("jcr.best-effort / ").is_err());
        assert!(Expr::parse("jcr.best-effort / a b").is_err());
    }

    #[test]
    fn ratios_and_reductions_compare_with_the_other_variant_at_the_same_point() {
        // p99 of 1..=n jobs × 10 s is n × 10 s with n ≤ 100.
        let all = vec![
            summary("a", Some("X1"), 10),
            summary("a", Some("X2"), 20),
            summary("b", Some("X1"), 40),
            summary("b", Some("X2"), 80),
        ];
        let ratio = Expr::parse("jct_p99.best-effort / b").unwrap();
        assert_eq!(ratio.value(&all[0], &all), Some(0.25));
        assert_eq!(ratio.value(&all[1], &all), Some(0.25));
        let reduction = Expr::parse("1 - jct_p99.best-effort / b").unwrap();
        assert_eq!(reduction.value(&all[0], &all), Some(0.75));
        assert_eq!(reduction.format(0.75), "75.0% lower");
        assert_eq!(reduction.format(-0.5), "50.0% higher");
        assert_eq!(ratio.format(0.25), "0.25x");
        let value = Expr::parse("jct_p99.best-effort").unwrap();
        assert_eq!(value.value(&all[2], &all), Some(400.0));
        assert_eq!(value.format(400.0), "6.7m");
    }

    #[test]
    fn a_ratio_to_a_zero_or_missing_value_is_none() {
        let all = vec![summary("a", None, 3), summary("b", None, 3)];
        assert_eq!(Expr::parse("kills / b").unwrap().value(&all[0], &all), None);
        assert_eq!(Expr::parse("jct_p50.production / b").unwrap().value(&all[0], &all), None);
        assert_eq!(Expr::parse("kills / c").unwrap().value(&all[0], &all), None);
    }

    #[test]
    fn paper_rows_evaluate_ours_at_the_point_or_at_every_point() {
        let mut s = Scenario::parse(
            r#"
            name = "t"
            title = "t"
            [sweep]
            key = "seed"
            values = [1, 2]
            labels = ["X1", "X2"]
            [[variants]]
            name = "a"
            [[variants]]
            name = "b"
            [[paper_numbers]]
            variant = "a"
            point = "X2"
            metric = "JCR"
            value = "51%"
            source = "000"
            ours = "jcr.best-effort"
            [[paper_numbers]]
            variant = "a"
            metric = "p99 vs b"
            value = "2x"
            source = "000"
            ours = "jct_p99.best-effort / b"
            [[paper_numbers]]
            metric = "words"
            value = "some"
            source = "000"
        "#,
            "t",
            &[],
        )
        .unwrap();
        check_paper_numbers(&s).unwrap();
        let mut failed = be_jobs(4);
        failed[0].completed = false;
        let summaries = vec![
            summary("a", Some("X1"), 10),
            RunSummary::new(&result("a", failed), 32).at_point("a@X2", Some("X2")),
            summary("b", Some("X1"), 20),
            summary("b", Some("X2"), 20),
        ];
        let rows = paper_rows(&s, &summaries);
        assert_eq!(rows[0].ours_text(), "75.0%");
        assert_eq!(rows[1].ours_text(), "X1 0.50x, X2 0.20x");
        assert_eq!(rows[2].ours_text(), "-");
        s.paper_numbers[1].ours = Some("jct_p99.best-effort / c".into());
        s.paper_numbers[0].point = Some("X9".into());
        s.paper_numbers[2].ours = Some("kills".into());
        let err = check_paper_numbers(&s).unwrap_err();
        assert!(err.contains("\"c\"") && err.contains("variants: a, b"), "{err}");
        assert!(err.contains("\"X9\""), "{err}");
        assert!(err.contains("needs a variant"), "{err}");
        assert_eq!(err.lines().count(), 4, "{err}");
    }

    #[test]
    fn every_built_in_scenarios_paper_numbers_check() {
        for (name, _) in BUILT_IN {
            let s = Scenario::load(name, &[]).unwrap();
            check_paper_numbers(&s).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn the_papers_numbers_that_have_a_counterpart_are_wired_to_one() {
        for name in ["charon-loads", "charon-snapshot", "charon-tolerance", "checkpoint-storage"] {
            let s = Scenario::load(name, &[]).unwrap();
            assert!(s.paper_numbers.iter().any(|n| n.ours.is_some()), "{name} has no ours");
        }
    }
}
