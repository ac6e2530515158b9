//! Deaths the trace records (`WorkloadEvent::Death`): the trace ended a
//! task's attempt (evicted, failed, killed, lost), and the engine ends it
//! wherever it is.
//!
//! * Waiting (backing off, awaiting a guarantee, queued on a node, frozen,
//!   checkpointed): it leaves its queue, and a frozen one its swap.
//! * Holding memory (running, idle, refaulting): it leaves its node at once,
//!   giving back its memory, its swap and its production guarantee.
//! * Caught in the middle of something that ends on its own (a kill's delay,
//!   a freeze's swap-out, a dump, a resume): it is marked, and leaves once
//!   that is done, as if it had died then.
//!
//! Its work is lost; it is not a completion and not a policy kill: the
//! outcome says `trace_death`, and `RunCounters::trace_deaths` counts it. A
//! later `Submit` of the same key is a new attempt with a slot of its own.

use super::task::Phase;
use super::Engine;
use crate::workload::TaskKey;

impl Engine<'_> {
    /// The trace ended the attempt of `key` (nothing if the engine does not
    /// hold it: never submitted, after the horizon, already given up on).
    pub(super) fn on_death(&mut self, key: TaskKey) {
        let Some(slot) = self.by_key.remove(&key) else {
            return;
        };
        let Some(task) = self.task_mut(slot) else {
            return;
        };
        match task.phase {
            Phase::Dying { .. }
            | Phase::Freezing { .. }
            | Phase::Dumping { .. }
            | Phase::Resuming { .. } => task.doomed = true,
            _ => self.die(slot),
        }
    }

    /// End the attempt in `slot` now, from whatever phase it is in.
    pub(super) fn die(&mut self, slot: u32) {
        let Some(task) = self.task(slot) else {
            return;
        };
        let (phase, id, request) = (task.phase, task.id, task.spec.request);
        let node = match phase {
            Phase::Backoff => None,
            Phase::AwaitingGuarantee => {
                self.waiting_for_guarantee.retain(|&s| s != slot);
                None
            }
            Phase::Queued { node } => {
                let n = &mut self.nodes[node as usize];
                n.queued = n.queued.saturating_sub(1);
                n.queued_request = n.queued_request.saturating_sub(request);
                n.with_policy(|p| p.departed(id));
                self.release_guarantee(slot, node);
                Some(node)
            }
            Phase::Frozen { node } => {
                let mem = task.mem;
                let n = &mut self.nodes[node as usize];
                n.swap_used = n.swap_used.saturating_sub(mem);
                n.with_policy(|p| p.departed(id));
                Some(node)
            }
            Phase::Checkpointed { node, .. } => {
                self.nodes[node as usize].with_policy(|p| p.departed(id));
                Some(node)
            }
            Phase::Running { node }
            | Phase::Idle { node }
            | Phase::Refaulting { node }
            | Phase::Resuming { node }
            | Phase::Dying { node }
            | Phase::Freezing { node }
            | Phase::Dumping { node } => {
                self.advance(node);
                self.sync(slot);
                let Some(task) = self.task_mut(slot) else {
                    return;
                };
                let (mem, out) = (task.mem, std::mem::take(&mut task.out));
                let n = &mut self.nodes[node as usize];
                let protected = n.protected(slot);
                n.remove_member(slot);
                n.hold(protected, mem, 0);
                n.out = n.out.saturating_sub(out);
                n.swap_used = n.swap_used.saturating_sub(out);
                if matches!(phase, Phase::Idle { .. }) {
                    n.idle = n.idle.saturating_sub(1);
                }
                n.with_policy(|p| p.departed(id));
                self.release_guarantee(slot, node);
                self.recompute(node);
                Some(node)
            }
        };
        self.end_by_trace(slot);
        if let Some(node) = node {
            self.reindex(node);
            self.points_moved(node);
            self.step(node);
        }
        self.place_waiting_for_guarantee();
    }

    /// The attempt leaves the engine as a trace death (its node, if any,
    /// already settled): events left for it go stale.
    pub(super) fn end_by_trace(&mut self, slot: u32) {
        let Some(task) = self.task_mut(slot) else {
            return;
        };
        task.bump();
        task.outcome.trace_death = true;
        self.counters.trace_deaths += 1;
        self.retire(slot, false);
    }
}

#[cfg(test)]
impl Engine<'_> {
    /// What the nodes hold is what their tasks hold, and nothing the trace
    /// ended is anywhere (checked at the end of every test run).
    pub(super) fn check_books(&self) {
        for (i, n) in self.nodes.iter().enumerate() {
            let node = overbook_core::convert::usize_to_u32(i);
            let mut held: overbook_core::Bytes = 0;
            for m in &n.members {
                let t = self.task(m.slot).expect("a member is a live task");
                held += t.mem;
                assert!(!t.outcome.trace_death, "a dead task on node {i}");
            }
            assert_eq!(n.demand, held, "node {i}: demand is its members' memory");
            let swapped: overbook_core::Bytes = self
                .slots
                .iter()
                .flatten()
                .map(|t| match t.phase {
                    Phase::Frozen { node: at } if at == node => t.mem,
                    Phase::Idle { node: at } | Phase::Refaulting { node: at } if at == node => {
                        t.out
                    }
                    _ => 0,
                })
                .sum();
            assert_eq!(
                n.swap_used, swapped,
                "node {i}: swap is what frozen and idle tasks put there"
            );
            let queued =
                self.slots.iter().flatten().filter(|t| t.phase == (Phase::Queued { node })).count();
            assert_eq!(n.queued as usize, queued, "node {i}: queued tasks");
        }
        for (key, &slot) in &self.by_key {
            let t = self.task(slot).expect("a key maps to a live task");
            assert_eq!(t.spec.key, *key);
            assert!(!t.doomed, "a doomed task is no longer the key's");
        }
        for &slot in &self.waiting_for_guarantee {
            assert!(self.task(slot).is_some_and(|t| t.phase == Phase::AwaitingGuarantee));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::engine::{Engine, KillDelay, SimConfig, ThrashModel};
    use crate::tally::Outcomes;
    use crate::workload::{MemProfile, Pause, TaskKey, TaskSpec, WorkloadEvent};
    use overbook_core::config::PolicyConfig;
    use overbook_core::detect::DetectorConfig;
    use overbook_core::preempt::{PreemptorConfig, StoreBandwidth};
    use overbook_core::rank::RankerConfig;
    use overbook_core::{Bytes, Class, JobId, Time};
    use proptest::prelude::*;
    use rand::RngCore;
    use std::time::Duration;

    const GIB: Bytes = 1 << 30;

    /// Speed falls steeply past capacity; faults at a fixed rate (also the
    /// protected lane's tests').
    pub(crate) struct Steep;
    impl ThrashModel for Steep {
        fn speed(&self, demand: Bytes, capacity: Bytes) -> f64 {
            if demand <= capacity {
                1.0
            } else {
                (capacity as f64 / demand as f64).powi(8)
            }
        }
        fn fault_rates(&self, demand: Bytes, capacity: Bytes) -> (f64, f64) {
            if demand <= capacity {
                (0.0, 0.0)
            } else {
                (5000.0, 5000.0)
            }
        }
    }

    /// Kills that take a while, so that deaths land in the middle of some.
    struct Slow;
    impl KillDelay for Slow {
        fn sample(&self, _: &mut dyn RngCore) -> Duration {
            Duration::from_secs(20)
        }
    }

    fn config(preemptor: PreemptorConfig, nodes: usize) -> SimConfig {
        SimConfig {
            nodes,
            node_memory: 8 * GIB,
            node_swap: 16 * GIB,
            policy: PolicyConfig {
                detector: DetectorConfig::ConstraintThrashing { tolerance: 3.0, min_rate: 1.0 },
                ranker: RankerConfig::MemoryPerRuntime {},
                preemptor,
                ..PolicyConfig::default()
            },
            // Slow stores and swap: dumps, swap-outs and resumes take seconds.
            store: StoreBandwidth { write: 5e7, read: 5e7, net: 5e7 },
            dump_overhead: Duration::from_millis(100),
            can_checkpoint: true,
            can_incremental: true,
            shared_store: nodes > 1,
            swap_bandwidth: 5e7,
            sample_period: Duration::from_millis(500),
            max_attempts: 4,
            retry_backoff: Duration::from_secs(10),
            stop_submissions_at: Time::from_secs(10_000),
            end: Time::from_secs(20_000),
            seed: 7,
        }
    }

    /// One task: class, submit, memory (GiB), work, and when (after its
    /// submit) the trace ends it, if it does, and whether it comes back.
    type Plan = (bool, u64, u64, u64, Option<u64>, bool);

    fn events(plans: &[Plan]) -> Vec<WorkloadEvent> {
        let mut evs = Vec::new();
        for (i, &(production, at, gib, work, dies, again)) in plans.iter().enumerate() {
            let key = TaskKey(i as u64);
            let class = if production { Class::Production } else { Class::BestEffort };
            // Production grows into what best-effort borrowed: preemptions.
            let profile = if production {
                MemProfile::from_points(vec![
                    (Duration::ZERO, GIB),
                    (Duration::from_secs(20), gib * GIB),
                ])
            } else {
                MemProfile::flat(gib * GIB)
            };
            let spec = TaskSpec {
                key,
                job: JobId(i as u64 % 3),
                submit: Time::from_secs(at),
                class,
                priority: if production { 10 } else { 1 },
                request: gib * GIB,
                cpus: 1.0,
                work: None,
                profile,
                weight: 1,
                // Some idle spells, for deaths of idle and refaulting tasks.
                pauses: if i % 2 == 0 && !production {
                    vec![Pause { at: Duration::from_secs(5), length: Duration::from_secs(30) }]
                } else {
                    Vec::new()
                },
            };
            evs.push(WorkloadEvent::Submit(spec.clone()));
            match dies {
                Some(d) if d < work => {
                    let died = at + d;
                    evs.push(WorkloadEvent::Death { task: key, at: Time::from_secs(died) });
                    if again {
                        let mut next = spec;
                        next.submit = Time::from_secs(died + 1);
                        next.work = Some(Duration::from_secs(work));
                        evs.push(WorkloadEvent::Submit(next));
                    }
                }
                _ => evs.push(WorkloadEvent::Finish {
                    task: key,
                    at: Time::from_secs(at + work),
                    work: Duration::from_secs(work),
                }),
            }
        }
        evs.sort_by_key(WorkloadEvent::at);
        evs
    }

    fn run(preemptor: PreemptorConfig, nodes: usize, plans: &[Plan]) -> crate::outcome::RunResult {
        let engine = Engine::new(config(preemptor, nodes), &Steep, &Slow)
            .expect("config")
            .keeping(Outcomes::Kept);
        let stream = Box::new(events(plans).into_iter().map(Ok));
        engine.run("t", stream, &mut ()).expect("run")
    }

    fn plan() -> impl Strategy<Value = Plan> {
        (
            prop::bool::weighted(0.3),
            0u64..120,
            1u64..7,
            10u64..300,
            prop::option::weighted(0.6, 0u64..300),
            any::<bool>(),
        )
    }

    fn preemptor() -> impl Strategy<Value = PreemptorConfig> {
        prop_oneof![
            Just(PreemptorConfig::Kill {}),
            Just(PreemptorConfig::SuspendAndSwapOut {}),
            Just(PreemptorConfig::Checkpoint { incremental: true }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Deaths at any moment, under every way of preempting: the books
        /// balance (`check_books`), a dead attempt never completes, every
        /// death the engine saw is counted once, and the run is the same run
        /// twice.
        #[test]
        fn deaths_at_any_moment_leave_nothing_behind(
            preemptor in preemptor(),
            nodes in 1usize..3,
            plans in prop::collection::vec(plan(), 1..14),
        ) {
            let r = run(preemptor.clone(), nodes, &plans);
            let dead = r.outcomes.iter().filter(|o| o.trace_death).count();
            prop_assert_eq!(r.counters.trace_deaths, dead as u64);
            for o in &r.outcomes {
                prop_assert!(!(o.trace_death && o.completed), "{:?}", o);
            }
            let submits = plans.iter().map(|p| 1 + usize::from(p.4.is_some_and(|d| d < p.3) && p.5)).sum::<usize>();
            prop_assert_eq!(r.outcomes.len(), submits);
            prop_assert_eq!(run(preemptor, nodes, &plans), r);
        }
    }
}
