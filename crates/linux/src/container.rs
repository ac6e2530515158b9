//! The domain types shared by both cgroup versions: which container, what
//! it uses, how it is protected, and what a kill did.
//!
//! Why: the agent speaks of containers, not of v1 or v2 files; these types
//! are what [`crate::ContainerCgroups`] and [`crate::ContainerControl`] take
//! and return, whatever the kernel underneath.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::parse::{Limit, Pressure};

/// A container's cgroup, as a path relative to the root the implementation
/// manages (a v1 "node" cgroup, a v2 subtree). The empty path is that root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ContainerPath(String);

/// Why a string is not a [`ContainerPath`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid container path `{path}`: {reason}")]
pub struct InvalidContainerPath {
    /// The string given.
    pub path: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl ContainerPath {
    /// The managed root itself.
    pub fn root() -> Self {
        Self(String::new())
    }

    /// A path of `/`-separated names. Leading and trailing `/` are ignored;
    /// empty names, `.`, `..`, and names with control characters are refused
    /// (the last because `/proc/<pid>/cgroup` is line-based).
    pub fn new(path: &str) -> Result<Self, InvalidContainerPath> {
        let trimmed = path.trim_matches('/');
        if trimmed.is_empty() {
            return Ok(Self::root());
        }
        for name in trimmed.split('/') {
            check_name(name)
                .map_err(|reason| InvalidContainerPath { path: path.into(), reason })?;
        }
        Ok(Self(trimmed.to_owned()))
    }

    /// The child `name` of this container.
    pub fn child(&self, name: &str) -> Result<Self, InvalidContainerPath> {
        check_name(name).map_err(|reason| InvalidContainerPath { path: name.into(), reason })?;
        Ok(if self.0.is_empty() {
            Self(name.to_owned())
        } else {
            Self(format!("{}/{name}", self.0))
        })
    }

    /// The parent, or `None` for the root.
    pub fn parent(&self) -> Option<Self> {
        if self.0.is_empty() {
            return None;
        }
        Some(match self.0.rsplit_once('/') {
            Some((parent, _)) => Self(parent.to_owned()),
            None => Self::root(),
        })
    }

    /// The last name ("" for the root).
    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or_default()
    }

    /// The path as given, without leading `/`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the managed root.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The directory of this container under `base`.
    pub fn dir_under(&self, base: &Path) -> PathBuf {
        if self.0.is_empty() {
            base.to_path_buf()
        } else {
            base.join(&self.0)
        }
    }
}

fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        Err("empty name")
    } else if name == "." || name == ".." {
        Err("`.` and `..` are not names")
    } else if name.contains('/') {
        Err("`/` inside a name")
    } else if name.chars().any(char::is_control) {
        Err("control character in a name")
    } else {
        Ok(())
    }
}

impl fmt::Display for ContainerPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "/{}", self.0)
    }
}

/// What a look under a parent cgroup found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovery {
    /// The containers, sorted by name.
    pub containers: Vec<ContainerPath>,
    /// Child directories that are no container (their name has a control
    /// character or is not UTF-8), shown lossily: skipped, and to be told.
    pub skipped: Vec<String>,
}

/// The result of an operation on a container that may have disappeared
/// meanwhile: a container exiting or removed by someone else is a normal
/// event on a busy node, not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Outcome<T> {
    /// The operation completed (a read returned this value).
    Done(T),
    /// The container's cgroup was gone (`ENOENT`/`ENODEV` mid-operation).
    Vanished,
}

impl<T> Outcome<T> {
    /// The value, or `None` if the cgroup vanished.
    pub fn done(self) -> Option<T> {
        match self {
            Self::Done(v) => Some(v),
            Self::Vanished => None,
        }
    }

    /// Whether the cgroup vanished.
    pub fn is_vanished(&self) -> bool {
        matches!(self, Self::Vanished)
    }

    /// Maps the value.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        match self {
            Self::Done(v) => Outcome::Done(f(v)),
            Self::Vanished => Outcome::Vanished,
        }
    }
}

/// Unwraps an `Outcome` inside a function returning `Result<Outcome<_>, _>`:
/// yields the value, or returns `Ok(Outcome::Vanished)`.
macro_rules! done_or_return {
    ($e:expr) => {
        match $e {
            $crate::Outcome::Done(v) => v,
            $crate::Outcome::Vanished => return Ok($crate::Outcome::Vanished),
        }
    };
}
pub(crate) use done_or_return;

/// Which cgroup version an implementation drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CgroupVersion {
    /// Legacy hierarchies, one per controller.
    V1,
    /// The unified hierarchy.
    V2,
}

/// The names of the files a reader goes to directly (a benchmark's ~1 ms
/// sampler, which cannot afford [`crate::ContainerCgroups::counters`]):
/// the same figure is in a differently named file in each version.
impl CgroupVersion {
    /// The memory charged to a cgroup now, bytes, alone in its file.
    pub fn usage_file(self) -> &'static str {
        match self {
            Self::V1 => "memory.usage_in_bytes",
            Self::V2 => "memory.current",
        }
    }

    /// A cgroup's hard memory limit (written as bytes in both versions).
    pub fn limit_file(self) -> &'static str {
        match self {
            Self::V1 => "memory.limit_in_bytes",
            Self::V2 => "memory.max",
        }
    }

    /// The flat keyed file with a cgroup's `oom_kill` counter (v1 has it
    /// since Linux 4.13).
    pub fn oom_events_file(self) -> &'static str {
        match self {
            Self::V1 => "memory.oom_control",
            Self::V2 => "memory.events",
        }
    }
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::V1 => "cgroup v1",
            Self::V2 => "cgroup v2",
        })
    }
}

/// A container's memory counters, the same on both versions. Counters are
/// hierarchical (the container and everything under it) and cumulative
/// since the cgroup was created; the detector turns them into rates.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MemoryCounters {
    /// Memory charged now, bytes (v2 `memory.current`, v1 `memory.usage_in_bytes`).
    pub usage: u64,
    /// Major page faults (`pgmajfault`).
    pub major_faults: u64,
    /// Refaults of anonymous pages; `None` before 5.9.
    pub refault_anon: Option<u64>,
    /// Refaults of file pages; older kernels' `workingset_refault` counts here.
    pub refault_file: Option<u64>,
    /// Swap used, bytes; `None` without swap accounting.
    pub swap: Option<u64>,
    /// Page cache on the inactive file LRU, bytes: what the kernel drops
    /// first, without swap (`usage - inactive_file` is the kubelet's
    /// "working set").
    pub inactive_file: u64,
    /// Processes the kernel's OOM killer killed in the container (v2
    /// `memory.events` `oom_kill`, v1 `memory.oom_control`); `None` where
    /// the kernel does not count them.
    pub oom_kills: Option<u64>,
    /// Times usage reached the container's limit and had to reclaim to
    /// charge more (v2 `memory.events` `max`; on v1 `None` here, see
    /// [`crate::ContainerCgroups::limit_hits`]).
    pub limit_hits: Option<u64>,
    /// The container's own memory PSI; `None` on v1 or with PSI off.
    pub pressure: Option<Pressure>,
}

/// How the swap of a container is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwapPolicy {
    /// Never swap this container out (v2 `memory.swap.max` = 0,
    /// v1 `memory.swappiness` = 0): the "swap bypass" of critical containers.
    Never,
    /// v2 only: at most this much swap (`memory.swap.max`).
    Limit(Limit),
    /// v1 only: `memory.swappiness`, 0..=100 (200 on recent kernels).
    Swappiness(u8),
}

/// Memory protection and limits for a container; `None` leaves a knob as it
/// is. A knob the version lacks makes [`crate::ContainerControl::protect`]
/// fail with `Unsupported` before anything is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Protection {
    /// Memory never reclaimed (v2 `memory.min`; no v1 equivalent).
    pub min: Option<Limit>,
    /// Memory reclaimed only when nothing unprotected is left (v2 `memory.low`;
    /// v1 `memory.soft_limit_in_bytes`, whose excess is reclaimed first).
    pub low: Option<Limit>,
    /// Usage above which the container is throttled and reclaimed (v2
    /// `memory.high`; no v1 equivalent).
    pub high: Option<Limit>,
    /// Hard limit (v2 `memory.max`, v1 `memory.limit_in_bytes`).
    pub max: Option<Limit>,
    /// Swap handling.
    pub swap: Option<SwapPolicy>,
}

/// A container's share of the CPU against its siblings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuShare {
    /// On v2's `cpu.weight` scale, 1 to 10000 (100 is the kernel's
    /// default); v1 `cpu.shares` of weight × 1024 / 100, at least 2.
    Weight(u32),
    /// Only CPU no one else wants: `cpu.idle` (v2, and v1 where the kernel
    /// has it, 5.15+), else the lowest weight.
    Idle,
}

/// A ceiling on a container's CPU time (CFS bandwidth), whatever the
/// CPU is free: a share only orders who runs first, and a best-effort
/// job at the lowest share still keeps a CPU busy that production's
/// wakeups could have had at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuMax {
    /// No ceiling (v2 `cpu.max = max`, v1 `cpu.cfs_quota_us = -1`).
    Unlimited,
    /// At most this many microseconds of CPU in every period of
    /// [`CpuMax::PERIOD_US`] (the kernel refuses less than 1,000).
    Quota(u64),
}

impl CpuMax {
    /// The accounting period: the kernel's default, 100 ms.
    pub const PERIOD_US: u64 = 100_000;

    /// A ceiling of `cores` CPUs (0.25: a quarter of one), at least the
    /// kernel's smallest quota (1 ms a period).
    // `as` saturates: a negative or NaN value becomes 0 (then the
    // smallest quota), a huge one u64::MAX; the agent's config refuses both
    // before they get here.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn cores(cores: f64) -> CpuMax {
        let us = (cores * Self::PERIOD_US as f64).round();
        CpuMax::Quota((us as u64).max(1_000))
    }
}

impl CpuShare {
    /// The v1 `cpu.shares` of a weight.
    pub fn v1_shares(weight: u32) -> u64 {
        (u64::from(weight.clamp(1, 10_000)) * 1024 / 100).max(2)
    }
}

/// How a container was killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillMethod {
    /// v2 `cgroup.kill`: the kernel signalled every member, new forks too.
    CgroupKill,
    /// `pidfd_send_signal(SIGKILL)` to each member (the container frozen
    /// first where a freezer exists, so none could fork away).
    Pidfd,
}

/// What a kill did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KillReport {
    /// How members were signalled.
    pub method: KillMethod,
    /// Members signalled (by overbook with pidfds, or found before `cgroup.kill`).
    pub signalled: usize,
    /// Members whose memory `process_mrelease` reaped at once.
    pub reaped: usize,
    /// Members `process_mrelease` could not reap (already gone, not yet
    /// dying, or the syscall is missing); their memory is freed by their exit.
    pub not_reaped: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_ceiling_is_a_quota_of_100_ms_and_never_below_the_kernel_s_least() {
        assert_eq!(CpuMax::cores(0.25), CpuMax::Quota(25_000));
        assert_eq!(CpuMax::cores(2.0), CpuMax::Quota(200_000), "more than one CPU");
        assert_eq!(CpuMax::cores(0.5 / 3.0), CpuMax::Quota(16_667));
        assert_eq!(CpuMax::cores(0.001), CpuMax::Quota(1_000), "the kernel refuses less");
        assert_eq!(CpuMax::cores(f64::NAN), CpuMax::Quota(1_000));
    }

    #[test]
    fn container_paths() {
        let p = ContainerPath::new("/a/b/").expect("valid");
        assert_eq!(p.as_str(), "a/b");
        assert_eq!(p.to_string(), "/a/b");
        assert_eq!(p.name(), "b");
        assert_eq!(p.parent(), Some(ContainerPath::new("a").expect("valid")));
        assert_eq!(p.parent().and_then(|p| p.parent()), Some(ContainerPath::root()));
        assert_eq!(ContainerPath::root().parent(), None);
        assert_eq!(ContainerPath::root().child("x").map(|c| c.as_str().to_owned()), Ok("x".into()));
        assert_eq!(p.dir_under(Path::new("/m")), PathBuf::from("/m/a/b"));
        assert_eq!(ContainerPath::root().dir_under(Path::new("/m")), PathBuf::from("/m"));
        assert!(ContainerPath::new("/").is_ok_and(|p| p.is_root()));
        for bad in ["a//b", "a/../b", "./a", "a\nb"] {
            assert!(ContainerPath::new(bad).is_err(), "{bad:?}");
        }
        assert!(p.child("x/y").is_err());
    }

    #[test]
    fn file_names_per_version_are_the_kernels() {
        // Each name is a file captured from (v1) or written for (v2) that version.
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        for (version, dir) in [(CgroupVersion::V1, "v1"), (CgroupVersion::V2, "v2")] {
            for file in [version.usage_file(), version.limit_file(), version.oom_events_file()] {
                assert!(fixtures.join(dir).join(file).is_file(), "{dir}/{file}");
            }
        }
        assert_ne!(CgroupVersion::V1.usage_file(), CgroupVersion::V2.usage_file());
    }

    #[test]
    fn outcomes() {
        assert_eq!(Outcome::Done(2).map(|x| x * 2).done(), Some(4));
        assert!(Outcome::<u8>::Vanished.is_vanished());
    }
}
