//! A simulated task: its spec, where it is in its life, and what it has cost.

use super::clock::Reading;
use crate::outcome::{Span, Stamp, TaskOutcome};
use crate::workload::TaskSpec;
use overbook_core::convert::usize_to_u32;
use overbook_core::launch::TaskRequest;
use overbook_core::{Bytes, Class, ContainerId, ImageInfo, JobId, Time};
use std::ops::Range;
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

/// A task in the engine.
///
/// Laid out by who reads it (`repr(C)`, on cache lines of its own): a day
/// at Google scale keeps hundreds of thousands of tasks spread over most of
/// a gigabyte, and the engine spends its time waiting for them, so what a
/// policy step reads of each task on its node, and what a task's point
/// reads of it, sit together at the front (`STEP_LINES`, `POINT_LINES`),
/// and what only a kill, dump or departure reads sits behind.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Task {
    /// First line: its work, idle spells and profile; the second neither a
    /// step nor a point reads.
    pub spec: TaskSpec,
    // Third line: what only a step reads.
    /// Of `mem`, what reclaim pushed to swap while it was idle; it faults
    /// it back when it works again.
    pub out: Bytes,
    pub id: ContainerId,
    /// Start of the current incarnation.
    pub started: Time,
    /// Copies of its spec's job, weight, class and priority, on the line a
    /// step reads anyway: read from the spec, they cost each member of a
    /// stepped node a cache line more (the spec's second).
    pub(super) job: JobId,
    pub image: Option<ImageInfo>,
    pub(super) weight: u32,
    pub(super) class: Class,
    pub(super) priority: u8,
    // Fourth and fifth: what both a step and a point read (a sync), and
    // where its planned point is.
    /// Work done in the current incarnation (kept across freezes and
    /// checkpoints), up to its last sync with its node's clocks.
    pub progress: Duration,
    /// Its node's clocks on its lane at its last sync, while it runs.
    pub base: Reading,
    /// Memory it holds now (its profile at `progress`).
    pub mem: Bytes,
    /// Fault counters synthesized from the thrashing model, up to its last sync.
    pub major_faults: f64,
    pub refaults: f64,
    /// Nanoseconds it ran slowed by thrashing, up to its last sync: its
    /// outcome's `thrashing_time` when it leaves (`Task::into_outcome`).
    thrashed: u64,
    pub phase: Phase,
    /// Bumped whenever scheduled events for this task become stale.
    pub epoch: u32,
    /// The progress `cursor` was found for (`Duration::MAX`: none).
    located: Duration,
    /// The work offset its planned point stands for.
    pub target: Duration,
    // Sixth and seventh: what only a point reads.
    /// Where `progress` was in its profile last time (`MemProfile::points`
    /// index of the first point after it): a task moves through its
    /// profile point by point, so no search is needed.
    cursor: u32,
    window_start: u32,
    window_len: u32,
    /// Its profile's length, kept here as a profile's shape (which says how
    /// its length is counted) sits on the spec's second line.
    profile_len: u32,
    /// A copy of the profile's points from `window_start` on (`window_len`
    /// of them), kept in the task so that moving point by point reads the
    /// profile's own memory only every few points. Offsets in nanoseconds:
    /// 16 bytes a point, where a `Duration` takes 16 alone.
    window: [(u64, Bytes); WINDOW],
    /// Progress at its last image, for the dirty share of an incremental dump.
    pub progress_at_image: Duration,
    /// Bytes its pending dump writes.
    pub written: Bytes,
    /// When its refaulting ends (`Phase::Refaulting`).
    pub refault_until: Time,
    /// When it began waiting to resume, to learn how long local resumes take.
    pub suspended_at: Time,
    /// Runs so far (a kill ends one).
    pub attempts: u32,
    /// The trace ended it while a kill, freeze, dump or resume was under
    /// way: it leaves once that is done (`death.rs`).
    pub doomed: bool,
    pub outcome: TaskOutcome,
}

/// The cache lines of a task that a policy step reads: its spec's first
/// (where `Option<Task>` keeps whether the slot is taken), then what it
/// reports (swap, identity, image, the copies of its spec's job, weight,
/// class and priority) and the sync's (progress, clocks, memory,
/// counters, phase).
pub const STEP_LINES: [Range<usize>; 2] = [0..1, 2..5];
/// The cache lines of a task that reaching a point reads: the spec's first
/// (work, idle spells, profile), then the sync's, the cursor and the window.
pub const POINT_LINES: [Range<usize>; 2] = [0..1, 3..7];

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
        let (job, weight, class, priority) = (spec.job, spec.weight, spec.class, spec.priority);
        let profile_len = usize_to_u32(spec.profile.len());
        Task {
            spec,
            progress: Duration::ZERO,
            base: Reading::default(),
            mem: 0,
            major_faults: 0.0,
            refaults: 0.0,
            thrashed: 0,
            out: 0,
            id,
            started: Time::ZERO,
            phase: Phase::Backoff,
            epoch: 0,
            job,
            image: None,
            located: Duration::MAX,
            target: Duration::ZERO,
            weight,
            class,
            priority,
            cursor: 0,
            window_start: 0,
            window_len: 0,
            profile_len,
            window: [(0, 0); WINDOW],
            progress_at_image: Duration::ZERO,
            written: 0,
            refault_until: Time::ZERO,
            suspended_at: Time::ZERO,
            attempts: 0,
            doomed: false,
            outcome,
        }
    }

    /// Its outcome as it leaves, with what it ran slowed since its last sync.
    pub fn into_outcome(self) -> TaskOutcome {
        let mut outcome = self.outcome;
        outcome.thrashing_time += Span::from_nanos(self.thrashed);
        outcome
    }

    /// Add what it ran slowed by thrashing, nanoseconds (`Clocks::sync`).
    pub fn thrashed(&mut self, nanos: u64) {
        self.thrashed = self.thrashed.saturating_add(nanos);
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
        self.profile_len = usize_to_u32(self.spec.profile.len());
        self.window_len = 0;
        self.located = Duration::MAX;
        // Only what is behind it, short of the point in force: its memory
        // now and ahead stays exact; a restart replays a coarser past
        // that never holds less.
        let passed = self.locate().saturating_sub(1);
        if passed > PAST_POINTS {
            self.spec.profile.coarsen_before(passed);
            self.profile_len = usize_to_u32(self.spec.profile.len());
            self.cursor = 0;
            self.located = Duration::MAX;
            self.window_len = 0;
        }
    }

    /// Profile point `i` (`i` < the profile's length), from the window when
    /// it holds it, else the window is refilled from `i - 1` on.
    fn point(&mut self, i: usize) -> (Duration, Bytes) {
        let k = i.wrapping_sub(self.window_start as usize);
        if k < self.window_len as usize {
            let (offset, mem) = self.window[k];
            return (Duration::from_nanos(offset), mem);
        }
        let start = i.saturating_sub(1);
        // An offset past 584 years stays out: the window then ends short.
        let len = self.spec.profile.copy_points(start, &mut self.window);
        // Both at most the profile's length, so `usize_to_u32` saturates
        // only for a profile of more than 4 G points (none comes near).
        self.window_start = usize_to_u32(start);
        self.window_len = usize_to_u32(len);
        self.spec.profile.point(i)
    }

    /// The index of the first profile point after `progress` (the
    /// profile's `first_after`), from where it was last time.
    fn locate(&mut self) -> usize {
        let progress = self.progress;
        // A point event asks twice (its memory, then its next point).
        if progress == self.located {
            return self.cursor as usize;
        }
        let len = self.profile_len as usize;
        let mut i = (self.cursor as usize).min(len);
        if i > 0 && self.point(i - 1).0 > progress {
            i = self.spec.profile.first_after(0, progress);
        } else {
            let mut steps = 0;
            while i < len && self.point(i).0 <= progress {
                i += 1;
                steps += 1;
                if steps == 4 {
                    i = self.spec.profile.first_after(i, progress);
                    break;
                }
            }
        }
        self.cursor = usize_to_u32(i);
        self.located = progress;
        i
    }

    /// Memory its profile gives at its progress (`MemProfile::at`).
    pub fn profile_mem(&mut self) -> Bytes {
        let i = self.locate();
        let len = self.profile_len as usize;
        match i {
            _ if len == 0 => 0,
            0 => self.point(0).1,
            i => self.point(i - 1).1,
        }
    }

    /// The next work offset at which something changes: its memory, or its end.
    pub fn next_point(&mut self) -> Option<Duration> {
        let i = self.locate();
        let len = self.profile_len as usize;
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

    /// Where a field of a task lies: its first byte and one past its last.
    macro_rules! bytes_of {
        ($($field:ident).+ : $ty:ty) => {{
            let start = std::mem::offset_of!(Task, $($field).+);
            (stringify!($($field).+), start, start + size_of::<$ty>())
        }};
    }

    #[test]
    fn what_a_step_and_a_point_read_sits_in_their_cache_lines() {
        let within = |lines: &Range<usize>, (_, start, end): (&str, usize, usize)| {
            lines.start * 64 <= start && end <= lines.end * 64
        };
        // What a sync reads and writes.
        let sync = [
            bytes_of!(progress: Duration),
            bytes_of!(base: Reading),
            bytes_of!(mem: Bytes),
            bytes_of!(major_faults: f64),
            bytes_of!(refaults: f64),
            bytes_of!(thrashed: u64),
            bytes_of!(phase: Phase),
        ];
        // What `stats_of` reads besides.
        let stats = [
            bytes_of!(job: JobId),
            bytes_of!(weight: u32),
            bytes_of!(class: Class),
            bytes_of!(priority: u8),
            bytes_of!(out: Bytes),
            bytes_of!(id: ContainerId),
            bytes_of!(started: Time),
            bytes_of!(image: Option<ImageInfo>),
        ];
        // What reaching a point reads besides: its spec's work, idle spells
        // and profile, and where it is in the profile.
        let point = [
            bytes_of!(spec.work: Option<Duration>),
            bytes_of!(spec.pauses: Vec<crate::workload::Pause>),
            bytes_of!(spec.profile: Vec<u64>),
            bytes_of!(located: Duration),
            bytes_of!(target: Duration),
            bytes_of!(cursor: u32),
            bytes_of!(window_start: u32),
            bytes_of!(window_len: u32),
            bytes_of!(profile_len: u32),
            bytes_of!(window: [(u64, Bytes); WINDOW]),
        ];
        for field in sync.iter().chain(&stats) {
            assert!(STEP_LINES.iter().any(|l| within(l, *field)), "a step reads {field:?}");
        }
        for field in sync.iter().chain(&point) {
            assert!(POINT_LINES.iter().any(|l| within(l, *field)), "a point reads {field:?}");
        }
        assert_eq!(std::mem::align_of::<Task>(), 64);
        assert_eq!(size_of::<Option<Task>>(), size_of::<Task>(), "a slot is a task");
    }

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
        let kept = task.spec.profile.len();
        assert!(kept <= PAST_POINTS + 2, "{kept} points kept");
        assert_eq!(task.spec.profile.peak(), 96 << 20, "the past's peak is kept");
    }
}
