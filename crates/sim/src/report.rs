//! Reports of a scenario's runs: the comparison table, CSV, JSON and plots.
//! (Being written: see the helper's task.)

use crate::outcome::RunResult;
use crate::scenario::Scenario;
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
}

/// The comparison table printed on stdout.
pub fn render(scenario: &Scenario, results: &[RunResult]) -> String {
    let _ = (scenario, results);
    String::new()
}

/// Write summary.csv, summary.json, plots and (if asked) per-task CSVs under `dir`.
pub fn write_outputs(
    scenario: &Scenario,
    results: &[RunResult],
    dir: &Path,
    plots: bool,
    per_task: bool,
) -> Result<Vec<PathBuf>, ReportError> {
    let _ = (scenario, results, dir, plots, per_task);
    Ok(Vec::new())
}
