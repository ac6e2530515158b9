//! The discrete-event engine: virtual time, a queue of events, N nodes each
//! running overbook-core's `NodePolicy`, and tasks that progress at the speed
//! the thrashing model gives their node.
//!
//! The engine is the simulator's executor: it applies the policy's actions the
//! way the agent applies them on a real node (a kill frees memory after the
//! kill delay, a dump after its write time, one dump at a time per node), so
//! what is evaluated is what is deployed.

mod clock;
mod death;
mod guarantee;
mod node;
mod placement;
mod points;
mod prefetch;
#[cfg(test)]
mod protection;
mod queue;
mod reclaim;
mod task;

use crate::outcome::{RunCounters, RunResult, Stamp, TaskOutcome};
use crate::tally::{Outcomes, Tally};
use crate::workload::{TaskKey, TaskSpec, WorkloadEvent, WorkloadStream};
use clock::Lane;
use node::{Member, Node};
use overbook_core::action::RejectReason;
use overbook_core::cadence::Cadence;
use overbook_core::config::{ConfigError, PolicyConfig};
use overbook_core::launch::Admission;
use overbook_core::policy::{NodeFacilities, NodePolicy};
use overbook_core::preempt::{choose_resume_site, StoreBandwidth};
use overbook_core::{
    Action, Bytes, ContainerId, ContainerStats, FaultCounters, ImageInfo, Observation, Preemption,
    ResumeSite, RunState, Time,
};
use placement::Placement;
use queue::{Event, EventQueue};
use rand::RngCore;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::time::Duration;
use task::{Phase, Task};

/// How fast a node's tasks run when its memory is oversubscribed, and what
/// fault counters that shows (calibrated from a real node).
pub trait ThrashModel: Send + Sync {
    /// Relative speed (0, 1] of tasks on a node holding `demand` in `capacity`.
    fn speed(&self, demand: Bytes, capacity: Bytes) -> f64;
    /// Major faults and refaults per second, per GiB a thrashing task holds.
    fn fault_rates(&self, demand: Bytes, capacity: Bytes) -> (f64, f64);
}

/// Task slots reserved per node when an engine is made. Why: a task is
/// aligned to its cache lines, so the allocator cannot grow the slots in
/// place, and each doubling copied every live task into memory the kernel
/// first had to zero; at Google scale (`overbook bench sim`, 130,744 slots
/// for 12,500 nodes, 1,000 nodes 9,010) the last one copied 42 MB. The
/// reservation is only address space until a slot is used, and the slots
/// still grow past it.
const SLOTS_PER_NODE: usize = 16;
/// At most this many (670 MB of address space): a cluster larger than
/// that grows its slots as it needs them.
const MOST_SLOTS_RESERVED: usize = 1 << 20;

/// How long a kill takes from the decision to the memory being free.
pub trait KillDelay: Send + Sync {
    fn sample(&self, rng: &mut dyn RngCore) -> Duration;
}

/// Told of progress every so many events (the CLI draws a bar).
pub trait Progress {
    fn update(&mut self, now: Time, events: u64);
    /// Where to say how far the sort of a trace given out of time order is
    /// (rows read, runs written), before the run's first event.
    fn sort_hook(&self) -> Option<crate::trace::SortHook> {
        None
    }
}

impl Progress for () {
    fn update(&mut self, _: Time, _: u64) {}
}

/// Everything a run needs besides the workload and the models.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub nodes: usize,
    pub node_memory: Bytes,
    pub node_swap: Bytes,
    pub policy: PolicyConfig,
    /// The node's checkpoint store.
    pub store: StoreBandwidth,
    /// Fixed cost of every dump (process tree walk, metadata), on top of size / bandwidth.
    pub dump_overhead: Duration,
    /// Whether checkpoints work on the nodes (CRIU), and incremental ones (soft-dirty).
    pub can_checkpoint: bool,
    pub can_incremental: bool,
    /// Whether images sit on a store every node reads (remote resume, 004 Algorithm 2).
    pub shared_store: bool,
    /// Swap device bandwidth, bytes/s, for freezing out and thawing in.
    pub swap_bandwidth: f64,
    /// How often a node's policy samples while the node thrashes.
    pub sample_period: Duration,
    /// Runs a task gets before its job gives up on it (Spark's
    /// `spark.task.maxFailures` default: 4).
    pub max_attempts: u32,
    /// How long a job waits before resubmitting a task a full queue refused.
    pub retry_backoff: Duration,
    /// Submissions after this time are ignored (the workload's horizon).
    pub stop_submissions_at: Time,
    /// The run ends here; tasks not done by then count as not completed.
    pub end: Time,
    pub seed: u64,
}

impl SimConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.nodes == 0 || self.nodes > u32::MAX as usize / 2 {
            return Err(ConfigError::new(
                "nodes",
                format!("{} nodes: must be 1 or more", self.nodes),
            ));
        }
        if self.node_memory == 0 {
            return Err(ConfigError::new("node_memory", "must be more than 0 bytes"));
        }
        for (key, bw) in [
            ("store.write", self.store.write),
            ("store.read", self.store.read),
            ("store.net", self.store.net),
            ("swap_bandwidth", self.swap_bandwidth),
        ] {
            if !bw.is_finite() || bw <= 0.0 {
                return Err(ConfigError::new(key, format!("{bw} bytes/s: must be positive")));
            }
        }
        if self.sample_period.is_zero() {
            return Err(ConfigError::new("sample_period", "must be more than 0"));
        }
        if self.max_attempts == 0 {
            return Err(ConfigError::new("max_attempts", "must be at least 1"));
        }
        self.policy.validate().map_err(|e| e.under("policy"))
    }
}

/// One simulation run.
pub struct Engine<'m> {
    cfg: SimConfig,
    model: &'m dyn ThrashModel,
    killer: &'m dyn KillDelay,
    rng: ChaCha8Rng,
    now: Time,
    queue: EventQueue,
    nodes: Vec<Node>,
    placement: Placement,
    /// Every node's production reservations, to find the node with the most
    /// unreserved guaranteed memory (`guarantee.rs`).
    guarantees: Placement,
    /// Production and critical tasks waiting, first come first served, for a
    /// node with room for their reservation.
    waiting_for_guarantee: std::collections::VecDeque<u32>,
    /// Nodes whose point event needs putting right (`points.rs`).
    moved: Vec<u32>,
    slots: Vec<Option<Task>>,
    generations: Vec<u32>,
    /// Each slot's last epoch: a task taking a slot starts from there, so
    /// events left for the slot's previous task stay stale.
    epochs: Vec<u32>,
    free: Vec<u32>,
    /// Tasks whose trace rows are still to come (usage samples, their end).
    by_key: HashMap<TaskKey, u32>,
    counters: RunCounters,
    tally: Tally,
    /// Every outcome, when asked for (`Outcomes::Kept`).
    outcomes: Option<Vec<TaskOutcome>>,
    actions: Vec<Action>,
    observed: Vec<ContainerStats>,
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("now", &self.now).field("nodes", &self.nodes.len()).finish()
    }
}

/// The workload failed mid-run (a bad trace row), or the config is unusable.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid simulation config: {0}")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Trace(#[from] crate::workload::TraceError),
}

impl<'m> Engine<'m> {
    pub fn new(
        cfg: SimConfig,
        model: &'m dyn ThrashModel,
        killer: &'m dyn KillDelay,
    ) -> Result<Engine<'m>, SimError> {
        cfg.validate()?;
        let facilities = NodeFacilities {
            store: cfg.store,
            can_checkpoint: cfg.can_checkpoint,
            can_incremental: cfg.can_incremental,
            swap_write: cfg.swap_bandwidth,
        };
        let mut nodes = Vec::with_capacity(cfg.nodes);
        let mut keys = Vec::with_capacity(cfg.nodes);
        let mut guarantee_keys = Vec::with_capacity(cfg.nodes);
        for i in 0..cfg.nodes {
            let policy = NodePolicy::new(&cfg.policy, facilities).map_err(|e| e.under("policy"))?;
            let node =
                Node::new(cfg.node_memory, cfg.node_swap, policy, cfg.policy.protect.production);
            keys.push(node.placement_key(overbook_core::convert::usize_to_u32(i)));
            guarantee_keys.push(node.guarantee_key(overbook_core::convert::usize_to_u32(i)));
            nodes.push(node);
        }
        let counters = RunCounters { nodes: cfg.nodes, ..RunCounters::default() };
        let reserved = cfg.nodes.saturating_mul(SLOTS_PER_NODE).min(MOST_SLOTS_RESERVED);
        Ok(Engine {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            cfg,
            model,
            killer,
            now: Time::ZERO,
            queue: EventQueue::default(),
            nodes,
            placement: Placement::new(keys),
            guarantees: Placement::new(guarantee_keys),
            waiting_for_guarantee: std::collections::VecDeque::new(),
            moved: Vec::new(),
            slots: Vec::with_capacity(reserved),
            generations: Vec::with_capacity(reserved),
            epochs: Vec::with_capacity(reserved),
            free: Vec::new(),
            by_key: HashMap::new(),
            counters,
            tally: Tally::default(),
            outcomes: None,
            actions: Vec::new(),
            observed: Vec::new(),
        })
    }

    /// Keep every task's outcome beside the tally (per-task reports, tests):
    /// memory then grows by one outcome per task run.
    pub fn keeping(mut self, outcomes: Outcomes) -> Engine<'m> {
        self.outcomes = (outcomes == Outcomes::Kept).then(Vec::new);
        self
    }

    /// Run the workload to the end; `progress` is told how far it got now and then.
    pub fn run(
        mut self,
        variant: &str,
        mut workload: WorkloadStream,
        progress: &mut dyn Progress,
    ) -> Result<RunResult, SimError> {
        let mut pending = workload.next().transpose()?;
        self.counters.first_event_at = pending.as_ref().map(WorkloadEvent::at);
        loop {
            self.settle_points();
            let next_event = self.queue.peek_time();
            let take_workload = match (&pending, next_event) {
                (Some(w), Some(t)) => w.at() <= t,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let at = if take_workload {
                pending.as_ref().map_or(self.now, WorkloadEvent::at)
            } else {
                next_event.unwrap_or(self.now)
            };
            if at > self.cfg.end {
                break;
            }
            self.now = self.now.max(at);
            self.counters.events += 1;
            if self.counters.events.is_multiple_of(65_536) {
                progress.update(self.now, self.counters.events);
            }
            if take_workload {
                if let Some(ev) = pending.take() {
                    self.on_workload(ev);
                }
                pending = workload.next().transpose()?;
            } else if let Some((_, ev)) = self.queue.pop() {
                if let Some(next) = self.queue.peek() {
                    self.prefetch(next);
                }
                self.on_event(ev);
                if let Some(next) = self.queue.peek() {
                    self.prefetch_members(next);
                }
            }
        }
        Ok(self.finish(variant))
    }

    fn finish(mut self, variant: &str) -> RunResult {
        let end = self.now;
        for i in 0..self.nodes.len() {
            self.advance(overbook_core::convert::usize_to_u32(i));
        }
        for slot in 0..self.slots.len() {
            self.sync(overbook_core::convert::usize_to_u32(slot));
        }
        #[cfg(test)]
        self.check_books();
        for slot in 0..self.slots.len() {
            if let Some(task) = self.slots[slot].take() {
                self.leave(task.into_outcome());
            }
        }
        self.counters.horizon = end.since(Time::ZERO);
        let mut outcomes = self.outcomes.unwrap_or_default();
        outcomes.sort_by_key(|o| (o.submit, o.key));
        RunResult {
            variant: variant.to_string(),
            counters: self.counters,
            tally: self.tally,
            outcomes,
        }
    }

    /// A task's outcome is final: tally it (and keep it, if asked).
    fn leave(&mut self, outcome: TaskOutcome) {
        self.tally.add(&outcome);
        if let Some(kept) = &mut self.outcomes {
            kept.push(outcome);
        }
    }

    // ---- workload -------------------------------------------------------

    fn on_workload(&mut self, ev: WorkloadEvent) {
        match ev {
            WorkloadEvent::Submit(spec) => {
                if spec.submit > self.cfg.stop_submissions_at {
                    self.counters.after_horizon += 1;
                    return;
                }
                let awaits_trace = spec.work.is_none();
                let key = spec.key;
                let slot = self.admit(spec);
                if awaits_trace {
                    self.by_key.insert(key, slot);
                }
                self.place(slot);
            }
            WorkloadEvent::Usage { task, offset, mem, .. } => {
                let Some(&slot) = self.by_key.get(&task) else {
                    return;
                };
                if let Some(t) = self.task_mut(slot) {
                    t.push_usage(offset, mem);
                }
                self.memory_may_have_changed(slot);
            }
            WorkloadEvent::Finish { task, work, .. } => {
                let Some(slot) = self.by_key.remove(&task) else {
                    return;
                };
                if let Some(t) = self.task_mut(slot) {
                    t.spec.work = Some(work);
                    t.outcome.work = work.into();
                }
                self.memory_may_have_changed(slot);
            }
            WorkloadEvent::Death { task, .. } => self.on_death(task),
        }
    }

    fn admit(&mut self, mut spec: TaskSpec) -> u32 {
        if spec.profile.is_empty() {
            spec.profile = crate::workload::MemProfile::flat(spec.request);
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.generations.push(0);
                self.epochs.push(0);
                overbook_core::convert::usize_to_u32(self.slots.len() - 1)
            }
        };
        let gen = self.generations[slot as usize].wrapping_add(1);
        self.generations[slot as usize] = gen;
        let id = ContainerId((u64::from(gen) << 32) | u64::from(slot));
        let mut task = Task::new(id, spec);
        task.epoch = self.epochs[slot as usize];
        self.slots[slot as usize] = Some(task);
        slot
    }

    fn slot_of(&self, id: ContainerId) -> Option<u32> {
        let slot = (id.0 & 0xffff_ffff) as u32;
        let gen = (id.0 >> 32) as u32;
        (self.generations.get(slot as usize) == Some(&gen)).then_some(slot)
    }

    fn task(&self, slot: u32) -> Option<&Task> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    fn task_mut(&mut self, slot: u32) -> Option<&mut Task> {
        self.slots.get_mut(slot as usize).and_then(Option::as_mut)
    }

    /// A task leaves the simulation for good.
    fn retire(&mut self, slot: u32, completed: bool) {
        let Some(mut task) = self.slots.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        task.outcome.completed = completed;
        task.outcome.end = Stamp::at(self.now);
        self.epochs[slot as usize] = task.epoch;
        // Only if the key is still this attempt's: a task the trace ended
        // may leave after its next attempt was submitted.
        if !completed && self.by_key.get(&task.spec.key) == Some(&slot) {
            self.by_key.remove(&task.spec.key);
        }
        self.leave(task.into_outcome());
        self.free.push(slot);
    }

    // ---- placement and admission -----------------------------------------

    fn place(&mut self, slot: u32) {
        if self.task(slot).is_some_and(|t| !t.spec.class.is_preemptible()) {
            self.place_guaranteed(slot);
            return;
        }
        let Some((_, _, node)) = self.placement.first() else {
            return;
        };
        self.submit_to(slot, node);
    }

    fn submit_to(&mut self, slot: u32, node: u32) {
        let now = self.now;
        let Some(task) = self.task_mut(slot) else {
            return;
        };
        let req = task.request(now);
        task.phase = Phase::Queued { node };
        let n = &mut self.nodes[node as usize];
        let stats = n.stats();
        match n.with_policy(|p| p.submit(now, req, &stats)) {
            Admission::Launch => self.launch(slot, node),
            Admission::Queued => {
                n.queued += 1;
                n.queued_request = n.queued_request.saturating_add(req.request);
                self.reindex(node);
                self.step(node);
            }
            Admission::Rejected(reason) => self.reject(slot, reason),
        }
    }

    fn reject(&mut self, slot: u32, reason: RejectReason) {
        let budget = self.cfg.policy.launcher.retry_budget;
        let backoff = self.cfg.retry_backoff;
        let now = self.now;
        let Some(task) = self.task_mut(slot) else {
            return;
        };
        task.outcome.rejections += 1;
        if reason == RejectReason::TooLarge || task.outcome.rejections > budget {
            self.retire(slot, false);
            return;
        }
        task.phase = Phase::Backoff;
        let epoch = task.bump();
        self.queue.push(now + backoff, Event::Retry { slot, epoch });
    }

    fn reindex(&mut self, node: u32) {
        let key = self.nodes[node as usize].placement_key(node);
        self.placement.set(node, key);
    }

    // ---- events -----------------------------------------------------------

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Wake { node } => {
                let n = &mut self.nodes[node as usize];
                if n.next_wake != self.now {
                    return;
                }
                n.next_wake = Time::MAX;
                self.advance(node);
                self.step(node);
            }
            Event::Point { node, epoch, slot } => self.on_point(node, epoch, slot),
            Event::Released { slot, epoch } => self.on_released(slot, epoch),
            Event::Resumed { slot, epoch } => self.on_resumed(slot, epoch),
            Event::Retry { slot, epoch } => {
                if self.task(slot).is_some_and(|t| t.epoch == epoch && t.phase == Phase::Backoff) {
                    self.place(slot);
                }
            }
        }
    }

    /// Ask the cache for what `ev` touches first, while another event runs.
    fn prefetch(&self, ev: Event) {
        match ev {
            Event::Wake { node } => prefetch::prefetch(&self.nodes[node as usize]),
            Event::Point { node, slot, .. } => {
                prefetch::prefetch(&self.nodes[node as usize]);
                // Its memory changes, and with it its placement key.
                self.placement.prefetch(node);
                if let Some(task) = self.slots.get(slot as usize) {
                    for lines in task::POINT_LINES {
                        prefetch::prefetch_lines(task, lines);
                    }
                }
            }
            Event::Released { slot, .. }
            | Event::Resumed { slot, .. }
            | Event::Retry { slot, .. } => {
                if let Some(task) = self.slots.get(slot as usize) {
                    prefetch::prefetch(task);
                }
            }
        }
    }

    /// Ask the cache for the members and policy of the node `ev` is for: by
    /// now its node (`prefetch`) is at hand to say where they are. Not its
    /// task's next profile points: saying where they are read two of the
    /// task's lines and waited for them (`bench sim` 1.036× [0.999–1.074]
    /// without, over ten rounds).
    fn prefetch_members(&self, ev: Event) {
        match ev {
            Event::Wake { node } => {
                let n = &self.nodes[node as usize];
                prefetch::prefetch_slice(&n.members);
                prefetch::prefetch(n.policy());
            }
            Event::Point { node, .. } => {
                prefetch::prefetch_slice(&self.nodes[node as usize].members);
            }
            _ => {}
        }
    }

    fn live(&self, slot: u32, epoch: u32) -> Option<&Task> {
        self.task(slot).filter(|t| t.epoch == epoch)
    }

    fn complete(&mut self, slot: u32, node: u32) {
        let Some(task) = self.task(slot) else { return };
        let (id, job, peak) = (task.id, task.spec.job, task.spec.profile.peak());
        let (runtime, mem) = (task.progress, task.mem);
        let n = &mut self.nodes[node as usize];
        n.hold(n.protected(slot), mem, 0);
        n.remove_member(slot);
        n.with_policy(|p| p.finished(self.now, id, job, peak, runtime));
        self.release_guarantee(slot, node);
        self.retire(slot, true);
        self.recompute(node);
        self.step(node);
        self.place_waiting_for_guarantee();
    }

    /// A task's profile or work changed (its work advanced to a change point,
    /// or the trace told more): update what it holds and when it next changes.
    fn memory_may_have_changed(&mut self, slot: u32) {
        let Some(Phase::Running { node }) = self.task(slot).map(|t| t.phase) else {
            return;
        };
        self.advance(node);
        // Faults so far count at the memory it held so far.
        self.sync(slot);
        self.memory_changed(slot, node);
    }

    /// [`Engine::memory_may_have_changed`] for a task running on `node`,
    /// synced to its clocks at this instant.
    fn memory_changed(&mut self, slot: u32, node: u32) {
        let Some(task) = self.task_mut(slot) else {
            return;
        };
        let mem = task.profile_mem();
        let before = task.mem;
        task.mem = mem;
        let n = &mut self.nodes[node as usize];
        n.hold(n.protected(slot), before, mem);
        if mem > before {
            self.kernel_reclaim(node);
        }
        self.target_synced_point(slot, node);
        if !self.recompute(node) {
            self.time_point(slot, node);
        }
        if mem != before && self.worth_a_step(node, mem < before) {
            self.step(node);
        }
    }

    /// Most memory changes on a calm node need no decision; stepping only near
    /// pressure, or when memory freed up for waiting tasks, keeps calm nodes cheap.
    fn worth_a_step(&self, node: u32, freed: bool) -> bool {
        let n = &self.nodes[node as usize];
        n.thrashing
            || n.demand.saturating_mul(5) > n.capacity.saturating_mul(4)
            || (freed && n.waiting())
    }

    fn on_released(&mut self, slot: u32, epoch: u32) {
        let Some(task) = self.live(slot, epoch) else {
            return;
        };
        let (phase, id) = (task.phase, task.id);
        let node = match phase {
            Phase::Dying { node } | Phase::Freezing { node } | Phase::Dumping { node } => node,
            _ => return,
        };
        self.advance(node);
        let now = self.now;
        let n = &mut self.nodes[node as usize];
        let protected = n.protected(slot);
        n.remove_member(slot);
        n.with_policy(|p| p.departed(id));
        let Some(task) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        n.hold(protected, task.mem, 0);
        if task.doomed {
            // The trace ended it meanwhile: what it held is free, and it leaves.
            if matches!(phase, Phase::Dumping { .. }) {
                self.counters.checkpoint_bytes_written += task.written;
            }
            self.recompute(node);
            self.end_by_trace(slot);
            self.reindex(node);
            self.step(node);
            return;
        }
        match phase {
            Phase::Dying { .. } => {
                task.outcome.lost_work += task.progress;
                task.progress = Duration::ZERO;
                task.progress_at_image = Duration::ZERO;
                task.image = None;
                let give_up = task.attempts >= self.cfg.max_attempts;
                self.recompute(node);
                if give_up {
                    self.retire(slot, false);
                } else {
                    task_phase(self, slot, Phase::Backoff);
                    self.place(slot);
                }
            }
            Phase::Freezing { .. } => {
                n.swap_used = n.swap_used.saturating_add(task.mem);
                task.phase = Phase::Frozen { node };
                task.suspended_at = now;
                let (req, mem) = (task.request(now), task.mem);
                n.with_policy(|p| p.suspended(now, req, mem));
                self.recompute(node);
            }
            Phase::Dumping { .. } => {
                let size = task.mem;
                self.counters.checkpoint_bytes_written += task.written;
                task.image = Some(ImageInfo { size, taken_at: now, shared: self.cfg.shared_store });
                task.progress_at_image = task.progress;
                task.suspended_at = now;
                self.recompute(node);
                let target = self.resume_site(node, size);
                let Some(task) = self.task_mut(slot) else {
                    return;
                };
                task.phase = Phase::Checkpointed { node: target, image_node: node };
                let (req, mem) = (task.request(now), task.mem);
                self.nodes[target as usize].with_policy(|p| p.suspended(now, req, mem));
                if target != node {
                    self.reindex(target);
                    self.step(target);
                }
            }
            _ => {}
        }
        self.reindex(node);
        self.step(node);
    }

    /// 004 Algorithm 2: restore where it waits least, here or on the
    /// least-loaded node with room, when images are on a shared store.
    fn resume_site(&mut self, node: u32, size: Bytes) -> u32 {
        if !self.cfg.shared_store {
            return node;
        }
        let Some((_, _, other)) = self.placement.first_other(node) else {
            return node;
        };
        let o = &self.nodes[other as usize];
        if o.stats().available < size {
            return node;
        }
        let here = &self.nodes[node as usize];
        let local_queue =
            Duration::from_secs_f64(here.resume_wait.max(0.0)) + here.dump_free_at.since(self.now);
        let remote_queue = o.dump_free_at.since(self.now);
        match choose_resume_site(Some(size), &self.cfg.store, local_queue, remote_queue) {
            ResumeSite::Remote => other,
            _ => node,
        }
    }

    fn on_resumed(&mut self, slot: u32, epoch: u32) {
        match self.live(slot, epoch).map(|t| t.phase) {
            Some(Phase::Idle { node }) => self.end_idle(slot, node),
            Some(Phase::Resuming { .. }) if self.task(slot).is_some_and(|t| t.doomed) => {
                self.die(slot);
            }
            Some(Phase::Resuming { node } | Phase::Refaulting { node }) => {
                self.advance(node);
                self.start_running(slot, node);
            }
            _ => {}
        }
    }

    // ---- the policy ----------------------------------------------------------

    fn step(&mut self, node: u32) {
        self.advance(node);
        let now = self.now;
        let mut observed = std::mem::take(&mut self.observed);
        let n = &self.nodes[node as usize];
        // All members' misses at once, not one after the other, and the
        // policy's with them.
        for m in &n.members {
            if let Some(task) = self.slots.get(m.slot as usize) {
                for lines in task::STEP_LINES {
                    prefetch::prefetch_lines(task, lines);
                }
            }
        }
        prefetch::prefetch(n.policy());
        for span in n.policy_spans {
            prefetch::prefetch_span(span);
        }
        // Written over earlier steps' entries, field by field, and kept at
        // the most members a node has had: building each one and pushing
        // it copied it whole (1.5% of all instructions at 1,000 nodes).
        let mut len = 0;
        for m in &n.members {
            if let Some(task) = self.slots.get_mut(m.slot as usize).and_then(Option::as_mut) {
                if m.running {
                    n.clocks.sync(task, m.lane);
                }
                match observed.get_mut(len) {
                    Some(stats) => write_stats(stats, task),
                    None => observed.push(stats_of(task)),
                }
                len += 1;
            }
        }
        let obs = Observation { now, node: n.stats(), containers: &observed[..len] };
        let backlog = n.dump_free_at.since(now);
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        let n = &mut self.nodes[node as usize];
        let wake = n.with_policy(|p| p.step(&obs, backlog, &mut actions));
        n.policy_spans = n.policy().state_spans();
        let thrashing = n.thrashing;
        self.observed = observed;
        for action in actions.drain(..) {
            self.apply(node, action);
        }
        self.actions = actions;
        // Every change steps the policy already (this is called on each):
        // an event-driven node has no calm period, only looks to schedule.
        let cadence = Cadence { sample_period: self.cfg.sample_period, calm_period: Duration::MAX };
        if let Some(at) = cadence.next_look(now, thrashing, wake) {
            self.wake(node, at.max(now));
        }
    }

    fn apply(&mut self, node: u32, action: Action) {
        let Some(slot) = self.slot_of(action.container()) else {
            return;
        };
        match action {
            Action::Launch { .. } => {
                if matches!(self.task(slot).map(|t| t.phase), Some(Phase::Queued { node: q }) if q == node)
                {
                    let req = self.task(slot).map_or(0, |t| t.spec.request);
                    let n = &mut self.nodes[node as usize];
                    n.queued = n.queued.saturating_sub(1);
                    n.queued_request = n.queued_request.saturating_sub(req);
                    self.launch(slot, node);
                }
            }
            Action::Resume { site, .. } => self.resume(slot, node, site),
            Action::Reject { reason, .. } => self.reject(slot, reason),
            Action::Preempt { how, .. } => self.preempt(slot, node, how),
            Action::Reclaim { bytes, .. } => self.reclaim(slot, node, bytes),
            // The model never swaps nor reclaims a critical task's memory:
            // it is protected already (and the simulated policies run
            // without the agent's guard, so none arrives).
            Action::Protect { .. } => {}
            Action::ProtectProduction { .. } => self.protect(slot, node),
        }
    }

    /// Production's memory protected from reclaim (v2 `memory.low`): the
    /// task goes on the protected lane, and the node's speeds change.
    fn protect(&mut self, slot: u32, node: u32) {
        self.advance(node);
        self.sync(slot);
        let Some(task) = self.slots.get(slot as usize).and_then(Option::as_ref) else { return };
        let (mem, running) = (task.mem, task.phase == Phase::Running { node });
        if !self.nodes[node as usize].protect(slot, mem) {
            return;
        }
        if running {
            // Synced just now: it counts from here on its new lane's clock,
            // and so does its next point.
            let n = &self.nodes[node as usize];
            if let Some(task) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) {
                n.rebase(slot, task);
            }
            self.target_point(slot, node);
        }
        if !self.recompute(node) && running {
            self.time_point(slot, node);
        }
    }

    fn launch(&mut self, slot: u32, node: u32) {
        let now = self.now;
        let Some(task) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        task.phase = Phase::Running { node };
        task.started = now;
        task.attempts += 1;
        task.outcome.first_start.set_once(now);
        task.mem = task.profile_mem();
        let n = &mut self.nodes[node as usize];
        if tracing() {
            eprintln!(
                "launch {} node={} key={:?} mem={} prog={:?}",
                now.0, node, task.spec.key, task.mem, task.progress
            );
        }
        let mem = task.mem;
        let lane = Lane::of(task.spec.class);
        task.base = n.clocks.reading(lane);
        n.add_member(Member::new(slot, true, lane), task.spec.cpus);
        n.hold(false, 0, mem);
        self.kernel_reclaim(node);
        self.target_point(slot, node);
        if !self.recompute(node) {
            self.time_point(slot, node);
        }
    }

    fn resume(&mut self, slot: u32, node: u32, site: ResumeSite) {
        let now = self.now;
        let store = self.cfg.store;
        let swap_bw = self.cfg.swap_bandwidth;
        let Some(task) = self.task_mut(slot) else {
            return;
        };
        let (pause, read) = match (task.phase, site) {
            (Phase::Frozen { node: at }, _) if at == node => (task.mem as f64 / swap_bw, 0),
            (
                Phase::Checkpointed { node: at, image_node },
                ResumeSite::Local | ResumeSite::Remote,
            ) if at == node => {
                let size = task.image.map_or(task.mem, |i| i.size);
                let mut secs = size as f64 / store.read;
                if image_node != node {
                    secs += size as f64 / store.net;
                    task.outcome.remote_resumes += 1;
                }
                task.outcome.checkpoint_time += Duration::from_secs_f64(secs);
                (secs, size)
            }
            (Phase::Checkpointed { node: at, .. }, ResumeSite::Restart) if at == node => {
                task.outcome.restarts += 1;
                task.outcome.lost_work += task.progress;
                task.progress = Duration::ZERO;
                task.image = None;
                (0.0, 0)
            }
            _ => return,
        };
        let waited = now.since(task.suspended_at).as_secs_f64();
        let was_frozen = matches!(task.phase, Phase::Frozen { .. });
        task.phase = Phase::Resuming { node };
        task.mem = task.profile_mem();
        let mem = task.mem;
        let epoch = task.bump();
        let (class, task_cpus) = (task.spec.class, task.spec.cpus);
        self.counters.checkpoint_bytes_read += read;
        let n = &mut self.nodes[node as usize];
        if was_frozen {
            n.swap_used = n.swap_used.saturating_sub(mem);
        }
        // A short memory of how long resumes wait here: 004's local queue time.
        n.resume_wait = 0.8 * n.resume_wait + 0.2 * waited;
        let lane = Lane::of(class);
        n.add_member(Member::new(slot, false, lane), task_cpus);
        n.hold(false, 0, mem);
        self.kernel_reclaim(node);
        self.recompute(node);
        self.queue
            .push(now + Duration::from_secs_f64(pause.min(1e9)), Event::Resumed { slot, epoch });
    }

    fn preempt(&mut self, slot: u32, node: u32, how: Preemption) {
        let now = self.now;
        self.advance(node);
        self.sync(slot);
        let swap_free = self.nodes[node as usize].stats().swap_free;
        let Some(task) = self.task(slot) else { return };
        if task.phase != (Phase::Running { node }) || !task.spec.class.is_preemptible() {
            return;
        }
        let mem = task.mem;
        // Freezing frees memory only into swap: with no room there, the
        // executor kills instead (as the agent does), so no task is left frozen
        // holding the memory production needs.
        let how = match how {
            Preemption::Freeze | Preemption::FreezeAndSwapOut if swap_free < mem => {
                Preemption::Kill
            }
            Preemption::Checkpoint { .. } if !self.cfg.can_checkpoint => Preemption::Kill,
            other => other,
        };
        let (phase, done_at) = match how {
            Preemption::Kill => {
                let delay = self.killer.sample(&mut self.rng);
                (Phase::Dying { node }, now + delay)
            }
            Preemption::Freeze | Preemption::FreezeAndSwapOut => {
                let secs = mem as f64 / self.cfg.swap_bandwidth;
                (Phase::Freezing { node }, now + Duration::from_secs_f64(secs.min(1e9)))
            }
            Preemption::Checkpoint { incremental } => {
                let incremental = incremental && task.image.is_some() && self.cfg.can_incremental;
                let size = if incremental {
                    overbook_core::convert::to_u64(
                        mem as f64 * task.dirty_fraction().unwrap_or(1.0),
                    )
                } else {
                    mem
                };
                let secs = size as f64 / self.cfg.store.write;
                let dump = self.cfg.dump_overhead + Duration::from_secs_f64(secs.min(1e9));
                let n = &mut self.nodes[node as usize];
                let start = n.dump_free_at.max(now);
                n.dump_free_at = start + dump;
                let Some(task) = self.task_mut(slot) else {
                    return;
                };
                task.outcome.checkpoints += 1;
                task.outcome.incremental_checkpoints += u32::from(incremental);
                task.outcome.checkpoint_time += dump;
                task.written = size;
                (Phase::Dumping { node }, start + dump)
            }
        };
        let Some(task) = self.task_mut(slot) else {
            return;
        };
        match how {
            Preemption::Kill => task.outcome.kills += 1,
            Preemption::Freeze | Preemption::FreezeAndSwapOut => task.outcome.suspensions += 1,
            Preemption::Checkpoint { .. } => {}
        }
        task.phase = phase;
        let epoch = task.bump();
        self.queue.push(done_at, Event::Released { slot, epoch });
        self.nodes[node as usize].set_running(slot, false);
        self.points_moved(node);
    }
}

/// Whether `TRACE` is set: the engine then prints its steps to stderr. Read
/// once, as the hot paths ask on every event.
fn tracing() -> bool {
    static TRACING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACING.get_or_init(|| std::env::var_os("TRACE").is_some())
}

fn task_phase(engine: &mut Engine<'_>, slot: u32, phase: Phase) {
    if let Some(t) = engine.task_mut(slot) {
        t.phase = phase;
    }
}

fn stats_of(task: &Task) -> ContainerStats {
    let mut stats = ContainerStats::new(task.id, task.job, task.class, task.started);
    write_stats(&mut stats, task);
    stats
}

/// What a step observes of `task`, over `stats`. Every field is named, so
/// a field added to `ContainerStats` cannot keep a stale value here.
fn write_stats(stats: &mut ContainerStats, task: &Task) {
    let ContainerStats {
        id,
        job,
        class,
        state,
        started,
        progress,
        usage,
        swap,
        faults,
        stall,
        score,
        weight,
        dirty_fraction,
        image,
    } = stats;
    debug_assert_eq!(
        (task.job, task.weight, task.class, task.priority),
        (task.spec.job, task.spec.weight, task.spec.class, task.spec.priority),
        "a task's copies of its spec's fields went stale"
    );
    *id = task.id;
    *job = task.job;
    *class = task.class;
    // Idle and refaulting containers are not frozen: they are up, and
    // their memory is what a reclaimer weighs.
    *state = match task.phase {
        Phase::Running { .. } | Phase::Idle { .. } | Phase::Refaulting { .. } => RunState::Running,
        _ => RunState::Frozen,
    };
    *started = task.started;
    *progress = task.progress;
    *usage = task.mem.saturating_sub(task.out);
    *swap = task.out;
    *faults = FaultCounters {
        major_faults: overbook_core::convert::to_u64(task.major_faults),
        refault_anon: overbook_core::convert::to_u64(task.refaults),
        refault_file: 0,
    };
    *stall = None;
    // Lower trace priority is cheaper work: the `score` ranker preempts it first.
    *score = 11 - i64::from(task.priority);
    *weight = task.weight;
    *dirty_fraction = task.dirty_fraction();
    *image = task.image;
}
