//! overbook's kernel boundary: everything the agent asks of Linux about
//! memory, and every action it takes on containers.
//!
//! Why a crate of its own: the policy core stays pure, and this crate is the
//! one place that reads cgroupfs and procfs, makes syscalls, and knows the
//! difference between cgroup v1 and v2. It is three layers:
//!
//! * [`parse`]: one type per kernel file, parsed from text, never touching
//!   the system (tested on literal kernel text and fuzzed);
//! * [`ContainerCgroups`] and [`ContainerControl`]: small traits in the
//!   agent's terms (discover, counters, create, freeze, kill, protect), with
//!   [`V1Cgroups`] and [`V2Cgroups`] implementing them;
//! * [`HostSupport::probe`]: what this host can do, for `overbook check`.
//!
//! Beside them, [`criu`] checkpoints and restores process trees with CRIU,
//! [`spawn`] starts a program inside a cgroup, [`process`] answers about
//! and acts on single processes (existence, reaping, OOM score, procfs
//! figures), [`host`] describes the machine, [`swap`] adds a swap file for
//! a demo, and [`fastread`] reads one counter without allocating, for
//! benchmarks' millisecond samplers.
//!
//! All `unsafe` lives in one private module (`sys`), for the one syscall no
//! well-kept crate wraps (`process_mrelease`) and the one hook run between
//! `fork` and `exec` (joining a cgroup, see [`spawn`]).

mod cgroups;
mod container;
pub mod criu;
mod error;
pub mod fastread;
mod fsio;
pub mod host;
mod kill;
pub mod kubepods;
mod node;
pub mod parse;
mod probe;
pub mod process;
pub mod psi;
pub mod spawn;
pub mod swap;
mod sys;
mod v1;
mod v2;

pub use cgroups::{ContainerCgroups, ContainerControl, ReclaimFn};
pub use container::{
    CgroupVersion, ContainerPath, CpuMax, CpuShare, Discovery, InvalidContainerPath, KillMethod,
    KillReport, MemoryCounters, Outcome, Protection, SwapPolicy,
};
pub use error::CgroupError;
pub use node::{host_cgroups, own_memory_cgroup, NodeCgroups};
pub use parse::{Limit, Pid};
pub use probe::{FreezerSupport, HostSupport, MemoryController};
pub use v1::V1Cgroups;
pub use v2::V2Cgroups;
