//! `overbook bench colocation` end to end through the binary, short scenes,
//! in the VM (a whole machine with swap, Debian's Redis, PostgreSQL and
//! earlyoom, CRIU): the policies that need a whole machine or a working
//! CRIU run (earlyoom, the kernel's own OOM killer, overbook's checkpointing
//! policies) beside the isolated reference; production is measured in every
//! scene, every oversubscribed policy runs best-effort work, isolated runs
//! none, the table, JSON and plot are written and everything made is
//! removed. The policies a memory cgroup can host (static, threshold,
//! overbook-kill, and these again) run on the host, natively
//! (`bench_colocation_native`): an emulated scene costs about 80 s, and
//! these three ran the same code here as there. The comparison's numbers
//! are the benchmark's to report (README), not this test's to assert.

mod common;

/// The policies that need the VM: earlyoom and the kernel's OOM killer watch
/// a whole machine, overbook's checkpoints need a working CRIU; isolated is
/// every ratio's reference.
const POLICIES: [&str; 5] = ["isolated", "kernel", "earlyoom", "overbook-adaptive", "overbook"];

#[test]
#[ignore = "takes the whole machine (earlyoom, the kernel OOM killer): runs in the VM (scripts/vm)"]
fn the_whole_machine_policies_run_the_same_scene_and_clean_up() {
    assert!(
        std::env::var_os("OVERBOOK_VM").is_some(),
        "this test gives the whole machine to earlyoom and the OOM killer: run it in scripts/vm"
    );
    // The VM's disk: PostgreSQL's tables must be page cache, not memory.
    let disk = std::env::var("OVERBOOK_VM_DISK").expect("scripts/vm's guest has a disk");
    let dir = tempfile::tempdir_in(disk).expect("temp dir");
    let json = dir.path().join("colocation.json");
    let plot = dir.path().join("colocation.svg");
    let scratch = dir.path().display().to_string();
    let plot_arg = plot.display().to_string();
    let policies = POLICIES.join(",");
    let args = [
        "bench",
        "colocation",
        "--seconds",
        "30",
        "--repeats",
        "1",
        "--no-warmup",
        "--policies",
        &policies,
        "--scratch",
        &scratch,
        "--plot",
        &plot_arg,
    ];
    let (_, r) = common::run_bench(&args, &json);
    let scenes = r["scenes"].as_array().expect("scenes");
    // Run in a seeded order of their own; every policy once.
    let mut names: Vec<&str> = scenes.iter().filter_map(|s| s["policy"].as_str()).collect();
    names.sort_unstable();
    let mut want = POLICIES.to_vec();
    want.sort_unstable();
    assert_eq!(names, want);
    let scene = |policy: &str| {
        scenes.iter().find(|s| s["policy"] == policy).expect("every policy ran").clone()
    };
    for s in scenes {
        for service in ["redis", "postgres"] {
            assert!(s[service]["requests"].as_u64().is_some_and(|n| n > 0), "{service}: {s}");
            assert!(s[service]["p99_ms"].as_f64().is_some_and(|x| x > 0.0), "{service}: {s}");
        }
        // Production's CPU time is read from its processes' schedstat.
        assert!(s["prod_cpu_s"].as_f64().is_some_and(|x| x > 0.0), "{s}");
        assert!(s["prod_runq_wait_s"].as_f64().is_some_and(|x| x >= 0.0), "{s}");
        if s["policy"] != "isolated" {
            assert!(s["batch"]["started"].as_u64().is_some_and(|n| n > 0), "{s}");
            // The jobs' CPU time is read from their processes, whoever
            // started them: a job fills its memory from a hash first.
            assert!(s["be_cpu_s"].as_f64().is_some_and(|x| x > 0.0), "{s}");
        }
    }
    assert_eq!(scene("isolated")["batch"]["started"], 0, "isolated runs no best-effort work");
    let summary = r["summary"].as_array().expect("summary");
    assert_eq!(summary.len(), POLICIES.len());
    // One repeat: each interval is its one ratio.
    let isolated = summary.iter().find(|s| s["policy"] == "isolated").expect("isolated");
    assert_eq!(isolated["redis_p99_ci"], serde_json::json!([1.0, 1.0]), "{isolated}");
    let svg = std::fs::read_to_string(&plot).expect("plot written");
    assert!(
        svg.contains("<svg") && svg.contains("overbook-adaptive"),
        "the plot names every policy"
    );
    let left = common::left_in(dir.path(), &[&json, &plot]);
    assert!(left.is_empty(), "the benchmark's files are removed: {left:?}");
}

/// A report shown again without a run (`--from`), on any host: the table
/// and the plot from the README's report, and clear errors for bad files.
#[test]
fn a_report_is_shown_again_from_its_json() {
    let overbook = env!("CARGO_BIN_EXE_overbook");
    let report = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/colocation.json");
    let dir = tempfile::tempdir().expect("temp dir");
    let plot = dir.path().join("again.svg");
    let out = std::process::Command::new(overbook)
        .args(["bench", "colocation", "--from", report, "--plot"])
        .arg(&plot)
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let isolated = stdout.lines().find(|l| l.starts_with("isolated ")).expect("isolated row");
    // Its own reference: every ratio exactly 1, so no interval is shown.
    let ratios: Vec<&str> = isolated.split_whitespace().skip(1).take(6).collect();
    assert_eq!(ratios, ["1.00"; 6], "isolated is its own reference: {isolated}");
    // The README's run, re-summarized: three repeats, 95% intervals, noise.
    let adaptive = stdout.lines().find(|l| l.starts_with("overbook-adaptive ")).expect("row");
    assert!(adaptive.contains(" [") && adaptive.contains("]"), "an interval: {adaptive}");
    assert!(stdout.contains("noise: isolated's own p99 strays"), "{stdout}");
    assert!(std::fs::read_to_string(&plot).is_ok_and(|s| s.contains("<svg")), "plot written");

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"seed": 1, "seconds": "ninety"}"#).expect("write");
    for (file, says) in
        [(bad.as_path(), "seconds"), (dir.path().join("none.json").as_path(), "none.json")]
    {
        let out = std::process::Command::new(overbook)
            .args(["bench", "colocation", "--from"])
            .arg(file)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(says), "{stderr}");
    }
    // An `--out` the report could not be written to is refused before
    // anything runs, not after the last scene (`--seconds 1`, refused
    // later, keeps a broken check from starting a run).
    let missing = dir.path().join("no-such-dir/report.json");
    for (target, says) in [(dir.path(), "is a directory"), (missing.as_path(), "no directory")] {
        let out = std::process::Command::new(overbook)
            .args(["bench", "colocation", "--seconds", "1", "--out"])
            .arg(target)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(says), "{stderr}");
    }
}
