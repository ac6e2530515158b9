//! `overbook bench sim`: one run's measure as text or JSON, and a grid that
//! refuses bad settings before its first point.

use std::process::{Command, Output};

fn overbook(args: &[&str]) -> Output {
    overbook_with(args, &[])
}

fn overbook_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_overbook"));
    cmd.args(args).env_remove("GLIBC_TUNABLES").env_remove("OVERBOOK_HUGE_PAGES");
    match cmd.envs(env.iter().copied()).output() {
        Ok(o) => o,
        Err(e) => panic!("running overbook {args:?}: {e}"),
    }
}

/// Whether this machine's kernel backs memory that asks with huge pages.
fn kernel_gives_huge_pages() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|t| t.contains("[always]") || t.contains("[madvise]"))
}

const SMALL: [&str; 7] =
    ["bench", "sim", "--json", "--set", "cluster.nodes=20", "--set", "sim.horizon=1h"];

fn point(o: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(stdout.trim()).expect("one JSON line")
}

#[test]
fn the_simulator_runs_on_huge_pages_where_the_kernel_has_them_and_not_if_told() {
    // glibc only: elsewhere the allocator is not told, and says so.
    let glibc = cfg!(target_env = "gnu");
    let p = point(&overbook(&SMALL));
    assert_eq!(p["huge_pages"], glibc && kernel_gives_huge_pages(), "{p}");
    let p = point(&overbook_with(&SMALL, &[("OVERBOOK_HUGE_PAGES", "0")]));
    assert_eq!(p["huge_pages"], false, "{p}");
    let o = overbook_with(&SMALL, &[("OVERBOOK_HUGE_PAGES", "yes")]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("OVERBOOK_HUGE_PAGES=\"yes\" is neither 0 nor 1"), "{stderr}");
    assert_eq!(point(&o)["huge_pages"], false);
    let p = point(&overbook_with(&SMALL, &[("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0")]));
    assert_eq!(p["huge_pages"], false, "the user's own setting stands: {p}");
    let o = overbook(&["bench", "sim", "--set", "cluster.nodes=20", "--set", "sim.horizon=1h"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.lines().any(|l| l.starts_with("huge pages:")), "{text}");
}

#[test]
fn where_memory_lies_changes_no_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |name: &str, env: &[(&str, &str)]| {
        let out = dir.path().join(name);
        let args = ["sim", "--small", "--no-plots", "--no-progress", "--out"];
        let o = overbook_with(&[&args[..], &[out.to_str().expect("utf-8")]].concat(), env);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(out.join("summary.json")).expect("summary.json")
    };
    let on = run("on", &[]);
    let off = run("off", &[("OVERBOOK_HUGE_PAGES", "0")]);
    assert!(on.contains("\"variant\""), "{on}");
    assert_eq!(on, off);
}

#[test]
fn a_small_run_reports_its_speed_and_peak_memory_as_json() {
    let point = point(&overbook(&SMALL));
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

#[test]
fn against_another_binary_it_runs_rounds_in_turn_and_gives_an_interval() {
    let me = env!("CARGO_BIN_EXE_overbook");
    let tiny = ["--set", "cluster.nodes=20", "--set", "sim.horizon=1h"];
    let args = [&["bench", "sim", "--against", me, "--rounds", "3"][..], &tiny[..]].concat();
    let o = overbook(&args);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    let rounds: Vec<&str> = stdout.lines().filter(|l| l.starts_with("round ")).collect();
    assert_eq!(rounds.len(), 3, "{stdout}");
    assert!(rounds.iter().all(|l| l.contains("other") && l.contains("× as fast")), "{stdout}");
    let speedup = stdout.lines().find(|l| l.starts_with("speedup: ")).expect("a speedup line");
    let figures: Vec<f64> = speedup["speedup: ".len()..]
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|t| t.parse().ok())
        .take(3)
        .collect();
    assert!(
        figures.len() == 3 && figures[1] <= figures[0] && figures[0] <= figures[2],
        "mean within its interval: {speedup}"
    );
    // Each run said which binary it was, in turn: the other first in odd rounds.
    let order: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("[round "))
        .filter_map(|l| l.split("] ").nth(1)?.split(':').next())
        .collect();
    assert_eq!(order, ["other", "this", "this", "other", "other", "this"], "{stderr}");
}

#[test]
fn against_refuses_what_cannot_give_an_interval() {
    let me = env!("CARGO_BIN_EXE_overbook");
    let o = overbook(&["bench", "sim", "--against", me, "--rounds", "1"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && stderr.contains("--rounds 1: at least 2"), "{stderr}");
    let o = overbook(&["bench", "sim", "--against", "/nonexistent/overbook"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && stderr.contains("/nonexistent/overbook: no such file"),
        "{stderr}"
    );
    let o = overbook(&["bench", "sim", "--against", me, "--set", "cluster.nodes=0"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && stderr.contains("nodes"),
        "a bad setting, before any run: {stderr}"
    );
    assert!(!stderr.contains("[round"), "{stderr}");
    let o = overbook(&["bench", "sim", "--against", me, "--grid"]);
    assert!(!o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = overbook(&["bench", "sim", "--rounds", "3"]);
    assert!(!o.status.success(), "--rounds without --against");
}
