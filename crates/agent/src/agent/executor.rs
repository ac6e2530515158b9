//! The executor: the core's actions carried out on the node, each from
//! decision to its effect in one place (a kill from the decision to the
//! memory released, a freeze, a swap-out, a checkpoint's hand-off, a
//! resume, a reclaim, a critical container's protection), and the
//! operator's preemptions by name, which take the same paths.

use super::dumping::PreemptOrder;
use super::{Agent, Tick, SETTLE};
use crate::config::CpuCeiling;
use crate::events::details::{self, PreemptReport, Preempted, Reclaimed, Resumed, Timings};
use crate::events::{detail_json, EventKind};
use crate::store::StoredState;
use crate::tasks::{Managed, PreemptRequest, RunError};
use overbook_core::detect::Reason;
use overbook_core::launch::TaskRequest;
use overbook_core::{Action, Class, ContainerId, Evidence, JobId, Preemption, Time};
use overbook_linux::{CgroupError, ContainerCgroups, ContainerControl, ContainerPath, Outcome};
use serde_json::json;
use std::time::{Duration, Instant};

/// Whether a container takes a part of the best-effort CPU ceiling: a
/// best-effort one with processes, not frozen (a frozen one uses no CPU:
/// its part goes to the others).
fn shares_the_ceiling(k: &crate::node::Known) -> bool {
    k.members > 0 && !k.frozen && k.class == Class::BestEffort
}

/// How many full reads a burst of the rest's CPU use keeps best-effort
/// work at the lower budget (a few seconds: full reads come every sample
/// period while memory is busy, every calm period otherwise).
const CPU_BUDGET_HOLD: usize = 3;

impl<C: ContainerCgroups + ContainerControl> Agent<C> {
    pub(super) fn execute(
        &mut self,
        now: Time,
        action: &Action,
        decided: Instant,
        tick: &mut Tick,
    ) {
        match action {
            Action::Preempt { id, how, evidence } => {
                self.preempt(now, *id, *how, evidence, decided, false, tick)
            }
            Action::Resume { id, site } => self.resume(now, *id, *site, tick),
            // A start that fails is recorded (and the task given up) there.
            Action::Launch { id } => {
                let _ = self.start(now, *id);
            }
            Action::Reclaim { id, bytes } => self.reclaim(now, *id, *bytes),
            Action::Protect { id, min } => self.protect(now, *id, *min),
            Action::ProtectProduction { id } => self.protect_production(now, *id),
            Action::Reject { id, reason } => {
                if let Some(m) = self.tasks.by_id.remove(id) {
                    self.view.unreserve(&m.path);
                    let why = self.refusal(*reason, m.request.mem_peak.unwrap_or(0));
                    self.record(now, EventKind::Rejected, Some(&m.path), json!({ "reason": why }));
                }
            }
        }
    }

    /// Preempts container `id` as `how`; a checkpoint's dump runs off the
    /// loop unless `wait` (an operator waits for its reply).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn preempt(
        &mut self,
        now: Time,
        id: ContainerId,
        how: Preemption,
        evidence: &Evidence,
        decided: Instant,
        wait: bool,
        tick: &mut Tick,
    ) {
        let Some(victim) = self.view.by_id(id) else { return };
        let (path, class, usage) = (victim.path.clone(), victim.class, victim.counters.usage);
        // The core never picks a protected class; this guard makes sure no
        // bug anywhere can turn that into a kill.
        if !class.is_preemptible() {
            let evidence = detail_json(&self.evidence_detail(evidence));
            self.record(
                now,
                EventKind::PreemptRefused,
                Some(&path),
                json!({ "class": class.as_str(), "how": how.as_str(), "evidence": evidence }),
            );
            return;
        }
        // CRIU holds it (its dump is under way or queued): freezing or
        // dumping it again would stop CRIU's parasite mid-way, CRIU would
        // be killed at its timeout, and the task left with CRIU's code in
        // it (`bench preemption` saw one die of SIGTRAP, its work lost).
        if self.dumps.involves(id) {
            let evidence = detail_json(&self.evidence_detail(evidence));
            let why = "its dump is under way or queued: CRIU has it";
            self.record(
                now,
                EventKind::PreemptRefused,
                Some(&path),
                json!({ "class": class.as_str(), "how": how.as_str(), "why": why, "evidence": evidence }),
            );
            return;
        }
        let order = PreemptOrder {
            id,
            path,
            class,
            usage,
            incremental: false,
            how,
            evidence: evidence.clone(),
            decided,
            issued: Instant::now(),
        };
        if let Preemption::Checkpoint { incremental } = how {
            let order = PreemptOrder { incremental, ..order };
            let why = match self.can_checkpoint(id) {
                Err(why) => why,
                Ok(()) => match self.checkpoint_or_queue(now, order.clone(), wait, tick) {
                    Ok(()) => return,
                    Err(why) => format!("checkpoint failed: {why}"),
                },
            };
            self.fall_back(now, &order, why, tick);
            return;
        }
        self.intend_kill(now, id, how);
        let result = self.suspend_or_kill(id, how, &order.path, usage).map_err(|e| e.to_string());
        self.conclude(now, &order, how, None, result, tick);
    }

    /// What a preemption came to, carried on and recorded: `done` is how
    /// it was done (a fallback says why in `fallback`).
    pub(super) fn conclude(
        &mut self,
        now: Time,
        order: &PreemptOrder,
        done: Preemption,
        fallback: Option<String>,
        result: Result<Outcome<PreemptReport>, String>,
        tick: &mut Tick,
    ) {
        let (id, path, usage, how) = (order.id, order.path.clone(), order.usage, order.how);
        if done == Preemption::Kill && !matches!(result, Ok(Outcome::Done(_))) {
            // It was not killed after all: it runs on (or ended by itself).
            self.persist(now, id, StoredState::Running, "kill not done");
        }
        let finished = Instant::now();
        // Everything for the log is made after the action, not before it.
        let evidence = self.evidence_detail(&order.evidence);
        let timings = Timings {
            decision_to_issue_us: overbook_core::convert::u128_to_u64(
                order.issued.saturating_duration_since(order.decided).as_micros(),
            ),
            action_us: overbook_core::convert::u128_to_u64(
                finished.saturating_duration_since(order.issued).as_micros(),
            ),
        };
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
                            // A kill that found no one killed nothing: the
                            // task ended by itself (told at its reaping).
                            m.killed = report.signalled != Some(0);
                            // The work a restart from scratch must do again.
                            let ran = m.started_at.map_or(Duration::ZERO, |s| now.since(s));
                            lost_s = Some((m.progress_before + ran).as_secs_f64());
                        }
                    }
                    // Already waiting to be restored (see `finish_checkpoint`).
                    Preemption::Checkpoint { .. } => {}
                    Preemption::Freeze | Preemption::FreezeAndSwapOut => {
                        self.view.set_frozen(id, true);
                        let task = TaskRequest {
                            id,
                            job: JobId(id.0),
                            class: order.class,
                            request: usage,
                            submitted: now,
                        };
                        self.policy.suspended(now, task, usage);
                        self.suspended.insert(id, path.clone());
                    }
                }
                tick.preempted.push((path.clone(), done));
                let detail = Preempted {
                    how: done.as_str().to_string(),
                    usage,
                    evidence,
                    timings,
                    report,
                    fallback,
                    lost_s,
                };
                self.record(now, EventKind::Preempted, Some(&path), detail_json(&detail));
            }
            Ok(Outcome::Vanished) => {
                self.record(
                    now,
                    EventKind::PreemptVanished,
                    Some(&path),
                    json!({ "how": done.as_str(), "evidence": detail_json(&evidence) }),
                );
            }
            Err(e) => {
                self.record(
                    now,
                    EventKind::PreemptFailed,
                    Some(&path),
                    json!({ "how": done.as_str(), "error": e, "evidence": detail_json(&evidence), "fallback": fallback }),
                );
            }
        }
    }

    /// A managed task about to be killed is recorded as killed first: an
    /// agent that dies between the kill and its record would leave it
    /// `running`, and the next one would take its end for a finish and
    /// never run it again.
    pub(super) fn intend_kill(&mut self, now: Time, id: ContainerId, how: Preemption) {
        if how == Preemption::Kill {
            self.persist(now, id, StoredState::Killed, "killed by a preemption");
        }
    }

    /// Kills, freezes, or freezes and swaps out a container.
    pub(super) fn suspend_or_kill(
        &mut self,
        id: ContainerId,
        how: Preemption,
        path: &ContainerPath,
        usage: u64,
    ) -> Result<Outcome<PreemptReport>, CgroupError> {
        match how {
            Preemption::Freeze => self
                .view
                .cgroups()
                .freeze(path, SETTLE)
                .map(|o| o.map(|()| PreemptReport::default())),
            Preemption::FreezeAndSwapOut => self.freeze_and_swap_out(id, path, usage),
            _ => self.view.cgroups().kill(path).map(|o| o.map(|r| kill_report(&r))),
        }
    }

    /// Freezes a container, then has its memory pushed out (v2
    /// `memory.reclaim`; v1 a squeezed limit) off the loop
    /// ([`super::swap_out`]), so production gets the RAM while the work
    /// stays and the agent keeps watching.
    pub(super) fn freeze_and_swap_out(
        &mut self,
        id: ContainerId,
        path: &ContainerPath,
        usage: u64,
    ) -> Result<Outcome<PreemptReport>, CgroupError> {
        if let Outcome::Vanished = self.view.cgroups().freeze(path, SETTLE)? {
            return Ok(Outcome::Vanished);
        }
        // Frozen: it cannot fault its pages back, so all of it may go.
        let reclaim = self.view.cgroups().background_reclaim();
        self.swap_outs.start(id, path.clone(), usage.max(1), reclaim);
        Ok(Outcome::Done(PreemptReport {
            reclaimed: Some(json!("under way: see its swapped-out event")),
            ..PreemptReport::default()
        }))
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
            self.bring_sample_to(now);
            let stats = self.sample.containers.iter().find(|c| c.id == id);
            match stats {
                Some(stats) => self.policy.preemption_for(stats, now, self.sample.node.swap_free),
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
            reason: Reason::Text(format!("overbook preempt {} --how {}", order.name, order.how)),
            thrashing: Vec::new(),
            lasted: Duration::ZERO,
            candidates: vec![(id, 0.0)],
        };
        let mut tick = Tick::default();
        let before = self.log.recent().last().map_or(0, |e| e.seq);
        self.preempt(now, id, how, &evidence, Instant::now(), order.wait, &mut tick);
        let preempted = !tick.preempted.is_empty();
        let dumping = !preempted && self.dumps.involves(id);
        if how == Preemption::Kill && preempted {
            self.policy.note_kill(now);
        } else if preempted || dumping {
            self.policy.note_preemption(now);
        }
        let events: Vec<serde_json::Value> =
            self.log.after(before).filter_map(|e| serde_json::to_value(e).ok()).collect();
        Ok(json!({ "preempted": preempted, "dumping": dumping, "events": events }))
    }

    pub(super) fn resume(
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
        // Thawed before its swap-out ended, it would run squeezed (v1).
        if let Some(done) = self.swap_outs.wait(id) {
            self.record_swap_out(now, done);
        }
        match self.view.cgroups().thaw(&path, SETTLE) {
            Ok(Outcome::Done(())) => {
                self.resumes += 1;
                self.view.set_frozen(id, false);
                tick.resumed.push(path.clone());
                let thawed =
                    Resumed { site: "local".into(), how: "thaw".into(), ..Resumed::default() };
                self.record(now, EventKind::Resumed, Some(&path), detail_json(&thawed));
            }
            Ok(Outcome::Vanished) => {
                self.record(now, EventKind::ResumeVanished, Some(&path), json!({}));
            }
            Err(e) => {
                // Keep it queued: a thaw that failed is retried, never forgotten.
                let usage = self.view.by_id(id).map_or(0, |k| k.counters.usage);
                let class = self.view.by_id(id).map_or(Class::BestEffort, |k| k.class);
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
    pub(super) fn reclaim(&mut self, now: Time, id: ContainerId, bytes: u64) {
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
            Ok(Outcome::Done(got)) => Reclaimed {
                asked: bytes,
                reclaimed: Some(got),
                usage_before: Some(usage),
                took_us: Some(overbook_core::convert::u128_to_u64(started.elapsed().as_micros())),
                error: None,
            },
            Ok(Outcome::Vanished) => return,
            Err(e) => {
                Reclaimed { asked: bytes, error: Some(e.to_string()), ..Reclaimed::default() }
            }
        };
        self.record(now, EventKind::Reclaimed, Some(&path), detail_json(&detail));
    }

    /// Critical containers: swap bypass at once, and (v2) `memory.min`
    /// raised to their usage as it grows, so the working set of a job
    /// manager is never reclaimed (000 §5.6: only critical ones; production
    /// keeps the default swappiness).
    /// Carries out a critical container's protection (the core's
    /// [`overbook_core::protect::CriticalGuard`] decides when and how far);
    /// said the first time for each container.
    pub(super) fn protect(&mut self, now: Time, id: ContainerId, min: Option<u64>) {
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

    /// Production's memory kept from reclaim while anything unprotected is
    /// left (`[policy.protect] production`): v2 `memory.low` = max, so a
    /// shortage on the node is paid by best-effort work first. v1 has no
    /// such protection for a node under a limit (its soft limit reclaims a
    /// container's excess *first*): said once per container, nothing set.
    pub(super) fn protect_production(&mut self, now: Time, id: ContainerId) {
        let Some(k) = self.view.by_id(id) else { return };
        let path = k.path.clone();
        let why_not = if self.view.cgroups().version() != overbook_linux::CgroupVersion::V2 {
            Some("cgroup v1 has no memory.low: production's memory is not protected")
        } else if self.view.pods() {
            // The kernel honours a pod's memory.low only as far as its QoS
            // cgroup's (the kubelet's) protects it, which is nothing.
            Some("a kubelet's pod: its QoS cgroup has no memory.low, so the pod's would not count")
        } else {
            None
        };
        if let Some(error) = why_not {
            self.record(now, EventKind::ProtectFailed, Some(&path), json!({ "error": error }));
            return;
        }
        let protection = overbook_linux::Protection {
            low: Some(overbook_linux::Limit::Unlimited),
            ..overbook_linux::Protection::default()
        };
        match self.view.cgroups().protect(&path, &protection) {
            Ok(Outcome::Done(())) => {
                self.record(now, EventKind::Protected, Some(&path), json!({ "low": "max" }));
            }
            Ok(Outcome::Vanished) => {}
            Err(e) => self.record(
                now,
                EventKind::ProtectFailed,
                Some(&path),
                json!({ "error": e.to_string() }),
            ),
        }
    }

    /// Each container's CPU share for its class (`[cpu]`), set once it is
    /// seen with processes; said once, whether it was set or failed.
    pub(super) fn share_cpu(&mut self, now: Time) {
        // A kubelet sets its pods' CPU shares by QoS (best-effort pods get
        // the least) and per container; on v1 a share set here would move
        // a pod's processes out of their containers' cpu cgroups.
        if self.view.pods() {
            return;
        }
        let due: Vec<(ContainerId, ContainerPath, overbook_linux::CpuShare)> =
            (self.view.containers())
                .filter(|k| k.members > 0 && !self.cpu_shared.contains(&k.id))
                .filter_map(|k| self.cpu.of(k.class).map(|share| (k.id, k.path.clone(), share)))
                .collect();
        for (id, path, share) in due {
            self.write_cpu_share(now, id, &path, share, json!({}));
        }
        let view = &self.view;
        self.cpu_shared.retain(|id| view.by_id(*id).is_some());
    }

    /// Writes a container's CPU share, once: said with `detail` and what
    /// was written, or its error.
    fn write_cpu_share(
        &mut self,
        now: Time,
        id: ContainerId,
        path: &ContainerPath,
        share: overbook_linux::CpuShare,
        mut detail: serde_json::Value,
    ) {
        self.cpu_shared.insert(id);
        match self.view.cgroups().set_cpu_share(path, share) {
            Ok(Outcome::Done(written)) => {
                detail["set"] = json!(written);
                self.record(now, EventKind::CpuShare, Some(path), detail);
            }
            Ok(Outcome::Vanished) => {}
            Err(e) => {
                let detail = json!({ "error": e.to_string() });
                self.record(now, EventKind::CpuShareFailed, Some(path), detail);
            }
        }
    }

    /// Writes a best-effort container's CPU ceiling and remembers it (or
    /// that it failed, so it is not tried again): said with `detail` and
    /// what was written, or its error.
    fn write_cpu_max(
        &mut self,
        now: Time,
        id: ContainerId,
        path: &ContainerPath,
        max: overbook_linux::CpuMax,
        mut detail: serde_json::Value,
    ) {
        match self.view.cgroups().set_cpu_max(path, max) {
            Ok(Outcome::Done(written)) => {
                self.cpu_capped.insert(id, Some(max));
                detail["set"] = json!(written);
                self.record(now, EventKind::CpuMax, Some(path), detail);
            }
            Ok(Outcome::Vanished) => {}
            Err(e) => {
                self.cpu_capped.insert(id, None);
                let detail = json!({ "error": e.to_string() });
                self.record(now, EventKind::CpuMaxFailed, Some(path), detail);
            }
        }
    }

    /// A task the agent starts gets its class's CPU share, and a
    /// best-effort one a ceiling, in its container before its process
    /// exists: found only at the next full read (up to a calm period
    /// later), it would run that long at the kernel's default weight,
    /// beside production as an equal, and its start (exec, its first touch
    /// of its memory) is the burst that most needs to yield. The ceiling is
    /// the smallest one in force on another best-effort container, else its
    /// part of a fixed ceiling (or of a leftover one's floor) split with
    /// those running; the next full read splits it again. Said as at a
    /// full read, and not said again there.
    pub(super) fn cpu_before_start(
        &mut self,
        now: Time,
        id: ContainerId,
        path: &ContainerPath,
        class: Class,
    ) {
        if self.view.pods() {
            return;
        }
        if let Some(share) = self.cpu.of(class) {
            self.write_cpu_share(now, id, path, share, json!({ "before_start": true }));
        }
        if class != Class::BestEffort {
            return;
        }
        let whole = match self.cpu.best_effort_max {
            CpuCeiling::Unlimited => return,
            CpuCeiling::Fixed(cpus) => cpus,
            CpuCeiling::Leftover { floor, .. } => floor,
        };
        let in_force = self.cpu_capped.values().flatten().copied().min_by_key(|m| match m {
            overbook_linux::CpuMax::Quota(us) => *us,
            overbook_linux::CpuMax::Unlimited => u64::MAX,
        });
        let max = in_force.unwrap_or_else(|| {
            let running = self.view.containers().filter(|k| shares_the_ceiling(k)).count();
            overbook_linux::CpuMax::cores(whole / (running + 1) as f64)
        });
        self.write_cpu_max(now, id, path, max, json!({ "before_start": true }));
    }

    /// The best-effort containers' CPU ceiling (`[cpu] best-effort-max`),
    /// split evenly between those with processes and not frozen, and
    /// written again on each when their number or the ceiling changes.
    pub(super) fn cap_cpu(&mut self, now: Time) {
        // As for shares: a kubelet owns its pods' CPU settings.
        if self.view.pods() {
            return;
        }
        let (cpus, budget) = match self.cpu.best_effort_max {
            CpuCeiling::Unlimited => return,
            CpuCeiling::Fixed(cpus) => (cpus, None),
            CpuCeiling::Leftover { busy_target, floor } => {
                let Some(e) = self.cpu_budget(now, busy_target, floor) else { return };
                // In steps of 0.05 CPU (down), so that noise in what the
                // rest uses does not rewrite every container at each read.
                (((e.cpus / 0.05).floor() * 0.05).max(floor), Some(e))
            }
        };
        let view = &self.view;
        self.cpu_capped.retain(|id, _| view.by_id(*id).is_some());
        let capped: Vec<(ContainerId, ContainerPath)> = (view.containers())
            .filter(|k| shares_the_ceiling(k))
            .map(|k| (k.id, k.path.clone()))
            .collect();
        let count = capped.len();
        let max = overbook_linux::CpuMax::cores(cpus / count.max(1) as f64);
        for (id, path) in capped {
            match self.cpu_capped.get(&id) {
                Some(None) => continue,
                Some(Some(m)) if *m == max => continue,
                _ => {}
            }
            // To a thousandth of a CPU: what a reader compares.
            let round = |x: f64| (x * 1000.0).round() / 1000.0;
            let mut detail = json!({ "node_cpus": round(cpus), "containers": count });
            if let Some(e) = budget {
                detail["others_cpus"] = json!(e.others_now.map(round));
                detail["others_held_cpus"] = json!(round(e.others_held));
            }
            self.write_cpu_max(now, id, &path, max, detail);
        }
    }

    /// This read's best-effort CPU budget (`"leftover"`), from the node's
    /// busy time and the best-effort containers' own. A best-effort
    /// container whose time cannot be read counts to the rest (which errs
    /// towards production); a node whose time cannot be read keeps the
    /// ceilings as they are. Either is said once.
    fn cpu_budget(
        &mut self,
        now: Time,
        busy_target: f64,
        floor: f64,
    ) -> Option<overbook_core::cpu_budget::CpuBudgetEvidence> {
        use overbook_core::cpu_budget::{CpuBudget, CpuBudgetRule, CpuReading};
        let (node_used, node_cpus) = match overbook_linux::host::cpu_busy() {
            Ok(read) => read,
            Err(e) => {
                self.tell_cpu_budget_failed(now, None, &e);
                return None;
            }
        };
        let mut reading = CpuReading { at: now, node_used, ..CpuReading::default() };
        let best_effort: Vec<(ContainerId, ContainerPath)> = (self.view.containers())
            .filter(|k| k.class == Class::BestEffort)
            .map(|k| (k.id, k.path.clone()))
            .collect();
        for (id, path) in best_effort {
            match self.view.cgroups().cpu_used(&path) {
                Ok(Outcome::Done(used)) => {
                    reading.best_effort_used.insert(id, used);
                }
                Ok(Outcome::Vanished) => {}
                Err(e) => self.tell_cpu_budget_failed(now, Some(&path), &e),
            }
        }
        let budget = self.cpu_budget.get_or_insert_with(|| {
            CpuBudget::new(CpuBudgetRule {
                node_cpus: node_cpus as f64,
                busy_target,
                floor,
                hold: CPU_BUDGET_HOLD,
            })
        });
        Some(budget.observe(reading))
    }

    fn tell_cpu_budget_failed(&mut self, now: Time, path: Option<&ContainerPath>, e: &CgroupError) {
        if !std::mem::replace(&mut self.cpu_budget_told, true) {
            let detail = json!({ "error": e.to_string(), "budget": true });
            self.record(now, EventKind::CpuMaxFailed, path, detail);
        }
    }

    /// The evidence with container names instead of ids.
    pub(super) fn evidence_detail(&self, e: &Evidence) -> details::Evidence {
        let name = |id: &ContainerId| {
            self.view.by_id(*id).map_or_else(|| id.to_string(), |k| k.path.name().to_string())
        };
        details::Evidence {
            detector: e.detector.clone(),
            reason: named_in(&e.reason.to_string(), |id| {
                self.view.by_id(id).map(|k| k.path.name().to_string())
            }),
            thrashing: e.thrashing.iter().map(name).collect(),
            lasted_s: e.lasted.as_secs_f64(),
            candidates: (e.candidates.iter())
                .map(|(id, score)| details::Candidate { container: name(id), score: *score })
                .collect(),
        }
    }
}

fn kill_report(r: &overbook_linux::KillReport) -> PreemptReport {
    let count = |n: usize| Some(u64::try_from(n).unwrap_or(u64::MAX));
    PreemptReport {
        method: Some(format!("{:?}", r.method)),
        signalled: count(r.signalled),
        reaped: count(r.reaped),
        not_reaped: count(r.not_reaped),
        ..PreemptReport::default()
    }
}

/// `reason` with each container id the core wrote (`c3`) replaced by the
/// container's name where `name` knows it: the core knows ids, a reader
/// knows names.
fn named_in(reason: &str, name: impl Fn(ContainerId) -> Option<String>) -> String {
    let mut out = String::with_capacity(reason.len());
    let mut rest = reason;
    while let Some(at) = rest.find('c') {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let digits = from[1..].chars().take_while(char::is_ascii_digit).count();
        let whole_word = !before.ends_with(|c: char| c.is_alphanumeric() || c == '_')
            && !from[1 + digits..].starts_with(|c: char| c.is_alphanumeric() || c == '_');
        let named = (digits > 0 && whole_word)
            .then(|| from[1..=digits].parse().ok())
            .flatten()
            .and_then(|n| name(ContainerId(n)));
        match named {
            Some(n) => {
                out.push_str(&n);
                rest = &from[1 + digits..];
            }
            None => {
                out.push('c');
                rest = &from[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_core_s_ids_become_names_and_nothing_else_changes() {
        let name = |id: ContainerId| (id.0 == 3).then(|| "be-batch".to_string());
        assert_eq!(
            named_in("c3 (best-effort) thrashing for 3.0s: refaults 12/s", name),
            "be-batch (best-effort) thrashing for 3.0s: refaults 12/s"
        );
        assert_eq!(
            named_in("c4 (production) stalled; c3 (best-effort)", name),
            "c4 (production) stalled; be-batch (best-effort)"
        );
        assert_eq!(named_in("critical c33 abc3 c3x", name), "critical c33 abc3 c3x");
    }
}
