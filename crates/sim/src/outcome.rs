//! What a simulation run produces: one record per task, plus per-run counters.
//! Reports (tables, CSV, JSON, plots) are computed from these alone.

use crate::tally::Tally;
use crate::workload::TaskKey;
use overbook_core::{Class, JobId, Time};
use serde::{Deserialize, Serialize};
use std::ops::{Add, AddAssign};
use std::time::Duration;

/// A span of simulated time in 8 bytes (whole nanoseconds, up to 584
/// years), where a `Duration` takes 16. A run keeps one outcome per task
/// it ever ran, so their size is most of a long run's memory at its end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Span(u64);

impl Span {
    pub const ZERO: Span = Span(0);

    pub fn get(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    pub fn as_secs_f64(self) -> f64 {
        self.get().as_secs_f64()
    }

    pub fn nanos(self) -> u64 {
        self.0
    }

    pub fn from_nanos(nanos: u64) -> Span {
        Span(nanos)
    }
}

impl From<Duration> for Span {
    fn from(d: Duration) -> Span {
        Span(overbook_core::convert::u128_to_u64(d.as_nanos()))
    }
}

impl AddAssign<Duration> for Span {
    fn add_assign(&mut self, d: Duration) {
        self.0 = self.0.saturating_add(Span::from(d).0);
    }
}

impl AddAssign for Span {
    fn add_assign(&mut self, other: Span) {
        self.0 = self.0.saturating_add(other.0);
    }
}

impl Add for Span {
    type Output = Span;

    fn add(self, other: Span) -> Span {
        Span(self.0.saturating_add(other.0))
    }
}

/// A moment of simulated time, or none yet, in 8 bytes (an
/// `Option<Time>` takes 16): `Time::MAX` is never a moment a task reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp(u64);

impl Stamp {
    pub const NONE: Stamp = Stamp(u64::MAX);

    pub fn at(t: Time) -> Stamp {
        Stamp(t.0.min(u64::MAX - 1))
    }

    pub fn get(self) -> Option<Time> {
        (self != Stamp::NONE).then_some(Time(self.0))
    }

    /// Set it to `t` unless it is set already.
    pub fn set_once(&mut self, t: Time) {
        if *self == Stamp::NONE {
            *self = Stamp::at(t);
        }
    }
}

impl Default for Stamp {
    fn default() -> Stamp {
        Stamp::NONE
    }
}

/// The fate of one task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskOutcome {
    pub key: TaskKey,
    pub job: JobId,
    pub class: Class,
    pub priority: u8,
    pub submit: Time,
    /// When it first started running, if ever.
    pub first_start: Stamp,
    /// When it finished its work (completed) or was given up (not completed).
    pub end: Stamp,
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
    pub work: Span,
    /// Work done and then thrown away by kills.
    pub lost_work: Span,
    /// Time spent dumping and restoring its images.
    pub checkpoint_time: Span,
    /// Time it ran slowed by thrashing (any slowdown below full speed).
    pub thrashing_time: Span,
    /// Memory reclaim took from it (the kernel's or a reclaimer's), bytes.
    #[serde(default)]
    pub reclaimed: u64,
    /// The largest share of its memory it was short of at once.
    #[serde(default)]
    pub lost_share: f64,
    /// Time it stood still faulting reclaimed memory back.
    #[serde(default)]
    pub refault_time: Span,
}

impl TaskOutcome {
    /// Completion time from submission, for a completed task.
    pub fn completion_time(&self) -> Option<Duration> {
        match (self.completed, self.end.get()) {
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
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunResult {
    /// The variant's name within its scenario (`charon`, `kuber`, `adaptive-ssd`, ...).
    pub variant: String,
    pub counters: RunCounters,
    /// What the reports need of every task, gathered as each left.
    pub tally: Tally,
    /// Every task's outcome, in (submission, key) order, when the run was
    /// asked to keep them (`Outcomes::Kept`); else empty.
    pub outcomes: Vec<TaskOutcome>,
}

impl RunResult {
    /// A result of tasks given whole, tallied and kept (hand-built runs).
    pub fn of_outcomes(
        variant: &str,
        counters: RunCounters,
        outcomes: Vec<TaskOutcome>,
    ) -> RunResult {
        RunResult { variant: variant.to_string(), counters, tally: Tally::of(&outcomes), outcomes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_adds_and_reads_as_the_duration_it_stands_for() {
        let parts = [Duration::new(3, 999_999_999), Duration::from_secs_f64(0.1), Duration::ZERO];
        let mut span = Span::ZERO;
        for p in parts {
            span += p;
        }
        let total: Duration = parts.iter().sum();
        assert_eq!(span.get(), total);
        assert_eq!(span.as_secs_f64().to_bits(), total.as_secs_f64().to_bits());
        assert_eq!((span + Span::from(total)).get(), total * 2);
        assert_eq!(Span::from(Duration::MAX).get(), Duration::from_nanos(u64::MAX), "saturates");
    }

    #[test]
    fn a_stamp_is_set_once() {
        let mut s = Stamp::default();
        assert_eq!(s.get(), None);
        s.set_once(Time::from_secs(5));
        s.set_once(Time::from_secs(9));
        assert_eq!(s.get(), Some(Time::from_secs(5)));
        assert_eq!(Stamp::at(Time::ZERO).get(), Some(Time::ZERO));
    }
}
