//! PSI triggers: the kernel wakes the agent when memory stall crosses a
//! threshold, instead of the agent finding out at its next poll.
//!
//! A trigger is a PSI file (`/proc/pressure/memory`, or a v2 cgroup's
//! `memory.pressure`) opened for writing, given `some <stall µs> <window
//! µs>`, and polled for `POLLPRI`; it stays armed while the descriptor is
//! open.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use crate::error::CgroupError;

/// One armed trigger.
#[derive(Debug)]
pub struct PsiTrigger {
    file: File,
    path: PathBuf,
}

impl PsiTrigger {
    /// Arms a trigger on `path`: fire when some task stalled on memory for
    /// `stall` within any `window` (the kernel wants 500 ms ≤ window ≤ 10 s).
    pub fn new(path: &Path, stall: Duration, window: Duration) -> Result<Self, CgroupError> {
        let io = |op, source| CgroupError::Io { op, path: path.to_path_buf(), source };
        let mut file =
            OpenOptions::new().read(true).write(true).open(path).map_err(|e| io("open", e))?;
        let spec = format!("some {} {}\0", stall.as_micros(), window.as_micros());
        file.write_all(spec.as_bytes()).map_err(|e| io("write", e))?;
        Ok(Self { file, path: path.to_path_buf() })
    }

    /// The PSI file it watches.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits at most `timeout` for any of `triggers` to fire; returns the
    /// indexes of those that fired (empty on timeout or a signal).
    pub fn wait_any(
        triggers: &[&PsiTrigger],
        timeout: Duration,
        fired: &mut Vec<usize>,
    ) -> Result<(), CgroupError> {
        fired.clear();
        let mut fds: Vec<PollFd<'_>> =
            triggers.iter().map(|t| PollFd::new(&t.file, PollFlags::PRI)).collect();
        let ts = Timespec {
            tv_sec: timeout.as_secs().try_into().unwrap_or(i64::MAX),
            tv_nsec: timeout.subsec_nanos().into(),
        };
        match poll(&mut fds, Some(&ts)) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok(()),
            Err(e) => {
                let path = triggers.first().map(|t| t.path.clone()).unwrap_or_default();
                return Err(CgroupError::Io { op: "poll", path, source: e.into() });
            }
        }
        for (i, fd) in fds.iter().enumerate() {
            let r = fd.revents();
            if r.contains(PollFlags::ERR) {
                // The cgroup was removed: the trigger is dead, not firing.
                continue;
            }
            if r.contains(PollFlags::PRI) {
                fired.push(i);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_system_trigger_arms_and_times_out_when_calm_or_says_why_not() {
        let path = Path::new(crate::host::SYSTEM_PRESSURE);
        match PsiTrigger::new(path, Duration::from_millis(150), Duration::from_secs(1)) {
            Ok(t) => {
                let mut fired = Vec::new();
                PsiTrigger::wait_any(&[&t], Duration::from_millis(10), &mut fired).expect("poll");
                assert!(fired.len() <= 1);
            }
            // Not root, or no PSI: the error names the file.
            Err(e) => assert!(e.to_string().contains("/proc/pressure/memory"), "{e}"),
        }
    }
}
