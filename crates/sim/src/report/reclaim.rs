//! Who paid for reclaim, per priority band: the share of its memory a task
//! was short of at once (001's "A lost 27% of its memory") and the time it
//! stood still faulting memory back (its work delayed). Shown when a run
//! steers reclaim or reclaim took anything.

use super::summary::{Band, GroupKey};
use super::ReportError;
use crate::outcome::RunResult;
use crate::scenario::Scenario;
use crate::tally::Tally;
use overbook_core::reclaim::ReclaimerConfig;
use std::fmt::Write as _;
use std::path::Path;

/// Means over a band's tasks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BandReclaim {
    pub tasks: usize,
    /// Mean of each task's largest share of its memory short at once.
    pub lost: f64,
    /// Mean seconds spent faulting memory back.
    pub refault_s: f64,
}

impl BandReclaim {
    pub fn of(tally: &Tally, band: Band) -> BandReclaim {
        let group = tally.group(GroupKey::Band(band));
        BandReclaim {
            tasks: group.tasks,
            lost: group.mean_lost_share(),
            refault_s: group.mean_refault_s(),
        }
    }
}

/// Whether the scenario's report has the reclaim table.
pub fn shows(scenario: &Scenario, results: &[RunResult]) -> bool {
    scenario.runs.iter().any(|r| r.spec.policy.reclaimer != ReclaimerConfig::None {})
        || results.iter().any(|r| r.tally.reclaimed_any)
}

const BANDS: [Band; 3] = [Band::High, Band::Medium, Band::Low];

/// The stdout table: one row per run, three columns per band.
pub fn render(scenario: &Scenario, results: &[RunResult]) -> String {
    let mut out = String::from(
        "\nWho paid for reclaim, by priority band (mean per task; lost: most of its memory short \
         at once;\nrefault: time standing still faulting it back):\n",
    );
    let width = scenario.runs.iter().map(|r| r.name.len()).max().unwrap_or(3).max(3);
    let mut head = format!("{:width$}", "");
    let mut sub = format!("{:width$}", "run");
    for b in BANDS {
        let _ = write!(head, "  {:^17}", b.as_str());
        let _ = write!(sub, "  {:>7} {:>9}", "lost", "refault");
    }
    let _ = writeln!(out, "{}", head.trim_end());
    let _ = writeln!(out, "{sub}");
    for (run, result) in scenario.runs.iter().zip(results) {
        let mut line = format!("{:width$}", run.name);
        for b in BANDS {
            let r = BandReclaim::of(&result.tally, b);
            if r.tasks == 0 {
                let _ = write!(line, "  {:>7} {:>9}", "-", "-");
                continue;
            }
            let lost = format!("{:.1}%", 100.0 * r.lost);
            let _ = write!(line, "  {lost:>7} {:>9}", format!("{:.1}s", r.refault_s));
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

/// `reclaim.csv`: the same numbers, one row per run and band.
pub fn write_csv(
    path: &Path,
    scenario: &Scenario,
    results: &[RunResult],
) -> Result<(), ReportError> {
    let mut text = String::from("run,band,tasks,lost_share,refault_s\n");
    for (run, result) in scenario.runs.iter().zip(results) {
        for b in BANDS {
            let r = BandReclaim::of(&result.tally, b);
            let _ = writeln!(
                text,
                "{},{},{},{:.6},{:.3}",
                run.name,
                b.as_str(),
                r.tasks,
                r.lost,
                r.refault_s
            );
        }
    }
    std::fs::write(path, text)
        .map_err(|source| ReportError::Io { path: path.to_path_buf(), source })
}
