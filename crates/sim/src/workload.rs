//! The workload stream the engine consumes: trace readers and the built-in
//! generator both produce it, in non-decreasing time order, one event at a
//! time, so no trace is ever held in memory whole.

use overbook_core::{Bytes, Class, JobId, Time};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

mod profile;
pub use profile::MemProfile;

/// A task's identity across the whole workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TaskKey(pub u64);

/// A task as submitted.
///
/// Laid out in this order (`repr(C)`) for the simulator, which keeps
/// hundreds of thousands of tasks and reads a few fields of each at a time:
/// what a task's every point reads first (its work, idle spells and
/// profile), then what its node's policy step reads (job, weight, class,
/// priority), the rest last.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[repr(C)]
pub struct TaskSpec {
    /// Work to do, as run time on an unloaded node; `None` when the trace
    /// tells it only later (a `Finish` event follows).
    pub work: Option<Duration>,
    /// Idle spells, by work offset: at `at` the task stops working and
    /// touching its memory for `length` of wall time (a service with no
    /// requests), its memory then the coldest on the node. Sorted by `at`.
    #[serde(default)]
    pub pauses: Vec<Pause>,
    /// Memory over the work; may be empty or partial when `Usage` events follow.
    pub profile: MemProfile,
    pub job: JobId,
    /// Share of memory for the `weighted` reclaimer (003); traces carry none.
    #[serde(default = "one")]
    pub weight: u32,
    pub class: Class,
    /// The trace's priority (Google 2011: 0..=11), kept for per-band reports.
    pub priority: u8,
    pub key: TaskKey,
    pub submit: Time,
    /// Memory reserved by the task's request.
    pub request: Bytes,
    /// CPU cores the task uses while it runs (for CPU-hour accounting).
    pub cpus: f64,
}

fn one() -> u32 {
    1
}

/// An idle spell of a task (`TaskSpec::pauses`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// Work offset at which it begins.
    pub at: Duration,
    /// Wall time it lasts.
    pub length: Duration,
}

impl TaskSpec {
    /// The idle spell that begins exactly at work offset `at`, if any.
    pub fn pause_at(&self, at: Duration) -> Option<Pause> {
        self.pauses.iter().find(|p| p.at == at).copied()
    }

    /// The first idle spell after work offset `after`.
    pub fn next_pause(&self, after: Duration) -> Option<Duration> {
        self.pauses.iter().map(|p| p.at).find(|&a| a > after)
    }
}

/// One event of a workload, in time order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum WorkloadEvent {
    /// A task is submitted at `spec.submit`.
    Submit(TaskSpec),
    /// A usage sample of a task: at `offset` into its run it held `mem`.
    /// Sent at trace time `at` (no earlier than the task's submit).
    Usage { task: TaskKey, at: Time, offset: Duration, mem: Bytes },
    /// The trace says the task's work, at trace time `at`: it ran for `work`.
    Finish { task: TaskKey, at: Time, work: Duration },
    /// The trace ends the task's attempt at `at` (Google EVICT, FAIL, KILL
    /// or LOST; an Alibaba instance over by status with no usable end):
    /// wherever it is, it leaves and gives back what it held, its work is
    /// lost, and it counts as a trace death, neither a completion nor a
    /// policy kill. A later `Submit` of the same key is a new attempt.
    Death { task: TaskKey, at: Time },
}

impl WorkloadEvent {
    /// The time the event happens at, for ordering.
    pub fn at(&self) -> Time {
        match self {
            WorkloadEvent::Submit(s) => s.submit,
            WorkloadEvent::Usage { at, .. }
            | WorkloadEvent::Finish { at, .. }
            | WorkloadEvent::Death { at, .. } => *at,
        }
    }
}

/// A row of a trace that cannot be read, or a trace file that cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: {problem}")]
    BadRow { path: PathBuf, line: u64, problem: String },
    #[error("{path}: {problem}")]
    BadFile { path: PathBuf, problem: String },
    /// A file whose header row is missing or wrong: never skipped, as none
    /// of its rows could be read.
    #[error("{path}:{line}: {problem}")]
    BadHeader { path: PathBuf, line: u64, problem: String },
    /// A replay window the trace does not reach.
    #[error("{0}")]
    Window(String),
}

/// A stream of workload events.
pub type WorkloadStream = Box<dyn Iterator<Item = Result<WorkloadEvent, TraceError>> + Send>;
