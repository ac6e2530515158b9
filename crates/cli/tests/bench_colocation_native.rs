//! `overbook bench colocation --native` end to end on this host, short
//! scenes: the node is a memory cgroup of the machine with a limit, the
//! services and jobs run natively in it, and a swap file is made for the
//! run where the machine has none. Every policy the mode has runs (the VM's
//! `bench_colocation` runs those that need a whole machine or CRIU), both
//! services answer in every scene, static loses no job, the JSON and plot are written, and
//! everything made is removed: the scratch directory, the node cgroups,
//! the swap file. The numbers are the documented long runs' to report
//! (README), not this test's to assert.

mod common;

/// One native run at a time: each makes a node cgroup and a swap file, and
/// checks that none is left when it ends.
static ONE_RUN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Every policy of the mode, and one overbook scene with a detector
/// setting of its own (a cgroup name from a policy with `@`, `=` and `.`).
const POLICIES: [&str; 8] = [
    "isolated",
    "static",
    "kernel",
    "threshold",
    "overbook-kill",
    "overbook-adaptive",
    "overbook",
    "overbook@floor=0.10",
];

#[test]
fn every_native_policy_runs_and_leaves_nothing_behind() {
    if !common::may_run_on_a_real_node("bench colocation --native") {
        return;
    }
    let _one = ONE_RUN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir_in("/var/tmp").expect("temp dir");
    let json = dir.path().join("native.json");
    let plot = dir.path().join("native.svg");
    let scratch = dir.path().display().to_string();
    let plot_arg = plot.display().to_string();
    let policies = POLICIES.join(",");
    let args = [
        "bench",
        "colocation",
        "--native",
        "--capacity",
        "1GiB",
        "--swap",
        "512MiB",
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
    let swaps_before = std::fs::read_to_string("/proc/swaps").expect("/proc/swaps");
    let (table, r) = common::run_bench(&args, &json);
    assert!(table.starts_with("native, a node cgroup"), "{table}");
    assert_eq!(r["native"]["capacity"], 1u64 << 30);
    assert_eq!(r["max_steal"], 0.05);
    let scenes = r["scenes"].as_array().expect("scenes");
    let mut ran: Vec<&str> = scenes.iter().filter_map(|s| s["policy"].as_str()).collect();
    ran.sort_unstable();
    let mut want = POLICIES.to_vec();
    want.sort_unstable();
    assert_eq!(ran, want);
    for s in scenes {
        for service in ["redis", "postgres"] {
            assert!(s[service]["requests"].as_u64().is_some_and(|n| n > 0), "{service}: {s}");
            assert!(s[service]["failures"].as_array().is_some_and(Vec::is_empty), "{s}");
        }
        assert!(s["prod_cpu_s"].as_f64().is_some_and(|x| x > 0.0), "{s}");
        // Its own loop looks at the node ten times a second.
        assert!(s["bench_cpu_s"].as_f64().is_some_and(|x| x > 0.0), "{s}");
        // The default --max-steal: a scene the host took more of the CPU
        // from runs again, up to twice, and only the last try counts.
        let steal = s["cpu_steal"].as_f64().expect("cpu_steal");
        let reruns = s["reruns"].as_u64().expect("reruns");
        assert!(reruns <= 2 && (steal <= 0.05 || reruns == 2), "{s}");
        if s["policy"] != "isolated" {
            assert!(s["batch"]["started"].as_u64().is_some_and(|n| n > 0), "{s}");
            // The jobs' CPU time, whoever started them (the bench's runner
            // or the agent): a job fills its memory from a hash first.
            assert!(s["be_cpu_s"].as_f64().is_some_and(|x| x > 0.0), "{s}");
        } else {
            assert_eq!(s["be_cpu_s"], 0.0, "nothing but production runs: {s}");
        }
        if s["policy"] == "static" {
            assert_eq!(s["batch"]["kills"], 0, "static admits only what fits: {s}");
        }
    }
    assert!(std::fs::read_to_string(&plot).expect("plot").contains("<svg"));
    // Nothing left: the scratch directory holds only the report and plot,
    // no node cgroup is left, the run's swap file is off.
    let left = common::left_in(dir.path(), &[&json, &plot]);
    assert!(left.is_empty(), "the benchmark's files are removed: {left:?}");
    assert_eq!(std::fs::read_to_string("/proc/swaps").expect("/proc/swaps"), swaps_before);
    let nodes = node_cgroups();
    assert!(nodes.is_empty(), "node cgroups left: {nodes:?}");
}

/// Node cgroups of `overbook bench colocation` in the memory hierarchy.
fn node_cgroups() -> Vec<std::path::PathBuf> {
    let probe = overbook_linux::HostSupport::probe();
    let mount = probe.memory.expect("a memory controller").mount;
    std::fs::read_dir(mount)
        .expect("the hierarchy")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("overbook-colocation-"))
        .map(|e| e.path())
        .collect()
}

#[test]
fn an_interrupted_run_removes_what_its_scene_made() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    if !common::may_run_on_a_real_node("bench colocation --native") {
        return;
    }
    let _one = ONE_RUN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir_in("/var/tmp").expect("temp dir");
    let scratch = dir.path().display().to_string();
    let swaps_before = std::fs::read_to_string("/proc/swaps").expect("/proc/swaps");
    let mut bench = Command::new(env!("CARGO_BIN_EXE_overbook"))
        .args(["bench", "colocation", "--native", "--capacity", "1GiB", "--swap", "512MiB"])
        .args(["--seconds", "30", "--repeats", "1", "--no-warmup", "--scratch", &scratch])
        .args(["--policies", "isolated,overbook", "--pg-rate", "300", "--redis-round", "50"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    // Interrupted mid-scene: once the cache fill began, the services,
    // their drivers and (under overbook) the jobs all run.
    let mut lines = BufReader::new(bench.stderr.take().expect("piped")).lines();
    let said: Vec<String> =
        lines.by_ref().map_while(Result::ok).take_while(|l| !l.contains("cache fill at")).collect();
    let pid = rustix::process::Pid::from_raw(i32::try_from(bench.id()).expect("pid fits"))
        .expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = bench.wait().expect("waits");
    assert!(!status.success(), "{said:?} {rest:?}");
    assert!(rest.iter().any(|l| l.contains("interrupted")), "says why: {rest:?}");
    assert!(
        said.iter().any(|l| l.contains("load pinned: pgbench at 300 tx/s, Redis rounds of 50")),
        "a pinned load is not calibrated: {said:?}"
    );
    let left = common::left_in(dir.path(), &[]);
    assert!(left.is_empty(), "the benchmark's files are removed: {left:?}");
    assert_eq!(std::fs::read_to_string("/proc/swaps").expect("/proc/swaps"), swaps_before);
    assert!(node_cgroups().is_empty(), "node cgroups left: {:?}", node_cgroups());
    let scratch_procs =
        std::process::Command::new("pgrep").args(["-f", &scratch]).output().expect("pgrep runs");
    assert!(
        scratch_procs.stdout.is_empty(),
        "processes of the run left: {}",
        String::from_utf8_lossy(&scratch_procs.stdout)
    );
}
