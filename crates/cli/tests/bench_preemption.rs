//! `overbook bench preemption` end to end through the binary, small, in the
//! VM (CRIU): every preemptor's best-effort tasks all finish with the
//! answer of an uninterrupted run, `checkpoint` loses no work and restores
//! every dump, `kill` dumps nothing, and everything made is removed. The
//! comparison's numbers are the benchmark's to report (README), not this
//! test's to assert.
//!
//! Needs CRIU, so it runs in the VM (`scripts/vm`, `--include-ignored`).

mod common;

#[test]
#[ignore = "needs CRIU: runs in the VM (scripts/vm)"]
fn every_preemptor_finishes_every_task_right_and_checkpoints_lose_nothing() {
    let criu = overbook_linux::criu::Criu::probe();
    assert!(criu.usable(), "CRIU must work where this test runs: {:?}", criu.why_not());
    let dir = tempfile::tempdir_in("/var/tmp").expect("temp dir");
    let json = dir.path().join("preemption.json");
    let scratch = dir.path().display().to_string();
    let args = ["bench", "preemption", "--tasks", "3", "--bursts", "2", "--scale", "0.5"];
    let (_, r) = common::run_bench(&[&args[..], &["--scratch", &scratch]].concat(), &json);
    let results = r["results"].as_array().expect("results");
    let names: Vec<&str> = results.iter().filter_map(|x| x["preemptor"].as_str()).collect();
    assert_eq!(names, ["kill", "checkpoint", "adaptive"]);
    for x in results {
        assert_eq!(x["be_completed"], 3, "{x}");
        assert_eq!(x["wrong_answers"].as_array().map(Vec::len), Some(0), "{x}");
        assert!(x["prod_slowdown"].as_f64().is_some_and(|s| s > 0.0), "{x}");
    }
    let (kill, ckpt) = (&results[0], &results[1]);
    assert_eq!(kill["checkpoints"], 0, "{kill}");
    assert_eq!(ckpt["kills"], 0, "{ckpt}");
    assert_eq!(ckpt["work_lost_s"], 0.0, "{ckpt}");
    assert_eq!(ckpt["restore_failures"], 0, "{ckpt}");
    assert_eq!(ckpt["restores"], ckpt["checkpoints"], "every dump restored: {ckpt}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("scratch")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p != &json)
        .collect();
    assert!(left.is_empty(), "the benchmark's files are removed: {left:?}");
}
