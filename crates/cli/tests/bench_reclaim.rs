//! `overbook bench reclaim` end to end through the binary, on this host's
//! real kernel (cgroup v1 on the host, v2 in the VM): the reproductions of
//! 001 and 003 with their goals as assertions. Needs root and a memory
//! controller; without them the test says so loudly and FAILS, unless
//! `OVERBOOK_ALLOW_SKIP=1`.
//!
//! * 001: with `recency`, the active container A loses at most 5% of its
//!   memory while C boots (the paper: 3% with ACDC, 27% with Linux);
//! * 003: with `weighted`, five runs give the same reclaimed split within
//!   5 points of each share, and it is the one water-filling by weight
//!   gives (within 5 points);
//!   two services with weights 1:2 and working sets 1:2 keep the same
//!   share of their working sets resident (within 15%) and, over the median
//!   of three runs, a 1:1 throughput ratio within 10% (003 Table 2; 25% in
//!   the emulated VM, and closer to 1:1 than the kernel alone's whenever
//!   the kernel alone misses that band).

mod common;

fn may_run() -> bool {
    common::may_run_on_a_real_node("bench reclaim")
}

/// The scale and the scratch directory: on the host, full size on a disk
/// (the working sets are page cache); in the VM (`scripts/vm`, read-only
/// root), half size on the guest's tmpfs, whose pages go to its zram swap.
fn scale_and_scratch() -> (&'static str, std::path::PathBuf) {
    if std::env::var("OVERBOOK_VM").as_deref() == Ok("1") {
        ("0.5", "/var/tmp".into())
    } else {
        ("1", env!("CARGO_TARGET_TMPDIR").into())
    }
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn reclaim_reproduces_001_and_003_on_this_kernel() {
    if !may_run() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("reclaim.json");
    let (scale, scratch) = scale_and_scratch();
    let args = ["bench", "reclaim", "--repeats", "5", "--scale", scale, "--scratch"];
    let scratch = scratch.display().to_string();
    let (_, r) = common::run_bench(&[&args[..], &[scratch.as_str()]].concat(), &json);

    // 001.
    let runs = r["recency"].as_array().expect("recency runs");
    let with = runs.iter().find(|x| x["reclaimer"] == "recency").expect("a recency run");
    assert!(f(&with["a_lost"]) <= 0.05, "A lost more than 5% with recency: {with}");
    assert!(f(&with["b_lost"]) > 0.3, "the idle B should have paid: {with}");
    assert!(runs.iter().any(|x| x["reclaimer"] == "kernel"), "no kernel baseline: {r}");

    // 003, stepwise.
    let runs: Vec<&serde_json::Value> = r["weighted"]
        .as_array()
        .expect("weighted runs")
        .iter()
        .filter(|x| x["reclaimer"] == "weighted")
        .collect();
    assert_eq!(runs.len(), 5, "{r}");
    let split = |x: &serde_json::Value, key: &str| -> Vec<f64> {
        x[key].as_array().expect("split").iter().map(f).collect()
    };
    let first = split(runs[0], "split");
    for x in &runs {
        let s = split(x, "split");
        let want = split(x, "expected_split");
        for i in 0..3 {
            assert!((s[i] - want[i]).abs() <= 0.05, "split {s:?} is not water-filling's {want:?}");
            assert!(
                (s[i] - first[i]).abs() <= 0.05,
                "runs differ by more than 5 points: {s:?} vs {first:?}"
            );
        }
    }
    // Usage ends in the weights' order: the weight-1 container gave most.
    assert!(first[0] > first[1] && first[1] > first[2], "{first:?}");

    // 003 Table 2: the median of overbook's runs (up to three).
    let runs = r["services"].as_array().expect("services runs");
    let mut weighted: Vec<&serde_json::Value> =
        runs.iter().filter(|x| x["reclaimer"] == "weighted").collect();
    assert_eq!(weighted.len(), 3, "--repeats 5 gives three services runs: {r}");
    // The mechanism itself: weights 1:2 over working sets 1:2 keep the same
    // share of each set resident (the kernel alone keeps all of the smaller
    // one), so both miss alike.
    for x in &weighted {
        let resident = |i: usize| f(&x["usage"][i]) / f(&x["working_sets"][i]);
        let (a, b) = (resident(0), resident(1));
        assert!(
            (a / b - 1.0).abs() <= 0.15,
            "resident shares {a:.2} and {b:.2} differ by more than 15%: {x}"
        );
    }
    weighted.sort_by(|a, b| f(&a["ratio"]).total_cmp(&f(&b["ratio"])));
    let with = weighted[1];
    let ratio = f(&with["ratio"]);
    // The goal, 10%, on the host. The emulated VM's services are CPU-bound
    // and their tmpfs pages go through zram: single runs there gave 0.90 to
    // 1.25 (the kernel alone: far off 1 or as near as 1.30), so the VM's
    // median is held to 25%, and says so; the host's runs are the
    // measurement (README).
    let tolerance = if std::env::var("OVERBOOK_VM").as_deref() == Ok("1") {
        eprintln!(
            "!!!!! services median ratio {ratio:.2}: the VM is held to 25%, not the goal's 10%"
        );
        0.25
    } else {
        0.10
    };
    // Beating the kernel alone is a claim only where the kernel missed:
    // one emulated-VM run gave the kernel 1.05 (its resident shares 0.88
    // and 0.80), and no reclaimer can be told closer to 1:1 than that.
    if let Some(kernel) = runs.iter().find(|x| x["reclaimer"] != "weighted") {
        let alone = f(&kernel["ratio"]);
        if (alone - 1.0).abs() > tolerance {
            assert!(
                (ratio - 1.0).abs() < (alone - 1.0).abs(),
                "weighted {ratio:.2} is no closer to 1:1 than the kernel alone's {alone:.2}"
            );
        } else {
            eprintln!(
                "!!!!! the kernel alone gave {alone:.2}, within {:.0}% of 1:1 itself: \
                 this run cannot tell weighted from it",
                tolerance * 100.0
            );
        }
    }
    assert!(
        (1.0 - tolerance..=1.0 + tolerance).contains(&ratio),
        "median throughput ratio {ratio:.2}, not 1:1 within {:.0}%: {with}",
        tolerance * 100.0
    );
}
