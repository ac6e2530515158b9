//! `overbook bench sim`: one run's measure as text or JSON, and a grid that
//! refuses bad settings before its first point.

use std::process::{Command, Output};

fn overbook(args: &[&str]) -> Output {
    match Command::new(env!("CARGO_BIN_EXE_overbook")).args(args).output() {
        Ok(o) => o,
        Err(e) => panic!("running overbook {args:?}: {e}"),
    }
}

#[test]
fn a_small_run_reports_its_speed_and_peak_memory_as_json() {
    let o = overbook(&[
        "bench",
        "sim",
        "--json",
        "--set",
        "cluster.nodes=20",
        "--set",
        "sim.horizon=1h",
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    let point: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(point["nodes"], 20, "{point}");
    assert_eq!(point["days"].as_f64(), Some(1.0 / 24.0), "{point}");
    assert!(point["tasks"].as_u64().is_some_and(|t| t > 0), "{point}");
    assert!(point["events"].as_u64().is_some_and(|e| e > 0), "{point}");
    assert!(point["peak_rss_mib"].as_f64().is_some_and(|m| m > 1.0), "{point}");
}

#[test]
fn a_grid_refuses_a_bad_setting_before_it_runs_and_does_not_mix_with_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("grid");
    let o = overbook(&[
        "bench",
        "sim",
        "--grid",
        "--out",
        out.to_str().expect("utf-8"),
        "--set",
        "cluster.nodez=3",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(stderr.contains("cluster.nodez"), "{stderr}");
    assert!(!stderr.contains("[1/6]"), "no point ran: {stderr}");
    assert!(!out.exists(), "nothing written");
    let o = overbook(&["bench", "sim", "--grid", "--json"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}
