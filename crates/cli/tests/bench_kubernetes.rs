//! `overbook bench kubernetes` end to end through the binary, small, on a
//! real control plane (`scripts/kube up`): 10 pods, 3 s CPU windows, two
//! repeats. Checks that every metric of issue 17's goals is in its report
//! with sane values, and that the Node and pods are gone after; not how
//! fast (the goals are the benchmark's to report, not asserted here).
//!
//! Ignored by a plain `cargo test`: the control plane is built once per
//! machine by `scripts/kube build`; `scripts/test-all` builds it and runs
//! this with `--ignored`.

mod common;

// The lab's control plane, one file for both crates' tests.
#[allow(dead_code)]
#[path = "../../lab/tests/common/control_plane.rs"]
mod control_plane;

use control_plane::{text, ControlPlane};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The child's output, or a failure after `within` (the child killed).
fn output_within(mut cmd: Command, within: Duration) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawns");
    // Drained on threads of their own: a full pipe must not stall the child.
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    // Collected with a deadline, not joined: a process the child started
    // (the bench's hog) may hold a pipe open after the child is gone.
    let drain = |mut from: Box<dyn std::io::Read + Send>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = from.read_to_end(&mut v);
            let _ = tx.send(v);
        });
        rx
    };
    let out = drain(Box::new(stdout));
    let err = drain(Box::new(stderr));
    let until = Instant::now() + within;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waits") {
            break Some(status);
        }
        if Instant::now() >= until {
            // SIGTERM first: its guards remove what it made.
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let grace = Instant::now() + Duration::from_secs(20);
            while Instant::now() < grace && child.try_wait().ok().flatten().is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = out.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    let stderr = err.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    let Some(status) = status else {
        panic!(
            "not done within {within:?}, killed:\n{}\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        );
    };
    Output { status, stdout, stderr }
}

fn stat(report: &serde_json::Value, key: &str) -> (u64, f64, f64) {
    let s = &report[key];
    let n = s["n"].as_u64().unwrap_or(0);
    let min = s["min"].as_f64().unwrap_or(f64::NAN);
    let max = s["max"].as_f64().unwrap_or(f64::NAN);
    (n, min, max)
}

#[test]
#[ignore = "needs the control plane built by `scripts/kube build`: run by scripts/test-all"]
fn bench_kubernetes_reports_every_goal_s_metric_and_leaves_nothing() {
    if !common::may_run_on_a_real_node("bench kubernetes") {
        return;
    }
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let plane = ControlPlane::up(scratch.path().join("plane"));
    let json = scratch.path().join("kube.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_overbook"));
    cmd.args(["bench", "kubernetes", "--kubeconfig"])
        .arg(plane.env("KUBECONFIG"))
        .args(["--pods", "10", "--seconds", "3", "--repeats", "2", "--out"])
        .arg(&json);
    let out = output_within(cmd, Duration::from_secs(240));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stderr}\n{stdout}");
    assert!(out.status.success(), "failed:\n{stdout}\n{stderr}");
    for needle in [
        "agent CPU, % of one core",
        "agent peak RSS (VmHWM), MiB",
        "offer follows production",
        "preemption sent → its Event readable",
        "everything the benchmark made has been removed",
    ] {
        assert!(stdout.contains(needle), "no {needle:?} in:\n{stdout}");
    }

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON written"))
            .expect("valid JSON");
    assert_eq!(report["pods"], 10);
    assert_eq!(report["runs"].as_array().map(Vec::len), Some(2), "{report}");
    let (n, min, max) = stat(&report, "cpu_percent_of_core");
    assert!(n == 2 && min >= 0.0 && max < 100.0, "CPU: {}", report["cpu_percent_of_core"]);
    let (n, min, max) = stat(&report, "vm_hwm_mib");
    assert!(n == 2 && min > 1.0 && max < 1024.0, "VmHWM: {}", report["vm_hwm_mib"]);
    // Two offer cycles (down and up) and two preemptions per repeat.
    let (n, min, max) = stat(&report, "offer_follow_ms");
    assert!(n == 8 && min >= 0.0 && max < 30_000.0, "offer: {}", report["offer_follow_ms"]);
    let (n, min, max) = stat(&report, "event_ms");
    assert!(n == 4 && min > 0.0 && max < 30_000.0, "Event: {}", report["event_ms"]);
    let goals = report["goals"].as_array().expect("goals");
    assert_eq!(goals.len(), 4, "{report}");
    for run in report["runs"].as_array().expect("runs") {
        assert_eq!(run["problems"].as_array().map(Vec::len), Some(0), "{run}");
    }

    let node = report["node_name"].as_str().expect("named");
    nothing_left(&plane, node);

    // A SIGTERM mid-run (Ctrl-C alike): the run ends at its next wait and
    // removes everything it made, as on any error.
    let mut child = Command::new(env!("CARGO_BIN_EXE_overbook"))
        .args(["bench", "kubernetes", "--kubeconfig"])
        .arg(plane.env("KUBECONFIG"))
        .args(["--pods", "10", "--seconds", "60", "--repeats", "3"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawns");
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut said = Vec::new();
    let until = Instant::now() + Duration::from_secs(120);
    while !said.iter().any(|l: &String| l.contains("CPU over")) {
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(line) => said.push(line),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the run never reached its CPU window: {said:#?}");
            }
        }
    }
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let until = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waits") {
            break status;
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("not ended within 60 s of its SIGTERM: {said:#?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    said.extend(rx.try_iter());
    assert!(!status.success(), "an interrupted run fails: {said:#?}");
    assert!(said.iter().any(|l| l.contains("interrupted")), "said why: {said:#?}");
    nothing_left(&plane, "");
}

/// Nothing of a run left: not its Node (`node`, or any bench node when
/// empty), not a pod, not a cgroup.
fn nothing_left(plane: &ControlPlane, node: &str) {
    let nodes = plane.ok(&["get", "nodes", "-o", "name"], None);
    let node = if node.is_empty() { "overbook-bench-" } else { node };
    assert!(!nodes.contains(node), "{node} left: {nodes}");
    let pods = plane.ok(&["get", "pods", "-A", "-o", "name"], None);
    assert!(!pods.contains("obb-"), "pods left: {pods}");
    let left = Command::new("find")
        .args(["/sys/fs/cgroup", "-maxdepth", "2", "-type", "d", "-name", "overbook-bench-kube-*"])
        .output()
        .expect("runs find");
    assert!(left.stdout.is_empty(), "cgroups left: {}", text(&left));
}
