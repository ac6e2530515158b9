//! The host's cgroups with the moment of every kill noted, so the benchmark
//! knows when the agent issued its kill without changing the agent.

use overbook_linux::parse::{CgroupProcs, FreezerState};
use overbook_linux::{
    CgroupError, CgroupVersion, ContainerCgroups, ContainerControl, ContainerPath, KillReport,
    Limit, MemoryCounters, Outcome, Pid, Protection,
};
use std::cell::Cell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// `inner`, with the instant each `kill` was entered and returned.
#[derive(Debug)]
pub struct Timed<C> {
    pub inner: C,
    pub kill_entered: Rc<Cell<Option<Instant>>>,
    pub kill_returned: Rc<Cell<Option<Instant>>>,
}

impl<C> Timed<C> {
    pub fn new(inner: C) -> Self {
        Timed { inner, kill_entered: Rc::default(), kill_returned: Rc::default() }
    }
}

impl<C: ContainerCgroups> ContainerCgroups for Timed<C> {
    fn version(&self) -> CgroupVersion {
        self.inner.version()
    }
    fn discover_all(
        &self,
        parent: &ContainerPath,
    ) -> Result<Outcome<overbook_linux::Discovery>, CgroupError> {
        self.inner.discover_all(parent)
    }
    fn counters(&self, container: &ContainerPath) -> Result<Outcome<MemoryCounters>, CgroupError> {
        self.inner.counters(container)
    }
    fn usage(&self, container: &ContainerPath) -> Result<Outcome<u64>, CgroupError> {
        self.inner.usage(container)
    }
    fn members(&self, container: &ContainerPath) -> Result<Outcome<CgroupProcs>, CgroupError> {
        self.inner.members(container)
    }
    fn create(
        &self,
        container: &ContainerPath,
        limit: Option<Limit>,
    ) -> Result<Outcome<()>, CgroupError> {
        self.inner.create(container, limit)
    }
    fn remove(&self, container: &ContainerPath) -> Result<Outcome<()>, CgroupError> {
        self.inner.remove(container)
    }
    fn add_process(&self, container: &ContainerPath, pid: Pid) -> Result<Outcome<()>, CgroupError> {
        self.inner.add_process(container, pid)
    }
    fn limit(&self, container: &ContainerPath) -> Result<Outcome<Limit>, CgroupError> {
        self.inner.limit(container)
    }
    fn join_files(&self, container: &ContainerPath) -> Vec<PathBuf> {
        self.inner.join_files(container)
    }
    fn limit_hits(&self, container: &ContainerPath) -> Result<Outcome<Option<u64>>, CgroupError> {
        self.inner.limit_hits(container)
    }
    fn peak(&self, container: &ContainerPath) -> Result<Outcome<Option<u64>>, CgroupError> {
        self.inner.peak(container)
    }
    fn pressure_file(&self, container: &ContainerPath) -> Option<PathBuf> {
        self.inner.pressure_file(container)
    }
}

impl<C: ContainerControl> ContainerControl for Timed<C> {
    fn freezer_state(
        &self,
        container: &ContainerPath,
    ) -> Result<Outcome<FreezerState>, CgroupError> {
        self.inner.freezer_state(container)
    }
    fn freeze(
        &self,
        container: &ContainerPath,
        within: Duration,
    ) -> Result<Outcome<()>, CgroupError> {
        self.inner.freeze(container, within)
    }
    fn thaw(
        &self,
        container: &ContainerPath,
        within: Duration,
    ) -> Result<Outcome<()>, CgroupError> {
        self.inner.thaw(container, within)
    }
    fn kill(&self, container: &ContainerPath) -> Result<Outcome<KillReport>, CgroupError> {
        self.kill_entered.set(Some(Instant::now()));
        let r = self.inner.kill(container);
        self.kill_returned.set(Some(Instant::now()));
        r
    }
    fn release_empty(&self, container: &ContainerPath) -> Result<Outcome<()>, CgroupError> {
        self.inner.release_empty(container)
    }
    fn reclaim(&self, container: &ContainerPath, bytes: u64) -> Result<Outcome<u64>, CgroupError> {
        self.inner.reclaim(container, bytes)
    }
    fn background_reclaim(&self) -> overbook_linux::ReclaimFn {
        self.inner.background_reclaim()
    }
    fn protect(
        &self,
        container: &ContainerPath,
        protection: &Protection,
    ) -> Result<Outcome<()>, CgroupError> {
        self.inner.protect(container, protection)
    }
    fn set_cpu_share(
        &self,
        container: &ContainerPath,
        share: overbook_linux::CpuShare,
    ) -> Result<Outcome<String>, CgroupError> {
        self.inner.set_cpu_share(container, share)
    }
    fn set_cpu_max(
        &self,
        container: &ContainerPath,
        max: overbook_linux::CpuMax,
    ) -> Result<Outcome<String>, CgroupError> {
        self.inner.set_cpu_max(container, max)
    }
    fn cpu_used(
        &self,
        container: &ContainerPath,
    ) -> Result<Outcome<std::time::Duration>, CgroupError> {
        self.inner.cpu_used(container)
    }
}
