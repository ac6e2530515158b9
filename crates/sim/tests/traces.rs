//! The trace readers on the fixtures of `tests/fixtures/traces` (written by
//! its `generate.py`, which prints the counts asserted here): every format
//! reads, in time order, with the tasks, classes and events the fixture
//! holds; every broken file fails naming its file and line, or is skipped
//! and counted; and no input, however garbled, makes a reader panic.

use overbook_core::{Bytes, Class, JobId, Time};
use overbook_sim::trace::{self, BadRowCounter, TraceFormat, TraceOptions};
use overbook_sim::workload::{TaskKey, TaskSpec, TraceError, WorkloadEvent};
use proptest::prelude::*;

mod shuffle;
use shuffle::shuffled_copy;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const MIB: Bytes = 1 << 20;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces").join(rel)
}

fn opts() -> TraceOptions {
    TraceOptions { memory_scale: 64 << 30, ..TraceOptions::default() }
}

fn skipping() -> TraceOptions {
    TraceOptions { skip_bad_rows: true, ..opts() }
}

/// Every event of a trace, which must read without error.
fn read(
    format: TraceFormat,
    paths: &[PathBuf],
    opts: &TraceOptions,
) -> (Vec<WorkloadEvent>, Arc<BadRowCounter>) {
    let (stream, counter) = trace::open(format, paths, opts).expect("trace opens");
    let events = stream.collect::<Result<Vec<_>, _>>().expect("trace reads");
    (events, counter)
}

/// The error a trace stops with.
fn first_error(format: TraceFormat, paths: &[PathBuf], opts: &TraceOptions) -> TraceError {
    match trace::open(format, paths, opts) {
        Err(e) => e,
        Ok((stream, _)) => stream.filter_map(Result::err).next().expect("the trace fails"),
    }
}

fn assert_bad_row(err: &TraceError, file_ends: &str, want_line: u64, says: &str) {
    match err {
        TraceError::BadRow { path, line, problem } => {
            assert!(path.ends_with(file_ends), "{err}");
            assert_eq!(*line, want_line, "{err}");
            assert!(problem.contains(says), "{err}");
        }
        other => panic!("expected a bad row, got {other}"),
    }
}

#[derive(Debug, Default, PartialEq)]
struct Summary {
    tasks: usize,
    by_class: HashMap<Class, usize>,
    usage: usize,
    finishes: usize,
    deaths: usize,
}

/// Check what every stream promises and count what it holds: events in
/// time order; each task submitted once, before its usage and its finish;
/// nothing about a task after its finish.
fn summarize(events: &[WorkloadEvent]) -> (Summary, HashMap<TaskKey, TaskSpec>) {
    let mut s = Summary::default();
    let mut specs = HashMap::new();
    let mut finished = HashSet::new();
    let mut dead = HashSet::new();
    let mut last = Time::ZERO;
    for ev in events {
        assert!(ev.at() >= last, "{ev:?} goes back in time from {last}");
        last = ev.at();
        match ev {
            WorkloadEvent::Submit(spec) => {
                s.tasks += 1;
                *s.by_class.entry(spec.class).or_default() += 1;
                let again = specs.insert(spec.key, spec.clone());
                // Again only as a new attempt after a death.
                assert!(
                    again.is_none() || dead.remove(&spec.key),
                    "{:?} submitted twice while alive",
                    spec.key
                );
            }
            WorkloadEvent::Death { task, .. } => {
                s.deaths += 1;
                assert!(specs.contains_key(task), "death of an unknown task");
                assert!(!finished.contains(task), "{task:?} died after its finish");
                assert!(dead.insert(*task), "{task:?} died twice");
            }
            WorkloadEvent::Usage { task, at, .. } => {
                s.usage += 1;
                let spec = specs.get(task).expect("usage of a submitted task");
                assert!(*at >= spec.submit && !finished.contains(task), "{ev:?}");
                assert!(!dead.contains(task), "usage of a dead task: {ev:?}");
            }
            WorkloadEvent::Finish { task, .. } => {
                s.finishes += 1;
                assert!(specs.contains_key(task), "finish of an unknown task");
                assert!(finished.insert(*task), "{task:?} finished twice");
            }
        }
    }
    (s, specs)
}

fn count(s: &Summary, class: Class) -> usize {
    s.by_class.get(&class).copied().unwrap_or(0)
}

// ---------------------------------------------------------------- Google 2011

#[test]
fn google_2011_reads_its_jobs_usage_and_finishes() {
    let (events, counter) = read(TraceFormat::Google2011, &[fixture("google-2011/plain")], &opts());
    let (s, specs) = summarize(&events);
    // 20 tasks, one evicted and resubmitted (a new attempt), one killed.
    assert_eq!((s.tasks, s.finishes, s.usage, s.deaths), (21, 15, 109, 2));
    assert_eq!(count(&s, Class::Production), 6);
    assert_eq!(count(&s, Class::BestEffort), 15);
    assert_eq!((counter.bad_rows(), counter.late_rows(), counter.unmatched_rows()), (0, 0, 0));

    let priorities: HashSet<u8> = specs.values().map(|t| t.priority).collect();
    assert_eq!(priorities, HashSet::from([0, 4, 9, 11]));
    let middle = specs.values().find(|t| t.priority == 4).expect("a middle-band task");
    assert_eq!(middle.class, Class::BestEffort, "004's middle band is best-effort");
    assert_eq!(middle.job, JobId(6252000002));
    assert_eq!(
        middle.request,
        overbook_core::convert::to_u64((0.0239 * (64u64 << 30) as f64).round())
    );
    assert!(specs.values().all(|t| t.work.is_none() && t.profile.is_empty()));
}

#[test]
fn google_2011_an_evicted_task_finishes_once_with_its_last_run() {
    let (events, _) = read(TraceFormat::Google2011, &[fixture("google-2011/plain")], &opts());
    let (_, specs) = summarize(&events);
    let evicted: Vec<TaskKey> =
        specs.values().filter(|t| t.job == JobId(6251900001)).map(|t| t.key).collect();
    let works: Vec<Duration> = events
        .iter()
        .filter_map(|e| match e {
            WorkloadEvent::Finish { task, work, .. } if evicted.contains(task) => Some(*work),
            _ => None,
        })
        .collect();
    assert_eq!(works.len(), 8);
    // Scheduled again at 1100 s, finished at 2000 s; the others ran from
    // 705 s to 1500 s plus 30 s per index.
    assert!(works.contains(&Duration::from_secs(900)), "{works:?}");
    assert!(works.contains(&Duration::from_secs(795)), "{works:?}");
}

#[test]
fn google_2011_gzip_part_files_read_the_same_as_plain() {
    let (plain, _) = read(TraceFormat::Google2011, &[fixture("google-2011/plain")], &opts());
    let gz = [
        fixture("google-2011/gz/task_events"),
        fixture("google-2011/gz/task_usage/part-00000-of-00002.csv.gz"),
        fixture("google-2011/gz/task_usage/part-00001-of-00002.csv.gz"),
    ];
    let (gz, _) = read(TraceFormat::Google2011, &gz, &opts());
    assert_eq!(plain, gz);
}

#[test]
fn google_2011_without_usage_tasks_hold_their_request() {
    let (events, _) =
        read(TraceFormat::Google2011, &[fixture("google-2011/plain/task_events")], &opts());
    let (s, specs) = summarize(&events);
    assert_eq!((s.tasks, s.usage, s.deaths), (21, 0, 2));
    assert!(specs.values().all(|t| t.profile.peak() == t.request));
}

#[test]
fn google_2011_time_offset_moves_the_trace_start() {
    let shifted = TraceOptions { time_offset: Duration::from_secs(600), ..opts() };
    let (a, _) = read(TraceFormat::Google2011, &[fixture("google-2011/plain")], &opts());
    let (b, _) = read(TraceFormat::Google2011, &[fixture("google-2011/plain")], &shifted);
    let first_usage = |evs: &[WorkloadEvent]| {
        evs.iter().find(|e| matches!(e, WorkloadEvent::Usage { .. })).map(WorkloadEvent::at)
    };
    assert_eq!(first_usage(&a), Some(Time::from_secs(600)));
    assert_eq!(first_usage(&b), Some(Time::ZERO));
    assert_eq!(a.len(), b.len());
}

#[test]
fn google_2011_broken_rows_name_file_and_line_or_are_counted() {
    let broken = [fixture("google-2011/broken")];
    let err = first_error(TraceFormat::Google2011, &broken, &opts());
    assert_bad_row(&err, "task_events/part-00000-of-00001.csv", 4, "expected 13 columns");

    let (events, counter) = read(TraceFormat::Google2011, &broken, &skipping());
    assert_eq!(counter.bad_rows(), 4);
    let example = counter.first_bad_row().expect("an example");
    assert!(example.contains("part-00000-of-00001.csv:4:"), "{example}");
    let (s, _) = summarize(&events);
    assert_eq!(s.tasks, 6, "eight submissions, two of them broken");
}

#[test]
fn google_2011_each_bad_field_is_its_own_problem() {
    let events = [fixture("google-2011/broken/task_events")];
    let (_, counter) = read(TraceFormat::Google2011, &events, &skipping());
    assert_eq!(counter.bad_rows(), 3);

    let usage =
        [fixture("google-2011/plain/task_events"), fixture("google-2011/broken/task_usage")];
    let err = first_error(TraceFormat::Google2011, &usage, &opts());
    assert_bad_row(&err, "task_usage/part-00000-of-00001.csv", 6, "end time");
}

// ---------------------------------------------------------------- Google 2019

#[test]
fn google_2019_json_export_reads_its_instances() {
    let (events, counter) = read(TraceFormat::Google2019, &[fixture("google-2019/json")], &opts());
    let (s, specs) = summarize(&events);
    assert_eq!((s.tasks, s.finishes, s.usage, s.deaths), (14, 9, 72, 1));
    assert_eq!(count(&s, Class::Production), 4);
    assert_eq!(count(&s, Class::BestEffort), 10, "an evicted instance resubmitted");
    assert_eq!(counter.unmatched_rows(), 0, "alloc-set rows are skipped, not unmatched");
    let priorities: HashSet<u8> = specs.values().map(|t| t.priority).collect();
    assert_eq!(priorities, HashSet::from([0, 2, 9, 10]));
}

#[test]
fn google_2019_csv_export_reads_the_same_as_json() {
    let (json, _) = read(TraceFormat::Google2019, &[fixture("google-2019/json")], &opts());
    let (csv, _) = read(TraceFormat::Google2019, &[fixture("google-2019/csv")], &opts());
    assert_eq!(json, csv);
}

#[test]
fn google_2019_broken_rows_name_file_and_line_or_are_counted() {
    let broken = [fixture("google-2019/broken")];
    let err = first_error(TraceFormat::Google2019, &broken, &opts());
    assert_bad_row(&err, "instance_events-000000000000.json", 3, "not JSON");
    let (events, counter) = read(TraceFormat::Google2019, &broken, &skipping());
    assert_eq!(counter.bad_rows(), 2);
    let (s, specs) = summarize(&events);
    assert_eq!(s.tasks, 3);
    // No usage table: each instance holds its request.
    assert!(specs.values().all(|t| t.profile.peak() == t.request));
}

// ---------------------------------------------------------------- Alibaba 2018

#[test]
fn alibaba_2018_reads_batch_instances_and_containers() {
    // Named one by one: the broken/ directory beside them is another trace.
    let files: Vec<PathBuf> = ["batch_task", "batch_instance", "container_meta", "container_usage"]
        .iter()
        .map(|t| fixture(&format!("alibaba-2018/{t}.csv")))
        .collect();
    let (events, counter) = read(TraceFormat::Alibaba2018, &files, &opts());
    let (s, specs) = summarize(&events);
    assert_eq!(count(&s, Class::BestEffort), 12);
    assert_eq!(count(&s, Class::Production), 5);
    assert_eq!((s.finishes, s.usage), (1, 31));
    assert_eq!(counter.unmatched_rows(), 0);

    let batch: Vec<&TaskSpec> = specs.values().filter(|t| t.class == Class::BestEffort).collect();
    assert_eq!(batch.iter().filter(|t| t.work.is_none()).count(), 1, "one still running");
    assert!(batch.iter().all(|t| t.priority == 0));
    // Tasks of j_1001's M1 request its plan_mem of 0.39 (of 100).
    let scale = (64u64 << 30) as f64;
    let m1 = overbook_core::convert::to_u64((0.39 / 100.0 * scale).round());
    assert_eq!(batch.iter().filter(|t| t.request == m1).count(), 3);
    let containers: Vec<&TaskSpec> =
        specs.values().filter(|t| t.class == Class::Production).collect();
    assert!(containers.iter().all(|t| t.priority == 9 && t.work.is_none()));
    assert_eq!(containers.iter().map(|t| t.job).collect::<HashSet<_>>().len(), 2);
}

#[test]
fn alibaba_2018_broken_rows_name_file_and_line_or_are_counted() {
    let broken = [fixture("alibaba-2018/broken")];
    let err = first_error(TraceFormat::Alibaba2018, &broken, &opts());
    assert_bad_row(&err, "broken/batch_instance.csv", 2, "expected 14 columns");
    let (events, counter) = read(TraceFormat::Alibaba2018, &broken, &skipping());
    assert_eq!(counter.bad_rows(), 3);
    let (s, _) = summarize(&events);
    assert_eq!(s.tasks, 2, "the waiting row is skipped, three are broken");
}

// ---------------------------------------------------------------- Charon-SLS

#[test]
fn charon_sls_reads_jobs_of_containers_from_an_array() {
    let (events, _) = read(TraceFormat::CharonSls, &[fixture("charon-sls/array")], &opts());
    let (s, specs) = summarize(&events);
    assert_eq!(s.tasks, 10);
    assert_eq!(
        (count(&s, Class::Critical), count(&s, Class::Production), count(&s, Class::BestEffort)),
        (2, 2, 6)
    );
    assert!(specs.values().all(|t| t.work.is_some()));
    // job 3's container 1 gives no request: its usage's peak is.
    let peak = specs
        .values()
        .find(|t| t.job == JobId(3) && t.class == Class::BestEffort && t.priority == 0)
        .expect("job 3's opportunistic container");
    assert_eq!(peak.request, 6100 * MIB);
    assert_eq!(peak.profile.at(Duration::from_secs(45)), 6100 * MIB);
}

#[test]
fn charon_sls_reads_lone_containers_from_json_lines() {
    let (events, _) = read(TraceFormat::CharonSls, &[fixture("charon-sls/lines")], &opts());
    let (s, specs) = summarize(&events);
    assert_eq!(s.tasks, 4);
    let job10: Vec<&TaskSpec> = specs.values().filter(|t| t.request == 2048 * MIB).collect();
    assert_eq!(job10.len(), 2);
    assert_eq!(job10[0].job, job10[1].job, "nested and dotted job.id agree");
}

#[test]
fn charon_sls_broken_rows_name_file_and_line_or_are_counted() {
    let broken = [fixture("charon-sls/broken")];
    let err = first_error(TraceFormat::CharonSls, &broken, &opts());
    assert_bad_row(&err, "containers.jsonl", 2, "\"gold\"");
    let (events, counter) = read(TraceFormat::CharonSls, &broken, &skipping());
    assert_eq!(counter.bad_rows(), 2);
    assert_eq!(summarize(&events).0.tasks, 2);
}

// ---------------------------------------------------------------- files

#[test]
fn a_missing_file_is_an_io_error_naming_it() {
    let missing = fixture("google-2011/nope/task_events.csv");
    match trace::open(TraceFormat::Google2011, std::slice::from_ref(&missing), &opts()) {
        Err(TraceError::Io { path, .. }) => assert_eq!(path, missing),
        Err(other) => panic!("expected an I/O error, got {other}"),
        Ok(_) => panic!("a missing file opened"),
    }
}

#[test]
fn a_truncated_gzip_is_an_io_error_and_a_false_gzip_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gz = std::fs::read(fixture("google-2011/gz/task_events/part-00000-of-00002.csv.gz"))
        .expect("fixture");
    let cut = dir.path().join("task_events-cut.csv.gz");
    std::fs::write(&cut, &gz[..gz.len() / 2]).expect("write");
    match first_error(TraceFormat::Google2011, std::slice::from_ref(&cut), &opts()) {
        TraceError::Io { path, .. } => assert_eq!(path, cut),
        other => panic!("expected an I/O error, got {other}"),
    }
    let fake = dir.path().join("task_events-fake.csv.gz");
    std::fs::write(&fake, "0,,1,0,,0,u,0,0,0.1,0.1,0,0\n").expect("write");
    let err = first_error(TraceFormat::Google2011, &[fake], &opts());
    assert!(err.to_string().ends_with("named .gz but is not gzip"), "{err}");
}

#[test]
fn files_of_no_table_and_formats_without_their_tables_are_refused() {
    let err = first_error(TraceFormat::Google2011, &[fixture("charon-sls/README.md")], &opts());
    assert!(matches!(err, TraceError::BadFile { .. }), "{err}");
    let err = first_error(TraceFormat::Google2019, &[fixture("google-2011/plain")], &opts());
    assert!(err.to_string().contains("no instance_events files"), "{err}");
    assert!("google-2018".parse::<TraceFormat>().is_err());
}

#[test]
fn rows_out_of_time_order_are_sorted_by_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let events = dir.path().join("task_events.csv");
    // Task 1 at 100 s, task 3 at 90 s, task 2 at 200 s, then task 4 at
    // 10 s, far back: all in their place, none late.
    let rows = [(100, 1), (90, 3), (200, 2), (10, 4)]
        .iter()
        .map(|(t, i)| format!("{},,7,{i},,0,u,0,0,0.1,0.1,0,0\n", t * 1_000_000))
        .collect::<String>();
    std::fs::write(&events, rows).expect("write");
    let (evs, counter) = read(TraceFormat::Google2011, &[events], &opts());
    let times: Vec<u64> = evs.iter().map(|e| e.at().as_micros() / 1_000_000).collect();
    assert_eq!(times, [10, 90, 100, 200]);
    assert_eq!((counter.late_rows(), counter.rows_read()), (0, 4));
}

/// The events of a trace, as text to compare.
fn events_text(format: TraceFormat, paths: &[PathBuf], opts: &TraceOptions) -> Vec<String> {
    let (evs, _) = read(format, paths, opts);
    evs.iter().map(|e| format!("{e:?}")).collect()
}

/// The same events, or the first that differs.
fn same(got: &[String], want: &[String], what: &str) {
    if let Some(i) = (0..got.len().min(want.len())).find(|&i| got[i] != want[i]) {
        panic!("{what}: event {i} differs:\n got {}\nwant {}", got[i], want[i]);
    }
    assert_eq!(got.len(), want.len(), "{what}: events");
}

#[test]
fn shuffled_rows_and_parts_replay_as_the_ordered_fixture() {
    for (format, rel) in [
        (TraceFormat::Google2011, "google-2011/plain"),
        (TraceFormat::Google2019, "google-2019/csv"),
        (TraceFormat::Google2019, "google-2019/json"),
        (TraceFormat::Alibaba2018, "alibaba-2018"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let from = fixture(rel);
        let from = if rel == "alibaba-2018" {
            // Only the tables, not the broken ones beside them.
            let tables = dir.path().join("src");
            std::fs::create_dir(&tables).expect("mkdir");
            for t in ["batch_task", "batch_instance", "container_meta", "container_usage"] {
                std::fs::copy(from.join(format!("{t}.csv")), tables.join(format!("{t}.csv")))
                    .expect("copy");
            }
            tables
        } else {
            from
        };
        let ordered = events_text(format, std::slice::from_ref(&from), &opts());
        let to = dir.path().join("shuffled");
        std::fs::create_dir(&to).expect("mkdir");
        shuffled_copy(&from, &to, 3);
        let got = events_text(format, std::slice::from_ref(&to), &opts());
        same(&got, &ordered, &format!("{rel}: shuffled rows"));
        // A budget of a few rows: sorted runs spilled and merged.
        let spill = tempfile::tempdir().expect("spill dir");
        let small = TraceOptions {
            sort_memory: 600,
            spill_dir: Some(spill.path().to_path_buf()),
            ..opts()
        };
        let (stream, counter) = trace::open(format, &[to], &small).expect("opens");
        let evs = stream.collect::<Result<Vec<_>, _>>().expect("reads");
        let got: Vec<String> = evs.iter().map(|e| format!("{e:?}")).collect();
        assert!(counter.spilled_runs() > 2, "{rel}: the small budget spills ({counter:?})");
        same(&got, &ordered, &format!("{rel}: a sort through files"));
        let left: Vec<_> = std::fs::read_dir(spill.path()).expect("dir").collect();
        assert!(left.is_empty(), "{rel}: temporary files left: {left:?}");
    }
}

#[test]
fn ordered_tables_over_the_budget_stream_without_spilling() {
    let spill = tempfile::tempdir().expect("spill dir");
    let small =
        TraceOptions { sort_memory: 600, spill_dir: Some(spill.path().to_path_buf()), ..opts() };
    let paths = [fixture("google-2011/plain")];
    let (evs, counter) = read(TraceFormat::Google2011, &paths, &small);
    let (ordered, plain) = read(TraceFormat::Google2011, &paths, &opts());
    assert_eq!(format!("{evs:?}"), format!("{ordered:?}"));
    assert_eq!(counter.spilled_runs(), 0);
    assert_eq!(counter.rows_read(), plain.rows_read(), "rows counted once");
    assert_eq!(counter.machines(), plain.machines());
    assert_eq!(std::fs::read_dir(spill.path()).expect("dir").count(), 0);
}

// ---------------------------------------------------------------- garbage in

/// Drain a trace of `files` (name, bytes), with and without skipping: it
/// may fail, it must not panic or go back in time.
fn drain(format: TraceFormat, files: &[(&str, Vec<u8>)]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut paths = Vec::new();
    for (name, bytes) in files {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("write");
        paths.push(path);
    }
    for skip in [false, true] {
        let o = TraceOptions { skip_bad_rows: skip, ..opts() };
        if let Ok((stream, _)) = trace::open(format, &paths, &o) {
            let mut last = Time::ZERO;
            for ev in stream.take(10_000) {
                let Ok(ev) = ev else { break };
                assert!(ev.at() >= last);
                last = ev.at();
            }
        }
    }
}

const TOKENS: &[&str] = &[
    "",
    "0",
    "1",
    "2",
    "3",
    "4",
    "5",
    "8",
    "9",
    "11",
    "120",
    "360",
    "-1",
    "-7",
    "101",
    "0.5",
    "0.01",
    "1e400",
    "NaN",
    "inf",
    "abc",
    "\"",
    "\"x\"",
    "{",
    "}",
    "[",
    "]",
    ":",
    "stopped",
    "Terminated",
    "SUBMIT",
    "9223372036854775807",
    "18446744073709551616",
    "j_1",
    "M1",
];

/// Lines of comma-separated tokens, mostly of a schema's column counts so
/// that rows get past the count check into the fields.
fn csv_lines() -> impl Strategy<Value = Vec<u8>> {
    let row = prop_oneof![
        Just(13usize),
        Just(20),
        Just(19),
        Just(9),
        Just(14),
        Just(8),
        Just(11),
        0usize..24
    ]
    .prop_flat_map(|n| proptest::collection::vec(proptest::sample::select(TOKENS), n))
    .prop_map(|fields| fields.join(","));
    proptest::collection::vec(row, 0..40).prop_map(|rows| rows.join("\n").into_bytes())
}

const NAMES: &[&str] = &[
    "time",
    "type",
    "collection_id",
    "instance_index",
    "priority",
    "collection_type",
    "resource_request",
    "memory",
    "cpus",
    "start_time",
    "end_time",
    "average_usage",
    "container.exetype",
    "container.start.ms",
    "container.duration.ms",
    "container.end.ms",
    "container.memory",
    "container.musage",
    "times",
    "mems",
    "job.tasks",
    "job.id",
    "job.start.ms",
    "container.id",
    "container.priority",
    "container",
];

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{json, Value};
    let leaf = prop_oneof![
        proptest::sample::select(TOKENS).prop_map(|t| json!(t)),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|x| json!(x)),
        (0u64..5000).prop_map(|n| json!(n)),
        proptest::sample::select(&["production", "best-effort", "critical", "gold"][..])
            .prop_map(|t| json!(t)),
        Just(Value::Null),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::btree_map(proptest::sample::select(NAMES), inner, 0..8).prop_map(
                |m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            ),
        ]
    })
}

fn json_lines() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(json_value(), 0..20)
        .prop_map(|vs| vs.iter().map(|v| v.to_string()).collect::<Vec<_>>().join("\n").into_bytes())
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..1024)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn google_2011_survives_garbage(a in bytes(), b in csv_lines(), c in csv_lines()) {
        drain(TraceFormat::Google2011, &[("task_events.csv", a), ("task_usage.csv", c.clone())]);
        drain(TraceFormat::Google2011, &[("task_events.csv", b), ("task_usage.csv", c)]);
    }

    #[test]
    fn google_2019_survives_garbage(a in bytes(), b in json_lines(), c in csv_lines()) {
        drain(TraceFormat::Google2019, &[("instance_events.json", a.clone()), ("instance_usage.csv", a)]);
        drain(TraceFormat::Google2019, &[("instance_events.json", b.clone()), ("instance_usage.json", b)]);
        let mut header = b"time,type,collection_id,instance_index,priority,collection_type,resource_request.memory\n".to_vec();
        header.extend(c);
        drain(TraceFormat::Google2019, &[("instance_events.csv", header)]);
    }

    #[test]
    fn alibaba_2018_survives_garbage(a in bytes(), b in csv_lines(), c in csv_lines()) {
        drain(TraceFormat::Alibaba2018, &[
            ("batch_task.csv", b.clone()), ("batch_instance.csv", c.clone()),
            ("container_meta.csv", b), ("container_usage.csv", c),
        ]);
        drain(TraceFormat::Alibaba2018, &[("batch_instance.csv", a.clone()), ("container_meta.csv", a)]);
    }

    #[test]
    fn charon_sls_survives_garbage(a in bytes(), b in json_lines(), v in proptest::collection::vec(json_value(), 0..10)) {
        drain(TraceFormat::CharonSls, &[("a.json", a)]);
        drain(TraceFormat::CharonSls, &[("b.jsonl", b)]);
        let array = serde_json::to_vec_pretty(&v).unwrap_or_default();
        drain(TraceFormat::CharonSls, &[("c.json", array.clone())]);
        // The same array cut short anywhere.
        let cut = array.len() / 2;
        drain(TraceFormat::CharonSls, &[("d.json", array[..cut].to_vec())]);
    }
}

#[test]
fn alibaba_2018_an_instance_over_without_an_end_dies_where_it_began() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("batch_instance.csv");
    std::fs::write(
        &path,
        "ins_1,M1,j_1,1,Failed,100,0,m_1,1,1,40,60,0.5,0.9\n\
         ins_2,M1,j_1,1,Terminated,110,200,m_1,1,1,40,60,0.5,0.9\n\
         ins_3,M1,j_1,1,Interrupted,120,90,m_2,1,1,40,60,0.5,0.9\n\
         ins_4,M1,j_1,1,Running,130,0,m_2,1,1,40,60,0.5,0.9\n",
    )
    .expect("write");
    let (events, _) = read(TraceFormat::Alibaba2018, &[path], &opts());
    let (s, _) = summarize(&events);
    assert_eq!((s.tasks, s.deaths), (4, 2), "{events:#?}");
    let deaths: Vec<Time> = events
        .iter()
        .filter(|e| matches!(e, WorkloadEvent::Death { .. }))
        .map(WorkloadEvent::at)
        .collect();
    assert_eq!(deaths, [Time::from_secs(100), Time::from_secs(120)]);
}

#[test]
fn google_2011_the_killed_task_dies_and_the_evicted_one_comes_back() {
    let (events, _) = read(TraceFormat::Google2011, &[fixture("google-2011/plain")], &opts());
    let died: Vec<TaskKey> = events
        .iter()
        .filter_map(|e| match e {
            WorkloadEvent::Death { task, .. } => Some(*task),
            _ => None,
        })
        .collect();
    assert_eq!(died.len(), 2);
    let submits = |k: TaskKey| {
        events.iter().filter(|e| matches!(e, WorkloadEvent::Submit(s) if s.key == k)).count()
    };
    let mut again: Vec<usize> = died.iter().map(|&k| submits(k)).collect();
    again.sort_unstable();
    assert_eq!(again, [1, 2], "the killed one is gone, the evicted one is a new attempt");
}

#[test]
fn every_format_counts_its_rows_and_the_machines_its_tasks_ran_on() {
    let alibaba: Vec<PathBuf> =
        ["batch_task", "batch_instance", "container_meta", "container_usage"]
            .iter()
            .map(|t| fixture(&format!("alibaba-2018/{t}.csv")))
            .collect();
    let cases = [
        (TraceFormat::Google2011, vec![fixture("google-2011/plain")]),
        (TraceFormat::Google2019, vec![fixture("google-2019/csv")]),
        (TraceFormat::Google2019, vec![fixture("google-2019/json")]),
        (TraceFormat::Alibaba2018, alibaba),
    ];
    let mut got = Vec::new();
    for (format, paths) in cases {
        let (_, counter) = read(format, &paths, &opts());
        got.push((format.as_str(), counter.rows_read(), counter.machines()));
    }
    // Every line but the CSV export's header is a row.
    assert_eq!(
        got,
        [
            ("google-2011", 169, 20),
            ("google-2019", 134, 17),
            ("google-2019", 134, 17),
            ("alibaba-2018", 56, 16)
        ]
    );
}

#[test]
fn a_byte_order_mark_changes_nothing_in_any_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (TraceFormat::Google2011, "google-2011/plain/task_events/part-00000-of-00002.csv"),
        (TraceFormat::Google2019, "google-2019/csv/instance_events-000000000000.csv"),
        (TraceFormat::Google2019, "google-2019/json/instance_events-000000000000.json"),
        (TraceFormat::Alibaba2018, "alibaba-2018/batch_instance.csv"),
    ];
    for (format, path) in cases {
        let plain = fixture(path);
        // Under its own table's directory, as the fixture is.
        let parent = plain.parent().and_then(Path::file_name).expect("a directory");
        let name = plain.file_name().expect("a file name");
        let marked = dir.path().join(format.as_str()).join(parent).join(name);
        std::fs::create_dir_all(marked.parent().expect("dir")).expect("mkdir");
        let mut text = b"\xef\xbb\xbf".to_vec();
        text.extend(std::fs::read(&plain).expect("read"));
        std::fs::write(&marked, text).expect("write");
        let (a, _) = read(format, &[plain], &opts());
        let (b, _) = read(format, &[marked], &opts());
        assert_eq!(a, b, "{path}");
    }
}

#[test]
fn a_bigquery_csv_without_its_header_is_refused_at_line_1_even_when_skipping() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = fixture("google-2019/csv/instance_events-000000000000.csv");
    let text = std::fs::read_to_string(&plain).expect("read");
    let headless = dir.path().join("instance_events-000000000000.csv");
    std::fs::write(&headless, text.split_once('\n').expect("a header").1).expect("write");
    for opts in [opts(), skipping()] {
        let err = first_error(TraceFormat::Google2019, std::slice::from_ref(&headless), &opts);
        assert!(matches!(err, TraceError::BadHeader { line: 1, .. }), "{err}");
        let want = format!("{}:1: expected a header row", headless.display());
        assert!(err.to_string().starts_with(&want), "{err}");
    }
}

// ---------------------------------------------------------------- windows

/// A google-2011 trace of four tasks (times in seconds), first row at 100 s:
/// A runs 110..1000 with usage at 110 and 400; B runs 110..200; C waits
/// from 250 and runs 600..700; D comes at 2000.
fn four_tasks(dir: &Path) -> Vec<PathBuf> {
    let ev = |t: u64, i: u64, kind: u64| {
        format!("{},,7,{i},5,{kind},u,0,0,0.1,0.1,0,0\n", t * 1_000_000)
    };
    let events: String = [
        (100, 0, 0),
        (100, 1, 0),
        (110, 0, 1),
        (110, 1, 1),
        (200, 1, 4),
        (250, 2, 0),
        (600, 2, 1),
        (700, 2, 4),
        (1000, 0, 4),
        (2000, 3, 0),
    ]
    .iter()
    .map(|&(t, i, k)| ev(t, i, k))
    .collect();
    let usage = |s: u64, mem: f64| {
        format!(
            "{},{},7,0,5,0.1,{mem},0,0,0,0,0,0,0,0,0,0,0,0,0\n",
            s * 1_000_000,
            (s + 290) * 1_000_000
        )
    };
    let paths = vec![dir.join("task_events.csv"), dir.join("task_usage.csv")];
    std::fs::write(&paths[0], events).expect("write");
    std::fs::write(&paths[1], usage(110, 0.1) + &usage(400, 0.2)).expect("write");
    paths
}

fn key_of(index: u64) -> TaskKey {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("task_events.csv");
    std::fs::write(&f, format!("1,,7,{index},,0,u,0,0,0.1,0.1,0,0\n")).expect("write");
    match read(TraceFormat::Google2011, &[f], &opts()).0.first() {
        Some(WorkloadEvent::Submit(s)) => s.key,
        other => panic!("no submit: {other:?}"),
    }
}

#[test]
fn a_window_in_the_middle_starts_the_tasks_alive_then_with_their_remaining_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = four_tasks(dir.path());
    let (all, _) = read(TraceFormat::Google2011, &paths, &opts());
    let mems: Vec<Bytes> = all
        .iter()
        .filter_map(|e| match e {
            WorkloadEvent::Usage { mem, .. } => Some(*mem),
            _ => None,
        })
        .collect();
    // From 200 s after the first row: the window starts at 300 s.
    let window = TraceOptions { window_from: Some(Duration::from_secs(200)), ..opts() };
    let (evs, _) = read(TraceFormat::Google2011, &paths, &window);
    let (a, c, d) = (key_of(0), key_of(2), key_of(3));
    let s = Duration::from_secs;
    let t = Time::from_secs;
    let got: Vec<String> = evs
        .iter()
        .map(|e| match e {
            WorkloadEvent::Submit(spec) => format!("submit {:?} at {:?}", spec.key, spec.submit),
            other => format!("{other:?}"),
        })
        .collect();
    let want = [
        format!("submit {a:?} at {:?}", Time::ZERO),
        format!(
            "{:?}",
            WorkloadEvent::Usage { task: a, at: Time::ZERO, offset: s(0), mem: mems[0] }
        ),
        format!("submit {c:?} at {:?}", Time::ZERO),
        format!("{:?}", WorkloadEvent::Usage { task: a, at: t(100), offset: s(100), mem: mems[1] }),
        format!("{:?}", WorkloadEvent::Finish { task: c, at: t(400), work: s(100) }),
        format!("{:?}", WorkloadEvent::Finish { task: a, at: t(700), work: s(700) }),
        format!("submit {d:?} at {:?}", t(1700)),
    ];
    assert_eq!(got, want, "B ended before the window: not replayed");
}

#[test]
fn the_default_window_starts_at_the_first_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = four_tasks(dir.path());
    let from_first = TraceOptions { window_from: Some(Duration::ZERO), ..opts() };
    let (evs, _) = read(TraceFormat::Google2011, &paths, &from_first);
    let (own, _) = read(TraceFormat::Google2011, &paths, &opts());
    assert_eq!(evs.len(), own.len());
    assert_eq!(evs[0].at(), Time::ZERO, "the first row, at 100 s, is time zero");
    for (w, o) in evs.iter().zip(&own) {
        assert_eq!(o.at().since(w.at()), Duration::from_secs(100), "{w:?} / {o:?}");
    }
}

#[test]
fn a_window_after_the_trace_is_an_error_naming_the_setting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = four_tasks(dir.path());
    let late = TraceOptions { window_from: Some(Duration::from_secs(86_400)), ..opts() };
    let err = first_error(TraceFormat::Google2011, &paths, &late);
    assert!(matches!(err, TraceError::Window(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "workload.from (--from) 1day: the window starts after the trace's last row, 31m 40s after its first"
    );
}

#[test]
fn a_container_running_at_the_window_start_keeps_its_remaining_work_and_profile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("containers.jsonl");
    // a: 0..500 s with memory samples every 100 s; b: 30..90 s, over before
    // the window; c: 200..260 s, after its start.
    std::fs::write(
        &file,
        r#"{"job.id": "j", "container.id": "a", "container.exetype": "production", "container.start.ms": 0, "container.duration.ms": 500000, "container.memory": 16384, "container.musage": {"times": [0, 100000, 200000, 300000, 400000], "mems": [4000, 9000, 12000, 15500, 11000]}}
{"job.id": "j", "container.id": "b", "container.exetype": "best-effort", "container.start.ms": 30000, "container.duration.ms": 60000, "container.memory": 2048}
{"job.id": "j", "container.id": "c", "container.exetype": "best-effort", "container.start.ms": 200000, "container.duration.ms": 60000, "container.memory": 2048}
"#,
    )
    .expect("write");
    let window = TraceOptions { window_from: Some(Duration::from_secs(150)), ..opts() };
    let (evs, _) = read(TraceFormat::CharonSls, &[file], &window);
    let specs: Vec<&TaskSpec> = evs
        .iter()
        .filter_map(|e| match e {
            WorkloadEvent::Submit(s) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(specs.len(), 2, "b ended before the window: {evs:?}");
    let (a, c) = (specs[0], specs[1]);
    assert_eq!((a.submit, a.work), (Time::ZERO, Some(Duration::from_secs(350))));
    let mib = |m: u64| m * MIB;
    let s = Duration::from_secs;
    assert_eq!(
        a.profile.to_points(),
        [(s(0), mib(9000)), (s(50), mib(12000)), (s(150), mib(15500)), (s(250), mib(11000))],
        "a's profile from 150 s on"
    );
    assert_eq!((c.submit, c.work), (Time::from_secs(50), Some(Duration::from_secs(60))));
}
