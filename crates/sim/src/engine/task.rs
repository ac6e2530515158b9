//! A simulated task: its spec, where it is in its life, and what it has cost.

use super::clock::Clocks;
use crate::outcome::{Span, Stamp, TaskOutcome};
use crate::workload::TaskSpec;
use overbook_core::launch::TaskRequest;
use overbook_core::{Bytes, ContainerId, ImageInfo, Time};
use std::time::Duration;

/// Profile points a task keeps at hand (`Task::window`).
const WINDOW: usize = 6;

/// Profile points a task keeps at most behind its progress before they are
/// coarsened. A trace's usage rows become points of a live task's profile
/// (a restart replays it from the start), so without a bound a task's
/// memory grew with the trace's length: 29 days of 5-minute samples are
/// 8,352 points, 134 KB a task.
const PAST_POINTS: usize = 512;

/// Where a task is in its life. A finished task has no phase: it leaves the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for a retry after its node's queue refused it.
    Backoff,
    /// A production or critical task waiting for a node with room for its
    /// reservation (the production scheduler's own queue).
    AwaitingGuarantee,
    /// In a node's launcher queue.
    Queued {
        node: u32,
    },
    Running {
        node: u32,
    },
    /// Kill issued; it holds its memory until the kill delay is over.
    Dying {
        node: u32,
    },
    /// Frozen; its memory is being swapped out.
    Freezing {
        node: u32,
    },
    /// Frozen and swapped out, waiting (in `node`'s launcher) to resume.
    Frozen {
        node: u32,
    },
    /// Its image is being written; it holds its memory until the dump is done.
    Dumping {
        node: u32,
    },
    /// Its image is on the store of `image_node`; it waits in `node`'s launcher.
    Checkpointed {
        node: u32,
        image_node: u32,
    },
    /// Being thawed or restored on `node`: memory charged, no progress yet.
    Resuming {
        node: u32,
    },
    /// In an idle spell (`TaskSpec::pauses`): holds memory, touches none of
    /// it, so the kernel and reclaimers can take it for free.
    Idle {
        node: u32,
    },
    /// Faulting back memory that was reclaimed while it needed it: no
    /// progress until it is back (`Task::refault_until`).
    Refaulting {
        node: u32,
    },
}

#[derive(Debug)]
pub struct Task {
    pub id: ContainerId,
    pub spec: TaskSpec,
    pub phase: Phase,
    /// Bumped whenever scheduled events for this task become stale.
    pub epoch: u32,
    /// Work done in the current incarnation (kept across freezes and
    /// checkpoints), up to its last sync with its node's clocks.
    pub progress: Duration,
    /// Its node's clocks at its last sync, while it runs.
    pub base: Clocks,
    /// Progress at its last image, for the dirty share of an incremental dump.
    pub progress_at_image: Duration,
    /// The work offset its planned point stands for.
    pub target: Duration,
    /// Bytes its pending dump writes.
    pub written: Bytes,
    /// Start of the current incarnation.
    pub started: Time,
    /// Memory it holds now (its profile at `progress`).
    pub mem: Bytes,
    /// Of `mem`, what reclaim pushed to swap while it was idle; it faults
    /// it back when it works again.
    pub out: Bytes,
    /// When its refaulting ends (`Phase::Refaulting`).
    pub refault_until: Time,
    /// Where `progress` was in its profile last time (`MemProfile::points`
    /// index of the first point after it): a task moves through its
    /// profile point by point, so no search is needed.
    cursor: usize,
    /// The progress `cursor` was found for (`Duration::MAX`: none).
    located: Duration,
    /// A copy of the profile's points from `window_start` on (`window_len`
    /// of them), kept in the task so that moving point by point reads the
    /// profile's own memory only every few points.
    window: [(Duration, Bytes); WINDOW],
    window_start: usize,
    window_len: usize,
    /// Runs so far (a kill ends one).
    pub attempts: u32,
    /// The trace ended it while a kill, freeze, dump or resume was under
    /// way: it leaves once that is done (`death.rs`).
    pub doomed: bool,
    pub image: Option<ImageInfo>,
    /// When it began waiting to resume, to learn how long local resumes take.
    pub suspended_at: Time,
    /// Fault counters synthesized from the thrashing model, up to its last sync.
    pub major_faults: f64,
    pub refaults: f64,
    pub outcome: TaskOutcome,
}

impl Task {
    pub fn new(id: ContainerId, spec: TaskSpec) -> Task {
        let outcome = TaskOutcome {
            key: spec.key,
            job: spec.job,
            class: spec.class,
            priority: spec.priority,
            submit: spec.submit,
            first_start: Stamp::NONE,
            end: Stamp::NONE,
            completed: false,
            trace_death: false,
            rejections: 0,
            kills: 0,
            suspensions: 0,
            checkpoints: 0,
            incremental_checkpoints: 0,
            remote_resumes: 0,
            restarts: 0,
            cpus: spec.cpus,
            work: spec.work.unwrap_or_default().into(),
            lost_work: Span::ZERO,
            checkpoint_time: Span::ZERO,
            thrashing_time: Span::ZERO,
            reclaimed: 0,
            lost_share: 0.0,
            refault_time: Span::ZERO,
        };
        Task {
            id,
            spec,
            phase: Phase::Backoff,
            epoch: 0,
            progress: Duration::ZERO,
            base: Clocks::default(),
            progress_at_image: Duration::ZERO,
            target: Duration::ZERO,
            written: 0,
            started: Time::ZERO,
            mem: 0,
            out: 0,
            refault_until: Time::ZERO,
            cursor: 0,
            located: Duration::MAX,
            window: [(Duration::ZERO, 0); WINDOW],
            window_start: 0,
            window_len: 0,
            attempts: 0,
            doomed: false,
            image: None,
            suspended_at: Time::ZERO,
            major_faults: 0.0,
            refaults: 0.0,
            outcome,
        }
    }

    pub fn request(&self, now: Time) -> TaskRequest {
        TaskRequest {
            id: self.id,
            job: self.spec.job,
            class: self.spec.class,
            request: self.spec.request,
            submitted: now,
        }
    }

    /// Work still to do, `None` while the trace has not told it.
    pub fn remaining(&self) -> Option<Duration> {
        self.spec.work.map(|w| w.saturating_sub(self.progress))
    }

    /// Add a usage sample to its profile (a trace's row).
    pub fn push_usage(&mut self, offset: Duration, mem: Bytes) {
        self.spec.profile.push(offset, mem);
        self.window_len = 0;
        self.located = Duration::MAX;
        // Only what is behind it, short of the point in force: its memory
        // now and ahead stays exact; a restart replays a coarser past
        // that never holds less.
        let passed = self.locate().saturating_sub(1);
        if passed > PAST_POINTS {
            self.spec.profile.coarsen_before(passed);
            self.cursor = 0;
            self.located = Duration::MAX;
            self.window_len = 0;
        }
    }

    /// Profile point `i` (`i` < the profile's length), from the window when
    /// it holds it, else the window is refilled from `i - 1` on.
    fn point(&mut self, i: usize) -> (Duration, Bytes) {
        let k = i.wrapping_sub(self.window_start);
        if k < self.window_len {
            return self.window[k];
        }
        let points = self.spec.profile.points();
        let start = i.saturating_sub(1);
        let len = (points.len() - start).min(WINDOW);
        self.window[..len].copy_from_slice(&points[start..start + len]);
        self.window_start = start;
        self.window_len = len;
        points[i]
    }

    /// Ask the cache for the profile points the window is next refilled
    /// from, when the task is about to run out of it.
    pub fn prefetch_profile(&self) {
        let end = self.window_start + self.window_len;
        let points = self.spec.profile.points();
        let start = end.saturating_sub(1);
        if self.cursor + 2 >= end && start < points.len() {
            super::prefetch::prefetch_slice(&points[start..(start + WINDOW).min(points.len())]);
        }
    }

    /// The index of the first profile point after `progress` (the
    /// profile's `partition_point`), from where it was last time.
    fn locate(&mut self) -> usize {
        let progress = self.progress;
        // A point event asks twice (its memory, then its next point).
        if progress == self.located {
            return self.cursor;
        }
        let len = self.spec.profile.points().len();
        let mut i = self.cursor.min(len);
        if i > 0 && self.point(i - 1).0 > progress {
            i = self.spec.profile.points().partition_point(|p| p.0 <= progress);
        } else {
            let mut steps = 0;
            while i < len && self.point(i).0 <= progress {
                i += 1;
                steps += 1;
                if steps == 4 {
                    i += self.spec.profile.points()[i..].partition_point(|p| p.0 <= progress);
                    break;
                }
            }
        }
        self.cursor = i;
        self.located = progress;
        i
    }

    /// Memory its profile gives at its progress (`MemProfile::at`).
    pub fn profile_mem(&mut self) -> Bytes {
        let i = self.locate();
        let len = self.spec.profile.points().len();
        match i {
            _ if len == 0 => 0,
            0 => self.point(0).1,
            i => self.point(i - 1).1,
        }
    }

    /// The next work offset at which something changes: its memory, or its end.
    pub fn next_point(&mut self) -> Option<Duration> {
        let i = self.locate();
        let len = self.spec.profile.points().len();
        let mut change = (i < len).then(|| self.point(i).0);
        if let Some(p) = self.spec.next_pause(self.progress) {
            change = Some(change.map_or(p, |c| c.min(p)));
        }
        match (change, self.spec.work) {
            (Some(c), Some(w)) => Some(c.min(w)),
            (c, w) => c.or(w),
        }
    }

    /// Share of its memory written since its last image: the work done since
    /// then over all work done (a task that re-touches its data uniformly).
    pub fn dirty_fraction(&self) -> Option<f64> {
        self.image?;
        let total = self.progress.as_secs_f64();
        if total <= 0.0 {
            return Some(0.0);
        }
        let since = self.progress.saturating_sub(self.progress_at_image).as_secs_f64();
        Some((since / total).clamp(0.0, 1.0))
    }

    pub fn bump(&mut self) -> u32 {
        self.epoch = self.epoch.wrapping_add(1);
        self.epoch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{MemProfile, TaskKey};
    use overbook_core::{Class, JobId};

    #[test]
    fn a_long_lived_tasks_profile_stays_bounded_and_exact_from_its_progress_on() {
        let spec = TaskSpec {
            key: TaskKey(1),
            job: JobId(1),
            submit: Time::ZERO,
            class: Class::BestEffort,
            priority: 0,
            request: 1 << 30,
            cpus: 1.0,
            work: None,
            profile: MemProfile::default(),
            weight: 1,
            pauses: Vec::new(),
        };
        let mut task = Task::new(ContainerId(1), spec);
        let five_minutes = Duration::from_secs(300);
        // 29 days of 5-minute samples, the task keeping up with them.
        for i in 0..29 * 288u32 {
            let at = five_minutes * i;
            let i = u64::from(i);
            task.progress = at;
            task.push_usage(at, (i % 97) << 20);
            assert_eq!(task.profile_mem(), (i % 97) << 20, "exact where it is, at sample {i}");
        }
        let kept = task.spec.profile.points().len();
        assert!(kept <= PAST_POINTS + 2, "{kept} points kept");
        let peak = task.spec.profile.points().iter().map(|p| p.1).max();
        assert_eq!(peak, Some(96 << 20), "the past's peak is kept");
    }
}
