//! The engine applies the core policy's actions as a node would: these runs
//! check the invariants every scenario relies on, on small hand-made workloads.

use overbook_core::config::PolicyConfig;
use overbook_core::detect::DetectorConfig;
use overbook_core::launch::AdmissionMode;
use overbook_core::preempt::{PreemptorConfig, StoreBandwidth};
use overbook_core::rank::RankerConfig;
use overbook_core::{Bytes, Class, JobId, Time};
use overbook_sim::engine::{Engine, KillDelay, SimConfig, ThrashModel};
use overbook_sim::outcome::RunResult;
use overbook_sim::tally::Outcomes;
use overbook_sim::workload::{MemProfile, TaskKey, TaskSpec, WorkloadEvent, WorkloadStream};
use rand::RngCore;
use std::time::Duration;

const GIB: Bytes = 1 << 30;

/// Speed falls with the square of the overflow: steep, like the calibration.
struct Steep;
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

struct Fixed(Duration);
impl KillDelay for Fixed {
    fn sample(&self, _: &mut dyn RngCore) -> Duration {
        self.0
    }
}

fn config(policy: PolicyConfig, nodes: usize) -> SimConfig {
    SimConfig {
        nodes,
        node_memory: 8 * GIB,
        node_swap: 8 * GIB,
        policy,
        store: StoreBandwidth { write: 1e9, read: 1e9, net: 1e9 },
        dump_overhead: Duration::from_millis(100),
        can_checkpoint: true,
        can_incremental: true,
        shared_store: false,
        swap_bandwidth: 5e8,
        sample_period: Duration::from_millis(500),
        max_attempts: 4,
        retry_backoff: Duration::from_secs(10),
        stop_submissions_at: Time::from_secs(10_000),
        end: Time::from_secs(100_000),
        seed: 7,
    }
}

fn task(
    key: u64,
    class: Class,
    at: u64,
    work: u64,
    profile: MemProfile,
    request: Bytes,
) -> WorkloadEvent {
    WorkloadEvent::Submit(TaskSpec {
        key: TaskKey(key),
        job: JobId(key),
        submit: Time::from_secs(at),
        class,
        priority: if class == Class::Production { 10 } else { 1 },
        request,
        cpus: 1.0,
        work: Some(Duration::from_secs(work)),
        profile,
        weight: 1,
        pauses: Vec::new(),
    })
}

fn stream(events: Vec<WorkloadEvent>) -> WorkloadStream {
    Box::new(events.into_iter().map(Ok))
}

fn charon() -> PolicyConfig {
    PolicyConfig {
        detector: DetectorConfig::ConstraintThrashing { tolerance: 3.0, min_rate: 1.0 },
        ranker: RankerConfig::MemoryPerRuntime {},
        ..PolicyConfig::default()
    }
}

fn run(cfg: SimConfig, events: Vec<WorkloadEvent>) -> RunResult {
    let killer = Fixed(Duration::from_millis(50));
    let engine = Engine::new(cfg, &Steep, &killer).expect("valid config").keeping(Outcomes::Kept);
    engine.run("test", stream(events), &mut ()).expect("run")
}

/// A production service that grows into memory best-effort work borrowed.
fn squeeze() -> Vec<WorkloadEvent> {
    let prod = MemProfile::from_points(vec![
        (Duration::ZERO, 2 * GIB),
        (Duration::from_secs(100), 6 * GIB),
    ]);
    vec![
        task(1, Class::Production, 0, 1000, prod, 6 * GIB),
        task(2, Class::BestEffort, 1, 500, MemProfile::flat(3 * GIB), 3 * GIB),
        task(3, Class::BestEffort, 2, 500, MemProfile::flat(2 * GIB), 2 * GIB),
        task(4, Class::Critical, 3, 800, MemProfile::flat(GIB / 4), GIB / 4),
    ]
}

#[test]
fn unloaded_tasks_finish_in_exactly_their_work() {
    let events = vec![
        task(1, Class::BestEffort, 0, 100, MemProfile::flat(GIB), GIB),
        task(2, Class::Production, 5, 50, MemProfile::flat(GIB), GIB),
    ];
    let r = run(config(charon(), 1), events);
    assert_eq!(r.outcomes.len(), 2);
    for o in &r.outcomes {
        assert!(o.completed, "{o:?}");
        let start = o.first_start.get().expect("started");
        let took = o.end.get().expect("ended") - start;
        assert!((took.as_secs_f64() - o.work.as_secs_f64()).abs() < 1e-3, "{o:?}");
        assert_eq!(o.kills, 0);
    }
    assert_eq!(r.counters.thrashing_node_seconds, 0.0);
}

#[test]
fn only_best_effort_pays_when_production_grows() {
    let r = run(config(charon(), 1), squeeze());
    let kills: u32 = r.outcomes.iter().map(|o| o.kills).sum();
    assert!(kills >= 1, "production grew past memory, someone must pay: {:#?}", r.outcomes);
    for o in r.outcomes.iter().filter(|o| o.class != Class::BestEffort) {
        assert_eq!(o.kills + o.suspensions + o.checkpoints, 0, "{o:?}");
        assert!(o.completed, "{o:?}");
    }
    assert!(r.outcomes.iter().all(|o| o.completed), "killed tasks are retried: {:#?}", r.outcomes);
}

#[test]
fn checkpointed_work_is_kept() {
    let mut policy = charon();
    policy.preemptor = PreemptorConfig::Checkpoint { incremental: true };
    let r = run(config(policy, 1), squeeze());
    let be: Vec<_> = r.outcomes.iter().filter(|o| o.class == Class::BestEffort).collect();
    assert!(be.iter().any(|o| o.checkpoints > 0), "{be:#?}");
    for o in &be {
        assert_eq!(o.kills, 0, "{o:?}");
        assert_eq!(o.lost_work.get(), Duration::ZERO, "a checkpoint keeps the work: {o:?}");
        assert!(o.completed, "{o:?}");
        if o.checkpoints > 0 {
            assert!(o.checkpoint_time.get() > Duration::ZERO, "{o:?}");
        }
    }
    assert!(r.counters.checkpoint_bytes_written > 0);
    assert!(r.counters.checkpoint_bytes_read > 0);
}

#[test]
fn static_reservation_never_oversubscribes() {
    let policy = PolicyConfig {
        detector: DetectorConfig::Static {},
        launcher: overbook_core::launch::LaunchConfig {
            admission: AdmissionMode::Reserved,
            // Room in the queue for every task, so none is refused.
            queue_limit: 40,
            ..Default::default()
        },
        ..PolicyConfig::default()
    };
    // Usage never exceeds requests, so reserving requests means no thrashing.
    let events =
        (0..40).map(|i| task(i, Class::BestEffort, i, 200, MemProfile::flat(GIB), GIB)).collect();
    let r = run(config(policy, 2), events);
    assert_eq!(r.counters.thrashing_node_seconds, 0.0);
    assert!(r.outcomes.iter().all(|o| o.completed && o.kills == 0));
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let a = run(config(charon(), 1), squeeze());
    let b = run(config(charon(), 1), squeeze());
    assert_eq!(a, b);
}

#[test]
fn invalid_config_is_refused_with_its_key() {
    let mut cfg = config(charon(), 1);
    cfg.nodes = 0;
    let err = Engine::new(cfg, &Steep, &Fixed(Duration::ZERO)).unwrap_err().to_string();
    assert!(err.contains("nodes"), "{err}");
    let mut cfg = config(charon(), 1);
    cfg.store.write = f64::NAN;
    let err = Engine::new(cfg, &Steep, &Fixed(Duration::ZERO)).unwrap_err().to_string();
    assert!(err.contains("store.write"), "{err}");
}

#[test]
fn a_bad_trace_row_stops_the_run_with_its_error() {
    let events: WorkloadStream = Box::new(
        vec![
            Ok(task(1, Class::BestEffort, 0, 10, MemProfile::flat(GIB), GIB)),
            Err(overbook_sim::workload::TraceError::BadRow {
                path: "t.csv".into(),
                line: 7,
                problem: "bad".into(),
            }),
        ]
        .into_iter(),
    );
    let engine = Engine::new(config(charon(), 1), &Steep, &Fixed(Duration::ZERO)).expect("valid");
    let err = engine.run("t", events, &mut ()).unwrap_err().to_string();
    assert!(err.contains("t.csv:7"), "{err}");
}

#[test]
fn production_waits_for_a_node_that_can_guarantee_its_reservation() {
    // Six 5 GiB production tasks on two 8 GiB nodes: one fits per node, the
    // rest wait their turn instead of overfilling a node.
    let events = (0..6)
        .map(|i| task(i, Class::Production, 0, 100, MemProfile::flat(5 * GIB), 5 * GIB))
        .collect();
    let r = run(config(charon(), 2), events);
    assert_eq!(r.counters.thrashing_node_seconds, 0.0);
    assert!(r.outcomes.iter().all(|o| o.completed && o.kills == 0), "{:#?}", r.outcomes);
    let mut starts: Vec<u64> =
        r.outcomes.iter().filter_map(|o| o.first_start.get()).map(|t| t.0 / 1_000_000).collect();
    starts.sort_unstable();
    assert_eq!(starts, vec![0, 0, 100, 100, 200, 200], "two at a time, first come first served");
}

#[test]
fn production_larger_than_any_node_is_given_up_at_once() {
    let events = vec![task(1, Class::Production, 0, 100, MemProfile::flat(9 * GIB), 9 * GIB)];
    let r = run(config(charon(), 2), events);
    assert!(r.outcomes.iter().all(|o| !o.completed && o.first_start.get().is_none()));
}

// ---------------------------------------------------------------- trace deaths

/// A task whose work the trace tells only at its end (or never).
fn traced(key: u64, class: Class, at: u64, mem: Bytes) -> WorkloadEvent {
    let WorkloadEvent::Submit(mut spec) = task(key, class, at, 0, MemProfile::flat(mem), mem)
    else {
        unreachable!()
    };
    spec.work = None;
    WorkloadEvent::Submit(spec)
}

fn death(key: u64, at: u64) -> WorkloadEvent {
    WorkloadEvent::Death { task: TaskKey(key), at: Time::from_secs(at) }
}

fn reserved() -> PolicyConfig {
    PolicyConfig {
        detector: DetectorConfig::Static {},
        launcher: overbook_core::launch::LaunchConfig {
            admission: AdmissionMode::Reserved,
            queue_limit: 40,
            ..Default::default()
        },
        ..PolicyConfig::default()
    }
}

#[test]
fn a_death_gives_its_memory_to_the_next_task() {
    for class in [Class::BestEffort, Class::Production] {
        // A holds 6 of 8 GiB and never finishes in the trace; B needs 6 too.
        let events = vec![
            traced(1, class, 0, 6 * GIB),
            task(2, class, 1, 100, MemProfile::flat(6 * GIB), 6 * GIB),
            death(1, 50),
        ];
        let r = run(config(reserved(), 1), events);
        let a = r.outcomes.iter().find(|o| o.key == TaskKey(1)).expect("A");
        let b = r.outcomes.iter().find(|o| o.key == TaskKey(2)).expect("B");
        assert!(a.trace_death && !a.completed, "{a:?}");
        assert_eq!((a.kills, a.lost_work.get()), (0, Duration::ZERO), "not the policy's: {a:?}");
        assert_eq!(a.end.get(), Some(Time::from_secs(50)));
        assert_eq!(b.first_start.get(), Some(Time::from_secs(50)), "{class:?}: {b:?}");
        assert!(b.completed && !b.trace_death, "{b:?}");
        assert_eq!(b.end.get(), Some(Time::from_secs(150)));
        assert_eq!(r.counters.trace_deaths, 1);
        assert_eq!(r.counters.thrashing_node_seconds, 0.0);
    }
}

#[test]
fn a_queued_death_never_runs_and_a_resubmission_is_a_new_attempt() {
    for class in [Class::BestEffort, Class::Production] {
        let events = vec![
            traced(1, class, 0, 6 * GIB),
            traced(2, class, 1, 6 * GIB),
            death(2, 10),
            // The same key again: a new attempt, which runs once A is done.
            traced(2, class, 20, 6 * GIB),
            WorkloadEvent::Finish {
                task: TaskKey(1),
                at: Time::from_secs(100),
                work: Duration::from_secs(100),
            },
            WorkloadEvent::Finish {
                task: TaskKey(2),
                at: Time::from_secs(200),
                work: Duration::from_secs(50),
            },
        ];
        let r = run(config(reserved(), 1), events);
        let twos: Vec<_> = r.outcomes.iter().filter(|o| o.key == TaskKey(2)).collect();
        assert_eq!(twos.len(), 2, "{class:?}: {twos:#?}");
        assert!(twos[0].trace_death && twos[0].first_start.get().is_none(), "{:?}", twos[0]);
        assert_eq!(twos[0].end.get(), Some(Time::from_secs(10)));
        assert!(twos[1].completed && !twos[1].trace_death, "{:?}", twos[1]);
        assert_eq!(twos[1].first_start.get(), Some(Time::from_secs(100)));
        assert_eq!(r.counters.trace_deaths, 1);
        let one = r.outcomes.iter().find(|o| o.key == TaskKey(1)).expect("A");
        assert!(one.completed);
    }
}

#[test]
fn submissions_after_the_horizon_are_counted() {
    let mut cfg = config(reserved(), 1);
    cfg.stop_submissions_at = Time::from_secs(5);
    let events = vec![
        task(1, Class::BestEffort, 0, 10, MemProfile::flat(GIB), GIB),
        task(2, Class::BestEffort, 6, 10, MemProfile::flat(GIB), GIB),
        death(2, 7),
    ];
    let r = run(cfg, events);
    assert_eq!((r.outcomes.len(), r.counters.after_horizon, r.counters.trace_deaths), (1, 1, 0));
}
