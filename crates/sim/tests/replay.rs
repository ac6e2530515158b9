//! A trace replay says what it read and dropped: in its summary, in its
//! note line, and as an error when it ran nothing.

use overbook_sim::report::RunSummary;
use overbook_sim::scenario::{execute, RunError, Scenario};
use overbook_sim::tally::Outcomes;
use std::path::{Path, PathBuf};

mod shuffle;

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces").join(path)
}

fn scenario(format: &str, path: &Path, extra: &str) -> Scenario {
    let text = format!(
        "name = \"t\"\ntitle = \"t\"\n[base.cluster]\nnodes = 4\n{extra}\n[base.workload]\nkind = \"trace\"\n\
         format = \"{format}\"\npaths = [{path:?}]\n[[variants]]\nname = \"a\"\n"
    );
    Scenario::parse(&text, "t", &[]).expect("scenario")
}

fn summary(s: &Scenario) -> RunSummary {
    let run = &s.runs[0];
    RunSummary::new(&execute(run, Outcomes::Tallied, &mut ()).expect("runs"), 32)
}

#[test]
fn a_replay_counts_rows_read_unmatched_deaths_and_machines() {
    let s = summary(&scenario("google-2011", &fixture("google-2011/plain"), ""));
    let t = s.trace.as_ref().expect("a trace replay's counts");
    let rows = ["task_events", "task_usage"]
        .iter()
        .flat_map(|t| std::fs::read_dir(fixture("google-2011/plain").join(t)).expect("dir"))
        .map(|f| std::fs::read_to_string(f.expect("entry").path()).expect("read").lines().count())
        .sum::<usize>();
    assert_eq!(t.rows_read, rows as u64);
    assert_eq!((t.unmatched, t.after_horizon, t.trace_deaths), (0, 0, 2));
    assert!(t.trace_machines > 0, "{t:?}");
    let json = serde_json::to_value(&s).expect("json");
    for key in ["rows_read", "unmatched", "after_horizon", "trace_deaths", "trace_machines"] {
        assert!(json.get(key).is_some_and(|v| v.is_u64()), "summary.json lacks {key}: {json}");
    }
    // The window: from the first row (this fixture's is at 0), for the horizon.
    assert_eq!(json["trace_first_row_s"], 0.0, "{json}");
    assert_eq!(json["window_from_s"], 0.0, "{json}");
    assert!(json["horizon_s"].as_f64().is_some_and(|h| h > 0.0), "{json}");
}

#[test]
fn a_replay_that_runs_no_task_is_an_error_with_its_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The trace's first row finishes a task it never submitted; two tasks
    // come a day later: after the 6 h horizon from the first row.
    let late = dir.path().join("task_events.csv");
    std::fs::write(
        &late,
        "100000000000,,9,9,,4,u,2,10,0.5,0.25,0.01,0\n\
         200000000000,,1,0,,0,u,2,10,0.5,0.25,0.01,0\n\
         200000000000,,1,1,,0,u,2,10,0.5,0.25,0.01,0\n\
         200001000000,,1,0,7,1,u,2,10,0.5,0.25,0.01,0\n",
    )
    .expect("write");
    let err = execute(&scenario("google-2011", &late, "").runs[0], Outcomes::Tallied, &mut ())
        .expect_err("none ran");
    assert!(matches!(err, RunError::EmptyReplay { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the trace replay ran no task: 4 rows read, 0 skipped as bad, 1 unmatched, 0 tasks \
         submitted after the horizon (sim.horizon = 6h; the window starts 0s after the trace's \
         first row, at 100000 s on its clock (workload.from); its first event is at 1day 3h 46m \
         40s); raise sim.horizon to reach them"
    );

    let empty = dir.path().join("empty/task_events.csv");
    std::fs::create_dir_all(empty.parent().expect("dir")).expect("mkdir");
    std::fs::write(&empty, "").expect("write");
    let err = execute(&scenario("google-2011", &empty, "").runs[0], Outcomes::Tallied, &mut ())
        .expect_err("empty");
    assert!(err.to_string().contains("0 rows read"), "{err}");
    assert!(err.to_string().ends_with("the trace's files hold no rows"), "{err}");
}

/// summary.json of a google-2011 replay of `path` with `workload` settings.
fn summary_json(path: &Path, workload: &str) -> String {
    let text = format!(
        "name = \"t\"\ntitle = \"t\"\n[base]\nseed = 7\n[base.cluster]\nnodes = 4\n[base.workload]\n\
         kind = \"trace\"\nformat = \"google-2011\"\npaths = [{path:?}]\n{workload}\n\
         [[variants]]\nname = \"a\"\n"
    );
    let s = Scenario::parse(&text, "t", &[]).expect("scenario");
    serde_json::to_string_pretty(&summary(&s)).expect("json")
}

#[test]
fn shuffled_rows_give_the_summary_of_the_ordered_trace_in_memory_or_through_files() {
    let ordered = summary_json(&fixture("google-2011/plain"), "");
    let dir = tempfile::tempdir().expect("tempdir");
    let shuffled = dir.path().join("shuffled");
    std::fs::create_dir(&shuffled).expect("mkdir");
    shuffle::shuffled_copy(&fixture("google-2011/plain"), &shuffled, 3);
    assert_eq!(summary_json(&shuffled, ""), ordered, "sorted in memory");
    let spill = dir.path().join("spill");
    std::fs::create_dir(&spill).expect("mkdir");
    let small = format!("sort_memory = \"1KiB\"\nspill_dir = {spill:?}");
    assert_eq!(summary_json(&shuffled, &small), ordered, "sorted through files");
    assert_eq!(std::fs::read_dir(&spill).expect("dir").count(), 0, "temporary files removed");
}

/// A copy of fixture `from` in a temporary directory (its `broken` examples
/// left out), with `extra` files (name, text) added.
fn fixture_with(from: &str, extra: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = fixture(from);
    let mut stack = vec![src.clone()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("dir") {
            let path = entry.expect("entry").path();
            let to = dir.path().join(path.strip_prefix(&src).expect("inside"));
            if path.is_dir() {
                if path.ends_with("broken") {
                    continue;
                }
                std::fs::create_dir_all(&to).expect("mkdir");
                stack.push(path);
            } else {
                std::fs::copy(&path, &to).expect("copy");
            }
        }
    }
    for (name, text) in extra {
        let to = dir.path().join(name);
        std::fs::create_dir_all(to.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&to, text).expect("write");
    }
    dir
}

fn with_cluster(format: &str, path: &Path, cluster: &str) -> Result<RunSummary, RunError> {
    let text = format!(
        "name = \"t\"\ntitle = \"t\"\n[base.cluster]\nnodes = 4\n[base.workload]\nkind = \"trace\"\n\
         format = \"{format}\"\npaths = [{path:?}]\ncluster = \"{cluster}\"\n[[variants]]\nname = \"a\"\n"
    );
    let s = Scenario::parse(&text, "t", &[]).expect("scenario");
    Ok(RunSummary::new(&execute(&s.runs[0], Outcomes::Tallied, &mut ())?, 32))
}

#[test]
fn the_cluster_is_the_machine_tables_when_the_trace_has_one() {
    // Google 2011: twelve machines added, ten of half the largest's memory;
    // one added twice (after a REMOVE), one UPDATE: still twelve.
    let mut events = String::new();
    for m in 1..=12 {
        let mem = if m <= 10 { "0.5" } else { "1" };
        events.push_str(&format!("0,{m},0,p,0.5,{mem}\n"));
    }
    events.push_str("5000000,3,1,p,0.5,0.5\n6000000,3,0,p,0.5,0.5\n7000000,4,2,p,0.5,0.25\n");
    let trace = fixture_with("google-2011/plain", &[("machine_events/part-0.csv", &events)]);
    let s = with_cluster("google-2011", trace.path(), "auto").expect("runs");
    assert_eq!(s.nodes, 12, "the table's machines, not cluster.nodes");
    let m = s.trace.as_ref().and_then(|t| t.machine_table.clone()).expect("said");
    assert_eq!((m.machines, m.node_memory, m.with_that_memory), (12, 32 << 30, 10));
    assert!(m.sized_the_cluster);
    let json = serde_json::to_value(&s).expect("json");
    assert_eq!(json["machine_table"]["machines"], 12, "{json}");
    let s = with_cluster("google-2011", trace.path(), "settings").expect("runs");
    assert_eq!(s.nodes, 4, "the settings when asked (the default)");
    let m = s.trace.as_ref().and_then(|t| t.machine_table.clone()).expect("read still");
    assert!(!m.sized_the_cluster && m.machines == 12, "{m:?}");

    // No machine table: the settings, or an error when the trace's is asked for.
    let plain = fixture("google-2011/plain");
    assert_eq!(with_cluster("google-2011", &plain, "auto").expect("runs").nodes, 4);
    let err = with_cluster("google-2011", &plain, "trace").expect_err("none");
    assert_eq!(
        err.to_string(),
        "workload.cluster: \"trace\": no machine_events table among the trace's files"
    );

    // A bad row names its file and line.
    let bad = fixture_with(
        "google-2011/plain",
        &[("machine_events/part-0.csv", "0,1,0,p,0.5,0.5\n0,2,0,p,0.5,lots\n")],
    );
    let err = with_cluster("google-2011", bad.path(), "auto").expect_err("bad");
    let text = err.to_string();
    assert!(text.contains("part-0.csv:2") && text.contains("memory"), "{text}");
    // ... but fails no run it does not size; a machine with no memory given
    // counts, without a say in the nodes' memory.
    assert_eq!(with_cluster("google-2011", bad.path(), "settings").expect("runs").nodes, 4);
    let blank = fixture_with(
        "google-2011/plain",
        &[("machine_events/part-0.csv", "0,1,0,p,0.5,0.5\n0,2,0,p,,\n")],
    );
    let s = with_cluster("google-2011", blank.path(), "trace").expect("runs");
    let m = s.trace.as_ref().and_then(|t| t.machine_table.clone()).expect("said");
    assert_eq!((s.nodes, m.node_memory, m.with_that_memory), (2, 32 << 30, 1));
}

#[test]
fn alibaba_and_google_2019_machine_tables_size_the_cluster_too() {
    // Alibaba's machine_meta: ids as text, memory normalized to 100.
    let meta = "m_1,0,1,1,96,50,USING\nm_2,0,1,1,96,50,USING\nm_3,0,1,1,96,100,USING\nm_1,10,1,1,96,50,USING\n";
    let trace = fixture_with("alibaba-2018", &[("machine_meta.csv", meta)]);
    let s = with_cluster("alibaba-2018", trace.path(), "auto").expect("runs");
    assert_eq!(s.nodes, 3);
    let m = s.trace.as_ref().and_then(|t| t.machine_table.clone()).expect("said");
    assert_eq!((m.node_memory, m.with_that_memory), (32 << 30, 2));
    // Google 2019: a header, types by number or name, nested memory flattened.
    let events = "time,machine_id,type,capacity.cpus,capacity.memory\n0,7,1,0.5,0.25\n0,8,ADD,0.5,0.25\n9,7,2,,\n";
    let trace = fixture_with("google-2019/csv", &[("machine_events.csv", events)]);
    let s = with_cluster("google-2019", trace.path(), "auto").expect("runs");
    assert_eq!(s.nodes, 2);
    let m = s.trace.as_ref().and_then(|t| t.machine_table.clone()).expect("said");
    assert_eq!((m.node_memory, m.with_that_memory), (16 << 30, 2));
}
