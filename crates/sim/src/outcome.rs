//! What a simulation run produces: one record per task, plus per-run counters.
//! Reports (tables, CSV, JSON, plots) are computed from these alone.

use crate::workload::TaskKey;
use overbook_core::{Class, JobId, Time};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The fate of one task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskOutcome {
    pub key: TaskKey,
    pub job: JobId,
    pub class: Class,
    pub priority: u8,
    pub submit: Time,
    /// When it first started running, if ever.
    pub first_start: Option<Time>,
    /// When it finished its work (completed) or was given up (not completed).
    pub end: Option<Time>,
    /// Whether all of its work was done by the end of the run.
    pub completed: bool,
    /// Whether the trace ended it (`WorkloadEvent::Death`): not completed,
    /// not killed by the policy; its work is lost but not counted in
    /// `lost_work`, which is the policy's waste.
    #[serde(default)]
    pub trace_death: bool,
    /// Submissions refused by a full queue (each retried while the budget lasts).
    pub rejections: u32,
    pub kills: u32,
    /// Freezes (with or without swap-out).
    pub suspensions: u32,
    pub checkpoints: u32,
    pub incremental_checkpoints: u32,
    pub remote_resumes: u32,
    /// Restores that failed or had no image, so the task restarted from nothing.
    pub restarts: u32,
    /// CPU cores it uses while running.
    pub cpus: f64,
    /// Work it had to do (unloaded run time).
    pub work: Duration,
    /// Work done and then thrown away by kills.
    pub lost_work: Duration,
    /// Time spent dumping and restoring its images.
    pub checkpoint_time: Duration,
    /// Time it ran slowed by thrashing (any slowdown below full speed).
    pub thrashing_time: Duration,
    /// Memory reclaim took from it (the kernel's or a reclaimer's), bytes.
    #[serde(default)]
    pub reclaimed: u64,
    /// The largest share of its memory it was short of at once.
    #[serde(default)]
    pub lost_share: f64,
    /// Time it stood still faulting reclaimed memory back.
    #[serde(default)]
    pub refault_time: Duration,
}

impl TaskOutcome {
    /// Completion time from submission, for a completed task.
    pub fn completion_time(&self) -> Option<Duration> {
        match (self.completed, self.end) {
            (true, Some(end)) => Some(end - self.submit),
            _ => None,
        }
    }
}

/// Counters of a whole run, beside the per-task outcomes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunCounters {
    /// Events the engine processed (task events, samples, policy steps).
    pub events: u64,
    pub nodes: usize,
    /// Simulated time covered.
    pub horizon: Duration,
    /// Node-seconds during which a node's demand exceeded its memory.
    pub thrashing_node_seconds: f64,
    /// Bytes written to and read from checkpoint stores.
    pub checkpoint_bytes_written: u64,
    pub checkpoint_bytes_read: u64,
    /// Integral of busy cores over time, core-seconds (for the energy model).
    pub busy_core_seconds: f64,
    /// Trace rows skipped as unreadable (`skip_bad_rows`), and the first one's error.
    #[serde(default)]
    pub skipped_rows: u64,
    #[serde(default)]
    pub first_skipped_row: Option<String>,
    /// Trace rows too far out of order, replayed late.
    #[serde(default)]
    pub late_rows: u64,
    /// Tasks the trace ended (`WorkloadEvent::Death`) while the engine held them.
    #[serde(default)]
    pub trace_deaths: u64,
    /// Submissions after `stop_submissions_at`, ignored.
    #[serde(default)]
    pub after_horizon: u64,
    /// What a trace replay read (`None` for a generated workload).
    #[serde(default)]
    pub trace: Option<TraceCounts>,
    /// When the workload's first event is (`None`: it had none).
    #[serde(default)]
    pub first_event_at: Option<Time>,
}

/// What the trace reader saw, beside what the engine ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceCounts {
    /// Rows read from the trace's files, good or bad.
    pub rows_read: u64,
    /// Well-formed rows about no task the reader knew (dropped).
    pub unmatched: u64,
    /// Distinct machines the trace's rows name (0: the format names none).
    pub machines: u64,
    /// The trace's first row's time, seconds of the trace's own clock, and
    /// how long after it the window began (`None`: no row was read).
    pub window: Option<(f64, f64)>,
    /// The trace's machine table: its machines, the memory most had, how
    /// many had it, and whether it sized the cluster (`workload.cluster`).
    pub machine_table: Option<(u64, u64, u64, bool)>,
}

/// One simulated run of one policy on one workload.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// The variant's name within its scenario (`charon`, `kuber`, `adaptive-ssd`, ...).
    pub variant: String,
    pub counters: RunCounters,
    pub outcomes: Vec<TaskOutcome>,
}
