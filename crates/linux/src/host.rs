//! Node-wide figures from procfs: memory and swap (`/proc/meminfo`),
//! memory pressure (`/proc/pressure/memory`), memory event counters
//! (`/proc/vmstat`) and CPU time (`/proc/stat`).
//!
//! Why apart from the cgroup traits: they describe the machine, not a
//! container, and are the same whatever the cgroup version.

use std::path::Path;

use crate::error::CgroupError;
use crate::fsio;
use crate::parse::{CpuTimes, MemInfo, Pressure, VmStat};

/// System-wide PSI for memory.
pub const SYSTEM_PRESSURE: &str = "/proc/pressure/memory";

/// The machine's memory and swap.
pub fn meminfo() -> Result<MemInfo, CgroupError> {
    fsio::read_proc(MemInfo::FILE, MemInfo::parse)
}

/// The machine's memory event counters since boot.
pub fn vmstat() -> Result<VmStat, CgroupError> {
    fsio::read_proc(VmStat::FILE, VmStat::parse)
}

/// The machine's CPU time since boot.
pub fn cpu_times() -> Result<CpuTimes, CgroupError> {
    fsio::read_proc(CpuTimes::FILE, CpuTimes::parse)
}

/// The machine's memory pressure, or `None` where the kernel has no PSI
/// (built without it, or booted with `psi=0`).
pub fn system_pressure() -> Result<Option<Pressure>, CgroupError> {
    let path = Path::new(SYSTEM_PRESSURE);
    match std::fs::read_to_string(path) {
        Ok(text) => fsio::parse_at(path, &text, Pressure::parse).map(Some),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::EOPNOTSUPP)) => {
            Ok(None)
        }
        Err(source) => Err(CgroupError::Io { op: "read", path: path.to_path_buf(), source }),
    }
}

/// What [`protect_self`] achieved.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SelfProtection {
    /// All of the process's memory is locked in RAM (`mlockall`).
    pub memory_locked: bool,
    /// The kernel OOM killer will never pick this process (`-1000`).
    pub oom_exempt: bool,
    /// Why a step failed.
    pub problems: Vec<String>,
}

/// Makes this process safe to run under the memory pressure it must
/// relieve: its pages never swapped or reclaimed (so the kill path never
/// faults), and never chosen by the kernel's OOM killer. Each step that
/// fails is reported, not fatal.
pub fn protect_self() -> SelfProtection {
    use rustix::mm::{mlockall, MlockAllFlags};
    let mut p = SelfProtection::default();
    // Everything mapped now is faulted in and locked; what is mapped later
    // (threads' 2 MiB stacks, heap growth) is locked as it is touched, so
    // the agent's resident set stays what it uses (ONFAULT, Linux 4.4+).
    let now = mlockall(MlockAllFlags::CURRENT);
    let later = now.and_then(|()| {
        mlockall(MlockAllFlags::CURRENT | MlockAllFlags::FUTURE | MlockAllFlags::ONFAULT)
    });
    match later {
        Ok(()) => p.memory_locked = true,
        Err(e) => p.problems.push(format!("mlockall: {e}")),
    }
    match std::fs::write("/proc/self/oom_score_adj", "-1000") {
        Ok(()) => p.oom_exempt = true,
        Err(e) => p.problems.push(format!("/proc/self/oom_score_adj: {e}")),
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_has_meminfo() {
        let m = meminfo().expect("/proc/meminfo reads");
        assert!(m.total > 0);
        assert!(m.available_or_free() <= m.total);
    }
}
