//! `overbook sim` end to end through the real binary: outputs written, bad
//! input refused with a message that names the place.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn overbook(args: &[&str]) -> Output {
    match Command::new(env!("CARGO_BIN_EXE_overbook")).args(args).output() {
        Ok(o) => o,
        Err(e) => panic!("cannot run overbook: {e}"),
    }
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sim/tests/fixtures/traces")
}

#[test]
fn the_default_scenario_runs_small_and_writes_its_outputs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("out");
    let o = overbook(&[
        "sim",
        "--small",
        "--no-progress",
        "--no-plots",
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    for variant in ["mercury", "kuber", "charon", "overbook-adaptive"] {
        assert!(stdout.contains(variant), "{variant} missing from:\n{stdout}");
    }
    let summary = std::fs::read_to_string(out.join("summary.json")).expect("summary.json written");
    let json: serde_json::Value = serde_json::from_str(&summary).expect("summary.json parses");
    assert!(json.is_object());
    assert!(out.join("summary.csv").is_file());
}

#[test]
fn the_same_seed_gives_the_same_numbers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = |name: &str| {
        let out = dir.path().join(name);
        let o = overbook(&[
            "sim",
            "--small",
            "--no-progress",
            "--no-plots",
            "--seed",
            "9",
            "--out",
            out.to_str().expect("utf-8"),
        ]);
        assert!(o.status.success(), "{:?}", text(&o));
        std::fs::read_to_string(out.join("summary.csv")).expect("summary.csv")
    };
    assert_eq!(run("a"), run("b"));
}

#[test]
fn a_misspelt_setting_is_refused_by_name() {
    let o = overbook(&["sim", "--small", "--no-progress", "--set", "cluster.nodez=3"]);
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(stderr.contains("nodez"), "{stderr}");
    let o = overbook(&["sim", "--small", "--no-progress", "--set", "policy.detector.tolerance=-2"]);
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(stderr.contains("tolerance"), "{stderr}");
}

#[test]
fn an_unknown_scenario_lists_the_built_in_ones() {
    let o = overbook(&["sim", "--scenario", "nonesuch"]);
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(stderr.contains("charon-loads"), "{stderr}");
}

#[test]
fn every_trace_format_replays_its_fixture() {
    let cases = [
        ("google-2011", "google-2011/plain"),
        ("google-2011", "google-2011/gz"),
        ("google-2019", "google-2019/csv"),
        // Its tables, not the broken ones beside them: every row of a table
        // is read to sort it, so a broken row past the horizon fails too.
        ("alibaba-2018", "alibaba-2018/batch_task.csv alibaba-2018/batch_instance.csv alibaba-2018/container_meta.csv alibaba-2018/container_usage.csv"),
        ("charon-sls", "charon-sls/lines"),
    ];
    for (format, paths) in cases {
        let dir = tempfile::tempdir().expect("temp dir");
        let traces: Vec<String> = paths
            .split(' ')
            .map(|p| fixtures().join(p).to_str().expect("utf-8").to_string())
            .collect();
        let mut args =
            vec!["sim", "--small", "--no-progress", "--no-plots", "--trace-format", format];
        args.push("--trace");
        args.extend(traces.iter().map(String::as_str));
        args.extend(["--out", dir.path().to_str().expect("utf-8")]);
        let o = overbook(&args);
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{format}: stdout:\n{stdout}\nstderr:\n{stderr}");
    }
}

#[test]
fn a_broken_trace_row_is_named_by_file_and_line_or_skipped_and_counted() {
    let trace = fixtures().join("google-2011/broken");
    let dir = tempfile::tempdir().expect("temp dir");
    let args = |skip: bool| {
        let mut a = vec![
            "sim".to_string(),
            "--small".into(),
            "--no-progress".into(),
            "--no-plots".into(),
            "--trace-format".into(),
            "google-2011".into(),
            "--trace".into(),
            trace.display().to_string(),
            "--out".into(),
            dir.path().display().to_string(),
        ];
        if skip {
            a.push("--skip-bad-rows".into());
        }
        a
    };
    let strict: Vec<String> = args(false);
    let o = overbook(&strict.iter().map(String::as_str).collect::<Vec<_>>());
    let (_, stderr) = text(&o);
    assert!(!o.status.success(), "a broken row must stop the run");
    assert!(stderr.contains("task_events") || stderr.contains("task_usage"), "{stderr}");
    assert!(stderr.contains(".csv:") || stderr.contains(":"), "{stderr}");
    let lenient: Vec<String> = args(true);
    let o = overbook(&lenient.iter().map(String::as_str).collect::<Vec<_>>());
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("rows skipped"), "the skipped rows are reported:\n{stdout}");
}

#[test]
fn a_closed_pipe_ends_the_listing_quietly() {
    use std::os::unix::process::ExitStatusExt;
    for args in [&["sim", "--list"][..], &["check"][..]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_overbook"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("runs");
        // The reader goes before the first line is written, as `head` does
        // once it has read what it wanted.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("waits");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || out.status.signal() == Some(libc_sigpipe()),
            "{args:?}: {:?}: {stderr}",
            out.status
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// SIGPIPE's number on Linux.
fn libc_sigpipe() -> i32 {
    13
}

#[test]
fn a_setting_applies_where_it_fits_and_a_variant_may_be_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Mercury's static detector has no tolerance: the others take it.
    let out = dir.path().join("out");
    let o = overbook(&[
        "sim",
        "--small",
        "--no-progress",
        "--no-plots",
        "--set",
        "policy.detector.tolerance=5",
        "--set",
        "charon:policy.detector.tolerance=10",
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("mercury") && stdout.contains("charon"), "{stdout}");
    for (set, named) in [
        ("policy.detector.toleranse=5", "policy.detector.toleranse"),
        ("mercury:policy.detector.tolerance=5", "mercury"),
        ("nosuch:cluster.nodes=3", "nosuch"),
    ] {
        let o = overbook(&["sim", "--small", "--no-progress", "--set", set]);
        let (_, stderr) = text(&o);
        assert!(!o.status.success(), "{set} accepted");
        assert!(stderr.contains(named), "{set}: {stderr}");
    }
}

#[test]
fn a_dry_run_checks_the_settings_and_lists_the_runs_without_running_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let o = Command::new(env!("CARGO_BIN_EXE_overbook"))
        .args(["sim", "--scenario", "charon-loads", "--set", "cluster.nodes=7", "--dry-run"])
        .current_dir(dir.path())
        .output()
        .expect("runs");
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("charon@X4") && stdout.contains("7 nodes"), "{stdout}");
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0, "nothing written");
    let o = overbook(&["sim", "--set", "cluster.nodez=7", "--dry-run"]);
    assert!(!o.status.success());
    assert!(text(&o).1.contains("nodez"));
}

#[test]
fn jobs_0_is_refused() {
    let o = overbook(&["sim", "--small", "--jobs", "0"]);
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(stderr.contains("--jobs") && stderr.contains("must be 1 or more"), "{stderr}");
}

#[test]
fn a_replay_is_titled_by_its_trace_and_says_what_it_read_and_dropped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let trace = fixtures().join("google-2011/plain");
    let o = overbook(&[
        "sim",
        "--small",
        "--no-progress",
        "--no-plots",
        "--set",
        "cluster.nodes=2",
        "--trace-format",
        "google-2011",
        "--trace",
        trace.to_str().expect("utf-8"),
        "--out",
        dir.path().to_str().expect("utf-8"),
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("replay of the google-2011 trace"), "{stdout}");
    assert!(!stdout.contains("Paper vs overbook") && !stdout.contains("reproduces"), "{stdout}");
    assert!(stdout.contains("169 trace rows read"), "{stdout}");
    assert!(stdout.contains("starting 0.0s after the trace's first row"), "{stdout}");
    assert!(stdout.contains("2 ended by the trace"), "{stdout}");
    assert!(stdout.contains("warning: the trace's tasks ran on 20 machines"), "{stdout}");
    let summary = std::fs::read_to_string(dir.path().join("summary.json")).expect("summary");
    assert!(summary.contains("\"trace_machines\"") && summary.contains("\"rows_read\""));
}

#[test]
fn a_trace_window_runs_and_bad_windows_name_their_flag() {
    let trace = fixtures().join("google-2011/plain");
    let trace = trace.to_str().expect("utf-8");
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().to_str().expect("utf-8");
    let run = |window: &[&str]| {
        let mut args = vec![
            "sim",
            "--no-progress",
            "--no-plots",
            "--set",
            "cluster.nodes=10",
            "--trace-format",
            "google-2011",
            "--trace",
            trace,
            "--out",
            out,
        ];
        args.extend(window);
        let o = overbook(&args);
        let (stdout, stderr) = text(&o);
        (o.status.success(), stdout, stderr)
    };
    let (ok, stdout, stderr) = run(&["--from", "10m", "--for", "20m"]);
    assert!(ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let (ok, _, stderr) = run(&["--for", "0s"]);
    assert!(!ok && stderr.contains("--for") && stderr.contains("longer than zero"), "{stderr}");
    let (ok, _, stderr) = run(&["--from=-2h"]);
    assert!(!ok && stderr.contains("--from"), "{stderr}");
    let (ok, _, stderr) = run(&["--from", "30d"]);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains(
            "workload.from (--from) 30days: the window starts after the trace's last row"
        ),
        "{stderr}"
    );
}
