//! What this host supports, for `overbook check` and for choosing how the
//! agent works here.
//!
//! Why a plain struct: the answer is data to print and to decide on, not a
//! set of errors; a probe that cannot read something reports the feature as
//! absent and says why in `notes`. Where features depend on the hierarchy,
//! they are the ones of the hierarchy that holds the memory controller: a v1
//! host with an empty v2 mount beside (like this project's) has no
//! `cgroup.kill` for its containers.

use std::path::{Path, PathBuf};

use crate::container::CgroupVersion;
use crate::parse::{MemInfo, Mounts, Pressure, ProcCgroup};
use crate::sys;

/// Where the memory controller is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryController {
    /// The version of the hierarchy holding it.
    pub version: CgroupVersion,
    /// Where that hierarchy is mounted.
    pub mount: PathBuf,
    /// This process's own cgroup in it (a directory under `mount`).
    pub own_cgroup: Option<PathBuf>,
}

/// How containers can be frozen here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FreezerSupport {
    /// v2 `cgroup.freeze`.
    V2,
    /// The v1 freezer hierarchy, mounted here.
    V1 {
        /// Its mount point.
        mount: PathBuf,
    },
    /// No freezer: preemption can only kill (or checkpoint).
    None,
}

/// What the host supports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSupport {
    /// The memory controller, if any hierarchy has it.
    pub memory: Option<MemoryController>,
    /// System-wide PSI (`/proc/pressure/memory` readable).
    pub psi_system: bool,
    /// Per-cgroup PSI (`memory.pressure` in the memory hierarchy; v2 only).
    pub psi_per_cgroup: bool,
    /// Swap space configured, bytes (`None` if `/proc/meminfo` was unreadable).
    pub swap_total: Option<u64>,
    /// v2 `cgroup.kill` (Linux 5.14+).
    pub cgroup_kill: bool,
    /// How containers can be frozen.
    pub freezer: FreezerSupport,
    /// The v1 cpu hierarchy's mount, where the memory controller is on v1
    /// (containers' CPU shares are set there; on v2 the cpu controller is
    /// in the unified hierarchy).
    pub v1_cpu: Option<PathBuf>,
    /// The v1 cpuacct hierarchy's mount (containers' CPU time is read
    /// there); the cpu one where the two are mounted together.
    pub v1_cpuacct: Option<PathBuf>,
    /// `pidfd_open` (Linux 5.3+).
    pub pidfd: bool,
    /// `process_mrelease` (Linux 5.15+).
    pub process_mrelease: bool,
    /// The `criu` binary, if one is on `PATH` or in `/usr/sbin`, `/sbin`.
    pub criu: Option<PathBuf>,
    /// Why features were found absent, when a file could not be read.
    pub notes: Vec<String>,
}

impl HostSupport {
    /// Probes the running system. Never fails: what cannot be read is absent.
    pub fn probe() -> Self {
        let mut notes = Vec::new();
        let mounts = read("/proc/self/mounts", Mounts::parse, &mut notes).unwrap_or_default();
        let own = read("/proc/self/cgroup", ProcCgroup::parse, &mut notes).unwrap_or_default();
        let memory = memory_controller(&mounts, &own);
        if memory.is_none() {
            notes.push("no cgroup hierarchy has the memory controller".into());
        }
        let psi_system = read(
            Pressure::SYSTEM_FILE,
            |t| Pressure::parse_file(Pressure::SYSTEM_FILE, t),
            &mut notes,
        )
        .is_some();
        let swap_total =
            read(MemInfo::FILE, MemInfo::parse, &mut notes).map(|m: MemInfo| m.swap_total);
        let v2_sample = memory
            .as_ref()
            .filter(|m| m.version == CgroupVersion::V2)
            .and_then(|m| sample_cgroup(&m.mount, m.own_cgroup.as_deref()));
        let v2_mount = memory.as_ref().filter(|m| m.version == CgroupVersion::V2).map(|m| &m.mount);
        // Every process may still be in the root (a fresh VM, a host before
        // its first container): the root has no `cgroup.kill` nor
        // `cgroup.freeze`, so the kernel's version tells instead.
        let release = v2_mount
            .filter(|_| v2_sample.is_none())
            .and_then(|_| std::fs::read_to_string(OSRELEASE).ok())
            .and_then(|r| kernel_version(&r).map(|v| (r.trim().to_owned(), v)));
        if let Some((r, _)) = &release {
            notes.push(format!(
                "no non-root cgroup v2 to look in: cgroup.kill and cgroup.freeze judged from \
                 the kernel version ({r})"
            ));
        }
        let has = |file: &str, since: (u32, u32)| match (&v2_sample, &release) {
            (Some(d), _) => d.join(file).exists(),
            (None, Some((_, v))) => *v >= since,
            (None, None) => false,
        };
        // The root has `memory.pressure` too (since 5.2), as the whole system's.
        let psi_per_cgroup =
            v2_sample.as_deref().or(v2_mount.map(PathBuf::as_path)).is_some_and(|d| {
                std::fs::read_to_string(d.join(Pressure::CGROUP_FILE))
                    .is_ok_and(|t| Pressure::parse(&t).is_ok())
            });
        let freezer = if has("cgroup.freeze", (5, 2)) {
            FreezerSupport::V2
        } else if let Some(mount) = mounts.v1_controller("freezer") {
            FreezerSupport::V1 { mount: mount.to_path_buf() }
        } else {
            FreezerSupport::None
        };
        Self {
            psi_system,
            psi_per_cgroup,
            swap_total,
            cgroup_kill: has("cgroup.kill", (5, 14)),
            freezer,
            v1_cpu: mounts.v1_controller("cpu").map(Path::to_path_buf),
            v1_cpuacct: mounts.v1_controller("cpuacct").map(Path::to_path_buf),
            pidfd: has_pidfd(),
            process_mrelease: sys::has_process_mrelease(),
            criu: find_criu(),
            memory,
            notes,
        }
    }
}

fn read<T>(
    path: &'static str,
    parse: impl FnOnce(&str) -> Result<T, crate::parse::ParseError>,
    notes: &mut Vec<String>,
) -> Option<T> {
    let parsed = std::fs::read_to_string(path)
        .map_err(|e| format!("{path}: {e}"))
        .and_then(|text| parse(&text).map_err(|e| e.to_string()));
    parsed.map_err(|note| notes.push(note)).ok()
}

/// The memory controller: a v1 hierarchy with option `memory`, else the v2
/// hierarchy if its root lists `memory` in `cgroup.controllers`.
pub(crate) fn memory_controller(mounts: &Mounts, own: &ProcCgroup) -> Option<MemoryController> {
    let under =
        |mount: &Path, path: Option<&str>| path.map(|p| mount.join(p.trim_start_matches('/')));
    if let Some(mount) = mounts.v1_controller("memory") {
        return Some(MemoryController {
            version: CgroupVersion::V1,
            mount: mount.to_path_buf(),
            own_cgroup: under(mount, own.v1_path("memory")),
        });
    }
    let mount = mounts.v2()?;
    let controllers = std::fs::read_to_string(mount.join("cgroup.controllers")).ok()?;
    controllers.split_whitespace().any(|c| c == "memory").then(|| MemoryController {
        version: CgroupVersion::V2,
        mount: mount.to_path_buf(),
        own_cgroup: under(mount, own.unified_path()),
    })
}

/// A non-root v2 cgroup to look for files in (the root lacks `cgroup.kill`
/// and `cgroup.freeze`): our own if it is not the root, else any child.
fn sample_cgroup(mount: &Path, own: Option<&Path>) -> Option<PathBuf> {
    if let Some(own) = own.filter(|o| *o != mount && o.is_dir()) {
        return Some(own.to_path_buf());
    }
    std::fs::read_dir(mount)
        .ok()?
        .filter_map(Result::ok)
        .find(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
}

/// The running kernel's release, e.g. `6.1.0-56-amd64`.
const OSRELEASE: &str = "/proc/sys/kernel/osrelease";

/// Major and minor version of a kernel release string (`6.1.0-56-amd64`).
pub(crate) fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn has_pidfd() -> bool {
    rustix::process::pidfd_open(rustix::process::getpid(), rustix::process::PidfdFlags::empty())
        .is_ok()
}

pub(crate) fn find_criu() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join("criu"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_fixture_has_v1_memory() {
        let mounts = Mounts::parse(include_str!("../tests/fixtures/proc/mounts")).expect("parses");
        let own =
            ProcCgroup::parse(include_str!("../tests/fixtures/proc/self-cgroup")).expect("parses");
        let m = memory_controller(&mounts, &own).expect("memory controller");
        assert_eq!(m.version, CgroupVersion::V1);
        assert_eq!(m.mount, PathBuf::from("/sys/fs/cgroup/memory"));
        assert!(m.own_cgroup.is_some_and(|p| p.starts_with("/sys/fs/cgroup/memory/process_api")));
    }

    #[test]
    fn kernel_versions() {
        assert_eq!(kernel_version("6.1.0-56-amd64\n"), Some((6, 1)));
        assert_eq!(kernel_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(kernel_version("5.14"), Some((5, 14)));
        assert!(kernel_version("5.13.0").is_some_and(|v| v < (5, 14)));
        assert_eq!(kernel_version("6"), None);
        assert_eq!(kernel_version(""), None);
        assert_eq!(kernel_version("x.y"), None);
    }

    #[test]
    fn no_cgroups_no_controller() {
        assert_eq!(memory_controller(&Mounts::default(), &ProcCgroup::default()), None);
    }
}
