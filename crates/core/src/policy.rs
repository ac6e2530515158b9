//! The node policy: the stages composed. One instance per node; the agent and
//! the simulator feed it the same observations and apply the same actions.

use crate::action::{Action, Evidence, Preemption};
use crate::config::{ConfigError, PolicyConfig};
use crate::detect::{Detector, Verdict};
use crate::launch::{Admission, LaunchConfig, Launcher, TaskRequest};
use crate::model::{Bytes, ContainerId, ContainerStats, JobId, NodeStats, Observation};
use crate::preempt::{PreemptContext, Preemptor, StoreBandwidth, SwapPace};
use crate::protect::{CriticalGuard, ProductionGuard};
use crate::rank::{rank_candidates, Ranker};
use crate::reclaim::Reclaimer;
use crate::time::Time;
use std::time::Duration;

/// What the node offers the preemptor, fixed for a node's life (the swap
/// pace is where it starts: see [`NodePolicy::learning_swap_pace`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeFacilities {
    pub store: StoreBandwidth,
    pub can_checkpoint: bool,
    pub can_incremental: bool,
    /// Bytes per second the node swaps a frozen container's memory out at.
    pub swap_write: f64,
}

/// The composed pipeline of one node.
#[derive(Debug)]
pub struct NodePolicy {
    detector: Box<dyn Detector>,
    ranker: Box<dyn Ranker>,
    preemptor: Box<dyn Preemptor>,
    reclaimer: Option<Box<dyn Reclaimer>>,
    launcher: Launcher,
    facilities: NodeFacilities,
    /// How fast memory goes out to swap here: `facilities.swap_write`
    /// until the node's own swap-outs say otherwise (when it learns).
    swap_pace: SwapPace,
    /// One preemption per window: no second victim before this time.
    quiet_until: Time,
    window: Duration,
    ranked: Vec<(ContainerId, f64)>,
    /// Critical containers' protection, where the node does it.
    guard: Option<CriticalGuard>,
    /// With `protect.production`.
    production_guard: Option<ProductionGuard>,
    /// Whether the last step held the launcher because the node thrashes.
    held: bool,
}

impl NodePolicy {
    pub fn new(cfg: &PolicyConfig, facilities: NodeFacilities) -> Result<NodePolicy, ConfigError> {
        cfg.validate()?;
        Ok(NodePolicy {
            detector: cfg.detector.build(),
            ranker: cfg.ranker.build(),
            preemptor: cfg.preemptor.build(),
            reclaimer: cfg.reclaimer.build(),
            launcher: Launcher::new(LaunchConfig {
                // What the detector keeps free, launches must not fill: the
                // task launched into it would be the next victim.
                headroom: cfg.launcher.headroom.max(cfg.detector.floor()),
                ..cfg.launcher.clone()
            }),
            facilities,
            swap_pace: SwapPace::new(facilities.swap_write, false),
            quiet_until: Time::ZERO,
            window: cfg.detector.window(),
            ranked: Vec::new(),
            guard: None,
            production_guard: cfg.protect.production.then(ProductionGuard::default),
            held: false,
        })
    }

    /// Protects critical containers too (the agent's `protect_critical`):
    /// each step first asks `guard` what is due.
    pub fn with_critical_guard(mut self, guard: CriticalGuard) -> NodePolicy {
        self.guard = Some(guard);
        self
    }

    /// The swap pace moves with the node's own swap-outs
    /// ([`NodePolicy::swapped_out`]) instead of staying the configured one.
    /// The agent learns; the simulator's swap runs at its configured pace,
    /// so there is nothing to learn there.
    pub fn learning_swap_pace(mut self) -> NodePolicy {
        self.swap_pace = SwapPace::new(self.facilities.swap_write, true);
        self
    }

    /// A frozen container's memory went out to swap: `bytes` in `took`.
    /// Returns whether the pace the preemptor weighs freezes by moved.
    pub fn swapped_out(&mut self, bytes: Bytes, took: Duration) -> bool {
        self.swap_pace.swapped_out(bytes, took)
    }

    /// Bytes per second the preemptor expects a swap-out to go at now.
    pub fn swap_pace(&self) -> f64 {
        self.swap_pace.bytes_per_sec()
    }

    pub fn launcher(&self) -> &Launcher {
        &self.launcher
    }

    /// Whether launches wait at `now`: the launcher's post-kill delay is
    /// on, or the last step held it because the node thrashes
    /// (`hold_while_thrashing`). What the node offers new work elsewhere
    /// (a cluster's scheduler) is nothing meanwhile.
    pub fn launches_held(&self, now: Time) -> bool {
        self.held || self.launcher.delayed(now)
    }

    /// A task asks to run here. `Launch` means start it now; `Queued` means a
    /// later `step` will launch it.
    pub fn submit(&mut self, now: Time, task: TaskRequest, node: &NodeStats) -> Admission {
        self.launcher.submit(now, task, node)
    }

    /// A task killed here waits to start again; never refused
    /// ([`Launcher::requeue`]).
    pub fn requeue(&mut self, now: Time, task: TaskRequest) -> Admission {
        self.launcher.requeue(now, task)
    }

    /// A preempted task waits here to resume (frozen or checkpointed).
    pub fn suspended(&mut self, now: Time, task: TaskRequest, memory: Bytes) {
        self.launcher.suspended(now, task, memory);
    }

    /// How the configured preemptor would make `victim` pay now, with
    /// `swap_room` free swap (for an operator who asks for the policy's own
    /// choice).
    pub fn preemption_for(
        &self,
        victim: &ContainerStats,
        now: Time,
        swap_room: Bytes,
    ) -> Preemption {
        let ctx = PreemptContext {
            now,
            store: self.facilities.store,
            dump_backlog: Duration::ZERO,
            can_checkpoint: self.facilities.can_checkpoint,
            can_incremental: self.facilities.can_incremental,
            production_waiting: false,
            swap_room,
            swap_write: self.swap_pace.bytes_per_sec(),
        };
        self.preemptor.choose(victim, &ctx)
    }

    /// A best-effort container was killed by someone other than this
    /// policy (an operator): launches wait as after the policy's own kills.
    pub fn note_kill(&mut self, now: Time) {
        self.launcher.killed(now);
    }

    /// A best-effort container was frozen or checkpointed by someone other
    /// than this policy (an operator): the node counts as short of memory,
    /// as after the policy's own preemptions.
    pub fn note_preemption(&mut self, now: Time) {
        self.launcher.preempted(now);
    }

    /// A finished task of an earlier life of this node (a restarted agent
    /// reads them back): it joins its job's profile, nothing else changes.
    pub fn remember_finished(&mut self, job: JobId, peak: Bytes, runtime: Duration) {
        self.launcher.finished(job, peak, runtime);
    }

    /// A task finished normally.
    pub fn finished(
        &mut self,
        now: Time,
        id: ContainerId,
        job: JobId,
        peak: Bytes,
        runtime: Duration,
    ) {
        self.launcher.finished(job, peak, runtime);
        self.finished_unprofiled(now, id);
    }

    /// A task finished whose peak and run time are not all known (an
    /// earlier life of the agent started it): its memory is free as any
    /// finished task's, but its job's profile does not learn from it.
    pub fn finished_unprofiled(&mut self, now: Time, id: ContainerId) {
        self.launcher.freed_by_finish(now);
        self.departed(id);
    }

    /// A container left the node for any reason.
    pub fn departed(&mut self, id: ContainerId) {
        self.launcher.departed(id);
        self.detector.forget(id);
        if let Some(r) = &mut self.reclaimer {
            r.forget(id);
        }
    }

    /// Where the state a step reads first lives outside the policy itself,
    /// as (address, bytes): its detector, and what the detector keeps of
    /// each container. A simulator stepping thousands of nodes asks the
    /// cache for them together with its tasks, where reaching them one
    /// pointer after another waited for each in turn. A hint only: nothing
    /// is read through them, and they are stale once the state moves.
    pub fn state_spans(&self) -> [(usize, usize); 2] {
        let detector: &dyn Detector = self.detector.as_ref();
        let at = std::ptr::from_ref(detector).cast::<u8>() as usize;
        [(at, std::mem::size_of_val(detector)), detector.state_span()]
    }

    /// One step: detect, maybe preempt one best-effort container, then launch
    /// or resume what fits. Actions are appended to `out`; the return value is
    /// the latest time the caller should call `step` again even if nothing
    /// changes (a window closing, a launch delay ending).
    pub fn step(
        &mut self,
        obs: &Observation<'_>,
        dump_backlog: Duration,
        out: &mut Vec<Action>,
    ) -> Option<Time> {
        let mut wake = None;
        let before = out.len();
        let verdict = self.detector.observe(obs);
        let pressured = !matches!(verdict, Verdict::Calm);
        match verdict {
            Verdict::Calm => {}
            Verdict::Watching { decide_at } => wake = Some(decide_at),
            Verdict::Fire(trigger) if obs.now < self.quiet_until => {
                let _ = trigger;
                wake = Some(self.quiet_until);
            }
            Verdict::Fire(trigger) => {
                let among = trigger.victim_among_suspects.then_some(trigger.suspects.as_slice());
                rank_candidates(obs, self.ranker.as_ref(), among, &mut self.ranked);
                if let Some(&(victim, _)) = self.ranked.first() {
                    if let Some(stats) = obs.container(victim) {
                        let ctx = PreemptContext {
                            now: obs.now,
                            store: self.facilities.store,
                            dump_backlog,
                            can_checkpoint: self.facilities.can_checkpoint,
                            can_incremental: self.facilities.can_incremental,
                            production_waiting: trigger.protected_stalled,
                            swap_room: obs.node.swap_free,
                            swap_write: self.swap_pace.bytes_per_sec(),
                        };
                        let how = self.preemptor.choose(stats, &ctx);
                        out.push(Action::Preempt {
                            id: victim,
                            how,
                            evidence: Evidence {
                                detector: self.detector.name().to_string(),
                                reason: trigger.reason,
                                thrashing: trigger.suspects,
                                lasted: trigger.lasted,
                                candidates: self.ranked.clone(),
                            },
                        });
                        if how == Preemption::Kill {
                            self.launcher.killed(obs.now);
                        } else {
                            self.launcher.preempted(obs.now);
                        }
                        self.detector.clear();
                        self.quiet_until = obs.now + self.window;
                    }
                }
            }
        }
        // Steer reclaim only when nobody was preempted: a preemption is
        // already giving memory back.
        if out.len() == before {
            if let Some(r) = &mut self.reclaimer {
                r.plan(obs, out);
            }
        }
        if let Some(g) = &mut self.guard {
            g.plan(obs.containers, out);
        }
        if let Some(g) = &mut self.production_guard {
            g.plan(obs.containers, out);
        }
        self.launcher.note_usage(obs.containers);
        self.held = pressured && self.launcher.config().hold_while_thrashing;
        if self.held {
            return earliest(wake, self.launcher.hold(obs.now, &obs.node));
        }
        self.launcher.poll(obs.now, &obs.node, out);
        earliest(wake, self.launcher.wake_at())
    }
}

fn earliest(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::{AdmissionMode, LaunchConfig};
    use crate::model::Class;

    const GB: Bytes = 1 << 30;

    fn policy(hold: bool) -> NodePolicy {
        let cfg = PolicyConfig {
            launcher: LaunchConfig {
                admission: AdmissionMode::Available,
                delay_after_kill: false,
                hold_while_thrashing: hold,
                ..LaunchConfig::default()
            },
            ..PolicyConfig::default()
        };
        let store = StoreBandwidth { write: 1e9, read: 1e9, net: 1e9 };
        let facilities = NodeFacilities {
            store,
            can_checkpoint: false,
            can_incremental: false,
            swap_write: 1e9,
        };
        NodePolicy::new(&cfg, facilities).expect("valid")
    }

    /// When a best-effort task submitted at 0.5 s launches, while
    /// production's file refaults climb every 100 ms from 0 s to `climbing`
    /// (under the detector's 3 s tolerance: watched, never fired).
    fn launch_time(hold: bool, climbing: f64) -> Option<f64> {
        let mut p = policy(hold);
        let node = NodeStats { capacity: 16 * GB, available: 8 * GB, ..NodeStats::default() };
        let task = TaskRequest {
            id: ContainerId(2),
            job: JobId(2),
            class: Class::BestEffort,
            request: GB,
            submitted: Time::ZERO,
        };
        let mut prod = ContainerStats::new(ContainerId(1), JobId(1), Class::Production, Time::ZERO);
        for tick in 0..100u32 {
            let t = f64::from(tick) / 10.0;
            if tick == 5 {
                assert_eq!(p.submit(Time::from_secs_f64(t), task, &node), Admission::Queued);
            }
            if t <= climbing {
                prod.faults.refault_file += 50;
            }
            let obs = Observation {
                now: Time::from_secs_f64(t),
                node,
                containers: std::slice::from_ref(&prod),
            };
            let mut out = Vec::new();
            p.step(&obs, Duration::ZERO, &mut out);
            if out.iter().any(|a| matches!(a, Action::Launch { id } if id.0 == 2)) {
                return Some(t);
            }
        }
        None
    }

    #[test]
    fn a_held_launcher_waits_for_production_to_stop_thrashing() {
        // 000's launcher starts the task into the thrashing node at once.
        assert_eq!(launch_time(false, 2.0), Some(0.5));
        // Held: once the refaults have paused for a second (the detector's
        // PAUSE), the node is calm again and the task starts.
        let held = launch_time(true, 2.0).expect("launches once calm");
        assert!((3.0..=3.2).contains(&held), "{held}");
        // What the node offers elsewhere waits the same way.
        let mut p = policy(true);
        assert!(!p.launches_held(Time::ZERO));
        let node = NodeStats { capacity: 16 * GB, available: 8 * GB, ..NodeStats::default() };
        let mut prod = ContainerStats::new(ContainerId(1), JobId(1), Class::Production, Time::ZERO);
        let mut held_at = None;
        for tick in 0..10u32 {
            prod.faults.refault_file += 50;
            let now = Time::from_millis(u64::from(tick) * 100);
            let obs = Observation { now, node, containers: std::slice::from_ref(&prod) };
            p.step(&obs, Duration::ZERO, &mut Vec::new());
            if p.launches_held(now) {
                held_at.get_or_insert(tick);
            }
        }
        assert!(held_at.is_some(), "climbing refaults hold launches");
        assert!(!policy(false).launches_held(Time::ZERO));
        // Nothing climbs: the hold changes nothing.
        assert_eq!(launch_time(true, -1.0), Some(0.5));
    }

    #[test]
    fn state_spans_name_the_detector_and_what_it_keeps_of_each_container() {
        let mut p = policy(false);
        let [detector, kept] = p.state_spans();
        assert!(detector.0 != 0 && detector.1 > 0, "{detector:?}");
        assert_eq!(kept.1, 0, "nothing kept before a look");
        let node = NodeStats { capacity: 16 * GB, available: 8 * GB, ..NodeStats::default() };
        let mut bytes = Vec::new();
        for n in [1u64, 3] {
            let containers: Vec<_> = (1..=n)
                .map(|i| {
                    ContainerStats::new(ContainerId(i), JobId(i), Class::BestEffort, Time::ZERO)
                })
                .collect();
            let obs = Observation { now: Time::from_secs(n), node, containers: &containers };
            p.step(&obs, Duration::ZERO, &mut Vec::new());
            let [again, kept] = p.state_spans();
            assert_eq!(again, detector, "the detector stays where it is");
            assert!(kept.0 != 0, "{kept:?}");
            bytes.push(kept.1);
        }
        assert_eq!(bytes[1], 3 * bytes[0], "one entry a container: {bytes:?}");
    }
}

#[cfg(test)]
mod production_first_tests {
    use super::*;
    use crate::detect::DetectorConfig;
    use crate::model::Class;
    use crate::preempt::PreemptorConfig;

    const GB: Bytes = 1 << 30;

    /// The first preemption a production-first node decides when the
    /// container of class `stalling` thrashes, its refaults climbing every
    /// 100 ms, next to a best-effort victim of 1 GiB that has run an hour
    /// (a checkpoint costs it 2 s of 3600: 004's Algorithm 1 checkpoints).
    fn first_preemption(stalling: Class) -> Option<(f64, Preemption)> {
        let cfg = PolicyConfig {
            detector: DetectorConfig::ProductionFirst {
                tolerance: 3.0,
                production_tolerance: 0.3,
                min_rate: 1.0,
                production_stall: 0.1,
                floor: 0.0,
            },
            preemptor: PreemptorConfig::ProductionFirst { incremental: true, production_wait: 0.5 },
            ..PolicyConfig::default()
        };
        let store = StoreBandwidth { write: GB as f64, read: GB as f64, net: GB as f64 };
        let facilities = NodeFacilities {
            store,
            can_checkpoint: true,
            can_incremental: true,
            swap_write: GB as f64,
        };
        let mut p = NodePolicy::new(&cfg, facilities).expect("valid");
        let mut thrashing = ContainerStats::new(ContainerId(1), JobId(1), stalling, Time::ZERO);
        let mut victim =
            ContainerStats::new(ContainerId(2), JobId(2), Class::BestEffort, Time::ZERO);
        victim.usage = GB;
        victim.progress = Duration::from_secs(3600);
        let node = NodeStats { capacity: 4 * GB, ..NodeStats::default() };
        for tick in 0..60u32 {
            thrashing.faults.refault_anon += 100;
            let t = f64::from(tick) / 10.0;
            let containers = [thrashing.clone(), victim.clone()];
            let obs = Observation { now: Time::from_secs_f64(t), node, containers: &containers };
            let mut out = Vec::new();
            p.step(&obs, Duration::ZERO, &mut out);
            for a in out {
                if let Action::Preempt { id, how, evidence } = a {
                    assert_eq!(id, ContainerId(2), "only best-effort pays");
                    assert_eq!(evidence.detector, "production-first");
                    return Some((t, how));
                }
            }
        }
        None
    }

    #[test]
    fn production_s_stall_is_met_within_its_tolerance_by_a_kill_it_need_not_wait_for() {
        // Production stalls: acted on after 0.3 s, and the victim, whose
        // 1 GiB dump would keep production waiting 1 s, is killed.
        for class in [Class::Production, Class::Critical] {
            let (t, how) = first_preemption(class).expect("preempts");
            assert!((t - 0.3).abs() < 1e-9, "{class}: {t}");
            assert_eq!(how, Preemption::Kill, "{class}");
        }
        // Best-effort thrashing alone: 000's 3 s, then 004's checkpoint.
        let (t, how) = first_preemption(Class::BestEffort).expect("preempts");
        assert!((t - 3.0).abs() < 1e-9, "{t}");
        assert_eq!(how, Preemption::Checkpoint { incremental: false });
    }

    #[test]
    fn a_learning_node_weighs_a_freeze_by_the_pace_its_own_swap_outs_went_at() {
        let cfg = PolicyConfig {
            preemptor: crate::preempt::PreemptorConfig::production_first(),
            ..PolicyConfig::default()
        };
        let facilities = NodeFacilities {
            store: StoreBandwidth { write: 1e9, read: 1e9, net: 1e9 },
            can_checkpoint: false,
            can_incremental: false,
            swap_write: 100e6,
        };
        let mut victim =
            ContainerStats::new(ContainerId(2), JobId(2), Class::BestEffort, Time::ZERO);
        victim.usage = 1_000_000_000;
        victim.progress = Duration::from_secs(10);
        let (now, room) = (Time::from_secs(10), 4 * GB);
        // At 100 MB/s, out and back costs 20 s of a 10 s task: killed.
        let mut fixed = NodePolicy::new(&cfg, facilities).expect("valid");
        assert_eq!(fixed.preemption_for(&victim, now, room), Preemption::Kill);
        assert!(!fixed.swapped_out(1_000_000_000, Duration::from_secs(1)), "told, not learning");
        assert_eq!(fixed.preemption_for(&victim, now, room), Preemption::Kill);
        // The node swapped 1 GB out in a second: 2 s, so the work is kept.
        let mut learning = NodePolicy::new(&cfg, facilities).expect("valid").learning_swap_pace();
        assert!(learning.swapped_out(1_000_000_000, Duration::from_secs(1)));
        assert!((learning.swap_pace() - 1e9).abs() < 1.0, "{}", learning.swap_pace());
        assert_eq!(learning.preemption_for(&victim, now, room), Preemption::FreezeAndSwapOut);
    }
}
