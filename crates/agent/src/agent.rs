//! One node's agent: observations in, the core policy decides, the agent
//! executes on the kernel and records every decision with its evidence.
//!
//! Why time comes in as an argument: [`Agent::tick`] is the whole loop body,
//! so tests drive it step by step on real cgroups, and the daemon
//! ([`crate::daemon`]) only adds the waiting.

mod checkpointing;
mod dumping;
mod durable;
mod executor;
mod pods;
mod supervisor;
mod swap_out;

use crate::checkpoint::ImageStore;
use crate::config::AgentConfig;
use crate::events::{Event, EventKind, EventLog};
use crate::node::{NodeSample, NodeView};
use crate::store::{StoreError, TaskStore};
use crate::tasks::Tasks;
use overbook_core::cadence::{Cadence, CheapSignals};
use overbook_core::config::ConfigError;
use overbook_core::launch::TaskRequest;
use overbook_core::policy::{NodeFacilities, NodePolicy};
use overbook_core::preempt::StoreBandwidth;
use overbook_core::{Action, ContainerId, JobId, Observation, Preemption, Time};
use overbook_linux::{
    CgroupError, ContainerCgroups, ContainerControl, ContainerPath, InvalidContainerPath, Outcome,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a freeze or thaw may take before it counts as failed.
const SETTLE: Duration = Duration::from_secs(2);

/// Why the agent could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("policy: {0}")]
    Policy(#[from] ConfigError),
    #[error("node.root: {0}")]
    Root(#[from] InvalidContainerPath),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot become a child subreaper (restored tasks would not be reaped): {0}")]
    Subreaper(overbook_linux::CgroupError),
    #[error("kubernetes: {0}")]
    Kubernetes(String),
}

/// What one tick did, for the daemon and for tests.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tick {
    /// Containers preempted, with how.
    pub preempted: Vec<(ContainerPath, Preemption)>,
    /// Containers resumed.
    pub resumed: Vec<ContainerPath>,
    /// When the policy wants to look again even if nothing changes.
    pub wake_at: Option<Time>,
}

/// A container as `overbook status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContainerStatus {
    pub name: String,
    pub class: String,
    pub usage: u64,
    pub swap: Option<u64>,
    pub major_faults_per_s: f64,
    pub refaults_per_s: f64,
    /// Per-cgroup PSI `some avg10` (v2 only).
    pub pressure_some_avg10: Option<f64>,
    pub processes: usize,
    pub state: String,
    /// Processes the kernel's OOM killer killed in it, where counted.
    #[serde(default)]
    pub oom_kills: Option<u64>,
}

/// The node as `overbook status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub root: String,
    pub capacity: u64,
    pub available: u64,
    pub swap_total: u64,
    pub swap_free: u64,
    pub containers: Vec<ContainerStatus>,
    pub preemptions: u64,
    pub resumes: u64,
    /// Tasks of `overbook run` waiting to start.
    #[serde(default)]
    pub queued: Vec<String>,
}

/// The agent of one node.
#[derive(Debug)]
pub struct Agent<C> {
    view: NodeView<C>,
    policy: NodePolicy,
    log: EventLog,
    /// Containers this agent froze (or found frozen), waiting to resume.
    suspended: BTreeMap<ContainerId, ContainerPath>,
    sample: NodeSample,
    actions: Vec<Action>,
    preemptions: u64,
    resumes: u64,
    tasks: Tasks,
    task_log_dir: PathBuf,
    /// When every container is read and the policy consulted (the core's rule).
    cadence: Cadence,
    /// The free share the policy keeps (the reclaimer's headroom, the
    /// detector's floor), if any: a calm node nearing it is read in full,
    /// so the policy acts before the kernel must.
    watched_headroom: Option<f64>,
    /// The node's counters at the last tick, and when every container was
    /// last read.
    last_pressure: Option<u64>,
    /// The last tick that read only the node, after the last full one.
    last_light: Option<Time>,
    /// Odd directories and unreadable containers already told (told again
    /// if they go and come back, or the reason changes).
    told_skipped: std::collections::BTreeSet<String>,
    told_unreadable: BTreeMap<String, String>,
    last_full: Option<Time>,
    /// Up to when the sample's progress has been brought (`bring_sample_to`).
    sample_told_at: Time,
    wake_at: Option<Time>,
    /// Critical containers whose protection has been said.
    protected: std::collections::BTreeSet<ContainerId>,
    /// Each class's CPU share, and the containers it was set on (or failed
    /// for: said once).
    cpu: crate::config::CpuShares,
    cpu_shared: std::collections::BTreeSet<ContainerId>,
    /// The CPU ceiling written on each best-effort container (`None`: it
    /// failed, said once, not tried again).
    cpu_capped: BTreeMap<ContainerId, Option<overbook_linux::CpuMax>>,
    /// With `best-effort-max = "leftover"`: the budget from the node's CPU
    /// readings, and whether a failed reading has been said.
    cpu_budget: Option<overbook_core::cpu_budget::CpuBudget>,
    cpu_budget_told: bool,
    durable: durable::Durable,
    /// CRIU and the image store, when the preemptor may checkpoint.
    images: Option<ImageStore>,
    /// Pre-dump running best-effort tasks this often (incremental dumps).
    pre_dump_interval: Option<Duration>,
    /// Tasks whose pre-dump failed, and when to try again.
    pre_dump_backoff: BTreeMap<ContainerId, Time>,
    /// Frozen containers' memory on its way to swap, off the loop.
    swap_outs: swap_out::SwapOuts,
    /// The checkpoint under way, off the loop, and the victims queued for it.
    dumps: dumping::Dumps,
    /// The pods' classes from the API server, on a Kubernetes node.
    pods: Option<pods::Pods>,
}

impl<C> Agent<C> {
    pub fn events(&self) -> &EventLog {
        &self.log
    }

    pub fn view(&self) -> &NodeView<C> {
        &self.view
    }
}

impl<C: ContainerCgroups + ContainerControl> Agent<C> {
    /// An agent over the containers under `config.root` in `cgroups`.
    pub fn new(config: &AgentConfig, cgroups: C, mut log: EventLog) -> Result<Self, AgentError> {
        use overbook_core::preempt::PreemptorConfig;
        let (wants_images, incremental) = match config.policy.preemptor {
            PreemptorConfig::Checkpoint { incremental } => (true, incremental),
            PreemptorConfig::Adaptive { incremental } => (true, incremental),
            PreemptorConfig::ProductionFirst { incremental, .. } => (true, incremental),
            _ => (false, false),
        };
        // CRIU is probed (and the store measured) only when the preemptor
        // may checkpoint: other agents start at once and need no criu.
        let images = wants_images.then(|| {
            let mut store = ImageStore::open(&config.checkpoint);
            let host = overbook_linux::host::hostname().unwrap_or_default();
            store.set_node(format!("{host}:{}", config.root));
            store
        });
        let facilities = match &images {
            Some(store) if store.usable() => NodeFacilities {
                store: store.bandwidth(),
                can_checkpoint: true,
                can_incremental: store.incremental(),
                swap_write: config.swap_write,
            },
            _ => NodeFacilities {
                // Unused: nothing is checkpointed without CRIU.
                store: StoreBandwidth { write: 1.0, read: 1.0, net: 1.0 },
                can_checkpoint: false,
                can_incremental: false,
                swap_write: config.swap_write,
            },
        };
        if images.as_ref().is_some_and(ImageStore::usable) {
            // A restored tree's root is reparented to the nearest child
            // subreaper once CRIU exits: this agent, which reaps it.
            overbook_linux::process::become_child_subreaper().map_err(AgentError::Subreaper)?;
        }
        let pre_dump_interval = config
            .checkpoint
            .pre_dump_interval
            .filter(|_| incremental && facilities.can_incremental);
        let mut policy = NodePolicy::new(&config.policy, facilities)?;
        if config.learn_swap_pace {
            policy = policy.learning_swap_pace();
        }
        if config.protect_critical {
            // Memory floors where the kernel has them (v2 `memory.min`).
            let floors = cgroups.version() == overbook_linux::CgroupVersion::V2;
            policy = policy.with_critical_guard(overbook_core::protect::CriticalGuard::new(floors));
        }
        let root = ContainerPath::new(&config.root)?;
        let mut view = NodeView::new(cgroups, root, config.capacity, config.classes.clone())
            .with_pods(config.pods);
        let mut durable = durable::Durable::default();
        let mut profiles = Vec::new();
        if let Some(path) = &config.state_db {
            // Never a start failure: what the database could not give is
            // one event each (the daemon prints them too).
            let start = TaskStore::open_for_agent(path);
            durable.restoring = start.tasks;
            profiles = start.profiles;
            durable.store = start.store;
            // Marks only where the store is kept: without it nothing outlives
            // the agent, and a read-only place would fail every start.
            durable.marks = durable.store.as_ref().map(|_| crate::starts::StartMarks::beside(path));
            for notice in start.notices {
                let (kind, detail) = (notice.kind(), notice.detail());
                let _ = log.record(Event { seq: 0, at: 0.0, kind, container: None, detail });
            }
        }
        // A task's class is part of its durable record: its container, found
        // at the first sample, is of the class it was started with, whatever
        // the name rules say (a production task named like best-effort work
        // must not become preemptible when the agent restarts).
        for stored in &durable.restoring {
            if let Ok(path) = view.root().child(&stored.request.name) {
                view.reserve(&path, stored.request.class, stored.request.weight);
            }
        }
        durable.profile_history = config.policy.launcher.profile_history;
        let mut tasks = Tasks::default();
        // The jobs' profiles, as an earlier agent left them (000 §4.2).
        for (job, peak, runtime) in profiles {
            policy.remember_finished(tasks.job_id(&job), peak, runtime);
        }
        let mut agent = Agent {
            view,
            policy,
            log,
            suspended: BTreeMap::new(),
            sample: NodeSample::default(),
            actions: Vec::new(),
            preemptions: 0,
            resumes: 0,
            tasks,
            task_log_dir: config.task_log_dir.clone(),
            cadence: Cadence {
                sample_period: config.sample_period,
                calm_period: config.calm_period,
            },
            watched_headroom: {
                let floor = config.policy.detector.floor();
                let reclaim = config.policy.reclaimer.headroom();
                reclaim.map(|h| h.max(floor)).or((floor > 0.0).then_some(floor))
            },
            last_pressure: None,
            last_light: None,
            told_skipped: Default::default(),
            told_unreadable: BTreeMap::new(),
            last_full: None,
            sample_told_at: Time::ZERO,
            wake_at: None,
            protected: std::collections::BTreeSet::new(),
            cpu: config.cpu,
            cpu_shared: std::collections::BTreeSet::new(),
            cpu_capped: BTreeMap::new(),
            cpu_budget: None,
            cpu_budget_told: false,
            durable,
            images,
            pre_dump_interval,
            pre_dump_backoff: BTreeMap::new(),
            swap_outs: swap_out::SwapOuts::default(),
            dumps: dumping::Dumps::default(),
            pods: match &config.kubernetes {
                None => None,
                Some(k) => Some(pods::Pods::start(k).map_err(AgentError::Kubernetes)?),
            },
        };
        agent.carry_cluster_writes(Time::ZERO);
        Ok(agent)
    }

    /// Says at start what the node can do for checkpoints (only when the
    /// preemptor may checkpoint), and what it falls back to where it cannot.
    pub fn note_checkpoint_support(&mut self, now: Time) {
        let Some(store) = &self.images else { return };
        let s = store.support();
        let bw = store.bandwidth();
        let detail = json!({
            "criu": s.binary.as_ref().map(|b| b.display().to_string()),
            "version": s.version,
            "usable": store.usable(),
            "why_not": s.why_not(),
            "incremental": store.incremental(),
            "why_not_incremental": s.mem_dirty_track.as_ref().err(),
            "images_dir": store.dir().display().to_string(),
            "shared": store.shared(),
            "write_mb_s": bw.write / 1e6,
            "read_mb_s": bw.read / 1e6,
            "measured": store.measured(),
            "pre_dump_interval_s": self.pre_dump_interval.map(|d| d.as_secs_f64()),
            "fallback": (!store.usable()).then_some(
                "checkpoints become freeze-and-swap-out where the node has swap, else kill"
            ),
        });
        let kind =
            if store.usable() { EventKind::Checkpoints } else { EventKind::CheckpointsUnavailable };
        self.record(now, kind, None, detail);
    }

    /// One pass of the loop at time `now` (since the agent started).
    pub fn tick(&mut self, now: Time) -> Result<Tick, AgentError> {
        let mut tick = Tick::default();
        // Supervise: tasks that exited, requeued tasks whose backoff ended.
        self.reap(now);
        self.requeue_after_backoff(now);
        self.collect_swap_outs(now);
        self.collect_dumps(now, &mut tick);
        self.read_pods(now);
        // Sample: every container, or (calm node) nothing.
        if self.sample_node(now, &mut tick)? {
            // Observe: arrivals and departures, earlier agents' tasks, peaks.
            self.observe(now);
            // Decide and execute: the core's step, each action carried out
            // (`executor`), each task's state persisted on the way.
            self.step_policy(now, &mut tick);
            // Prepare: a pre-dump, so a later checkpoint writes little (not
            // while a dump takes the store).
            if tick.preempted.is_empty() && !self.dumps.busy() {
                self.pre_dump_one(now);
            }
        }
        // Tell: on a Kubernetes node, its offer (every tick: the
        // publisher's timing is its own, and launches may wait on a
        // delay that ends without a sample).
        self.publish_offer(now);
        Ok(tick)
    }

    /// Reads every container if a full sample is due (returns true), else
    /// remembers the calm moment and returns false.
    fn sample_node(&mut self, now: Time, tick: &mut Tick) -> Result<bool, AgentError> {
        if !self.full_sample_due(now)? {
            self.last_light = Some(now);
            tick.wake_at = self.wake_at;
            return Ok(false);
        }
        // Until the last light tick the node was calm, so the containers
        // were as last read: the policy is told so at that time first, and
        // a thrashing that starts now is timed from then, not from the last
        // full read.
        if let Some(calm_until) = self.last_light.take() {
            if self.last_full.is_some() {
                self.step_policy(calm_until, tick);
            }
        }
        self.last_full = Some(now);
        self.sample = self.view.sample(now)?;
        self.sample_told_at = now;
        Ok(true)
    }

    /// What the new sample says beyond the policy's observation.
    fn observe(&mut self, now: Time) {
        self.note_arrivals_and_departures(now);
        self.share_cpu(now);
        self.cap_cpu(now);
        self.restore_and_watch(now);
        for (id, m) in &mut self.tasks.by_id {
            if let Some(k) = self.view.by_id(*id) {
                m.peak = m.peak.max(k.counters.usage);
            }
        }
    }

    /// The last full sample, told as of `now`: it can be seconds old on a
    /// calm node, and predate this agent's own acts. A container frozen
    /// or being dumped since is not a candidate, whatever the sample says
    /// (the calm moment's step once offered a task CRIU held, and the loop
    /// froze it under CRIU); a running one's work counts up to now (an
    /// operator's `--how policy` once weighed 3 s of work for 11.6 s, and
    /// killed a task worth its checkpoint).
    pub(super) fn bring_sample_to(&mut self, now: Time) {
        let ran = now.since(self.sample_told_at);
        self.sample_told_at = self.sample_told_at.max(now);
        for c in &mut self.sample.containers {
            let held = self.dumps.involves(c.id) || self.view.by_id(c.id).is_some_and(|k| k.frozen);
            if held {
                c.state = overbook_core::RunState::Frozen;
            } else if c.state == overbook_core::RunState::Running {
                // A task this agent started: its own books, not from when a
                // sample first found its container (a calm node's first
                // full sample can come seconds after the start).
                let started = self
                    .tasks
                    .by_id
                    .get(&c.id)
                    .and_then(|m| m.started_at.map(|at| m.progress_before + now.since(at)));
                c.progress = started.unwrap_or(c.progress + ran);
            }
        }
    }

    /// The policy decides on the last sample at `now`; its actions are done.
    fn step_policy(&mut self, now: Time, tick: &mut Tick) {
        self.actions.clear();
        self.bring_sample_to(now);
        let obs = Observation { now, node: self.sample.node, containers: &self.sample.containers };
        let decided = Instant::now();
        let backlog = self.dump_backlog();
        tick.wake_at = self.policy.step(&obs, backlog, &mut self.actions);
        self.wake_at = tick.wake_at;
        let actions = std::mem::take(&mut self.actions);
        for action in &actions {
            self.execute(now, action, decided, tick);
        }
        self.actions = actions;
    }

    /// Whether this tick reads every container, by the core's rule
    /// ([`Cadence::look_due`]) on what is cheap to see: whether the node's
    /// memory keeps filling up (its cgroup hits its limit: v1
    /// `memory.failcnt`, v2 `memory.events` `max`; on a node without a
    /// limit, system PSI stall grows), whether a task waits, and whether
    /// free memory nears the reclaimer's headroom. Why: reading
    /// 200 containers' files ten times a second costs ~10% of a core, a calm
    /// node needs none of it, and thrashing is only counted while the node
    /// is full anyway (see the detector), which one small file shows.
    fn full_sample_due(&mut self, now: Time) -> Result<bool, AgentError> {
        let hits = self.view.cgroups().limit_hits(self.view.root())?.done().flatten();
        let pressure = match hits {
            Some(h) => Some(h),
            None => overbook_linux::host::system_pressure()?
                .map(|p| u64::try_from(p.some.total.as_micros()).unwrap_or(u64::MAX)),
        };
        let busy = pressure.is_none() || pressure != self.last_pressure;
        self.last_pressure = pressure;
        let seen = CheapSignals {
            memory_busy: busy,
            work_waiting: self.tasks.by_id.values().any(|m| !m.running())
                || !self.suspended.is_empty()
                || !self.durable.restoring.is_empty(),
            near_headroom: self.nearing_headroom(),
            usage_moved: self.offer_usage_moved(now),
        };
        Ok(self.cadence.look_due(now, self.last_full, self.wake_at, seen))
    }

    /// Whether the node's free memory is within twice the reclaimer's
    /// headroom (or cannot be told cheaply).
    fn nearing_headroom(&self) -> bool {
        let Some(headroom) = self.watched_headroom else { return false };
        let capacity = self.sample.node.capacity;
        match self.view.cgroups().usage(self.view.root()) {
            Ok(Outcome::Done(usage)) if capacity > 0 => {
                (capacity.saturating_sub(usage) as f64) < 2.0 * headroom * capacity as f64
            }
            _ => true,
        }
    }

    /// The node and its containers as last sampled.
    pub fn status(&self) -> NodeStatus {
        let node = &self.sample.node;
        NodeStatus {
            root: self.view.root().to_string(),
            capacity: node.capacity,
            available: node.available,
            swap_total: node.swap_total,
            swap_free: node.swap_free,
            containers: self
                .view
                .containers()
                .map(|k| ContainerStatus {
                    name: k.path.name().to_string(),
                    class: k.class.to_string(),
                    usage: k.counters.usage,
                    swap: k.counters.swap,
                    major_faults_per_s: k.major_rate,
                    refaults_per_s: k.refault_rate,
                    pressure_some_avg10: k.counters.pressure.map(|p| p.some.avg10),
                    processes: k.members,
                    oom_kills: k.counters.oom_kills,
                    state: if k.members == 0 {
                        "empty"
                    } else if k.frozen {
                        "frozen"
                    } else {
                        "running"
                    }
                    .to_string(),
                })
                .collect(),
            preemptions: self.preemptions,
            resumes: self.resumes,
            queued: self.tasks.queued(),
        }
    }

    /// Records an event that is not a decision (start-up facts, warnings).
    pub fn note(&mut self, now: Time, kind: EventKind, detail: serde_json::Value) {
        self.record(now, kind, None, detail);
    }

    fn record(
        &mut self,
        now: Time,
        kind: EventKind,
        container: Option<&ContainerPath>,
        detail: serde_json::Value,
    ) {
        // The agent's own preemption or resume of a pod, recorded: the API
        // server is told next (off the loop), whichever path did it.
        let tells =
            matches!(kind, EventKind::Preempted | EventKind::Resumed) && self.pods.is_some();
        if let (true, Some(path)) = (tells, container) {
            self.tell_api(now, kind, path, &detail);
        }
        let event = Event {
            seq: 0,
            at: now.as_secs_f64(),
            kind,
            container: container.map(|c| c.to_string()),
            detail,
        };
        // A log that cannot be written must not stop the agent; the event
        // stays in memory and the failure itself is kept.
        if let Err(problem) = self.log.record(event) {
            let _ = self.log.record(Event {
                seq: 0,
                at: now.as_secs_f64(),
                kind: EventKind::LogFailed,
                container: None,
                detail: json!({ "problem": problem }),
            });
        }
    }

    fn note_arrivals_and_departures(&mut self, now: Time) {
        let skipped: std::collections::BTreeSet<String> =
            std::mem::take(&mut self.sample.skipped).into_iter().collect();
        for name in skipped.difference(&self.told_skipped).cloned().collect::<Vec<_>>() {
            let why = if self.view.pods() {
                "no pod's cgroup by its name and place (the kubelet's driver is node.pods)"
            } else {
                "its name is no container name (a control character, or not UTF-8)"
            };
            self.record(
                now,
                EventKind::ContainerSkipped,
                None,
                json!({ "name": name, "why": why }),
            );
        }
        self.told_skipped = skipped;
        let mut unreadable = BTreeMap::new();
        for (path, error) in std::mem::take(&mut self.sample.unreadable) {
            if self.told_unreadable.get(path.as_str()) != Some(&error) {
                let detail = json!({ "error": error, "then": "left out of this sample" });
                self.record(now, EventKind::ContainerUnreadable, Some(&path), detail);
            }
            unreadable.insert(path.as_str().to_string(), error);
        }
        self.told_unreadable = unreadable;
        for (id, path) in std::mem::take(&mut self.sample.gone) {
            // A managed task's container goes away between its incarnations
            // while the task itself waits to start again.
            if !self.tasks.by_id.contains_key(&id) {
                self.policy.departed(id);
            }
            self.suspended.remove(&id);
            self.protected.remove(&id);
            self.record(now, EventKind::Gone, Some(&path), json!({ "id": id.0 }));
        }
        for (id, kills) in std::mem::take(&mut self.sample.kernel_kills) {
            let Some(k) = self.view.by_id(id) else { continue };
            let (path, class) = (k.path.clone(), k.class);
            self.record(
                now,
                EventKind::KernelOomKill,
                Some(&path),
                json!({ "kills": kills, "class": class.as_str() }),
            );
        }
        for id in std::mem::take(&mut self.sample.emptied) {
            // Emptied by CRIU at its dump's end: the dump's end removes it.
            if self.dumps.involves(id) {
                continue;
            }
            let Some(k) = self.view.by_id(id) else { continue };
            let path = k.path.clone();
            let before = k.counters.usage;
            let detail = match self.view.cgroups().release_empty(&path) {
                Ok(_) => json!({ "usage_before": before }),
                Err(e) => json!({ "usage_before": before, "error": e.to_string() }),
            };
            self.record(now, EventKind::Released, Some(&path), detail);
        }
        for id in std::mem::take(&mut self.sample.appeared) {
            let Some(k) = self.view.by_id(id) else { continue };
            let (path, class, frozen, usage) =
                (k.path.clone(), k.class, k.frozen, k.counters.usage);
            self.record(
                now,
                EventKind::Found,
                Some(&path),
                json!({ "id": id.0, "class": class.as_str(), "frozen": frozen, "usage": usage }),
            );
            // Frozen by an earlier agent (or anyone): it waits to resume like
            // any preempted task, so nothing stays frozen forever.
            if frozen && class.is_preemptible() {
                let task =
                    TaskRequest { id, job: JobId(id.0), class, request: usage, submitted: now };
                self.policy.suspended(now, task, usage);
                self.suspended.insert(id, path);
            }
        }
    }
}
