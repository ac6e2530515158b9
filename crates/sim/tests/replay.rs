//! A trace replay says what it read and dropped: in its summary, in its
//! note line, and as an error when it ran nothing.

use overbook_sim::report::RunSummary;
use overbook_sim::scenario::{execute, RunError, Scenario};
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
    RunSummary::new(&execute(run, &mut ()).expect("runs"), 32)
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
    let err = execute(&scenario("google-2011", &late, "").runs[0], &mut ()).expect_err("none ran");
    assert!(matches!(err, RunError::EmptyReplay { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the trace replay ran no task: 4 rows read, 0 skipped as bad, 1 unmatched, 0 tasks \
         submitted after the horizon (sim.horizon = 6h, workload.from = 0s: the window starts \
         0s after the trace's first row, at 100000 s on its clock; its first event is at 1day \
         3h 46m 40s); raise sim.horizon to reach them"
    );

    let empty = dir.path().join("empty/task_events.csv");
    std::fs::create_dir_all(empty.parent().expect("dir")).expect("mkdir");
    std::fs::write(&empty, "").expect("write");
    let err = execute(&scenario("google-2011", &empty, "").runs[0], &mut ()).expect_err("empty");
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
