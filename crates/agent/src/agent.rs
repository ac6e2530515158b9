//! One node's agent: observations in, the core policy decides, the agent
//! executes on the kernel and records every decision with its evidence.
//!
//! Why time comes in as an argument: [`Agent::tick`] is the whole loop body,
//! so tests drive it step by step on real cgroups, and the daemon
//! ([`crate::daemon`]) only adds the waiting.

mod checkpointing;
mod durable;

use crate::checkpoint::ImageStore;
use crate::config::AgentConfig;
use crate::events::{Event, EventKind, EventLog};
use crate::node::{NodeSample, NodeView};
use crate::spawn::command_in;
use crate::store::{StoreError, StoredState, TaskStore};
use crate::tasks::{check_name, Managed, PreemptRequest, RunError, RunReply, RunRequest, Tasks};
use overbook_core::config::ConfigError;
use overbook_core::launch::{Admission, AfterKill, TaskRequest};
use overbook_core::policy::{NodeFacilities, NodePolicy};
use overbook_core::preempt::StoreBandwidth;
use overbook_core::{Action, ContainerId, Evidence, JobId, Observation, Preemption, Time};
use overbook_linux::{
    CgroupError, ContainerCgroups, ContainerControl, ContainerPath, InvalidContainerPath, Outcome,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::Stdio;
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
    calm_period: Duration,
    /// The reclaimer's headroom, if one is configured: a calm node nearing
    /// it is read in full, so the reclaimer acts before the kernel must.
    reclaim_headroom: Option<f64>,
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
    wake_at: Option<Time>,
    /// Critical containers whose protection has been said.
    protected: std::collections::BTreeSet<ContainerId>,
    durable: durable::Durable,
    /// CRIU and the image store, when the preemptor may checkpoint.
    images: Option<ImageStore>,
    /// Pre-dump running best-effort tasks this often (incremental dumps).
    pre_dump_interval: Option<Duration>,
    /// Tasks whose pre-dump failed, and when to try again.
    pre_dump_backoff: BTreeMap<ContainerId, Time>,
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
            },
            _ => NodeFacilities {
                // Unused: nothing is checkpointed without CRIU.
                store: StoreBandwidth { write: 1.0, read: 1.0, net: 1.0 },
                can_checkpoint: false,
                can_incremental: false,
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
        if config.protect_critical {
            // Memory floors where the kernel has them (v2 `memory.min`).
            let floors = cgroups.version() == overbook_linux::CgroupVersion::V2;
            policy = policy.with_critical_guard(overbook_core::protect::CriticalGuard::new(floors));
        }
        let root = ContainerPath::new(&config.root)?;
        let mut view = NodeView::new(cgroups, root, config.capacity, config.classes.clone());
        let mut durable = durable::Durable::default();
        let mut profiles = Vec::new();
        if let Some(path) = &config.state_db {
            // Never a start failure: what the database could not give is
            // one event each (the daemon prints them too).
            let start = TaskStore::open_for_agent(path);
            durable.restoring = start.tasks;
            profiles = start.profiles;
            durable.store = start.store;
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
        Ok(Agent {
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
            calm_period: config.calm_period,
            reclaim_headroom: config.policy.reclaimer.headroom(),
            last_pressure: None,
            last_light: None,
            told_skipped: Default::default(),
            told_unreadable: BTreeMap::new(),
            last_full: None,
            wake_at: None,
            protected: std::collections::BTreeSet::new(),
            durable,
            images,
            pre_dump_interval,
            pre_dump_backoff: BTreeMap::new(),
        })
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
        self.reap(now);
        self.requeue_after_backoff(now);
        if !self.full_sample_due(now)? {
            self.last_light = Some(now);
            tick.wake_at = self.wake_at;
            return Ok(tick);
        }
        // Until the last light tick the node was calm, so the containers
        // were as last read: the policy is told so at that time first, and
        // a thrashing that starts now is timed from then, not from the last
        // full read.
        if let Some(calm_until) = self.last_light.take() {
            if self.last_full.is_some() {
                self.step_policy(calm_until, &mut tick);
            }
        }
        self.last_full = Some(now);
        self.sample = self.view.sample(now)?;
        self.note_arrivals_and_departures(now);
        self.restore_and_watch(now);
        for (id, m) in &mut self.tasks.by_id {
            if let Some(k) = self.view.by_id(*id) {
                m.peak = m.peak.max(k.counters.usage);
            }
        }
        self.step_policy(now, &mut tick);
        if tick.preempted.is_empty() {
            self.pre_dump_one(now);
        }
        Ok(tick)
    }

    /// The policy decides on the last sample at `now`; its actions are done.
    fn step_policy(&mut self, now: Time, tick: &mut Tick) {
        self.actions.clear();
        let obs = Observation { now, node: self.sample.node, containers: &self.sample.containers };
        let decided = Instant::now();
        tick.wake_at = self.policy.step(&obs, Duration::ZERO, &mut self.actions);
        self.wake_at = tick.wake_at;
        let actions = std::mem::take(&mut self.actions);
        for action in &actions {
            self.execute(now, action, decided, tick);
        }
        self.actions = actions;
    }

    /// Whether this tick reads every container: always while the node's
    /// memory keeps filling up (its cgroup hits its limit: v1
    /// `memory.failcnt`, v2 `memory.events` `max`; on a node without a
    /// limit, system PSI stall grows), when the policy asked to look again,
    /// or when a task waits; otherwise once per `calm_period`. Why: reading
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
        let calm_over = self.last_full.is_none_or(|t| now.since(t) >= self.calm_period);
        let asked = self.wake_at.is_some_and(|w| now >= w);
        let waiting = self.tasks.by_id.values().any(|m| !m.running())
            || !self.suspended.is_empty()
            || !self.durable.restoring.is_empty();
        Ok(busy || calm_over || asked || waiting || self.nearing_headroom())
    }

    /// Whether the node's free memory is within twice the reclaimer's
    /// headroom (or cannot be told cheaply).
    fn nearing_headroom(&self) -> bool {
        let Some(headroom) = self.reclaim_headroom else { return false };
        let capacity = self.sample.node.capacity;
        match self.view.cgroups().counters(self.view.root()) {
            Ok(Outcome::Done(root)) if capacity > 0 => {
                (capacity.saturating_sub(root.usage) as f64) < 2.0 * headroom * capacity as f64
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
            let why = "its name is no container name (a control character, or not UTF-8)";
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

    fn execute(&mut self, now: Time, action: &Action, decided: Instant, tick: &mut Tick) {
        match action {
            Action::Preempt { id, how, evidence } => {
                self.preempt(now, *id, *how, evidence, decided, tick)
            }
            Action::Resume { id, site } => self.resume(now, *id, *site, tick),
            // A start that fails is recorded (and the task given up) there.
            Action::Launch { id } => {
                let _ = self.start(now, *id);
            }
            Action::Reclaim { id, bytes } => self.reclaim(now, *id, *bytes),
            Action::Protect { id, min } => self.protect(now, *id, *min),
            Action::Reject { id, reason } => {
                if let Some(m) = self.tasks.by_id.remove(id) {
                    self.view.unreserve(&m.path);
                    self.record(
                        now,
                        EventKind::Rejected,
                        Some(&m.path),
                        json!({ "reason": format!("{reason:?}") }),
                    );
                }
            }
        }
    }

    fn preempt(
        &mut self,
        now: Time,
        id: ContainerId,
        how: Preemption,
        evidence: &Evidence,
        decided: Instant,
        tick: &mut Tick,
    ) {
        let Some(victim) = self.view.by_id(id) else { return };
        let (path, class, usage) = (victim.path.clone(), victim.class, victim.counters.usage);
        // The core never picks a protected class; this guard makes sure no
        // bug anywhere can turn that into a kill.
        if !class.is_preemptible() {
            let evidence = self.evidence_json(evidence);
            self.record(
                now,
                EventKind::PreemptRefused,
                Some(&path),
                json!({ "class": class.as_str(), "how": how.as_str(), "evidence": evidence }),
            );
            return;
        }
        let mut fallback: Option<String> = None;
        let mut done = how;
        if let Preemption::Checkpoint { .. } = how {
            if let Err(why) = self.can_checkpoint(id) {
                done = self.checkpoint_fallback();
                fallback = Some(format!("{why}; {} instead", done.as_str()));
            }
        }
        let issued = Instant::now();
        let result = match done {
            Preemption::Checkpoint { incremental } => match self.checkpoint(now, id, incremental) {
                Ok(o) => Ok(o),
                Err(why) => {
                    // The tree still runs (a failed dump leaves it so): its
                    // memory must come back all the same.
                    done = self.checkpoint_fallback();
                    fallback = Some(format!("checkpoint failed: {why}; {} instead", done.as_str()));
                    self.intend_kill(now, id, done);
                    self.suspend_or_kill(done, &path, usage)
                }
            },
            other => {
                self.intend_kill(now, id, other);
                self.suspend_or_kill(other, &path, usage)
            }
        };
        if done == Preemption::Kill && !matches!(result, Ok(Outcome::Done(_))) {
            // It was not killed after all: it runs on (or ended by itself).
            self.persist(now, id, StoredState::Running, "kill not done");
        }
        let finished = Instant::now();
        // Everything for the log is made after the action, not before it.
        let evidence = self.evidence_json(evidence);
        let timings = json!({
            "decision_to_issue_us": overbook_core::convert::u128_to_u64(issued.duration_since(decided).as_micros()),
            "action_us": overbook_core::convert::u128_to_u64(finished.duration_since(issued).as_micros()),
        });
        match result {
            Ok(Outcome::Done(report)) => {
                self.preemptions += 1;
                let mut lost_s = None;
                match done {
                    Preemption::Kill => {
                        if how != Preemption::Kill {
                            // A fallback: launches wait as after any kill.
                            self.policy.note_kill(now);
                        }
                        self.policy.departed(id);
                        if let Some(m) = self.tasks.by_id.get_mut(&id) {
                            m.killed = true;
                            // The work a restart from scratch must do again.
                            let ran = m.started_at.map_or(Duration::ZERO, |s| now.since(s));
                            lost_s = Some((m.progress_before + ran).as_secs_f64());
                        }
                    }
                    // Already waiting to be restored (see `checkpoint`).
                    Preemption::Checkpoint { .. } => {}
                    Preemption::Freeze | Preemption::FreezeAndSwapOut => {
                        self.view.set_frozen(id, true);
                        let task = TaskRequest {
                            id,
                            job: JobId(id.0),
                            class,
                            request: usage,
                            submitted: now,
                        };
                        self.policy.suspended(now, task, usage);
                        self.suspended.insert(id, path.clone());
                    }
                }
                tick.preempted.push((path.clone(), done));
                let mut detail = json!({
                    "how": done.as_str(),
                    "usage": usage,
                    "evidence": evidence,
                    "timings": timings,
                    "report": report,
                });
                if let Some(why) = fallback {
                    detail["fallback"] = json!(why);
                }
                if let Some(lost) = lost_s {
                    detail["lost_s"] = json!(lost);
                }
                self.record(now, EventKind::Preempted, Some(&path), detail);
            }
            Ok(Outcome::Vanished) => {
                self.record(
                    now,
                    EventKind::PreemptVanished,
                    Some(&path),
                    json!({ "how": done.as_str(), "evidence": evidence }),
                );
            }
            Err(e) => {
                self.record(
                    now,
                    EventKind::PreemptFailed,
                    Some(&path),
                    json!({ "how": done.as_str(), "error": e.to_string(), "evidence": evidence, "fallback": fallback }),
                );
            }
        }
    }

    /// A managed task about to be killed is recorded as killed first: an
    /// agent that dies between the kill and its record would leave it
    /// `running`, and the next one would take its end for a finish and
    /// never run it again.
    fn intend_kill(&mut self, now: Time, id: ContainerId, how: Preemption) {
        if how == Preemption::Kill {
            self.persist(now, id, StoredState::Killed, "killed by a preemption");
        }
    }

    /// Kills, freezes, or freezes and swaps out a container.
    fn suspend_or_kill(
        &self,
        how: Preemption,
        path: &ContainerPath,
        usage: u64,
    ) -> Result<Outcome<serde_json::Value>, CgroupError> {
        match how {
            Preemption::Freeze => {
                self.view.cgroups().freeze(path, SETTLE).map(|o| o.map(|()| json!({})))
            }
            Preemption::FreezeAndSwapOut => self.freeze_and_swap_out(path, usage),
            _ => self.view.cgroups().kill(path).map(|o| o.map(|r| json!(r_json(&r)))),
        }
    }

    /// Freezes a container, then pushes its memory out (v2
    /// `memory.reclaim`; v1 a squeezed limit), so production gets the RAM
    /// while the work stays.
    fn freeze_and_swap_out(
        &self,
        path: &ContainerPath,
        usage: u64,
    ) -> Result<Outcome<serde_json::Value>, CgroupError> {
        if let Outcome::Vanished = self.view.cgroups().freeze(path, SETTLE)? {
            return Ok(Outcome::Vanished);
        }
        let started = Instant::now();
        // Frozen: it cannot fault its pages back, so all of it may go.
        let reclaimed = match self.view.cgroups().reclaim(path, usage.max(1)) {
            Ok(Outcome::Done(got)) => json!(got),
            Ok(Outcome::Vanished) => return Ok(Outcome::Vanished),
            // Frozen but still resident: the kernel takes it first, later.
            Err(e) => json!({ "error": e.to_string() }),
        };
        Ok(Outcome::Done(json!({
            "reclaimed": reclaimed,
            "swap_out_us": overbook_core::convert::u128_to_u64(started.elapsed().as_micros()),
        })))
    }

    /// Operator's preemption (`overbook preempt`) of one task or container
    /// by name, through the same path and guards as the policy's.
    pub fn preempt_by_name(
        &mut self,
        now: Time,
        order: &PreemptRequest,
    ) -> Result<serde_json::Value, RunError> {
        let how = match order.how.as_str() {
            "kill" => Preemption::Kill,
            "freeze" => Preemption::Freeze,
            "freeze-and-swap-out" => Preemption::FreezeAndSwapOut,
            "checkpoint" => Preemption::Checkpoint { incremental: true },
            "full-checkpoint" => Preemption::Checkpoint { incremental: false },
            // Decided below, by the configured preemptor.
            "policy" => Preemption::Freeze,
            other => return Err(RunError::How(other.to_string())),
        };
        // A fresh look: the container may have started since the last
        // full sample (a calm node is read in full only now and then).
        match self.view.sample(now) {
            Ok(sample) => {
                self.sample = sample;
                self.note_arrivals_and_departures(now);
            }
            Err(e) => {
                return Err(RunError::Start { name: order.name.clone(), problem: e.to_string() })
            }
        }
        let known = self
            .view
            .containers()
            .find(|k| k.path.name() == order.name && k.members > 0)
            .map(|k| (k.id, k.class, k.frozen));
        let Some((id, class, frozen)) = known else {
            return Err(RunError::NoSuchTask(order.name.clone()));
        };
        if !class.is_preemptible() {
            return Err(RunError::Protected { name: order.name.clone(), class: class.to_string() });
        }
        if frozen || self.suspended.contains_key(&id) {
            return Err(RunError::Start {
                name: order.name.clone(),
                problem: "it is already suspended".into(),
            });
        }
        let how = if order.how == "policy" {
            let stats = self.sample.containers.iter().find(|c| c.id == id);
            match stats {
                Some(stats) => self.policy.preemption_for(stats, now),
                None => return Err(RunError::NoSuchTask(order.name.clone())),
            }
        } else {
            match how {
                Preemption::Checkpoint { incremental } => {
                    Preemption::Checkpoint { incremental: incremental && self.has_pre_dump(id) }
                }
                other => other,
            }
        };
        let evidence = Evidence {
            detector: "operator".into(),
            reason: format!("overbook preempt {} --how {}", order.name, order.how),
            thrashing: Vec::new(),
            lasted: Duration::ZERO,
            candidates: vec![(id, 0.0)],
        };
        let mut tick = Tick::default();
        let before = self.log.recent().last().map_or(0, |e| e.seq);
        self.preempt(now, id, how, &evidence, Instant::now(), &mut tick);
        if how == Preemption::Kill && !tick.preempted.is_empty() {
            self.policy.note_kill(now);
        }
        let events: Vec<serde_json::Value> =
            self.log.after(before).filter_map(|e| serde_json::to_value(e).ok()).collect();
        Ok(json!({ "preempted": !tick.preempted.is_empty(), "events": events }))
    }

    fn resume(
        &mut self,
        now: Time,
        id: ContainerId,
        site: overbook_core::ResumeSite,
        tick: &mut Tick,
    ) {
        if self.tasks.by_id.get(&id).is_some_and(Managed::checkpointed) {
            self.restore_checkpointed(now, id, site, tick);
            return;
        }
        let Some(path) = self.suspended.remove(&id) else {
            let what = format!("resume {id} ({site:?}) of a task this agent did not suspend");
            self.record(now, EventKind::NotSupported, None, json!({ "action": what }));
            return;
        };
        match self.view.cgroups().thaw(&path, SETTLE) {
            Ok(Outcome::Done(())) => {
                self.resumes += 1;
                self.view.set_frozen(id, false);
                tick.resumed.push(path.clone());
                self.record(
                    now,
                    EventKind::Resumed,
                    Some(&path),
                    json!({ "site": "local", "how": "thaw" }),
                );
            }
            Ok(Outcome::Vanished) => {
                self.record(now, EventKind::ResumeVanished, Some(&path), json!({}));
            }
            Err(e) => {
                // Keep it queued: a thaw that failed is retried, never forgotten.
                let usage = self.view.by_id(id).map_or(0, |k| k.counters.usage);
                let class =
                    self.view.by_id(id).map_or(overbook_core::Class::BestEffort, |k| k.class);
                let task =
                    TaskRequest { id, job: JobId(id.0), class, request: usage, submitted: now };
                self.policy.suspended(now, task, usage);
                self.suspended.insert(id, path.clone());
                self.record(
                    now,
                    EventKind::ResumeFailed,
                    Some(&path),
                    json!({ "error": e.to_string() }),
                );
            }
        }
    }

    /// Steered reclaim (001, 003): the kernel asked to take `bytes` from
    /// one container now. Never a critical one, whatever asked.
    fn reclaim(&mut self, now: Time, id: ContainerId, bytes: u64) {
        let Some(k) = self.view.by_id(id) else { return };
        let (path, class, usage) = (k.path.clone(), k.class, k.counters.usage);
        if class == overbook_core::Class::Critical {
            self.record(
                now,
                EventKind::ReclaimRefused,
                Some(&path),
                json!({ "class": class.as_str() }),
            );
            return;
        }
        let started = Instant::now();
        let detail = match self.view.cgroups().reclaim(&path, bytes) {
            Ok(Outcome::Done(got)) => {
                json!({ "asked": bytes, "reclaimed": got, "usage_before": usage, "took_us": overbook_core::convert::u128_to_u64(started.elapsed().as_micros()) })
            }
            Ok(Outcome::Vanished) => return,
            Err(e) => json!({ "asked": bytes, "error": e.to_string() }),
        };
        self.record(now, EventKind::Reclaimed, Some(&path), detail);
    }

    /// Critical containers: swap bypass at once, and (v2) `memory.min`
    /// raised to their usage as it grows, so the working set of a job
    /// manager is never reclaimed (000 §5.6: only critical ones; production
    /// keeps the default swappiness).
    /// Carries out a critical container's protection (the core's
    /// [`overbook_core::protect::CriticalGuard`] decides when and how far);
    /// said the first time for each container.
    fn protect(&mut self, now: Time, id: ContainerId, min: Option<u64>) {
        let Some(k) = self.view.by_id(id) else { return };
        let path = k.path.clone();
        let protection = overbook_linux::Protection {
            swap: Some(overbook_linux::SwapPolicy::Never),
            min: min.map(overbook_linux::Limit::Bytes),
            ..overbook_linux::Protection::default()
        };
        let first = self.protected.insert(id);
        match self.view.cgroups().protect(&path, &protection) {
            Ok(_) if first => self.record(
                now,
                EventKind::Protected,
                Some(&path),
                json!({ "swap": "never", "min": min }),
            ),
            Ok(_) => {}
            Err(e) => self.record(
                now,
                EventKind::ProtectFailed,
                Some(&path),
                json!({ "error": e.to_string() }),
            ),
        }
    }

    /// `overbook run`: a command in a new container, admitted by the launcher.
    pub fn submit(&mut self, now: Time, request: RunRequest) -> Result<RunReply, RunError> {
        check_name(&request.name)?;
        let Some(program) = request.command.first().filter(|p| !p.is_empty()) else {
            return Err(RunError::NoCommand);
        };
        // Refused now, not queued to fail at its start minutes later.
        crate::spawn::find_program(program, request.cwd.as_deref())
            .map_err(|problem| RunError::Program { program: program.clone(), problem })?;
        let path = self
            .view
            .root()
            .child(&request.name)
            .map_err(|e| RunError::Name { name: request.name.clone(), problem: e.to_string() })?;
        if self.view.knows(&path) || self.tasks.by_id.values().any(|m| m.path == path) {
            return Err(RunError::Exists(request.name));
        }
        if let Some(w) = request.weight.filter(|w| !(1..=10_000).contains(w)) {
            return Err(RunError::Weight(w));
        }
        self.admit(now, request, 0, false)
    }

    /// A checked request (new, or taken back from the store) to the launcher.
    /// A task taken back was admitted once (`again`): a full line does not
    /// refuse it.
    fn admit(
        &mut self,
        now: Time,
        request: RunRequest,
        restarts: u32,
        again: bool,
    ) -> Result<RunReply, RunError> {
        let path = self
            .view
            .root()
            .child(&request.name)
            .map_err(|e| RunError::Name { name: request.name.clone(), problem: e.to_string() })?;
        let job = self.tasks.job_id(request.job.as_deref().unwrap_or(&request.name));
        let id = self.view.reserve(&path, request.class, request.weight);
        let task = TaskRequest {
            id,
            job,
            class: request.class,
            request: request.mem_peak.unwrap_or(0),
            submitted: now,
        };
        let managed = Managed::new(request, job, path.clone(), restarts);
        let log = self.log_path(&managed.request.name);
        self.tasks.by_id.insert(id, managed);
        let reply = |state: &str| RunReply {
            container: path.to_string(),
            state: state.to_string(),
            log: log.display().to_string(),
        };
        let admission = if again {
            self.policy.requeue(now, task)
        } else {
            self.policy.submit(now, task, &self.sample.node)
        };
        match admission {
            Admission::Launch => {
                self.start(now, id)?;
                Ok(reply("started"))
            }
            Admission::Queued => {
                self.record(now, EventKind::Queued, Some(&path), json!({ "job": job.0 }));
                self.persist(now, id, StoredState::Queued, "queued");
                Ok(reply("queued"))
            }
            Admission::Rejected(reason) => {
                self.tasks.by_id.remove(&id);
                self.view.unreserve(&path);
                Err(RunError::Rejected(format!("{reason:?}")))
            }
        }
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.task_log_dir.join(format!("{name}.log"))
    }

    /// Makes a managed task's container and starts its command in it.
    fn start(&mut self, now: Time, id: ContainerId) -> Result<(), RunError> {
        let Some(m) = self.tasks.by_id.get(&id) else { return Ok(()) };
        if m.running() {
            return Ok(());
        }
        let (path, name) = (m.path.clone(), m.request.name.clone());
        let fail = |problem: String| RunError::Start { name: name.clone(), problem };
        match self.view.cgroups().create(&path, None) {
            Ok(_) | Err(CgroupError::Exists { .. }) => {}
            Err(e) => return Err(self.give_up(now, id, fail(e.to_string()))),
        }
        let log_path = self.log_path(&name);
        let log = std::fs::create_dir_all(&self.task_log_dir)
            .and_then(|()| OpenOptions::new().create(true).append(true).open(&log_path))
            .and_then(|f| Ok((f.try_clone()?, f)));
        let (out, err) = match log {
            Ok(pair) => pair,
            Err(e) => {
                return Err(self.give_up(now, id, fail(format!("{}: {e}", log_path.display()))))
            }
        };
        let m = &self.tasks.by_id[&id];
        // Checked at submit and when read back from the state database; a
        // request from elsewhere (a shared store's manifest) is not.
        let Some((program, args)) = m.request.command.split_first() else {
            return Err(self.give_up(now, id, fail("the command is empty".into())));
        };
        let cmd = command_in(self.view.cgroups(), &path, program, args);
        let mut cmd = match cmd {
            Ok(cmd) => cmd,
            Err(e) => return Err(self.give_up(now, id, fail(e.to_string()))),
        };
        cmd.current_dir(m.request.cwd.as_deref().unwrap_or(std::path::Path::new("/")))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // Recorded before the process can run: an agent that dies from here
        // until `Running` is recorded leaves `Starting`, and the next one
        // (which holds the node's lock, so no child of this one is still
        // between fork and exec) finds the command in its container if it
        // ran, and starts it again only if it did not.
        self.persist(now, id, StoredState::Starting, "starting");
        match cmd.spawn() {
            Ok(child) => {
                let pid = child.id();
                let m = self.tasks.by_id.get_mut(&id).ok_or_else(|| fail("vanished".into()))?;
                m.child = Some(child);
                m.started_at = Some(now);
                m.killed = false;
                m.peak = 0;
                // From scratch: work before this start is gone, and so is
                // any image of it.
                m.progress_before = Duration::ZERO;
                m.image = None;
                let (restarts, name) = (m.restarts, m.request.name.clone());
                self.discard_images(now, &name);
                self.view.carry(id, Duration::ZERO, None);
                self.record(now, EventKind::Started, Some(&path), json!({ "pid": pid, "restarts": restarts, "log": log_path.display().to_string() }));
                self.persist(now, id, StoredState::Running, &format!("started, pid {pid}"));
                Ok(())
            }
            Err(e) => Err(self.give_up(now, id, fail(e.to_string()))),
        }
    }

    /// A task that cannot start is dropped, and says why.
    fn give_up(&mut self, now: Time, id: ContainerId, e: RunError) -> RunError {
        if let Some(m) = self.tasks.by_id.remove(&id) {
            self.policy.departed(id);
            self.view.unreserve(&m.path);
            let _ = self.view.cgroups().remove(&m.path);
            self.record(
                now,
                EventKind::StartFailed,
                Some(&m.path),
                json!({ "error": e.to_string() }),
            );
            self.unpersist(now, &m.request.name, "start-failed", &e.to_string());
            self.discard_images(now, &m.request.name);
        }
        e
    }

    /// Managed tasks whose command exited: finished (profile recorded,
    /// container removed) or, when a preemption killed them, queued again
    /// after their backoff, or given up past their restart budget.
    fn reap(&mut self, now: Time) {
        let view = &self.view;
        let exited: Vec<(ContainerId, String, bool)> = self
            .tasks
            .by_id
            .iter_mut()
            .filter_map(|(id, m)| {
                if m.adopted {
                    // Not this agent's child: over when its root is gone and
                    // nothing is left in its container.
                    let root_gone = m.restored.is_none_or(|pid| !durable::process_exists(pid));
                    let empty = view.by_id(*id).is_none_or(|k| k.members == 0);
                    if !(root_gone && empty) {
                        return None;
                    }
                    m.adopted = false;
                    m.restored = None;
                    let status = "exit status unknown (started by an earlier agent)";
                    return Some((*id, status.to_string(), true));
                }
                if let Some(pid) = m.restored {
                    let status = checkpointing::restored_exit(pid)?;
                    m.restored = None;
                    return Some((*id, status, false));
                }
                let status = m.child.as_mut()?.try_wait().ok()??;
                m.child = None;
                Some((*id, status.to_string(), false))
            })
            .collect();
        for (id, status, adopted) in exited {
            let Some(m) = self.tasks.by_id.get_mut(&id) else { continue };
            let path = m.path.clone();
            let runtime = m.progress_before + m.started_at.map_or(Duration::ZERO, |s| now.since(s));
            // The kernel's own high-water mark: samples may have missed it.
            if let Ok(Outcome::Done(Some(peak))) = self.view.cgroups().peak(&path) {
                m.peak = m.peak.max(peak);
            }
            let _ = self.view.cgroups().remove(&path);
            // A task that exited by itself (a status, not a signal) finished,
            // even if a kill was decided meanwhile: it raced the kill to its
            // end, and running it again would run it twice.
            let too_late = m.killed && status.starts_with("exit status");
            if too_late {
                m.killed = false;
            }
            if m.killed {
                m.killed = false;
                m.restarts += 1;
                let restarts = m.restarts;
                match self.policy.launcher().config().after_kill(restarts) {
                    AfterKill::Requeue { after } => {
                        m.not_before = Some(now + after);
                        self.record(
                            now,
                            EventKind::Requeued,
                            Some(&path),
                            json!({ "status": status, "restarts": restarts, "after_s": after.as_secs_f64() }),
                        );
                        let detail =
                            format!("killed; starts again after {:.1} s", after.as_secs_f64());
                        self.persist(now, id, StoredState::Queued, &detail);
                    }
                    AfterKill::GiveUp => {
                        let max = self.policy.launcher().config().max_restarts;
                        let detail = format!("killed {restarts} times, past max_restarts = {max}");
                        if let Some(m) = self.tasks.by_id.remove(&id) {
                            self.view.unreserve(&m.path);
                            self.view.uncarry(id);
                            self.discard_images(now, &m.request.name);
                            self.unpersist(now, &m.request.name, "gave-up", &detail);
                        }
                        self.record(
                            now,
                            EventKind::GaveUp,
                            Some(&path),
                            json!({ "status": status, "restarts": restarts, "max_restarts": max }),
                        );
                    }
                }
            } else {
                if too_late {
                    let detail = json!({ "status": status });
                    self.record(now, EventKind::KillTooLate, Some(&path), detail);
                }
                let Some(m) = self.tasks.by_id.get_mut(&id) else { continue };
                let (job, peak, name) = (m.job, m.peak, m.request.name.clone());
                let job_name = m.request.job.clone().unwrap_or_else(|| name.clone());
                self.tasks.by_id.remove(&id);
                // An adopted task's run time and peak are not all known here.
                if !adopted {
                    self.keep_profile(now, &job_name, peak, runtime);
                }
                self.discard_images(now, &name);
                self.view.uncarry(id);
                self.unpersist(now, &name, "finished", &status);
                self.view.unreserve(&path);
                if adopted {
                    self.policy.departed(id);
                } else {
                    self.policy.finished(id, job, peak, runtime);
                }
                self.record(
                    now,
                    EventKind::Finished,
                    Some(&path),
                    json!({ "status": status, "runtime_s": runtime.as_secs_f64(), "peak": peak }),
                );
            }
        }
    }

    /// Killed tasks whose restart backoff is over queue again (first come,
    /// first served, like any requeued task: a full line never refuses them).
    fn requeue_after_backoff(&mut self, now: Time) {
        let due: Vec<ContainerId> = self
            .tasks
            .by_id
            .iter()
            .filter(|(_, m)| !m.running() && m.not_before.is_some_and(|t| now >= t))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let Some(m) = self.tasks.by_id.get_mut(&id) else { continue };
            m.not_before = None;
            let task = TaskRequest {
                id,
                job: m.job,
                class: m.request.class,
                request: m.request.mem_peak.unwrap_or(0),
                submitted: now,
            };
            match self.policy.requeue(now, task) {
                Admission::Launch => {
                    let _ = self.start(now, id);
                }
                // Waits in the launcher's line (its state says queued).
                Admission::Queued => {}
                Admission::Rejected(reason) => {
                    // The launcher never refuses a requeue; were it to, the
                    // task is dropped with its reason, never silently.
                    if let Some(m) = self.tasks.by_id.remove(&id) {
                        self.view.unreserve(&m.path);
                        let why = format!("{reason:?}");
                        self.unpersist(now, &m.request.name, "rejected", &why);
                        self.record(
                            now,
                            EventKind::Rejected,
                            Some(&m.path),
                            json!({ "reason": why }),
                        );
                    }
                }
            }
        }
    }

    /// The evidence with container names instead of ids.
    fn evidence_json(&self, e: &Evidence) -> serde_json::Value {
        let name = |id: &ContainerId| {
            self.view.by_id(*id).map_or_else(|| id.to_string(), |k| k.path.name().to_string())
        };
        json!({
            "detector": e.detector,
            "reason": e.reason,
            "thrashing": e.thrashing.iter().map(name).collect::<Vec<_>>(),
            "lasted_s": e.lasted.as_secs_f64(),
            "candidates": e.candidates.iter().map(|(id, score)| json!({ "container": name(id), "score": score })).collect::<Vec<_>>(),
        })
    }
}

fn r_json(r: &overbook_linux::KillReport) -> serde_json::Value {
    json!({
        "method": format!("{:?}", r.method),
        "signalled": r.signalled,
        "reaped": r.reaped,
        "not_reaped": r.not_reaped,
    })
}
