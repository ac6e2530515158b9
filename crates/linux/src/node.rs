//! The host's cgroups as one object, whatever their version.
//!
//! Why: the agent is written once over [`ContainerCgroups`] and
//! [`ContainerControl`]; which implementation sits underneath is decided at
//! start-up from where the memory controller is mounted.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cgroups::{ContainerCgroups, ContainerControl};
use crate::container::{
    CgroupVersion, ContainerPath, CpuMax, CpuShare, Discovery, KillReport, MemoryCounters, Outcome,
    Protection,
};
use crate::error::CgroupError;
use crate::parse::{CgroupProcs, FreezerState, Limit, Pid};
use crate::probe::{FreezerSupport, HostSupport};
use crate::{V1Cgroups, V2Cgroups};

/// Both traits, for a boxed implementation chosen at run time.
pub trait NodeCgroups: ContainerCgroups + ContainerControl + Send + fmt::Debug {}

impl<T: ContainerCgroups + ContainerControl + Send + fmt::Debug> NodeCgroups for T {}

/// The host's cgroups rooted at the top of the hierarchy that holds the
/// memory controller (v2 if it is on the unified hierarchy, else v1 with the
/// freezer hierarchy beside it when mounted), so that container paths are
/// the ones `/proc/<pid>/cgroup` shows.
pub fn host_cgroups(host: &HostSupport) -> Result<Box<dyn NodeCgroups>, CgroupError> {
    let Some(memory) = &host.memory else {
        return Err(CgroupError::Unsupported {
            what: "no memory controller is mounted (cgroup v1 or v2)".into(),
        });
    };
    Ok(match memory.version {
        CgroupVersion::V2 => Box::new(V2Cgroups::new(memory.mount.clone())),
        CgroupVersion::V1 => {
            let freezer = match &host.freezer {
                FreezerSupport::V1 { mount } => Some(mount.clone()),
                _ => None,
            };
            let mut v1 = V1Cgroups::new(memory.mount.clone(), freezer);
            if let Some(mount) = &host.v1_cpu {
                v1 = v1.with_cpu(mount.clone());
            }
            if let Some(mount) = &host.v1_cpuacct {
                v1 = v1.with_cpuacct(mount.clone());
            }
            Box::new(v1)
        }
    })
}

/// The hierarchy path of this process's own memory cgroup (`""` for the
/// root), for tests and demos that make their node below themselves.
pub fn own_memory_cgroup(host: &HostSupport) -> Option<String> {
    let memory = host.memory.as_ref()?;
    let own: &Path = memory.own_cgroup.as_deref()?;
    let rel: PathBuf = own.strip_prefix(&memory.mount).ok()?.to_path_buf();
    Some(rel.to_string_lossy().trim_matches('/').to_string())
}

impl<T: ContainerCgroups + ?Sized> ContainerCgroups for Box<T> {
    fn version(&self) -> CgroupVersion {
        (**self).version()
    }
    fn discover_all(&self, parent: &ContainerPath) -> Result<Outcome<Discovery>, CgroupError> {
        (**self).discover_all(parent)
    }
    fn counters(&self, container: &ContainerPath) -> Result<Outcome<MemoryCounters>, CgroupError> {
        (**self).counters(container)
    }
    fn usage(&self, container: &ContainerPath) -> Result<Outcome<u64>, CgroupError> {
        (**self).usage(container)
    }
    fn members(&self, container: &ContainerPath) -> Result<Outcome<CgroupProcs>, CgroupError> {
        (**self).members(container)
    }
    fn create(
        &self,
        container: &ContainerPath,
        limit: Option<Limit>,
    ) -> Result<Outcome<()>, CgroupError> {
        (**self).create(container, limit)
    }
    fn remove(&self, container: &ContainerPath) -> Result<Outcome<()>, CgroupError> {
        (**self).remove(container)
    }
    fn add_process(&self, container: &ContainerPath, pid: Pid) -> Result<Outcome<()>, CgroupError> {
        (**self).add_process(container, pid)
    }
    fn limit_hits(&self, container: &ContainerPath) -> Result<Outcome<Option<u64>>, CgroupError> {
        (**self).limit_hits(container)
    }
    fn peak(&self, container: &ContainerPath) -> Result<Outcome<Option<u64>>, CgroupError> {
        (**self).peak(container)
    }
    fn limit(&self, container: &ContainerPath) -> Result<Outcome<Limit>, CgroupError> {
        (**self).limit(container)
    }
    fn pressure_file(&self, container: &ContainerPath) -> Option<PathBuf> {
        (**self).pressure_file(container)
    }
    fn join_files(&self, container: &ContainerPath) -> Vec<PathBuf> {
        (**self).join_files(container)
    }
}

impl<T: ContainerControl + ?Sized> ContainerControl for Box<T> {
    fn freezer_state(
        &self,
        container: &ContainerPath,
    ) -> Result<Outcome<FreezerState>, CgroupError> {
        (**self).freezer_state(container)
    }
    fn freeze(
        &self,
        container: &ContainerPath,
        within: Duration,
    ) -> Result<Outcome<()>, CgroupError> {
        (**self).freeze(container, within)
    }
    fn thaw(
        &self,
        container: &ContainerPath,
        within: Duration,
    ) -> Result<Outcome<()>, CgroupError> {
        (**self).thaw(container, within)
    }
    fn kill(&self, container: &ContainerPath) -> Result<Outcome<KillReport>, CgroupError> {
        (**self).kill(container)
    }
    fn reclaim(&self, container: &ContainerPath, bytes: u64) -> Result<Outcome<u64>, CgroupError> {
        (**self).reclaim(container, bytes)
    }
    fn background_reclaim(&self) -> crate::cgroups::ReclaimFn {
        (**self).background_reclaim()
    }
    fn release_empty(&self, container: &ContainerPath) -> Result<Outcome<()>, CgroupError> {
        (**self).release_empty(container)
    }
    fn protect(
        &self,
        container: &ContainerPath,
        protection: &Protection,
    ) -> Result<Outcome<()>, CgroupError> {
        (**self).protect(container, protection)
    }
    fn set_cpu_share(
        &self,
        container: &ContainerPath,
        share: CpuShare,
    ) -> Result<Outcome<String>, CgroupError> {
        (**self).set_cpu_share(container, share)
    }
    fn set_cpu_max(
        &self,
        container: &ContainerPath,
        max: CpuMax,
    ) -> Result<Outcome<String>, CgroupError> {
        (**self).set_cpu_max(container, max)
    }
    fn cpu_used(&self, container: &ContainerPath) -> Result<Outcome<Duration>, CgroupError> {
        (**self).cpu_used(container)
    }
}
