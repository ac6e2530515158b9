//! The two small traits the agent drives containers through.
//!
//! Why traits: the agent's loop and executor are written once and tested
//! against a fake; [`crate::V1Cgroups`] and [`crate::V2Cgroups`] implement
//! them on real kernels. Reading and lifecycle ([`ContainerCgroups`]) are
//! apart from the preemption and protection actions ([`ContainerControl`]),
//! so an observer can be handed only the first. Every operation on a
//! container may find it gone: that is [`Outcome::Vanished`], not an error.

use std::time::Duration;

use crate::container::{
    CgroupVersion, ContainerPath, KillReport, MemoryCounters, Outcome, Protection,
};
use crate::error::CgroupError;
use crate::parse::{CgroupProcs, FreezerState, Limit, Pid};

/// Finding, reading, creating and removing containers' cgroups.
pub trait ContainerCgroups {
    /// The cgroup version underneath.
    fn version(&self) -> CgroupVersion;

    /// The containers directly under `parent`, sorted by name.
    fn discover(&self, parent: &ContainerPath) -> Result<Outcome<Vec<ContainerPath>>, CgroupError>;

    /// Usage, faults, refaults, swap and (v2) pressure of a container.
    fn counters(&self, container: &ContainerPath) -> Result<Outcome<MemoryCounters>, CgroupError>;

    /// The processes in a container (not in its children).
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
}

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

    /// Sets memory protection and limits. Knobs the version lacks are refused
    /// before anything is written.
    fn protect(
        &self,
        container: &ContainerPath,
        protection: &Protection,
    ) -> Result<Outcome<()>, CgroupError>;
}

/// How long `kill` waits for a container to freeze before signalling it
/// anyway; freezing a busy 512 MiB process took ~5 ms on the test host.
pub(crate) const FREEZE_BEFORE_KILL: Duration = Duration::from_millis(500);
