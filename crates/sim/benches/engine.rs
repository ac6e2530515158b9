//! Simulator speed: simulated events per second on the default scenario's
//! Charon variant (a small cluster, so one iteration takes well under a second),
//! and the workload generator alone.
//!
//! `cargo bench -p overbook-sim --bench engine`; the events-per-second figure
//! is criterion's "thrpt" line (elements are engine events).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use overbook_sim::generate::Generator;
use overbook_sim::scenario::{self, Scenario, WorkloadSpec};
use overbook_sim::tally::Outcomes;
use std::hint::black_box;

const SMALL: [&str; 3] = ["cluster.nodes=20", "sim.horizon=\"2h\"", "sim.drain=\"1h\""];

fn scenario() -> Scenario {
    let overrides: Vec<String> = SMALL.iter().map(|s| s.to_string()).collect();
    match Scenario::load("default", &overrides) {
        Ok(s) => s,
        Err(e) => panic!("the default scenario does not load: {e}"),
    }
}

fn engine(c: &mut Criterion) {
    let s = scenario();
    let mut group = c.benchmark_group("engine");
    group.sample_size(10);
    for variant in ["mercury", "charon", "overbook-adaptive"] {
        let Some(run) = s.runs.iter().find(|r| r.variant == variant) else {
            panic!("the default scenario has no {variant} variant");
        };
        let events = match scenario::execute(run, Outcomes::Tallied, &mut ()) {
            Ok(r) => r.counters.events,
            Err(e) => panic!("{variant}: {e}"),
        };
        group.throughput(Throughput::Elements(events));
        group.bench_function(variant, |b| {
            b.iter(|| match scenario::execute(black_box(run), Outcomes::Tallied, &mut ()) {
                Ok(r) => black_box(r.counters.events),
                Err(e) => panic!("{variant}: {e}"),
            })
        });
    }
    group.finish();
}

fn generator(c: &mut Criterion) {
    let s = scenario();
    let run = &s.runs[0];
    let WorkloadSpec::Generate(table) = &run.spec.workload else {
        panic!("the default scenario does not use the generator");
    };
    let count = || match Generator::from_spec(table, &run.spec) {
        Ok(g) => g.count() as u64,
        Err(e) => panic!("generator: {e}"),
    };
    let mut group = c.benchmark_group("generator");
    group.sample_size(10);
    group.throughput(Throughput::Elements(count()));
    group.bench_function("default-tasks", |b| b.iter(|| black_box(count())));
    group.finish();
}

criterion_group!(benches, engine, generator);
criterion_main!(benches);
