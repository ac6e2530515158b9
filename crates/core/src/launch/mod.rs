//! The launcher (000 §4.2, 002 §3.1): production starts at once; best-effort
//! tasks queue and start only while the memory snapshot still fits them;
//! preempted tasks resume first-come-first-served when they fit; after a kill,
//! launches wait.
//!
//! # How a node decides
//!
//! * Production and critical tasks launch at submit, always, and their request
//!   is charged to the snapshot (or to the reservations) at once.
//! * A best-effort task is rejected at submit only when it can never run here
//!   (its request alone exceeds the node: `TooLarge`) or the line is full
//!   (`QueueFull`; `queue_limit` counts tasks waiting to *launch* only, since
//!   a preempted task was admitted already and is never refused). Otherwise it
//!   is `Queued`, even when it would fit now: the next `poll` launches it, so
//!   there is one path to a launch.
//! * `poll` first resumes preempted tasks, oldest first, then launches queued
//!   ones, oldest first, each while the head of the line fits (see
//!   [`AdmissionMode`] for what "fits" means and what a task costs).
//! * Both lines are strictly FIFO, head-of-line: a task that does not fit
//!   stops the line behind it, and a preempted task that does not fit stops the
//!   new launches too. Skipping ahead would fill every gap with small tasks and
//!   starve a big one forever; resuming before new work keeps the work already
//!   done (002 §3.1) and avoids waking two competitors at once. The price is
//!   Mercury's (000 §5.5): a big head can hold the line until memory frees.
//! * After a kill (`delay_after_kill`), nothing launches or resumes for one
//!   sync period, so memory pressure can ease before new work arrives (000 §4.2).
//! * With `hold_while_thrashing` (overbook), nothing launches or resumes
//!   either while the node's detector sees a condition starting or firing
//!   ([`Launcher::hold`]): 000 delays "until the memory pressure is more
//!   alleviated", and a fixed period is only a guess at when that is. A
//!   production container reading its evicted files back still thrashes
//!   after the period; work launched into it is killed again at once.
//! * With `resync_on_finish` (overbook), a task finishing makes the
//!   snapshot due again at once, so its freed memory does not sit idle
//!   until the next sync; but not within a sync period after a preemption,
//!   when freed memory is what production is taking back.
//!
//! # What a task costs
//!
//! A best-effort task is estimated at its job's profiled peak (the mean peak
//! of the job's last `profile_history` finished tasks), or at its request when
//! the job has no history here. A resumed task costs the memory it held when
//! preempted. In `Reserved` mode every task costs its request instead.
//! A measure larger than the whole node (a profile inflated by swap, a task
//! restored from a bigger node) could never fit and would hold the line
//! forever, so the request is used instead, capped at the node's capacity:
//! such a task then runs when the node has room for what it asked.
//!
//! # Bounded state
//!
//! Waiting lines are bounded by `queue_limit` (and by the tasks preempted
//! here); profiles by `profile_history` peaks for at most `profile_jobs` jobs
//! (least recently updated job forgotten first); reservations by the tasks
//! running here. A task waits once: a second `submit` or `suspended` for a
//! task already waiting is ignored (it keeps its place).

mod profile;
mod queue;
mod snapshot;
#[cfg(test)]
mod tests;

use self::profile::Profiles;
use self::queue::{Queues, Suspended};
use self::snapshot::Snapshot;
use crate::action::{Action, RejectReason, ResumeSite};
use crate::config::ConfigError;
use crate::model::{Bytes, Class, ContainerId, ContainerStats, JobId, NodeStats};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::Duration;

/// How a node decides that a best-effort task fits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdmissionMode {
    /// Mercury: only into memory nobody reserved (requests never exceed capacity).
    Reserved,
    /// Kuber: whatever is available right now, no charging for what is coming.
    Available,
    /// Charon: available memory as of the last sync, charged at once with the
    /// profiled peak of every task launched since.
    #[default]
    Snapshot,
}

/// The longest sync period accepted, seconds: beyond an hour the snapshot is
/// no longer a snapshot of anything.
const MAX_SYNC_SECS: f64 = 3600.0;

/// The longest profile ring: a mean over more peaks than this follows a job's
/// change no better, and the bound lets a ring's cursor be a u32.
pub const MAX_PROFILE_HISTORY: usize = 1 << 16;

/// `[launcher]` in config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LaunchConfig {
    pub admission: AdmissionMode,
    /// Best-effort tasks waiting at most; beyond, submissions are rejected.
    pub queue_limit: usize,
    /// How many times a job resubmits a rejected task before giving up.
    pub retry_budget: u32,
    /// Finished tasks of a job whose peaks make its profile (default 20,
    /// overbook's choice: 000 §4.2 names no history length).
    pub profile_history: usize,
    /// Jobs whose profile a node keeps at most; the least recently updated is
    /// forgotten first, so memory stays bounded over millions of jobs.
    pub profile_jobs: usize,
    /// Upper bound of the snapshot sync period, seconds (default 10 s,
    /// overbook's choice; 000 §4.2 resyncs "after a predefined period (e.g.,
    /// five seconds)"). The period is min(mean runtime / 2, this).
    pub max_sync_period: f64,
    /// Lower bound of the sync period, seconds: very short tasks would
    /// otherwise make a node with waiting tasks wake (and sync) continuously.
    pub min_sync_period: f64,
    /// Whether launches wait one sync period after a kill (000 §4.2).
    pub delay_after_kill: bool,
    /// Share of the node's capacity left free by best-effort launches and
    /// resumes, [0, 0.5]: a node whose detector acts below some free share
    /// (`threshold`) must not be filled past it by its own launcher, or it
    /// preempts what it just started, again and again.
    pub headroom: f64,
    /// Whether a launched best-effort task stays charged with the rest of
    /// its profiled peak until its usage reaches it, across snapshot syncs
    /// (overbook). 000's snapshot forgets the charge at the next sync: tasks
    /// that fill their memory slower than the sync period then look like
    /// free memory, and the node over-launches (seen under emulation, where
    /// a task takes seconds to fill 100 MiB).
    pub charge_until_peak: bool,
    /// Whether a task finishing here makes the snapshot due again at once,
    /// not at the end of the sync period (overbook; needs
    /// `charge_until_peak`). A finished task's memory is free the moment
    /// it exits, and with the charge nothing launched since the last sync
    /// looks free, so the only thing the period still guards is a figure
    /// the kernel has not caught up on. Waiting it out left a node's
    /// freed memory idle for up to `max_sync_period` after every finish
    /// (seconds of each minute on `bench colocation`'s node).
    pub resync_on_finish: bool,
    /// Whether nothing launches or resumes while the node's detector sees a
    /// condition starting or firing (overbook; see the module doc).
    pub hold_while_thrashing: bool,
    /// How many times a node agent starts a task again after preemptions
    /// killed it; past that it gives the task up and says so (overbook; the
    /// simulator's `sim.max_attempts` plays this part there).
    pub max_restarts: u32,
    /// Seconds a killed task waits before it queues again, doubled at each
    /// further restart up to 64 times this (overbook): on a squeezed node an
    /// immediate restart is killed again at once, over and over.
    pub restart_backoff: f64,
    /// Least seconds between two starts (launches or resumes) on a node,
    /// [0, 60]; 0 starts everything that fits at once (000). A start is a
    /// burst of first touches the kernel serves while production waits:
    /// on `bench colocation`'s node PostgreSQL's slowest 100 ms windows
    /// were at batches of starts. One at a time spreads the bursts (off by
    /// default: there it cost more best-effort work than it saved tail).
    pub launch_gap: f64,
}

impl Default for LaunchConfig {
    fn default() -> LaunchConfig {
        LaunchConfig {
            admission: AdmissionMode::Snapshot,
            queue_limit: 10,
            retry_budget: 3,
            profile_history: 20,
            profile_jobs: 256,
            max_sync_period: 10.0,
            min_sync_period: 1.0,
            delay_after_kill: true,
            headroom: 0.0,
            charge_until_peak: false,
            resync_on_finish: false,
            hold_while_thrashing: false,
            max_restarts: 10,
            restart_backoff: 1.0,
            launch_gap: 0.0,
        }
    }
}

/// What a node does with a task a preemption killed ([`LaunchConfig::after_kill`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterKill {
    /// It queues again once this much time has passed.
    Requeue { after: Duration },
    /// It was killed more often than `max_restarts`: it is given up.
    GiveUp,
}

/// The longest restart backoff, in multiples of `restart_backoff`.
const MAX_BACKOFF_FACTOR: u32 = 64;

impl LaunchConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.queue_limit == 0 {
            return Err(ConfigError::new(
                "queue_limit",
                "must be at least 1: with no room to wait, every best-effort task is refused",
            ));
        }
        if self.profile_history == 0 {
            return Err(ConfigError::new(
                "profile_history",
                "must be at least 1: a profile needs one finished task",
            ));
        }
        if self.profile_history > MAX_PROFILE_HISTORY {
            return Err(ConfigError::new(
                "profile_history",
                format!(
                    "{} is more than {MAX_PROFILE_HISTORY}: a mean over more peaks follows a job no better",
                    self.profile_history
                ),
            ));
        }
        if self.profile_jobs == 0 {
            return Err(ConfigError::new(
                "profile_jobs",
                "must be at least 1: with no job kept, no profile is ever used",
            ));
        }
        let max = self.max_sync_period;
        if !max.is_finite() || max <= 0.0 || max > MAX_SYNC_SECS {
            return Err(ConfigError::new(
                "max_sync_period",
                format!("{max} is outside (0, {MAX_SYNC_SECS}] seconds"),
            ));
        }
        if !(0.0..=0.5).contains(&self.headroom) {
            return Err(ConfigError::new(
                "headroom",
                format!("{} is outside [0, 0.5] (a share of the node's capacity)", self.headroom),
            ));
        }
        let min = self.min_sync_period;
        if !min.is_finite() || min <= 0.0 || min > max {
            return Err(ConfigError::new(
                "min_sync_period",
                format!("{min} is outside (0, max_sync_period = {max}] seconds"),
            ));
        }
        if self.resync_on_finish && !self.charge_until_peak {
            return Err(ConfigError::new(
                "resync_on_finish",
                "needs charge_until_peak = true (without the charge, tasks launched since the \
                 last sync and still filling look like free memory at every resync): set \
                 charge_until_peak = true, or resync_on_finish = false",
            ));
        }
        let backoff = self.restart_backoff;
        if !backoff.is_finite() || !(0.0..=3600.0).contains(&backoff) {
            return Err(ConfigError::new(
                "restart_backoff",
                format!("{backoff} is outside [0, 3600] seconds"),
            ));
        }
        let gap = self.launch_gap;
        if !gap.is_finite() || !(0.0..=60.0).contains(&gap) {
            return Err(ConfigError::new(
                "launch_gap",
                format!("{gap} is outside [0, 60] seconds"),
            ));
        }
        Ok(())
    }

    /// A task was killed by a preemption for the `restarts`-th time (from
    /// 1): whether it starts again, and after how long.
    pub fn after_kill(&self, restarts: u32) -> AfterKill {
        if restarts > self.max_restarts {
            return AfterKill::GiveUp;
        }
        let doublings = restarts.saturating_sub(1).min(MAX_BACKOFF_FACTOR.trailing_zeros());
        let after = Duration::from_secs_f64(self.restart_backoff * f64::from(1u32 << doublings));
        AfterKill::Requeue { after }
    }
}

/// A task asking to run on this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRequest {
    pub id: ContainerId,
    pub job: JobId,
    pub class: Class,
    /// Memory the task asked for (its reservation).
    pub request: Bytes,
    pub submitted: Time,
}

/// What became of a submission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Launch,
    Queued,
    Rejected(RejectReason),
}

/// `Reserved` mode's ledger: the request of every task running here.
#[derive(Debug, Default)]
struct Reservations {
    by_task: HashMap<ContainerId, Bytes>,
    /// u128: production may reserve past capacity, and many u64 requests
    /// summed must not wrap.
    total: u128,
}

impl Reservations {
    fn charge(&mut self, id: ContainerId, bytes: Bytes) {
        // A task charged twice (launched again without a departure in between)
        // holds one reservation, not two.
        let old = self.by_task.insert(id, bytes).map_or(0, u128::from);
        self.total = self.total - old + u128::from(bytes);
    }

    fn release(&mut self, id: ContainerId) {
        if let Some(bytes) = self.by_task.remove(&id) {
            self.total -= u128::from(bytes);
        }
    }

    /// Capacity nobody reserved.
    fn room(&self, capacity: Bytes) -> Bytes {
        let free = u128::from(capacity).saturating_sub(self.total);
        Bytes::try_from(free).unwrap_or(Bytes::MAX)
    }
}

/// One node's launcher. See the module doc.
#[derive(Debug)]
pub struct Launcher {
    cfg: LaunchConfig,
    /// `max_sync_period` and `min_sync_period` as durations, converted once
    /// and made safe even for a config that was never validated.
    max_sync: Duration,
    min_sync: Duration,
    profiles: Profiles,
    queues: Queues,
    snapshot: Snapshot,
    reservations: Reservations,
    /// No launch or resume before this (after a kill).
    delay_until: Time,
    /// The last preemption here: the node was short of memory then.
    short_at: Option<Time>,
    /// The latest time the launcher was told of.
    latest: Time,
    /// With `charge_until_peak`: launched tasks not yet at their charge, and
    /// that charge.
    ramping: HashMap<ContainerId, Bytes>,
    /// What they still owe (charge less usage), at the last look.
    owed: Bytes,
    /// `launch_gap` as a duration (zero when off).
    gap: Duration,
    /// No start before this (`launch_gap` after the last one).
    next_start: Time,
}

/// Seconds from config as a duration; `fallback` for values no duration has.
fn seconds(value: f64, fallback: Duration) -> Duration {
    if value.is_finite() && value > 0.0 {
        Duration::try_from_secs_f64(value.min(MAX_SYNC_SECS)).unwrap_or(fallback)
    } else {
        fallback
    }
}

/// What a task costs in the fit test: `measure`, unless the node could never
/// hold it, then the request (capped at capacity). See the module doc.
fn fit_cost(measure: Bytes, request: Bytes, capacity: Bytes) -> Bytes {
    if measure <= capacity {
        measure
    } else {
        request.min(capacity)
    }
}

impl Launcher {
    pub fn new(cfg: LaunchConfig) -> Launcher {
        let max_sync = seconds(cfg.max_sync_period, Duration::from_secs(10));
        let min_sync = seconds(cfg.min_sync_period, Duration::from_secs(1)).min(max_sync);
        let gap = seconds(cfg.launch_gap, Duration::ZERO);
        Launcher {
            profiles: Profiles::new(cfg.profile_history, cfg.profile_jobs),
            cfg,
            max_sync,
            min_sync,
            queues: Queues::default(),
            snapshot: Snapshot::default(),
            reservations: Reservations::default(),
            delay_until: Time::ZERO,
            short_at: None,
            latest: Time::ZERO,
            ramping: HashMap::new(),
            owed: 0,
            gap,
            next_start: Time::ZERO,
        }
    }

    /// The containers' usage now: tasks still filling to their charge owe
    /// the rest, which the next snapshot sync does not count as available
    /// (`charge_until_peak`). A task that reached its charge owes nothing
    /// more, ever.
    pub fn note_usage(&mut self, containers: &[ContainerStats]) {
        if self.ramping.is_empty() {
            self.owed = 0;
            return;
        }
        let mut owed: Bytes = 0;
        for c in containers {
            if let Some(&charge) = self.ramping.get(&c.id) {
                if c.usage >= charge {
                    self.ramping.remove(&c.id);
                } else {
                    owed = owed.saturating_add(charge - c.usage);
                }
            }
        }
        self.owed = owed;
    }

    pub fn config(&self) -> &LaunchConfig {
        &self.cfg
    }

    /// A task arrives. Production and critical tasks launch at once.
    pub fn submit(&mut self, now: Time, task: TaskRequest, node: &NodeStats) -> Admission {
        self.observe(now, node, false);
        if task.class != Class::BestEffort {
            // Production never waits (000 §4.2); what it reserved is gone for
            // best-effort work from now on, before the kernel shows it.
            match self.cfg.admission {
                AdmissionMode::Snapshot => self.snapshot.charge(task.request),
                AdmissionMode::Reserved => self.reservations.charge(task.id, task.request),
                AdmissionMode::Available => {}
            }
            return Admission::Launch;
        }
        if self.queues.contains(task.id) {
            return Admission::Queued;
        }
        if task.request > node.capacity {
            return Admission::Rejected(RejectReason::TooLarge);
        }
        if self.queues.lens().0 >= self.cfg.queue_limit {
            return Admission::Rejected(RejectReason::QueueFull);
        }
        self.queues.push_launch(task);
        Admission::Queued
    }

    /// A task this node admitted and then killed waits to start again from
    /// scratch. It was admitted once, so neither the queue limit nor a full
    /// line refuses it (a refusal would lose it): it joins the back of the
    /// launch line.
    pub fn requeue(&mut self, now: Time, task: TaskRequest) -> Admission {
        self.see(now);
        if task.class != Class::BestEffort {
            return Admission::Launch;
        }
        if !self.queues.contains(task.id) {
            self.queues.push_launch(task);
        }
        Admission::Queued
    }

    /// A preempted (frozen or checkpointed) task waits to resume, holding `memory`
    /// when it comes back; resumes are first-come-first-served.
    pub fn suspended(&mut self, now: Time, task: TaskRequest, memory: Bytes) {
        self.see(now);
        // It no longer runs here, whether or not `departed` said so first.
        self.reservations.release(task.id);
        self.ramping.remove(&task.id);
        if !self.queues.contains(task.id) {
            self.queues.push_resume(Suspended { task, memory });
        }
    }

    /// A task finished normally: its peak joins its job's profile.
    pub fn finished(&mut self, job: JobId, peak: Bytes, runtime: Duration) {
        self.profiles.record(job, peak, runtime);
    }

    /// A task finished here at `now`, its memory free: with
    /// `resync_on_finish`, the snapshot is due again from then, unless the
    /// node was short of memory (a preemption) within the last sync
    /// period. Memory freed then is what production is taking back (on
    /// `bench colocation`'s node a job launched into it during Redis's
    /// fill was killed 0.8 s later); the periodic sync decides instead.
    pub fn freed_by_finish(&mut self, now: Time) {
        self.see(now);
        let short = self.short_at.is_some_and(|at| now < at + self.sync_period());
        if self.cfg.resync_on_finish && !short {
            self.snapshot.due_from(now);
        }
    }

    /// A best-effort task was preempted here (any way): the node is short
    /// of memory now.
    pub fn preempted(&mut self, now: Time) {
        self.see(now);
        self.short_at = Some(now);
        // A finish reported before it in the same step frees nothing to launch into.
        self.snapshot.no_longer_due();
    }

    /// A task left the node (killed, finished, moved): it no longer holds a charge.
    pub fn departed(&mut self, id: ContainerId) {
        self.reservations.release(id);
        self.ramping.remove(&id);
        // A task that leaves while still waiting (cancelled) must not launch.
        self.queues.remove(id);
    }

    /// A container was killed: launches wait one sync period (when configured).
    pub fn killed(&mut self, now: Time) {
        self.preempted(now);
        if self.cfg.delay_after_kill {
            self.delay_until = self.delay_until.max(now + self.sync_period());
        }
    }

    /// Whether the post-kill delay is on at `now`: nothing launches or
    /// resumes before it ends (what a node offers the cluster is nothing
    /// meanwhile, or the work placed into it is killed next).
    pub fn delayed(&self, now: Time) -> bool {
        now < self.delay_until
    }

    /// The node is under pressure now: nothing launches or resumes, the
    /// snapshot keeps in sync. Returns when to look again at the latest
    /// (`wake_at`, when it is still ahead).
    pub fn hold(&mut self, now: Time, node: &NodeStats) -> Option<Time> {
        self.observe(now, node, true);
        self.wake_at().filter(|&t| t > now)
    }

    /// Launch or resume what fits now, in order, into `out`
    /// (`Action::Resume` for preempted tasks first, then `Action::Launch`).
    pub fn poll(&mut self, now: Time, node: &NodeStats, out: &mut Vec<Action>) {
        self.observe(now, node, true);
        if self.queues.is_empty() || now < self.delay_until || now < self.next_start {
            return;
        }
        let capacity = node.capacity;
        let room = match self.cfg.admission {
            AdmissionMode::Snapshot => self.snapshot.mem(),
            AdmissionMode::Available => node.available,
            AdmissionMode::Reserved => self.reservations.room(capacity),
        };
        let mut room =
            room.saturating_sub(crate::convert::to_u64(capacity as f64 * self.cfg.headroom));
        // Resume before new work: while a preempted task does not fit,
        // nothing new starts ahead of it.
        let mut resumed_all = true;
        while let Some(s) = self.queues.front_resume() {
            let cost = self.resume_cost(s, capacity);
            if cost > room {
                resumed_all = false;
                break;
            }
            room -= cost;
            if let Some(s) = self.queues.pop_resume() {
                self.admitted(now, s.task.id, cost);
                out.push(Action::Resume { id: s.task.id, site: ResumeSite::Local });
            }
            if now < self.next_start {
                resumed_all = false;
                break;
            }
        }
        if resumed_all {
            while let Some(t) = self.queues.front_launch() {
                if now < self.next_start {
                    break;
                }
                let cost = self.launch_cost(t, capacity);
                if cost > room {
                    break;
                }
                room -= cost;
                if let Some(t) = self.queues.pop_launch() {
                    self.admitted(now, t.id, cost);
                    out.push(Action::Launch { id: t.id });
                }
            }
        }
        if self.cfg.admission == AdmissionMode::Snapshot {
            self.snapshot.set(room);
        }
    }

    /// When `poll` could next do something that it cannot do now (end of the
    /// post-kill delay, next sync), if anything waits.
    ///
    /// A time not after the last one seen means "poll now": the snapshot is
    /// due for a sync (the period shortened as tasks finished) or was never
    /// taken.
    pub fn wake_at(&self) -> Option<Time> {
        if self.queues.is_empty() {
            return None;
        }
        // Nothing can start before the delay ends, whatever a sync shows.
        let blocked = self.delay_until.max(self.next_start);
        if blocked > self.latest {
            return Some(blocked);
        }
        match self.cfg.admission {
            AdmissionMode::Snapshot => {
                Some(self.snapshot.next_sync(self.sync_period()).unwrap_or(self.latest))
            }
            // Room here comes only with events the caller sees (departures,
            // memory freed), which make it poll anyway.
            AdmissionMode::Available | AdmissionMode::Reserved => None,
        }
    }

    /// Best-effort tasks waiting to launch, and preempted tasks waiting to resume.
    pub fn waiting(&self) -> (usize, usize) {
        self.queues.lens()
    }

    /// The snapshot sync period (also the post-kill delay):
    /// min(mean runtime / 2, `max_sync_period`), at least `min_sync_period`;
    /// `max_sync_period` before any task finished here.
    pub fn sync_period(&self) -> Duration {
        match self.profiles.mean_runtime() {
            None => self.max_sync,
            Some(mean) => (mean / 2).max(self.min_sync).min(self.max_sync),
        }
    }

    /// What a best-effort task of `job` is expected to use at its peak: the
    /// mean of its job's last peaks, if the job has finished tasks here.
    pub fn profiled_peak(&self, job: JobId) -> Option<Bytes> {
        self.profiles.estimate(job)
    }

    /// The snapshot's unclaimed memory (`SnapMem`), meaningful in `Snapshot` mode.
    pub fn snapshot_mem(&self) -> Bytes {
        self.snapshot.mem()
    }

    /// Bring time and, when a sync is due, the snapshot up to date.
    /// `fresh`: `node` was read at `now` (a step's observation), not
    /// carried over from an earlier read (a submission between samples).
    fn observe(&mut self, now: Time, node: &NodeStats, fresh: bool) {
        self.see(now);
        if self.cfg.admission == AdmissionMode::Snapshot {
            let period = self.sync_period();
            let available = node.available.saturating_sub(self.owed);
            self.snapshot.sync_if_due(now, period, available, fresh);
        }
    }

    fn see(&mut self, now: Time) {
        self.latest = self.latest.max(now);
    }

    fn launch_cost(&self, t: &TaskRequest, capacity: Bytes) -> Bytes {
        let measure = match self.cfg.admission {
            AdmissionMode::Reserved => t.request,
            AdmissionMode::Available | AdmissionMode::Snapshot => {
                self.profiles.estimate(t.job).unwrap_or(t.request)
            }
        };
        fit_cost(measure, t.request, capacity)
    }

    fn resume_cost(&self, s: &Suspended, capacity: Bytes) -> Bytes {
        let measure = match self.cfg.admission {
            // It takes its reservation back, whatever it held when preempted.
            AdmissionMode::Reserved => s.task.request,
            AdmissionMode::Available | AdmissionMode::Snapshot => s.memory,
        };
        fit_cost(measure, s.task.request, capacity)
    }

    /// A task was just launched or resumed at `cost`. The snapshot's charge is
    /// carried by `room` in `poll`; reservations are kept per task so that a
    /// departure gives exactly its own back.
    fn admitted(&mut self, now: Time, id: ContainerId, cost: Bytes) {
        if !self.gap.is_zero() {
            self.next_start = now + self.gap;
        }
        if self.cfg.admission == AdmissionMode::Reserved {
            self.reservations.charge(id, cost);
        }
        if self.cfg.charge_until_peak && self.cfg.admission == AdmissionMode::Snapshot {
            self.ramping.insert(id, cost);
        }
    }
}
