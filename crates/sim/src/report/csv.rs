//! `summary.csv` (one row per run × group) and `tasks-<run>.csv` (one row
//! per task). Times are seconds; empty cells mean "nothing to measure".

use super::summary::{GroupSummary, RunSummary};
use super::ReportError;
use crate::outcome::TaskOutcome;
use serde::Serialize;
use std::path::Path;

/// A row of summary.csv: a group's numbers beside its run's.
#[derive(Debug, Serialize)]
struct SummaryRow<'a> {
    scenario: &'a str,
    run: &'a str,
    variant: &'a str,
    point: Option<&'a str>,
    group: &'a str,
    tasks: usize,
    jobs: usize,
    completed_jobs: usize,
    jcr: Option<f64>,
    jct_p50_s: Option<f64>,
    jct_p90_s: Option<f64>,
    jct_p95_s: Option<f64>,
    jct_p99_s: Option<f64>,
    response_mean_s: Option<f64>,
    kills: u64,
    suspensions: u64,
    checkpoints: u64,
    incremental_checkpoints: u64,
    remote_resumes: u64,
    restarts: u64,
    rejections: u64,
    thrashing_task_hours: f64,
    wasted_cpu_hours: f64,
    run_wasted_cpu_hours: f64,
    run_busy_cpu_hours: f64,
    run_wasted_pct: Option<f64>,
    run_energy_kwh: f64,
    run_thrashing_node_seconds: f64,
    run_checkpoint_hours: f64,
    run_checkpoint_gb_written: f64,
    run_checkpoint_gb_read: f64,
    run_events: u64,
    run_skipped_rows: u64,
    run_late_rows: u64,
    nodes: usize,
    node_cores: u32,
    horizon_s: f64,
}

impl<'a> SummaryRow<'a> {
    fn new(scenario: &'a str, s: &'a RunSummary, g: &'a GroupSummary) -> SummaryRow<'a> {
        let a = &g.actions;
        SummaryRow {
            scenario,
            run: &s.run,
            variant: &s.variant,
            point: s.point.as_deref(),
            group: g.group,
            tasks: g.tasks,
            jobs: g.jobs,
            completed_jobs: g.completed_jobs,
            jcr: g.jcr,
            jct_p50_s: g.jct_p50,
            jct_p90_s: g.jct_p90,
            jct_p95_s: g.jct_p95,
            jct_p99_s: g.jct_p99,
            response_mean_s: g.response_mean,
            kills: a.kills,
            suspensions: a.suspensions,
            checkpoints: a.checkpoints,
            incremental_checkpoints: a.incremental_checkpoints,
            remote_resumes: a.remote_resumes,
            restarts: a.restarts,
            rejections: a.rejections,
            thrashing_task_hours: g.thrashing_task_hours,
            wasted_cpu_hours: g.wasted_cpu_hours,
            run_wasted_cpu_hours: s.wasted_cpu_hours,
            run_busy_cpu_hours: s.busy_cpu_hours,
            run_wasted_pct: s.wasted_pct,
            run_energy_kwh: s.energy_kwh,
            run_thrashing_node_seconds: s.thrashing_node_seconds,
            run_checkpoint_hours: s.checkpoint_hours,
            run_checkpoint_gb_written: s.checkpoint_gb_written,
            run_checkpoint_gb_read: s.checkpoint_gb_read,
            run_events: s.events,
            run_skipped_rows: s.skipped_rows,
            run_late_rows: s.late_rows,
            nodes: s.nodes,
            node_cores: s.node_cores,
            horizon_s: s.horizon_s,
        }
    }
}

/// A row of tasks-<run>.csv.
#[derive(Debug, Serialize)]
struct TaskRow {
    task: u64,
    job: u64,
    class: &'static str,
    priority: u8,
    submit_s: f64,
    first_start_s: Option<f64>,
    end_s: Option<f64>,
    completed: bool,
    completion_time_s: Option<f64>,
    rejections: u32,
    kills: u32,
    suspensions: u32,
    checkpoints: u32,
    incremental_checkpoints: u32,
    remote_resumes: u32,
    restarts: u32,
    cpus: f64,
    work_s: f64,
    lost_work_s: f64,
    checkpoint_time_s: f64,
    thrashing_time_s: f64,
}

impl From<&TaskOutcome> for TaskRow {
    fn from(t: &TaskOutcome) -> TaskRow {
        TaskRow {
            task: t.key.0,
            job: t.job.0,
            class: t.class.as_str(),
            priority: t.priority,
            submit_s: t.submit.as_secs_f64(),
            first_start_s: t.first_start.get().map(|x| x.as_secs_f64()),
            end_s: t.end.get().map(|x| x.as_secs_f64()),
            completed: t.completed,
            completion_time_s: t.completion_time().map(|d| d.as_secs_f64()),
            rejections: t.rejections,
            kills: t.kills,
            suspensions: t.suspensions,
            checkpoints: t.checkpoints,
            incremental_checkpoints: t.incremental_checkpoints,
            remote_resumes: t.remote_resumes,
            restarts: t.restarts,
            cpus: t.cpus,
            work_s: t.work.as_secs_f64(),
            lost_work_s: t.lost_work.as_secs_f64(),
            checkpoint_time_s: t.checkpoint_time.as_secs_f64(),
            thrashing_time_s: t.thrashing_time.as_secs_f64(),
        }
    }
}

/// Write one row per run × group.
pub(super) fn write_summary(
    path: &Path,
    scenario: &str,
    summaries: &[RunSummary],
) -> Result<(), ReportError> {
    let rows = summaries
        .iter()
        .flat_map(|s| s.groups.iter().map(move |g| SummaryRow::new(scenario, s, g)));
    write_rows(path, rows)
}

/// Write every task's outcome.
pub(super) fn write_tasks(path: &Path, tasks: &[TaskOutcome]) -> Result<(), ReportError> {
    write_rows(path, tasks.iter().map(TaskRow::from))
}

fn write_rows<R: Serialize>(path: &Path, rows: impl Iterator<Item = R>) -> Result<(), ReportError> {
    let fail = |e: ::csv::Error| csv_error(path, e);
    let mut w = ::csv::Writer::from_path(path).map_err(fail)?;
    for row in rows {
        w.serialize(row).map_err(fail)?;
    }
    w.flush().map_err(|source| ReportError::Io { path: path.to_path_buf(), source })
}

/// Keep I/O errors as such, naming the file either way.
fn csv_error(path: &Path, e: ::csv::Error) -> ReportError {
    let problem = e.to_string();
    match e.into_kind() {
        ::csv::ErrorKind::Io(source) => ReportError::Io { path: path.to_path_buf(), source },
        _ => ReportError::Other { path: path.to_path_buf(), problem },
    }
}
