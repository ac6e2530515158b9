//! The workload stream the engine consumes: trace readers and the built-in
//! generator both produce it, in non-decreasing time order, one event at a
//! time, so no trace is ever held in memory whole.

use overbook_core::{Bytes, Class, JobId, Time};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// A task's identity across the whole workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TaskKey(pub u64);

/// Memory over the course of a task's work: a step function of the work done.
/// At offset `t` the task holds the memory of the last point at or before `t`
/// (the first point's before it). Offsets are work done, not wall time, so a
/// slowed or restarted task replays the same curve.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[repr(C)] // `points` first: `TaskSpec`'s first cache line holds it.
pub struct MemProfile {
    points: Vec<(Duration, Bytes)>,
    /// Before this offset each point stands for several samples, holding
    /// their peak (`coarsen_before`).
    #[serde(skip)]
    coarse_until: Duration,
}

impl MemProfile {
    /// A task that holds `mem` for its whole life.
    pub fn flat(mem: Bytes) -> MemProfile {
        MemProfile { points: vec![(Duration::ZERO, mem)], coarse_until: Duration::ZERO }
    }

    /// Points in any order; they are sorted by offset, later duplicates win.
    pub fn from_points(mut points: Vec<(Duration, Bytes)>) -> MemProfile {
        points.sort_by_key(|p| p.0);
        points.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                earlier.1 = later.1;
                true
            } else {
                false
            }
        });
        MemProfile { points, coarse_until: Duration::ZERO }
    }

    /// Add a sample at `offset`; samples are expected in order (a trace's usage
    /// rows), and an out-of-order one replaces in place.
    pub fn push(&mut self, offset: Duration, mem: Bytes) {
        if offset < self.coarse_until {
            // A late sample in the coarsened past can only raise the point
            // in force there: replacing or splitting it would drop the peak
            // of the samples it stands for, and the profile would hold less
            // than the trace said.
            let i = self.points.partition_point(|p| p.0 <= offset).saturating_sub(1);
            if let Some(p) = self.points.get_mut(i) {
                p.1 = p.1.max(mem);
            }
            return;
        }
        match self.points.last() {
            // Out of order or repeated: in place, so the coarse past stays
            // marked as such (rebuilding the profile forgot where it ends).
            Some(&(last, _)) if offset <= last => {
                match self.points.binary_search_by_key(&offset, |p| p.0) {
                    Ok(i) => self.points[i].1 = mem,
                    Err(i) => self.points.insert(i, (offset, mem)),
                }
            }
            _ => self.points.push((offset, mem)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    pub fn points(&self) -> &[(Duration, Bytes)] {
        &self.points
    }

    /// Halve the points before index `keep`: each pair becomes one point at
    /// the first's offset holding the larger memory. The profile from
    /// `points()[keep]` on is unchanged, and before it never holds less
    /// than it did, even after late samples there (`push`): an envelope,
    /// coarser in time.
    pub fn coarsen_before(&mut self, keep: usize) {
        let keep = keep.min(self.points.len());
        let last_merged = keep.checked_sub(1).map(|i| self.points[i].0);
        let mut write = 0;
        let mut read = 0;
        while read < keep {
            let end = (read + 2).min(keep);
            let mem = self.points[read..end].iter().map(|p| p.1).max().unwrap_or(0);
            self.points[write] = (self.points[read].0, mem);
            write += 1;
            read = end;
        }
        self.points.drain(write..keep);
        // The coarse points cover up to the first point kept as it was;
        // with none kept, up to and including the last sample merged.
        let end = match self.points.get(write) {
            Some(&(kept, _)) => Some(kept),
            None => last_merged.map(|t| t + Duration::from_nanos(1)),
        };
        self.coarse_until = self.coarse_until.max(end.unwrap_or(Duration::ZERO));
    }

    /// Memory held at work offset `at` (0 for an empty profile).
    pub fn at(&self, at: Duration) -> Bytes {
        let i = self.points.partition_point(|p| p.0 <= at);
        match i {
            0 => self.points.first().map_or(0, |p| p.1),
            i => self.points[i - 1].1,
        }
    }

    /// The offset of the next change after `at`, if any.
    pub fn next_change(&self, at: Duration) -> Option<Duration> {
        let i = self.points.partition_point(|p| p.0 <= at);
        self.points.get(i).map(|p| p.0)
    }

    /// The largest memory held at any point.
    pub fn peak(&self) -> Bytes {
        self.points.iter().map(|p| p.1).max().unwrap_or(0)
    }
}

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

#[cfg(test)]
mod tests {
    #[test]
    fn a_coarsened_profile_is_an_envelope_and_keeps_its_tail() {
        let points: Vec<(Duration, Bytes)> =
            (0..9u64).map(|i| (Duration::from_secs(i * 10), (i * 7 % 5) * 100)).collect();
        let before = MemProfile::from_points(points);
        let mut after = before.clone();
        after.coarsen_before(6);
        assert_eq!(after.points().len(), 3 + 3, "six points before index 6 become three");
        for t in 0..100 {
            let at = Duration::from_secs(t);
            if at >= Duration::from_secs(60) {
                assert_eq!(after.at(at), before.at(at), "the tail is unchanged at {t}");
            } else {
                assert!(after.at(at) >= before.at(at), "never less at {t}");
            }
        }
        let mut odd = before.clone();
        odd.coarsen_before(5);
        assert_eq!(odd.points().len(), 3 + 4);
        assert_eq!(odd.points()[2], before.points()[4], "an odd one out stays as it is");
        let mut all = before.clone();
        all.coarsen_before(usize::MAX);
        assert_eq!(all.points().len(), 5);
    }

    #[test]
    fn a_late_sample_in_the_coarsened_past_only_raises_it() {
        let points: Vec<(Duration, Bytes)> =
            (0..9u64).map(|i| (Duration::from_secs(i * 10), (i * 7 % 5) * 100 + 100)).collect();
        let before = MemProfile::from_points(points);
        let mut late = before.clone();
        late.coarsen_before(6);
        let coarse = late.clone();
        // Low samples on a merged point's own offset, between two, and
        // before the first: the coarse past keeps its peaks.
        for (at, mem) in [(20, 1), (35, 1), (0, 1)] {
            late.push(Duration::from_secs(at), mem);
        }
        assert_eq!(late, coarse, "low samples change nothing there");
        // A high one raises the point in force at its offset, and only it.
        late.push(Duration::from_secs(25), 10_000);
        assert_eq!(late.at(Duration::from_secs(20)), 10_000);
        assert_eq!(late.points().len(), coarse.points().len(), "no point split");
        for t in 0..100 {
            let at = Duration::from_secs(t);
            assert!(late.at(at) >= before.at(at), "never less than the trace said at {t}");
        }
        // Past the coarse part a late sample is exact again.
        late.push(Duration::from_secs(65), 1);
        assert_eq!(late.at(Duration::from_secs(65)), 1);
        // ... and the coarse past stays coarse after it: a low sample on a
        // merged point's offset still cannot lower its peak.
        late.push(Duration::from_secs(20), 1);
        assert_eq!(late.at(Duration::from_secs(20)), 10_000, "the peak kept after a late row");
        let mut all = before.clone();
        all.coarsen_before(usize::MAX);
        all.push(Duration::from_secs(80), 1);
        let at80 = Duration::from_secs(80);
        assert_eq!(all.at(at80), before.at(at80), "the last sample merged keeps its memory");
        all.push(Duration::from_secs(90), 1);
        assert_eq!(all.at(Duration::from_secs(90)), 1, "a new sample after them all");
    }

    use super::*;

    fn s(x: u64) -> Duration {
        Duration::from_secs(x)
    }

    #[test]
    fn profile_is_a_step_function_of_work() {
        let p = MemProfile::from_points(vec![(s(10), 300), (s(0), 100), (s(5), 200)]);
        assert_eq!(p.at(s(0)), 100);
        assert_eq!(p.at(s(4)), 100);
        assert_eq!(p.at(s(5)), 200);
        assert_eq!(p.at(s(100)), 300);
        assert_eq!(p.next_change(s(5)), Some(s(10)));
        assert_eq!(p.next_change(s(10)), None);
        assert_eq!(p.peak(), 300);
    }

    #[test]
    fn out_of_order_samples_are_placed_in_order() {
        let mut p = MemProfile::default();
        p.push(s(10), 3);
        p.push(s(0), 1);
        p.push(s(10), 4);
        assert_eq!(p.points(), &[(s(0), 1), (s(10), 4)]);
    }
}
