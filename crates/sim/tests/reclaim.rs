//! Reclaim in the engine: who pays when a node runs short, with the kernel
//! alone and with each reclaimer of the core.

use overbook_core::config::PolicyConfig;
use overbook_core::preempt::StoreBandwidth;
use overbook_core::reclaim::ReclaimerConfig;
use overbook_core::{Bytes, Class, JobId, Time};
use overbook_sim::engine::{Engine, KillDelay, SimConfig, ThrashModel};
use overbook_sim::outcome::{RunResult, TaskOutcome};
use overbook_sim::report::reclaim::BandReclaim;
use overbook_sim::report::Band;
use overbook_sim::scenario::{execute, Scenario};
use overbook_sim::tally::Outcomes;
use overbook_sim::workload::{MemProfile, Pause, TaskKey, TaskSpec, WorkloadEvent};
use rand::RngCore;
use std::time::Duration;

const GIB: Bytes = 1 << 30;

/// 001's scenario, small: per band (A high, B medium, C low), for each variant.
fn consolidation() -> Vec<(String, [BandReclaim; 3])> {
    let overrides = ["cluster.nodes=4".to_string()];
    let scenario = Scenario::load("reclaim-consolidation", &overrides).expect("built in");
    scenario
        .runs
        .iter()
        .map(|run| {
            let r = execute(run, Outcomes::Kept, &mut ()).expect("runs");
            assert!(r.outcomes.iter().all(|t| t.completed), "{}: all complete", run.name);
            let by = |b| BandReclaim::of(&r.tally, b);
            (run.variant.clone(), [by(Band::High), by(Band::Medium), by(Band::Low)])
        })
        .collect()
}

#[test]
fn with_recency_the_idle_container_pays_and_the_active_one_keeps_its_memory() {
    let runs = consolidation();
    let get = |name: &str| runs.iter().find(|(v, _)| v == name).expect(name).1;
    let (none, recency) = (get("none"), get("recency"));
    let [a, b, _] = recency;
    assert!(a.lost <= 0.05, "recency: A lost {:.1}%", 100.0 * a.lost);
    assert!(b.lost > 0.3, "recency: B gave {:.1}%", 100.0 * b.lost);
    // The kernel alone takes from A as well, which A faults back slowly.
    assert!(none[0].lost > 2.0 * a.lost.max(0.01), "none: A lost {:.1}%", 100.0 * none[0].lost);
    assert!(none[0].refault_s > 5.0 * a.refault_s.max(0.5), "{none:?} vs {recency:?}");
    // Equal weights steer reclaim at A, which is worse than the kernel.
    let equal = get("weighted-equal");
    assert!(equal[0].refault_s > none[0].refault_s, "{equal:?} vs {none:?}");
    assert!(get("weighted")[0].lost <= 0.05);
}

struct Flat;
impl ThrashModel for Flat {
    fn speed(&self, demand: Bytes, capacity: Bytes) -> f64 {
        if demand <= capacity {
            1.0
        } else {
            0.1
        }
    }
    fn fault_rates(&self, _: Bytes, _: Bytes) -> (f64, f64) {
        (0.0, 0.0)
    }
}

struct Instant;
impl KillDelay for Instant {
    fn sample(&self, _: &mut dyn RngCore) -> Duration {
        Duration::ZERO
    }
}

fn spec(key: u64, class: Class, at: u64, work: u64, profile: MemProfile, weight: u32) -> TaskSpec {
    TaskSpec {
        key: TaskKey(key),
        job: JobId(key),
        submit: Time::from_secs(at),
        class,
        priority: 10,
        request: GIB,
        cpus: 1.0,
        work: Some(Duration::from_secs(work)),
        profile,
        weight,
        pauses: Vec::new(),
    }
}

/// 003's setting: three containers of 2 GiB with weights 1:2:3, idle after
/// their first second, while a critical one grows by 256 MiB every 2 s to
/// 5 GiB on an 8 GiB node. Returns the memory each keeps at the end.
fn weights_under_pressure(reclaimer: ReclaimerConfig) -> Vec<f64> {
    let mut events = Vec::new();
    for (k, w) in [1u32, 2, 3].into_iter().enumerate() {
        let mut s = spec(k as u64, Class::Production, 0, 200, MemProfile::flat(2 * GIB), w);
        s.pauses = vec![Pause { at: Duration::from_secs(1), length: Duration::from_secs(150) }];
        events.push(WorkloadEvent::Submit(s));
    }
    let grow: Vec<(Duration, Bytes)> =
        (0..20).map(|i| (Duration::from_secs(2 * i), (i + 1) * GIB / 4)).collect();
    let critical = spec(9, Class::Critical, 2, 100, MemProfile::from_points(grow), 1);
    events.push(WorkloadEvent::Submit(critical));
    let cfg = SimConfig {
        nodes: 1,
        node_memory: 8 * GIB,
        node_swap: 8 * GIB,
        policy: PolicyConfig { reclaimer, ..PolicyConfig::default() },
        store: StoreBandwidth { write: 1e9, read: 1e9, net: 1e9 },
        dump_overhead: Duration::ZERO,
        can_checkpoint: false,
        can_incremental: false,
        shared_store: false,
        swap_bandwidth: 5e8,
        sample_period: Duration::from_millis(500),
        max_attempts: 4,
        retry_backoff: Duration::from_secs(10),
        stop_submissions_at: Time::from_secs(1000),
        end: Time::from_secs(10_000),
        seed: 1,
    };
    let engine = Engine::new(cfg, &Flat, &Instant).expect("valid").keeping(Outcomes::Kept);
    let r: RunResult = engine.run("t", Box::new(events.into_iter().map(Ok)), &mut ()).expect("run");
    let kept = |t: &TaskOutcome| 2.0 * (1.0 - t.lost_share);
    let mut idle: Vec<&TaskOutcome> = r.outcomes.iter().filter(|t| t.key.0 < 9).collect();
    idle.sort_by_key(|t| t.key);
    assert!(idle.iter().all(|t| t.completed && t.reclaimed > 0), "{idle:?}");
    idle.into_iter().map(kept).collect()
}

#[test]
fn weighted_leaves_memory_in_the_ratio_of_the_weights() {
    let kept = weights_under_pressure(ReclaimerConfig::Weighted {
        headroom: 0.05,
        interval: 1.0,
        best_effort_only: false,
    });
    let per_weight: Vec<f64> = kept.iter().zip([1.0, 2.0, 3.0]).map(|(k, w)| k / w).collect();
    for p in &per_weight {
        assert!((p / per_weight[0] - 1.0).abs() < 0.05, "kept {kept:?} GiB: not 1:2:3");
    }
    // The 5 GiB critical one and 5% headroom leave 8 × 0.95 − 5 = 2.6 GiB.
    let total: f64 = kept.iter().sum();
    assert!((total - 2.6).abs() < 0.1, "kept {total} GiB in all");
}

#[test]
fn the_kernel_alone_takes_from_each_in_proportion_to_its_size() {
    let kept = weights_under_pressure(ReclaimerConfig::None {});
    for k in &kept {
        assert!((k / kept[0] - 1.0).abs() < 0.02, "kept {kept:?} GiB: not equal");
    }
    // No headroom: exactly the overflow, 8 − 5 = 3 GiB left.
    let total: f64 = kept.iter().sum();
    assert!((total - 3.0).abs() < 0.05, "kept {total} GiB in all");
}
