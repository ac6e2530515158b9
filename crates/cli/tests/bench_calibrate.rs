//! `overbook bench calibrate --quick` end to end through the binary, on this
//! host's real cgroups (root; adds a temporary swap file when the machine
//! has none), and `overbook sim` reading the file it wrote. Without root and
//! a memory controller the test says so loudly and FAILS, unless
//! `OVERBOOK_ALLOW_SKIP=1`.

mod common;

use std::process::Command;

fn may_run() -> bool {
    common::may_run_on_a_real_node("bench calibrate")
}

#[test]
fn a_quick_calibration_is_measured_written_and_read_by_the_simulator() {
    if !may_run() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("calibration.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_overbook"))
        .args(["bench", "calibrate", "--quick", "--scratch", env!("CARGO_TARGET_TMPDIR"), "--out"])
        .arg(&file)
        .output()
        .expect("run overbook");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = std::fs::read_to_string(&file).expect("the file was written");
    let cal =
        overbook_sim::calibration::Calibration::from_toml(&text).expect("the simulator reads it");
    let _ = cal;
    // Squeezed 1.5× into swap, a random-touch worker slows down for real.
    let squeezed = text
        .lines()
        .find(|l| l.contains("squeeze = 1.5"))
        .and_then(|l| l.split("speed = ").nth(1))
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .expect("an anon point at squeeze 1.5");
    assert!(squeezed < 0.5, "speed {squeezed} at squeeze 1.5:\n{text}");

    let sim = |calibration: &str| {
        Command::new(env!("CARGO_BIN_EXE_overbook"))
            .args(["sim", "--small", "--no-progress", "--no-plots", "--out"])
            .arg(dir.path().join("sim"))
            .args(["--set", &format!("sim.calibration={calibration}")])
            .output()
            .expect("run overbook sim")
    };
    let ok = sim(file.to_str().expect("utf-8 path"));
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let bad = sim("/nonexistent/calibration.toml");
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("sim.calibration"), "{err}");
}
