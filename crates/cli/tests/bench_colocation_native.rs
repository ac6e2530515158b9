//! `overbook bench colocation --native` end to end on this host, short
//! scenes: the node is a memory cgroup of the machine with a limit, the
//! services and jobs run natively in it, and a swap file is made for the
//! run where the machine has none. Every policy the mode has runs, both
//! services answer in every scene, the JSON and plot are written, and
//! everything made is removed: the scratch directory, the node cgroups,
//! the swap file. The numbers are the documented long runs' to report
//! (README), not this test's to assert.

mod common;

const POLICIES: [&str; 6] =
    ["isolated", "static", "kernel", "threshold", "overbook-kill", "overbook-adaptive"];

#[test]
fn every_native_policy_runs_and_leaves_nothing_behind() {
    if !common::may_run_on_a_real_node("bench colocation --native") {
        return;
    }
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
        if s["policy"] != "isolated" {
            assert!(s["batch"]["started"].as_u64().is_some_and(|n| n > 0), "{s}");
        }
    }
    assert!(std::fs::read_to_string(&plot).expect("plot").contains("<svg"));
    // Nothing left: the scratch directory holds only the report and plot,
    // no node cgroup is left, the run's swap file is off.
    let left = common::left_in(dir.path(), &[&json, &plot]);
    assert!(left.is_empty(), "the benchmark's files are removed: {left:?}");
    assert_eq!(std::fs::read_to_string("/proc/swaps").expect("/proc/swaps"), swaps_before);
    let probe = overbook_linux::HostSupport::probe();
    let mount = probe.memory.expect("a memory controller").mount;
    let nodes: Vec<_> = std::fs::read_dir(mount)
        .expect("the hierarchy")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("overbook-colocation-"))
        .map(|e| e.path())
        .collect();
    assert!(nodes.is_empty(), "node cgroups left: {nodes:?}");
}
