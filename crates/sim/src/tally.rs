//! What the reports need of a run's tasks, gathered as each task leaves the
//! run: sums per class, per priority band and run-wide, and one small
//! record per job. A run's memory so grows with its jobs (32 bytes each and
//! an index entry), not with every task it ever ran; a task's whole outcome
//! is kept only when asked for (`Outcomes::Kept`, `--per-task-csv`).

use crate::outcome::{Stamp, TaskOutcome};
use crate::report::summary::{ActionCounts, Band, GroupKey};
use crate::workload::TaskKey;
use overbook_core::{Class, JobId, Time};
use std::collections::HashMap;

const SECONDS_PER_HOUR: f64 = 3600.0;

/// Whether a run keeps every task's outcome beside its [`Tally`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcomes {
    /// Only the tally: memory bounded by live tasks and jobs.
    Tallied,
    /// Every outcome too, in (submission, key) order: per-task reports and tests.
    Kept,
}

/// Sums over one group's tasks. Spans are summed exactly, in nanoseconds,
/// so that a sum does not depend on the order tasks leave in.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupTally {
    pub tasks: usize,
    pub actions: ActionCounts,
    thrashing_ns: u128,
    checkpoint_ns: u128,
    refault_ns: u128,
    /// Core-seconds of work lost to kills and spent dumping and restoring.
    wasted_core_s: f64,
    lost_share: f64,
}

impl GroupTally {
    fn add(&mut self, t: &TaskOutcome) {
        self.tasks += 1;
        self.actions.add(t);
        self.thrashing_ns += u128::from(t.thrashing_time.nanos());
        self.checkpoint_ns += u128::from(t.checkpoint_time.nanos());
        self.refault_ns += u128::from(t.refault_time.nanos());
        self.wasted_core_s += (t.lost_work + t.checkpoint_time).as_secs_f64() * t.cpus;
        self.lost_share += t.lost_share;
    }

    /// Task-hours run slowed by thrashing.
    pub fn thrashing_hours(&self) -> f64 {
        hours(self.thrashing_ns)
    }

    /// Task-hours spent dumping and restoring images.
    pub fn checkpoint_hours(&self) -> f64 {
        hours(self.checkpoint_ns)
    }

    /// CPU-hours thrown away: work lost to kills plus checkpoint time, times cores.
    pub fn wasted_cpu_hours(&self) -> f64 {
        self.wasted_core_s / SECONDS_PER_HOUR
    }

    /// Mean over the tasks of the largest share of its memory a task was short of at once.
    pub fn mean_lost_share(&self) -> f64 {
        self.mean(self.lost_share)
    }

    /// Mean seconds a task stood still faulting reclaimed memory back.
    pub fn mean_refault_s(&self) -> f64 {
        self.mean(seconds(self.refault_ns))
    }

    fn mean(&self, sum: f64) -> f64 {
        if self.tasks == 0 {
            0.0
        } else {
            sum / self.tasks as f64
        }
    }
}

fn seconds(ns: u128) -> f64 {
    ns as f64 / 1e9
}

fn hours(ns: u128) -> f64 {
    seconds(ns) / SECONDS_PER_HOUR
}

/// A job as the reports see it: its first task (by submission, then key)
/// decides its class and band; it completes when every task did, from the
/// first submission to the last end.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub class: Class,
    pub priority: u8,
    /// No attempt but those the trace ended failed to complete.
    none_failed: bool,
    /// Some attempt of it completed (a job whose every attempt the trace
    /// ended never completes).
    ran_to_end: bool,
    first_submit: Time,
    first_key: TaskKey,
    last_end: Stamp,
}

impl Job {
    fn of(t: &TaskOutcome) -> Job {
        Job {
            class: t.class,
            priority: t.priority,
            none_failed: true,
            ran_to_end: false,
            first_submit: t.submit,
            first_key: t.key,
            last_end: Stamp::NONE,
        }
    }

    fn add(&mut self, t: &TaskOutcome) {
        if (t.submit, t.key) < (self.first_submit, self.first_key) {
            self.class = t.class;
            self.priority = t.priority;
            self.first_submit = t.submit;
            self.first_key = t.key;
        }
        if let Some(end) = t.end.get() {
            match self.last_end.get() {
                Some(last) if last >= end => {}
                _ => self.last_end = Stamp::at(end),
            }
        }
        // An attempt the trace ended (a death) neither completes its job
        // nor holds it back: its resubmission, if any, is what counts.
        if !t.trace_death {
            self.none_failed &= t.completed && t.end.get().is_some();
            self.ran_to_end |= t.completed;
        }
    }

    pub fn completed(&self) -> bool {
        self.none_failed && self.ran_to_end
    }

    /// Completion time in seconds, for a completed job.
    pub fn completion_secs(&self) -> Option<f64> {
        match (self.completed(), self.last_end.get()) {
            (true, Some(end)) => Some((end - self.first_submit).as_secs_f64()),
            _ => None,
        }
    }
}

/// Everything the reports say of a run's tasks, added to as each leaves.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// Every task of the run.
    pub all: GroupTally,
    /// By `GroupKey::ALL`'s order.
    groups: [GroupTally; 6],
    jobs: Vec<Job>,
    job_index: HashMap<JobId, u32>,
    /// Whether reclaim took memory from any task.
    pub reclaimed_any: bool,
}

impl Tally {
    /// The tally of tasks given whole (tests, reports of hand-built runs).
    pub fn of<'a>(tasks: impl IntoIterator<Item = &'a TaskOutcome>) -> Tally {
        let mut tally = Tally::default();
        tasks.into_iter().for_each(|t| tally.add(t));
        tally
    }

    /// A task left the run: count it.
    pub fn add(&mut self, t: &TaskOutcome) {
        self.all.add(t);
        self.groups[GroupKey::Class(t.class).index()].add(t);
        self.groups[GroupKey::Band(Band::of(t.priority)).index()].add(t);
        self.reclaimed_any |= t.reclaimed > 0;
        let next = overbook_core::convert::usize_to_u32(self.jobs.len());
        let i = *self.job_index.entry(t.job).or_insert(next);
        if i == next {
            self.jobs.push(Job::of(t));
        }
        if let Some(job) = self.jobs.get_mut(i as usize) {
            job.add(t);
        }
    }

    pub fn group(&self, key: GroupKey) -> &GroupTally {
        &self.groups[key.index()]
    }

    /// Whether any task of `class` ran.
    pub fn has(&self, class: Class) -> bool {
        self.group(GroupKey::Class(class)).tasks > 0
    }

    /// The run's jobs, in the order their first task left.
    pub fn jobs(&self) -> &[Job] {
        &self.jobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Span;
    use crate::report::summary::fixtures::task;
    use std::time::Duration;

    #[test]
    fn a_job_takes_its_class_from_its_first_task_whatever_order_they_leave_in() {
        let late = task(1, Class::BestEffort, 0, 50, 60);
        let first = task(1, Class::Production, 10, 5, 90);
        let forward = Tally::of([&first, &late]);
        let backward = Tally::of([&late, &first]);
        assert_eq!(forward.jobs(), backward.jobs());
        let job = &backward.jobs()[0];
        assert_eq!((job.class, job.priority), (Class::Production, 10));
        assert_eq!(job.completion_secs(), Some(85.0));
    }

    #[test]
    fn spans_sum_exactly_whatever_the_order() {
        let mut tasks: Vec<TaskOutcome> = (0..1000u64)
            .map(|i| {
                let mut t = task(i, Class::BestEffort, 0, 0, 10);
                t.thrashing_time = Span::from(Duration::from_nanos(i * 1_000_000_007 + 3));
                t
            })
            .collect();
        let forward = Tally::of(&tasks);
        tasks.reverse();
        let backward = Tally::of(&tasks);
        assert_eq!(
            forward.all.thrashing_hours().to_bits(),
            backward.all.thrashing_hours().to_bits()
        );
        let ns: u128 = (0..1000u128).map(|i| i * 1_000_000_007 + 3).sum();
        assert_eq!(forward.all.thrashing_hours(), ns as f64 / 1e9 / 3600.0);
        assert_eq!(forward.group(GroupKey::BEST_EFFORT).tasks, 1000);
        assert_eq!(forward.group(GroupKey::PRODUCTION).tasks, 0);
        assert!(!forward.has(Class::Critical));
    }

    #[test]
    fn a_job_takes_32_bytes() {
        assert_eq!(std::mem::size_of::<Job>(), 32);
    }

    #[test]
    fn every_group_has_its_own_place() {
        for (i, key) in GroupKey::ALL.into_iter().enumerate() {
            assert_eq!(key.index(), i, "{}", key.name());
        }
    }
}
