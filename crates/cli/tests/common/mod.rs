//! What the CLI tests that need a real node share.

use std::io::Write;

/// Whether a test of `what` can run here: root and a memory controller.
/// Without them it says so loudly and fails, unless `OVERBOOK_ALLOW_SKIP=1`
/// (a laptop), where it says it is skipped and tested nothing.
#[allow(dead_code)] // the VM-only test targets do not ask
pub fn may_run_on_a_real_node(what: &str) -> bool {
    let root = rustix::process::geteuid().is_root();
    let memory = overbook_linux::HostSupport::probe().memory.is_some();
    if root && memory {
        return true;
    }
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "\n!!!!! {what} test: CANNOT RUN: needs root and a memory controller");
    if std::env::var("OVERBOOK_ALLOW_SKIP").as_deref() == Ok("1") {
        let _ = writeln!(err, "!!!!! SKIPPED (OVERBOOK_ALLOW_SKIP=1): nothing was tested\n");
        return false;
    }
    panic!("{what} test cannot run here (set OVERBOOK_ALLOW_SKIP=1 to skip)");
}

/// Runs `overbook ARGS... --out JSON` and checks it succeeded and said it
/// removed what it made; its output (printed) and its JSON report.
#[allow(dead_code)] // not every test target runs a benchmark
pub fn run_bench<S: AsRef<std::ffi::OsStr>>(
    args: &[S],
    json: &std::path::Path,
) -> (String, serde_json::Value) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_overbook"))
        .args(args)
        .arg("--out")
        .arg(json)
        .output()
        .expect("run overbook");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed:\n{stdout}\n{stderr}");
    println!("{stderr}\n{stdout}");
    assert!(stdout.contains("everything the benchmark made has been removed"), "{stdout}");
    let text = std::fs::read_to_string(json).expect("JSON written");
    (stdout, serde_json::from_str(&text).expect("valid JSON"))
}

/// What a benchmark left in `dir` besides `kept` (its report and plot):
/// everything else it made must be removed.
#[allow(dead_code)] // not every test target runs a benchmark
pub fn left_in(dir: &std::path::Path, kept: &[&std::path::Path]) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .expect("scratch")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| !kept.contains(&p.as_path()))
        .collect()
}
