//! A run that keeps only its tally reports what a run that keeps every
//! task's outcome reports, and the tally agrees with the outcomes it kept.

use overbook_core::Class;
use overbook_sim::outcome::RunResult;
use overbook_sim::report::{GroupKey, RunSummary};
use overbook_sim::scenario::{execute, Scenario};
use overbook_sim::tally::Outcomes;

fn small(name: &str) -> Scenario {
    let overrides =
        ["cluster.nodes=10", "sim.horizon=\"2h\"", "sim.drain=\"2h\""].map(String::from);
    Scenario::load(name, &overrides).expect("built in")
}

#[test]
fn a_tallied_run_reports_what_a_run_keeping_every_outcome_reports() {
    for name in ["default", "checkpoint-storage", "reclaim-consolidation"] {
        let scenario = small(name);
        for run in &scenario.runs {
            let tallied = execute(run, Outcomes::Tallied, &mut ()).expect("runs");
            let kept = execute(run, Outcomes::Kept, &mut ()).expect("runs");
            assert!(tallied.outcomes.is_empty(), "{name}/{}: nothing kept", run.name);
            assert_eq!(kept.outcomes.len(), kept.tally.all.tasks, "{name}/{}", run.name);
            assert!(kept.tally.all.tasks > 0, "{name}/{}: tasks ran", run.name);
            assert_eq!(
                RunSummary::new(&tallied, 32),
                RunSummary::new(&kept, 32),
                "{name}/{}",
                run.name
            );
            same_counts(&kept, &format!("{name}/{}", run.name));
        }
    }
}

/// The tally gathered as tasks left counts what the kept outcomes, tallied
/// again in submission order, count (sums of floats may differ in their
/// last bits: they were added in another order).
fn same_counts(kept: &RunResult, what: &str) {
    let again = RunResult::of_outcomes(&kept.variant, kept.counters.clone(), kept.outcomes.clone());
    let (a, b) = (RunSummary::new(kept, 32), RunSummary::new(&again, 32));
    assert_eq!((a.tasks, a.jobs, &a.actions), (b.tasks, b.jobs, &b.actions), "{what}");
    for key in GroupKey::ALL {
        let (Some(x), Some(y)) = (a.group(key), b.group(key)) else {
            assert_eq!(a.group(key).is_some(), b.group(key).is_some(), "{what}: {}", key.name());
            continue;
        };
        assert_eq!(
            (x.tasks, x.jobs, x.completed_jobs, x.jct_p50, x.jct_p99, &x.actions),
            (y.tasks, y.jobs, y.completed_jobs, y.jct_p50, y.jct_p99, &y.actions),
            "{what}: {}",
            key.name()
        );
        assert_eq!(x.thrashing_task_hours, y.thrashing_task_hours, "{what}: exact sums");
        let close = |p: f64, q: f64| (p - q).abs() <= 1e-9 * p.abs().max(q.abs()).max(1.0);
        assert!(close(x.wasted_cpu_hours, y.wasted_cpu_hours), "{what}: {}", key.name());
    }
    assert_eq!(kept.tally.has(Class::Critical), again.tally.has(Class::Critical), "{what}");
}
