//! Node-wide figures from procfs and sysfs: memory and swap (`/proc/meminfo`,
//! `/proc/swaps`), memory pressure (`/proc/pressure/memory`), memory event
//! counters (`/proc/vmstat`), CPU time (`/proc/stat`), the kernel's
//! transparent huge page mode, and what a report records of the machine
//! (kernel release, host name, CPU model, swappiness).
//!
//! Why apart from the cgroup traits: they describe the machine, not a
//! container, and are the same whatever the cgroup version.

use std::path::Path;

use crate::error::CgroupError;
use crate::fsio;
use crate::parse::{single_line, CpuInfo, CpuTimes, MemInfo, ParseError, Pressure, Swaps, VmStat};

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

/// The machine's busy CPU time since boot, summed over its CPUs: neither
/// idle nor waiting on I/O (time a hypervisor stole counts as busy: it was
/// not this machine's to give); and how many CPUs it is summed over.
pub fn cpu_busy() -> Result<(std::time::Duration, usize), CgroupError> {
    let t = cpu_times()?;
    let hz = rustix::param::clock_ticks_per_second().max(1);
    let busy = t.total.saturating_sub(t.idle).saturating_sub(t.iowait);
    let time = std::time::Duration::from_secs(busy / hz)
        + std::time::Duration::from_nanos((busy % hz) * 1_000_000_000 / hz);
    Ok((time, t.cpus))
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

/// The swap areas in use.
pub fn swaps() -> Result<Swaps, CgroupError> {
    fsio::read_proc(Swaps::FILE, Swaps::parse)
}

/// The CPU model (x86's `model name`); `None` where the architecture
/// prints none.
pub fn cpu_model() -> Result<Option<String>, CgroupError> {
    fsio::read_proc(CpuInfo::FILE, CpuInfo::parse).map(|c| c.model_name)
}

/// The running kernel's release (`uname -r`), e.g. `6.1.0-18-amd64`.
pub fn kernel_release() -> Result<String, CgroupError> {
    const FILE: &str = "/proc/sys/kernel/osrelease";
    fsio::read_proc(FILE, |text| word(FILE, text))
}

/// This machine's host name (`uname -n`).
pub fn hostname() -> Result<String, CgroupError> {
    const FILE: &str = "/proc/sys/kernel/hostname";
    fsio::read_proc(FILE, |text| word(FILE, text))
}

/// The kernel's global swappiness (0 to 200; 60 by default), which every
/// cgroup v2 container and every v1 container without its own follows.
pub fn swappiness() -> Result<u32, CgroupError> {
    const FILE: &str = "/proc/sys/vm/swappiness";
    fsio::read_proc(FILE, |text| {
        let (number, value) = single_line(FILE, text)?;
        let n = crate::parse::count(FILE, number, "swappiness", value)?;
        u32::try_from(n).map_err(|_| crate::parse::bad_value(FILE, number, "swappiness", value))
    })
}

/// Where the kernel backs anonymous memory with transparent huge pages
/// (`/sys/kernel/mm/transparent_hugepage/enabled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransparentHugePages {
    /// Every anonymous mapping large enough.
    Always,
    /// Only mappings that ask (`madvise(MADV_HUGEPAGE)`), as glibc's
    /// allocator does with `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`.
    Madvise,
    Never,
}

/// The kernel's transparent huge page mode, or `None` where the kernel
/// has none (built without `CONFIG_TRANSPARENT_HUGEPAGE`: no file).
pub fn transparent_huge_pages() -> Result<Option<TransparentHugePages>, CgroupError> {
    const FILE: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
    let path = Path::new(FILE);
    match std::fs::read_to_string(path) {
        Ok(text) => fsio::parse_at(path, &text, |t| huge_page_mode(FILE, t)).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CgroupError::Io { op: "read", path: path.to_path_buf(), source }),
    }
}

/// The bracketed word of `always [madvise] never`.
fn huge_page_mode(file: &'static str, text: &str) -> Result<TransparentHugePages, ParseError> {
    let (number, line) = single_line(file, text)?;
    let chosen =
        line.split_whitespace().find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')));
    match chosen {
        Some("always") => Ok(TransparentHugePages::Always),
        Some("madvise") => Ok(TransparentHugePages::Madvise),
        Some("never") => Ok(TransparentHugePages::Never),
        _ => Err(crate::parse::bad_value(file, number, "mode", line)),
    }
}

/// The one line of a one-value sysctl file, trimmed.
fn word(file: &'static str, text: &str) -> Result<String, ParseError> {
    single_line(file, text).map(|(_, line)| line.to_owned())
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
    fn the_huge_page_mode_is_the_bracketed_word() {
        let f = "/sys/kernel/mm/transparent_hugepage/enabled";
        assert_eq!(
            huge_page_mode(f, "always [madvise] never\n"),
            Ok(TransparentHugePages::Madvise)
        );
        assert_eq!(huge_page_mode(f, "[always] madvise never"), Ok(TransparentHugePages::Always));
        assert_eq!(huge_page_mode(f, "always madvise [never]\n"), Ok(TransparentHugePages::Never));
        for bad in ["always madvise never", "always [sometimes] never", ""] {
            let e = huge_page_mode(f, bad).expect_err(bad).to_string();
            assert!(e.contains(f), "{bad:?}: {e}");
        }
    }

    #[test]
    fn this_machine_says_its_huge_page_mode() {
        // Absent only on a kernel built without them; never unreadable.
        let mode = transparent_huge_pages().expect("readable where present");
        let present = Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists();
        assert_eq!(mode.is_some(), present, "{mode:?}");
    }

    #[test]
    fn this_machine_has_meminfo() {
        let m = meminfo().expect("/proc/meminfo reads");
        assert!(m.total > 0);
        assert!(m.available_or_free() <= m.total);
    }

    #[test]
    fn this_machine_describes_itself() {
        let release = kernel_release().expect("osrelease reads");
        assert!(release.chars().next().is_some_and(|c| c.is_ascii_digit()), "{release}");
        assert!(!release.contains('\n'));
        let name = hostname().expect("hostname reads");
        assert!(!name.is_empty() && !name.contains('\n'));
        assert!(swappiness().expect("swappiness reads") <= 200);
        let swaps = swaps().expect("/proc/swaps reads");
        assert!(swaps.areas.iter().all(|a| a.used <= a.size));
        if cfg!(target_arch = "x86_64") {
            assert!(cpu_model().expect("cpuinfo reads").is_some_and(|m| !m.is_empty()));
        }
    }

    #[test]
    fn one_value_files_are_one_line() {
        assert_eq!(word("f", "6.1.0\n"), Ok("6.1.0".to_owned()));
        assert!(word("f", "").is_err());
        assert!(word("f", "a\nb\n").is_err());
    }
}
