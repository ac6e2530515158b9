//! The domain: nodes, containers (one task each), their classes and what the
//! kernel (or the simulator) says about them at one moment.

use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A quantity of memory in bytes.
pub type Bytes = u64;

/// A size for humans: `1.5 GiB`.
pub fn show_size(bytes: Bytes) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

/// One container. A task runs in exactly one container; a task restarted after
/// a kill keeps its id (it is the same unit of work, a new incarnation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ContainerId(pub u64);

/// The job a task belongs to; memory profiles are kept per job (000 §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobId(pub u64);

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}", self.0)
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "j{}", self.0)
    }
}

/// What a container is worth to the node's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// Latency-critical or guaranteed work: never preempted, starts at once.
    Production,
    /// Opportunistic work on memory production reserved but does not use:
    /// queued at launch and the only class that is ever preempted.
    BestEffort,
    /// Components whose delay fails whole jobs (job managers, application
    /// masters; 000 Table 2): never preempted, bypass swap.
    Critical,
}

impl Class {
    pub const ALL: [Class; 3] = [Class::Production, Class::BestEffort, Class::Critical];

    /// Only best-effort containers may ever be killed, frozen or checkpointed.
    pub fn is_preemptible(self) -> bool {
        matches!(self, Class::BestEffort)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Production => "production",
            Class::BestEffort => "best-effort",
            Class::Critical => "critical",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The class name was none of `production`, `best-effort`, `critical`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown class {0:?}: expected production, best-effort or critical")]
pub struct UnknownClass(pub String);

impl FromStr for Class {
    type Err = UnknownClass;
    fn from_str(s: &str) -> Result<Class, UnknownClass> {
        match s {
            "production" => Ok(Class::Production),
            "best-effort" => Ok(Class::BestEffort),
            "critical" => Ok(Class::Critical),
            other => Err(UnknownClass(other.to_string())),
        }
    }
}

/// Whether a container's processes may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunState {
    Running,
    /// Frozen (cgroup freezer): holds memory, uses no CPU, coldest to reclaim.
    Frozen,
}

/// Cumulative fault counters of one container (v2 and v1 `memory.stat`).
/// Detectors work on their rates, so only differences matter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultCounters {
    /// `pgmajfault`: major faults, pages read back from swap or files.
    pub major_faults: u64,
    /// `workingset_refault_anon`: evicted anonymous pages faulted back soon after.
    pub refault_anon: u64,
    /// `workingset_refault_file`: evicted page-cache pages read back soon after.
    pub refault_file: u64,
}

impl FaultCounters {
    /// Page evictions that hurt: refaults of either kind (000's `pgev`).
    pub fn refaults(&self) -> u64 {
        self.refault_anon.saturating_add(self.refault_file)
    }
}

/// A checkpoint image a container already has (for incremental dumps and resume).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInfo {
    /// Bytes of the image on its store.
    pub size: Bytes,
    /// When it was taken.
    pub taken_at: Time,
    /// Whether it sits on a store other nodes can read (remote resume).
    pub shared: bool,
}

/// What the kernel (or the simulator) says about one container now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContainerStats {
    pub id: ContainerId,
    pub job: JobId,
    pub class: Class,
    pub state: RunState,
    /// When this incarnation started running (after a restore: when restored).
    pub started: Time,
    /// Work done so far that a kill would lose (CPU time of the task, or
    /// simulated work), counted from the last restart, kept across checkpoints.
    pub progress: Duration,
    /// Resident memory charged to the container.
    pub usage: Bytes,
    /// Memory of the container that sits in swap.
    pub swap: Bytes,
    pub faults: FaultCounters,
    /// Cumulative time some of the container's tasks stalled on memory
    /// (v2 per-cgroup PSI `some total`), where the kernel has it.
    pub stall: Option<Duration>,
    /// User priority for the `score` ranker: a higher score is preempted first
    /// (000's `mem_adj_score`).
    pub score: i64,
    /// Share of memory for the `weighted` reclaimer (003).
    pub weight: u32,
    /// Share of its memory written since its last checkpoint, where known
    /// (soft-dirty tracking); `None` means assume all of it.
    pub dirty_fraction: Option<f64>,
    /// Its most recent checkpoint image, if any.
    pub image: Option<ImageInfo>,
}

impl ContainerStats {
    /// A running container with all optional evidence empty: the common start
    /// for tests, the simulator and discovery.
    pub fn new(id: ContainerId, job: JobId, class: Class, started: Time) -> ContainerStats {
        ContainerStats {
            id,
            job,
            class,
            state: RunState::Running,
            started,
            progress: Duration::ZERO,
            usage: 0,
            swap: 0,
            faults: FaultCounters::default(),
            stall: None,
            score: 0,
            weight: 1,
            dirty_fraction: None,
            image: None,
        }
    }

    /// Memory a checkpoint would write (resident plus swapped), or the dirty
    /// share of it when an earlier image makes an incremental dump possible.
    pub fn checkpoint_size(&self, incremental: bool) -> Bytes {
        let total = self.usage.saturating_add(self.swap);
        if incremental && self.image.is_some() {
            let share = self.dirty_fraction.unwrap_or(1.0).clamp(0.0, 1.0);
            crate::convert::to_u64(total as f64 * share)
        } else {
            total
        }
    }
}

/// What the node as a whole looks like now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeStats {
    /// Memory the node's containers may use (the machine, or the node cgroup limit).
    pub capacity: Bytes,
    /// Memory still available (`MemAvailable`, or limit minus usage).
    pub available: Bytes,
    pub swap_total: Bytes,
    pub swap_free: Bytes,
    /// Cumulative node-wide memory stall time (PSI `some total`), where known.
    pub stall: Option<Duration>,
    /// A count that grows while the node's memory is full and being
    /// reclaimed, where known: for a node cgroup with a limit, the times it
    /// or a limited cgroup above it hit its limit (v1 `memory.failcnt`, v2
    /// `memory.events` `max`) plus the pages the machine scanned because it
    /// ran short itself (`pgscan_kswapd`, `pgscan_direct`); for a node that
    /// is the whole machine, the pages the kernel scanned to reclaim
    /// (`/proc/vmstat` `pgscan_*`). Only whether it grew is used: refaults
    /// while it does not are a working set being read back into free
    /// memory, not thrashing.
    pub reclaims: Option<u64>,
}

/// One observation of a node: the time and everything measured at it.
///
/// Borrowed, so that callers can reuse their buffers between steps.
#[derive(Clone, Copy, Debug)]
pub struct Observation<'a> {
    pub now: Time,
    pub node: NodeStats,
    pub containers: &'a [ContainerStats],
}

impl<'a> Observation<'a> {
    pub fn container(&self, id: ContainerId) -> Option<&'a ContainerStats> {
        self.containers.iter().find(|c| c.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_best_effort_is_preemptible() {
        assert!(Class::BestEffort.is_preemptible());
        assert!(!Class::Production.is_preemptible());
        assert!(!Class::Critical.is_preemptible());
    }

    #[test]
    fn class_names_round_trip_and_bad_names_are_refused() {
        for c in Class::ALL {
            assert_eq!(c.as_str().parse::<Class>(), Ok(c));
        }
        let err = "batch".parse::<Class>().unwrap_err();
        assert!(err.to_string().contains("\"batch\""));
    }

    #[test]
    fn incremental_checkpoint_size_needs_an_earlier_image() {
        let mut c = ContainerStats::new(ContainerId(1), JobId(1), Class::BestEffort, Time::ZERO);
        c.usage = 1000;
        c.swap = 1000;
        c.dirty_fraction = Some(0.1);
        assert_eq!(c.checkpoint_size(true), 2000);
        c.image = Some(ImageInfo { size: 2000, taken_at: Time::ZERO, shared: false });
        assert_eq!(c.checkpoint_size(true), 200);
        assert_eq!(c.checkpoint_size(false), 2000);
    }
}
