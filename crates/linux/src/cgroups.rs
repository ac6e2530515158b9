//! The two small traits the agent drives containers through.
//!
//! Why traits: the agent's loop and executor are written once and tested
//! against a fake; [`crate::V1Cgroups`] and [`crate::V2Cgroups`] implement
//! them on real kernels. Reading and lifecycle ([`ContainerCgroups`]) are
//! apart from the preemption and protection actions ([`ContainerControl`]),
//! so an observer can be handed only the first. Every operation on a
//! container may find it gone: that is [`Outcome::Vanished`], not an error.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::container::{
    CgroupVersion, ContainerPath, CpuMax, CpuShare, Discovery, KillReport, MemoryCounters, Outcome,
    Protection,
};
use crate::error::CgroupError;
use crate::parse::{CgroupProcs, FreezerState, Limit, Pid};

/// Finding, reading, creating and removing containers' cgroups.
pub trait ContainerCgroups {
    /// The cgroup version underneath.
    fn version(&self) -> CgroupVersion;

    /// The containers directly under `parent`, sorted by name, and the
    /// child directories skipped because their name is no container name
    /// (a control character, not UTF-8): one odd directory must not blind
    /// the agent to every other container, nor go unreported.
    fn discover_all(&self, parent: &ContainerPath) -> Result<Outcome<Discovery>, CgroupError>;

    /// The containers directly under `parent`, sorted by name (the skipped
    /// ones left out).
    fn discover(&self, parent: &ContainerPath) -> Result<Outcome<Vec<ContainerPath>>, CgroupError> {
        Ok(match self.discover_all(parent)? {
            Outcome::Done(d) => Outcome::Done(d.containers),
            Outcome::Vanished => Outcome::Vanished,
        })
    }

    /// Usage, faults, refaults, swap and (v2) pressure of a container.
    fn counters(&self, container: &ContainerPath) -> Result<Outcome<MemoryCounters>, CgroupError>;

    /// A container's memory usage alone: one small file where the kernel
    /// has it, for what is looked at every tick (the counters read
    /// `memory.stat` too, which costs the kernel a walk of the subtree).
    fn usage(&self, container: &ContainerPath) -> Result<Outcome<u64>, CgroupError> {
        Ok(match self.counters(container)? {
            Outcome::Done(c) => Outcome::Done(c.usage),
            Outcome::Vanished => Outcome::Vanished,
        })
    }

    /// The processes in a container and in every cgroup below it.
    fn members(&self, container: &ContainerPath) -> Result<Outcome<CgroupProcs>, CgroupError>;

    /// Creates a container's cgroup under an existing parent, with a memory
    /// limit if given. `Vanished` means the parent is gone. A container that
    /// already exists is `CgroupError::Exists`. If setting the limit fails,
    /// the new cgroup is removed again.
    fn create(
        &self,
        container: &ContainerPath,
        limit: Option<Limit>,
    ) -> Result<Outcome<()>, CgroupError>;

    /// Removes an empty container's cgroup; `Vanished` if it was already gone.
    fn remove(&self, container: &ContainerPath) -> Result<Outcome<()>, CgroupError>;

    /// Moves a process (with all its threads) into a container.
    fn add_process(&self, container: &ContainerPath, pid: Pid) -> Result<Outcome<()>, CgroupError>;

    /// Times the container's usage reached its limit and had to reclaim
    /// (v1 `memory.failcnt`, v2 `memory.events` `max`); `None` where the
    /// kernel does not count them.
    fn limit_hits(&self, container: &ContainerPath) -> Result<Outcome<Option<u64>>, CgroupError>;

    /// The highest usage the kernel recorded (v1 `memory.max_usage_in_bytes`,
    /// v2 `memory.peak`, 5.19+).
    fn peak(&self, container: &ContainerPath) -> Result<Outcome<Option<u64>>, CgroupError>;

    /// A container's memory limit (`Unlimited` when none is set).
    fn limit(&self, container: &ContainerPath) -> Result<Outcome<Limit>, CgroupError>;

    /// The files a process writes its own pid to (`echo $$ > f`) to join the
    /// container in every hierarchy: one on v2, memory and freezer on v1.
    /// Why: a command must be inside its container before it `exec`s, or it
    /// could allocate outside it; a shell writing `$$` does that without
    /// `unsafe` code between `fork` and `exec`.
    fn join_files(&self, container: &ContainerPath) -> Vec<PathBuf>;

    /// The container's own PSI file for a trigger (v2 `memory.pressure`);
    /// `None` where the version has none (v1).
    fn pressure_file(&self, container: &ContainerPath) -> Option<PathBuf>;
}

/// A reclaim that can run on its own thread (see
/// [`ContainerControl::background_reclaim`]).
pub type ReclaimFn =
    Arc<dyn Fn(&ContainerPath, u64) -> Result<Outcome<u64>, CgroupError> + Send + Sync>;

/// Preempting and protecting containers.
pub trait ContainerControl {
    /// Whether a container is running, freezing or frozen.
    fn freezer_state(
        &self,
        container: &ContainerPath,
    ) -> Result<Outcome<FreezerState>, CgroupError>;

    /// Freezes a container and waits, at most `within`, until every task has
    /// stopped (`CgroupError::Timeout` otherwise; the request stays in force).
    fn freeze(
        &self,
        container: &ContainerPath,
        within: Duration,
    ) -> Result<Outcome<()>, CgroupError>;

    /// Thaws a container and waits, at most `within`, until it runs again.
    fn thaw(&self, container: &ContainerPath, within: Duration)
        -> Result<Outcome<()>, CgroupError>;

    /// Kills every process in a container with SIGKILL and reaps their
    /// memory with `process_mrelease`. Returns once every member is signalled
    /// and reaped; members may still be exiting. A frozen container is left
    /// thawed, so its members can die.
    fn kill(&self, container: &ContainerPath) -> Result<Outcome<KillReport>, CgroupError>;

    /// Asks the kernel to take `bytes` of the container's memory now (v2
    /// `memory.reclaim`; v1 its limit lowered to usage − `bytes` and put
    /// back at once). Returns the bytes its usage fell by; the kernel may
    /// take less than asked (memory it cannot drop or swap).
    fn reclaim(&self, container: &ContainerPath, bytes: u64) -> Result<Outcome<u64>, CgroupError>;

    /// [`reclaim`](Self::reclaim), callable from another thread: a
    /// frozen container's swap-out takes as long as the disk needs, and
    /// whoever watches the node must not wait for it.
    fn background_reclaim(&self) -> ReclaimFn;

    /// Drops the page cache still charged to a container with no process
    /// left (v1 `memory.force_empty`, v2 `memory.reclaim`), so that memory
    /// nobody uses stops hiding as "used" from the launcher. What the kernel
    /// cannot drop stays; a container with members is refused (`Busy`).
    fn release_empty(&self, container: &ContainerPath) -> Result<Outcome<()>, CgroupError>;

    /// Sets memory protection and limits. Knobs the version lacks are refused
    /// before anything is written.
    fn protect(
        &self,
        container: &ContainerPath,
        protection: &Protection,
    ) -> Result<Outcome<()>, CgroupError>;

    /// Sets the container's CPU share against its siblings. Returns what
    /// was written (`cpu.idle = 1`, `cpu.weight = 50`, `cpu.shares = 2`).
    /// Fails with `Unsupported` where the node's cgroups have no CPU
    /// controller for it (v2: not enabled in the parent's
    /// `cgroup.subtree_control`; v1: no cpu hierarchy mounted).
    fn set_cpu_share(
        &self,
        container: &ContainerPath,
        share: CpuShare,
    ) -> Result<Outcome<String>, CgroupError>;

    /// Sets the container's CPU ceiling (`cpu.max`, v1
    /// `cpu.cfs_quota_us` over `cpu.cfs_period_us`). Returns what was
    /// written; fails as [`ContainerControl::set_cpu_share`] does where there is no
    /// CPU controller.
    fn set_cpu_max(
        &self,
        container: &ContainerPath,
        max: CpuMax,
    ) -> Result<Outcome<String>, CgroupError>;

    /// The CPU time the container's processes have used, as the kernel
    /// counts it: v2 `cpu.stat`'s `usage_usec` (there with or without the
    /// cpu controller); v1 `cpuacct.usage` in its cpuacct cgroup, made and
    /// its members moved there as for [`ContainerControl::set_cpu_share`]. Fails with
    /// `Unsupported` on v1 without a cpuacct hierarchy.
    fn cpu_used(&self, container: &ContainerPath) -> Result<Outcome<Duration>, CgroupError>;
}

/// How long `kill` waits for a container to freeze before signalling it
/// anyway; freezing a busy 512 MiB process took ~5 ms on the test host.
pub(crate) const FREEZE_BEFORE_KILL: Duration = Duration::from_millis(500);
