//! The errors of the cgroup implementations.
//!
//! Why one enum: every caller (agent executor, `overbook check`, tests) must
//! tell a few cases apart (a missing kernel feature, a busy cgroup, a timeout)
//! and otherwise just report; each variant carries the path it concerns. A
//! cgroup that vanished is *not* here: it is [`crate::Outcome::Vanished`].

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::container::InvalidContainerPath;
use crate::parse::{ParseError, Pid};

/// What went wrong talking to cgroupfs or procfs.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// A read, write, mkdir or rmdir failed for a reason other than the
    /// cgroup having vanished.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done (`read`, `write`, `mkdir`, `rmdir`, `list`).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The kernel's answer.
        source: io::Error,
    },
    /// A kernel file's text was not in its format.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        source: ParseError,
    },
    /// The cgroup exists but the kernel provides no such file in it: the
    /// feature is not built in or not enabled (e.g. `memory.swap.max` without
    /// swap accounting, `cgroup.kill` before 5.14).
    #[error("{}: the kernel provides no such file here", path.display())]
    NoSuchFile {
        /// The file.
        path: PathBuf,
    },
    /// The operation needs something this cgroup version or setup lacks.
    #[error("not supported: {what}")]
    Unsupported {
        /// What, and why.
        what: String,
    },
    /// A container to create already exists.
    #[error("{} already exists", path.display())]
    Exists {
        /// The cgroup directory.
        path: PathBuf,
    },
    /// A cgroup to remove still has processes (or, v2, children).
    #[error("{} is still in use (processes or child cgroups)", path.display())]
    Busy {
        /// The cgroup directory.
        path: PathBuf,
    },
    /// A process to move is gone.
    #[error("process {pid} does not exist")]
    NoSuchProcess {
        /// The pid.
        pid: Pid,
    },
    /// A process to reap is not a child of this one (or was reaped already).
    #[error("process {pid} is not a child of this process (or was reaped already)")]
    NotAChild {
        /// The pid.
        pid: Pid,
    },
    /// A system call about no file failed (`prctl`, ...).
    #[error("{call}: {source}")]
    Syscall {
        /// The call, with its operation (`prctl(PR_SET_CHILD_SUBREAPER)`).
        call: &'static str,
        /// The kernel's answer.
        source: io::Error,
    },
    /// A system tool (`mkswap`, `swapon`) could not run or failed.
    #[error("{tool} {}: {problem}", path.display())]
    Tool {
        /// The tool.
        tool: &'static str,
        /// The file it was run on.
        path: PathBuf,
        /// Why it could not run, or what it printed on failing.
        problem: String,
    },
    /// A state change (freezing, thawing) did not settle in time.
    #[error("{}: {what} did not settle within {waited:?}", path.display())]
    Timeout {
        /// The cgroup directory.
        path: PathBuf,
        /// The change awaited.
        what: &'static str,
        /// How long it was awaited.
        waited: Duration,
    },
    /// A container path is not valid.
    #[error(transparent)]
    InvalidPath(#[from] InvalidContainerPath),
}
