//! Production's memory kept by the kernel (`protect.production`): what a
//! shortage costs, and whom, with and without it.

use crate::engine::death::tests::Steep;
use crate::engine::{Engine, KillDelay, SimConfig};
use crate::outcome::TaskOutcome;
use crate::tally::Outcomes;
use crate::workload::{MemProfile, TaskKey, TaskSpec, WorkloadEvent};
use overbook_core::config::{PolicyConfig, ProtectConfig};
use overbook_core::detect::DetectorConfig;
use overbook_core::preempt::StoreBandwidth;
use overbook_core::{Bytes, Class, JobId, Time};
use rand::RngCore;
use std::time::Duration;

const GIB: Bytes = 1 << 30;

struct Instant;
impl KillDelay for Instant {
    fn sample(&self, _: &mut dyn RngCore) -> Duration {
        Duration::ZERO
    }
}

fn task(key: u64, class: Class, request: Bytes, profile: MemProfile) -> WorkloadEvent {
    WorkloadEvent::Submit(TaskSpec {
        key: TaskKey(key),
        job: JobId(key),
        submit: Time::ZERO,
        class,
        priority: if class == Class::Production { 10 } else { 1 },
        request,
        cpus: 1.0,
        work: Some(Duration::from_secs(600)),
        profile,
        weight: 1,
        pauses: Vec::new(),
    })
}

/// Production holds 5 GiB of an 8 GiB node; two best-effort tasks are
/// admitted at 1 GiB each and grow to 3 GiB after 30 s of work: 11 GiB.
/// Nobody is preempted for ten minutes (000's detector, at its longest
/// tolerance): the shortage stays.
fn run(protect: bool) -> Vec<TaskOutcome> {
    let cfg = SimConfig {
        nodes: 1,
        node_memory: 8 * GIB,
        node_swap: 16 * GIB,
        policy: PolicyConfig {
            detector: DetectorConfig::ConstraintThrashing { tolerance: 600.0, min_rate: 1.0 },
            protect: ProtectConfig { production: protect },
            ..PolicyConfig::default()
        },
        store: StoreBandwidth { write: 5e8, read: 5e8, net: 5e8 },
        dump_overhead: Duration::ZERO,
        can_checkpoint: false,
        can_incremental: false,
        shared_store: false,
        swap_bandwidth: 5e8,
        sample_period: Duration::from_millis(500),
        max_attempts: 4,
        retry_backoff: Duration::from_secs(10),
        stop_submissions_at: Time::from_secs(100),
        end: Time::from_secs(20_000),
        seed: 1,
    };
    let growing =
        || MemProfile::from_points(vec![(Duration::ZERO, GIB), (Duration::from_secs(30), 3 * GIB)]);
    let events = vec![
        task(0, Class::Production, 5 * GIB, MemProfile::flat(5 * GIB)),
        task(1, Class::BestEffort, GIB, growing()),
        task(2, Class::BestEffort, GIB, growing()),
    ];
    let engine = Engine::new(cfg, &Steep, &Instant).expect("config").keeping(Outcomes::Kept);
    let result = engine.run("t", Box::new(events.into_iter().map(Ok)), &mut ()).expect("run");
    assert!(result.outcomes.iter().all(|o| o.completed), "{:?}", result.outcomes);
    result.outcomes
}

fn thrashed(outcomes: &[TaskOutcome], class: Class) -> Duration {
    outcomes.iter().filter(|o| o.class == class).map(|o| o.thrashing_time.get()).sum()
}

#[test]
fn protected_production_runs_on_while_best_effort_pays_for_the_shortage() {
    let (open, kept) = (run(false), run(true));
    assert!(thrashed(&open, Class::Production) > Duration::from_secs(60), "{open:?}");
    assert_eq!(thrashed(&kept, Class::Production), Duration::ZERO, "{kept:?}");
    assert!(thrashed(&kept, Class::BestEffort) > Duration::ZERO, "{kept:?}");
    // Production ends on time. Best-effort, squeezed into the 3 GiB
    // production leaves, stands nearly still until then, and then has the
    // node: here it even ends sooner than when all three crawled together.
    let last = |o: &[TaskOutcome], class| {
        o.iter().filter(|t| t.class == class).filter_map(|t| t.end.get()).max().expect("ended")
    };
    assert_eq!(last(&kept, Class::Production), Time::from_secs(600), "{kept:?}");
    assert!(last(&open, Class::Production) > Time::from_secs(600), "{open:?}");
    let (be_kept, be_open) = (last(&kept, Class::BestEffort), last(&open, Class::BestEffort));
    assert!(be_kept < be_open, "{be_kept:?} vs {be_open:?}");
}
