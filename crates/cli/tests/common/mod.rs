//! What the CLI tests that need a real node share.

use std::io::Write;

/// Whether a test of `what` can run here: root and a memory controller.
/// Without them it says so loudly and fails, unless `OVERBOOK_ALLOW_SKIP=1`
/// (a laptop), where it says it is skipped and tested nothing.
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
