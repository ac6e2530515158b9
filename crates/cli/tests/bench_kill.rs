//! `overbook bench kill-latency --quick` end to end through the binary, on
//! this host's real cgroups: a node cgroup made to thrash, 3 kills of
//! 256 MiB victims by each killer. Needs root and a memory controller;
//! without them the test says so loudly and FAILS, unless
//! `OVERBOOK_ALLOW_SKIP=1`. Checks that it completes, not how fast: the
//! numbers are the benchmark's to report.

mod common;

use std::process::{Command, Stdio};

fn may_run() -> bool {
    common::may_run_on_a_real_node("bench kill-latency")
}

#[test]
fn quick_kill_latency_kills_three_times_per_killer_and_cleans_up() {
    if !may_run() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("kill.json");
    let child = Command::new(env!("CARGO_BIN_EXE_overbook"))
        .args(["bench", "kill-latency", "--quick", "--scratch"])
        .arg(env!("CARGO_TARGET_TMPDIR"))
        .arg("--out")
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run overbook bench kill-latency");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait for it");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed:\n{stdout}\n{stderr}");

    // The table: one row per killer, with the three measures.
    for needle in [
        "victim 256 MiB",
        "unloaded exit",
        "(a) PRESS→AWAKE",
        "(b) DECIDE→KILL",
        "(c) KILL→FREED",
        "overbook agent",
        "threshold 10% (Kuber)",
        "kernel OOM killer",
        "everything the benchmark made has been removed",
    ] {
        assert!(stdout.contains(needle), "no {needle:?} in:\n{stdout}\n{stderr}");
    }

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON written"))
            .expect("valid JSON");
    let size = &report["sizes"][0];
    assert_eq!(size["size"], 256u64 << 20);
    assert!(size["unloaded_exit_ms"]["p50"].as_f64().is_some_and(|v| v > 0.0), "{size}");
    let killers = size["killers"].as_array().expect("killers");
    assert_eq!(killers.len(), 3, "{size}");
    for k in killers {
        let name = k["killer"].as_str().expect("name");
        assert!(k["kills"].as_u64().is_some_and(|n| n >= 3), "{name}: fewer than 3 kills: {k}");
        let release = k["issue_to_release_ms"]["p50"].as_f64();
        assert!(release.is_some_and(|v| v > 0.0 && v < 10_000.0), "{name}: release {k}");
        if name != "kernel-oom" {
            let b = k["decision_to_issue_ms"]["p99"].as_f64();
            assert!(b.is_some_and(|v| (0.0..1_000.0).contains(&v)), "{name}: (b) {k}");
        }
        // (a) needs PSI to have grown before the kill; a killer that acted
        // before the kernel showed any stall (`before_stall`) has none.
        let a = k["pressure_to_awake_ms"]["p50"].as_f64();
        let before_stall = k["before_stall"].as_u64().unwrap_or(0);
        assert!(
            a.is_some_and(|v| (0.0..60_000.0).contains(&v)) || (a.is_none() && before_stall > 0),
            "{name}: (a) {k}"
        );
    }

    // Nothing left behind: not its node cgroup, not its scratch file.
    let probe = overbook_linux::HostSupport::probe();
    let mount = probe.memory.expect("memory controller").mount;
    let node = mount.join(format!("overbook-bench-kill-{pid}"));
    assert!(!node.exists(), "left behind: {}", node.display());
    let scratch: Vec<String> = std::fs::read_dir(env!("CARGO_TARGET_TMPDIR"))
        .expect("read the scratch directory")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("overbook-bench-"))
        .collect();
    assert!(scratch.is_empty(), "left behind in the scratch directory: {scratch:?}");
}
