//! cgroup v1: the memory controller's hierarchy, mirrored in the freezer's.
//!
//! Why: many nodes still run v1 (this project's own host does). There,
//! each controller has its own tree, so a container is one directory in the
//! memory hierarchy and one of the same name in the freezer hierarchy; both
//! are made, joined and removed together. v1 has no `cgroup.kill` and no
//! per-cgroup PSI; a kill freezes the container, signals each member through
//! a pidfd, reaps, and thaws.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cgroups::{ContainerCgroups, ContainerControl, FREEZE_BEFORE_KILL};
use crate::container::{
    done_or_return, CgroupVersion, ContainerPath, CpuMax, CpuShare, Discovery, KillReport,
    MemoryCounters, Outcome, Protection, SwapPolicy,
};
use crate::error::CgroupError;
use crate::fsio;
use crate::kill;
use crate::parse::{
    ByteCount, CgroupProcs, CpuAcctUsage, FreezerState, Limit, Mounts, Pid, ProcCgroup,
    V1MemoryStat, V1OomControl,
};

/// Containers on cgroup v1, rooted at a directory of the memory hierarchy
/// and, if there is a freezer, at a directory of the freezer hierarchy.
#[derive(Debug, Clone)]
pub struct V1Cgroups {
    memory: PathBuf,
    freezer: Option<PathBuf>,
    cpu: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
}

impl V1Cgroups {
    /// Containers under `memory_root` (a directory in the v1 memory
    /// hierarchy) and `freezer_root` (the same place in the freezer's).
    pub fn new(memory_root: PathBuf, freezer_root: Option<PathBuf>) -> Self {
        Self { memory: memory_root, freezer: freezer_root, cpu: None, cpuacct: None }
    }

    /// With `cpu_root`, the same place in the cpu hierarchy, mirrored as
    /// the freezer's is: containers are made, joined and removed there
    /// too, and their CPU shares set there.
    pub fn with_cpu(self, cpu_root: PathBuf) -> Self {
        Self { cpu: Some(cpu_root), ..self }
    }

    /// With `cpuacct_root`, the same place in the cpuacct hierarchy (the
    /// cpu one's where the two are mounted together), mirrored as the cpu
    /// one is: containers' CPU time is read there.
    pub fn with_cpuacct(self, cpuacct_root: PathBuf) -> Self {
        Self { cpuacct: Some(cpuacct_root), ..self }
    }

    /// The container's directory in the cpu hierarchy, if there is one.
    pub fn cpu_dir(&self, container: &ContainerPath) -> Option<PathBuf> {
        self.cpu.as_deref().map(|c| container.dir_under(c))
    }

    /// The container's directory in the cpuacct hierarchy, if there is one.
    pub fn cpuacct_dir(&self, container: &ContainerPath) -> Option<PathBuf> {
        self.cpuacct.as_deref().map(|c| container.dir_under(c))
    }

    /// The cpuacct directory where it is not the cpu one: a mirror of its
    /// own.
    fn cpuacct_apart(&self, container: &ContainerPath) -> Option<PathBuf> {
        self.cpuacct_dir(container).filter(|d| self.cpu_dir(container).as_ref() != Some(d))
    }

    /// The container's cpu cgroup with its members in it: made, and the
    /// members moved in, where someone else made the container without a
    /// cpu mirror (a process forked meanwhile stays where it was; the next
    /// call moves it). `what` names the knob for the error where the cpu
    /// hierarchy is not mounted.
    fn cpu_mirror(
        &self,
        container: &ContainerPath,
        what: &str,
    ) -> Result<Outcome<PathBuf>, CgroupError> {
        let Some(dir) = self.cpu_dir(container) else {
            return Err(CgroupError::Unsupported {
                what: format!("{what} on cgroup v1 need the cpu hierarchy, which is not mounted"),
            });
        };
        self.mirror_with_members(container, dir)
    }

    /// `dir`, the container's directory in a hierarchy that mirrors the
    /// memory one, made if missing, with the container's members moved in.
    fn mirror_with_members(
        &self,
        container: &ContainerPath,
        dir: PathBuf,
    ) -> Result<Outcome<PathBuf>, CgroupError> {
        let memory = self.memory_dir(container);
        if !memory.is_dir() {
            return Ok(Outcome::Vanished);
        }
        if !dir.is_dir() {
            make_mirror(&dir)?;
        }
        let members = done_or_return!(fsio::read_procs_tree(&memory)?);
        // Only the members not there yet. Why: a container's CPU time is
        // read through here at every look, and each write to
        // `cgroup.procs` takes the kernel's lock on process moves, which
        // every fork and exit on the node takes too; a process forked in
        // the container is born in the mirror already.
        let there: HashSet<Pid> = match fsio::read_procs_tree(&dir)? {
            Outcome::Done(p) => p.pids.into_iter().collect(),
            Outcome::Vanished => HashSet::new(),
        };
        let procs = dir.join(CgroupProcs::FILE);
        for pid in members.pids.iter().filter(|pid| !there.contains(pid)) {
            match fsio::write(&procs, &pid.to_string()) {
                Ok(_) => {}
                // Gone meanwhile.
                Err(CgroupError::Io { source, .. })
                    if source.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Outcome::Done(dir))
    }

    /// The container's directories in the hierarchies that mirror the
    /// memory one.
    fn mirrors(&self, container: &ContainerPath) -> impl Iterator<Item = PathBuf> {
        (self.freezer_dir(container).into_iter())
            .chain(self.cpu_dir(container))
            .chain(self.cpuacct_apart(container))
    }

    /// Rooted at this process's own memory, freezer and cpu cgroups, found from
    /// `/proc/self/mounts` and `/proc/self/cgroup`.
    pub fn for_current_process() -> Result<Self, CgroupError> {
        let mounts = fsio::read_proc("/proc/self/mounts", Mounts::parse)?;
        let own = fsio::read_proc("/proc/self/cgroup", ProcCgroup::parse)?;
        let root_of = |controller: &str| -> Option<PathBuf> {
            let mount = mounts.v1_controller(controller)?;
            let path = own.v1_path(controller)?;
            Some(mount.join(path.trim_start_matches('/')))
        };
        let memory = root_of("memory").ok_or_else(|| CgroupError::Unsupported {
            what: "no cgroup v1 memory hierarchy is mounted".into(),
        })?;
        let v1 = Self::new(memory, root_of("freezer"));
        let v1 = match root_of("cpu") {
            Some(cpu) => v1.with_cpu(cpu),
            None => v1,
        };
        Ok(match root_of("cpuacct") {
            Some(cpuacct) => v1.with_cpuacct(cpuacct),
            None => v1,
        })
    }

    /// The container's directory in the memory hierarchy.
    pub fn memory_dir(&self, container: &ContainerPath) -> PathBuf {
        container.dir_under(&self.memory)
    }

    /// The container's directory in the freezer hierarchy, if there is one.
    pub fn freezer_dir(&self, container: &ContainerPath) -> Option<PathBuf> {
        self.freezer.as_deref().map(|f| container.dir_under(f))
    }

    fn require_freezer(&self, container: &ContainerPath) -> Result<PathBuf, CgroupError> {
        self.freezer_dir(container).ok_or_else(|| CgroupError::Unsupported {
            what: "freezing on cgroup v1 needs the freezer hierarchy, which is not mounted".into(),
        })
    }

    fn set_state(
        &self,
        container: &ContainerPath,
        want: FreezerState,
        within: Duration,
    ) -> Result<Outcome<()>, CgroupError> {
        let dir = self.require_freezer(container)?;
        let file = dir.join(FreezerState::FILE);
        done_or_return!(fsio::write(&file, want.v1_word())?);
        let settled = done_or_return!(fsio::settle(within, || {
            Ok(fsio::read_parsed(&file, FreezerState::parse)?.map(|s| s == want))
        })?);
        if !settled {
            let what = if want == FreezerState::Frozen { "freezing" } else { "thawing" };
            return Err(CgroupError::Timeout { path: dir, what, waited: within });
        }
        Ok(Outcome::Done(()))
    }
}

impl ContainerCgroups for V1Cgroups {
    fn version(&self) -> CgroupVersion {
        CgroupVersion::V1
    }

    fn discover_all(&self, parent: &ContainerPath) -> Result<Outcome<Discovery>, CgroupError> {
        fsio::discover_in(&self.memory_dir(parent), parent)
    }

    fn counters(&self, container: &ContainerPath) -> Result<Outcome<MemoryCounters>, CgroupError> {
        let dir = self.memory_dir(container);
        let usage = done_or_return!(fsio::read_parsed(&dir.join("memory.usage_in_bytes"), |t| {
            ByteCount::parse("memory.usage_in_bytes", t)
        })?);
        let stat =
            done_or_return!(fsio::read_parsed(&dir.join("memory.stat"), V1MemoryStat::parse)?);
        let oom = done_or_return!(fsio::read_parsed_optional(
            &dir.join(V1OomControl::FILE),
            V1OomControl::parse
        )?);
        Ok(Outcome::Done(MemoryCounters {
            usage: usage.0,
            major_faults: stat.total_pgmajfault,
            refault_anon: stat.total_workingset_refault_anon,
            refault_file: stat.total_refault_file_any(),
            swap: stat.total_swap,
            inactive_file: stat.total_inactive_file,
            oom_kills: oom.and_then(|o| o.oom_kill),
            // A file of its own (`memory.failcnt`), read only when asked:
            // every container's counters are read at every sample.
            limit_hits: None,
            pressure: None,
        }))
    }

    fn usage(&self, container: &ContainerPath) -> Result<Outcome<u64>, CgroupError> {
        let file = self.memory_dir(container).join("memory.usage_in_bytes");
        let usage = done_or_return!(fsio::read_parsed(&file, |t| ByteCount::parse(
            "memory.usage_in_bytes",
            t
        ))?);
        Ok(Outcome::Done(usage.0))
    }

    fn members(&self, container: &ContainerPath) -> Result<Outcome<CgroupProcs>, CgroupError> {
        fsio::read_procs_tree(&self.memory_dir(container))
    }

    fn create(
        &self,
        container: &ContainerPath,
        limit: Option<Limit>,
    ) -> Result<Outcome<()>, CgroupError> {
        let memory = self.memory_dir(container);
        done_or_return!(fsio::mkdir(&memory)?);
        let made = (|| {
            if let Some(limit) = limit {
                let file = memory.join("memory.limit_in_bytes");
                done_or_return!(fsio::write(&file, &limit.v1_text())?);
            }
            for mirror in self.mirrors(container) {
                make_mirror(&mirror)?;
            }
            Ok(Outcome::Done(()))
        })();
        if !matches!(made, Ok(Outcome::Done(()))) {
            let _ = fsio::rmdir(&memory);
        }
        made
    }

    fn remove(&self, container: &ContainerPath) -> Result<Outcome<()>, CgroupError> {
        let mut mirrors_gone = true;
        for mirror in self.mirrors(container) {
            mirrors_gone &= fsio::rmdir_tree(&mirror)?.is_vanished();
        }
        let memory = fsio::rmdir_tree(&self.memory_dir(container))?;
        Ok(if memory.is_vanished() && mirrors_gone { Outcome::Vanished } else { Outcome::Done(()) })
    }

    fn add_process(&self, container: &ContainerPath, pid: Pid) -> Result<Outcome<()>, CgroupError> {
        let mut dirs = vec![self.memory_dir(container)];
        dirs.extend(self.mirrors(container).filter(|d| d.is_dir()));
        for dir in dirs {
            match fsio::write(&dir.join(CgroupProcs::FILE), &pid.to_string()) {
                Ok(Outcome::Done(())) => {}
                Ok(Outcome::Vanished) => return Ok(Outcome::Vanished),
                Err(CgroupError::Io { source, .. })
                    if source.raw_os_error() == Some(libc::ESRCH) =>
                {
                    return Err(CgroupError::NoSuchProcess { pid })
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Outcome::Done(()))
    }

    fn limit(&self, container: &ContainerPath) -> Result<Outcome<Limit>, CgroupError> {
        let file = self.memory_dir(container).join("memory.limit_in_bytes");
        let bytes = done_or_return!(fsio::read_parsed(&file, |t| ByteCount::parse(
            "memory.limit_in_bytes",
            t
        ))?);
        // v1 shows "no limit" as the page counter's maximum, rounded to a page.
        Ok(Outcome::Done(if bytes.0 >= V1_UNLIMITED {
            Limit::Unlimited
        } else {
            Limit::Bytes(bytes.0)
        }))
    }

    fn pressure_file(&self, _container: &ContainerPath) -> Option<PathBuf> {
        None
    }

    fn limit_hits(&self, container: &ContainerPath) -> Result<Outcome<Option<u64>>, CgroupError> {
        let file = self.memory_dir(container).join("memory.failcnt");
        Ok(fsio::read_parsed_optional(&file, |t| ByteCount::parse("memory.failcnt", t))?
            .map(|c| c.map(|c| c.0)))
    }

    fn peak(&self, container: &ContainerPath) -> Result<Outcome<Option<u64>>, CgroupError> {
        let file = self.memory_dir(container).join("memory.max_usage_in_bytes");
        Ok(fsio::read_parsed_optional(&file, |t| ByteCount::parse("memory.max_usage_in_bytes", t))?
            .map(|c| c.map(|c| c.0)))
    }

    fn join_files(&self, container: &ContainerPath) -> Vec<PathBuf> {
        let mut files = vec![self.memory_dir(container).join(CgroupProcs::FILE)];
        files.extend(self.freezer_dir(container).map(|d| d.join(CgroupProcs::FILE)));
        // A container made by someone else may have no cpu mirror.
        files.extend(
            self.cpu_dir(container).filter(|d| d.is_dir()).map(|d| d.join(CgroupProcs::FILE)),
        );
        files.extend(
            (self.cpuacct_apart(container))
                .filter(|d| d.is_dir())
                .map(|d| d.join(CgroupProcs::FILE)),
        );
        files
    }
}

/// Makes a container's directory in a hierarchy that mirrors the memory
/// one (freezer, cpu), with the ancestors that exist only in the latter;
/// one left over from an earlier run is adopted.
fn make_mirror(dir: &Path) -> Result<(), CgroupError> {
    if let Some(parent) = dir.parent().filter(|p| !p.is_dir()) {
        std::fs::create_dir_all(parent).map_err(|source| CgroupError::Io {
            op: "mkdir",
            path: parent.to_path_buf(),
            source,
        })?;
    }
    match fsio::mkdir(dir) {
        Ok(_) | Err(CgroupError::Exists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Any v1 limit at or above this is the kernel's "unlimited"
/// (`PAGE_COUNTER_MAX` pages, 2^63 - 4096 bytes on 4 KiB pages).
const V1_UNLIMITED: u64 = 1 << 62;

impl ContainerControl for V1Cgroups {
    fn freezer_state(
        &self,
        container: &ContainerPath,
    ) -> Result<Outcome<FreezerState>, CgroupError> {
        let dir = self.require_freezer(container)?;
        fsio::read_parsed(&dir.join(FreezerState::FILE), FreezerState::parse)
    }

    fn freeze(
        &self,
        container: &ContainerPath,
        within: Duration,
    ) -> Result<Outcome<()>, CgroupError> {
        self.set_state(container, FreezerState::Frozen, within)
    }

    fn thaw(
        &self,
        container: &ContainerPath,
        within: Duration,
    ) -> Result<Outcome<()>, CgroupError> {
        self.set_state(container, FreezerState::Thawed, within)
    }

    fn kill(&self, container: &ContainerPath) -> Result<Outcome<KillReport>, CgroupError> {
        let frozen = match self.freezer {
            Some(_) => match self.freeze(container, FREEZE_BEFORE_KILL) {
                // Kill anyway: a member stuck in the kernel must not save the rest.
                Ok(_) | Err(CgroupError::Timeout { .. }) => true,
                Err(e) => return Err(e),
            },
            None => false,
        };
        // v1 frozen tasks do not die until thawed, but SIGKILL marks them as
        // exiting at once, so their memory can be reaped while they are frozen.
        let report = kill::kill_members(&self.memory_dir(container), None);
        if frozen {
            if let (Err(e), Ok(_)) = (self.thaw(container, FREEZE_BEFORE_KILL), &report) {
                return Err(e);
            }
        }
        report
    }

    fn background_reclaim(&self) -> crate::cgroups::ReclaimFn {
        let cgroups = self.clone();
        std::sync::Arc::new(move |container, bytes| cgroups.reclaim(container, bytes))
    }

    fn reclaim(&self, container: &ContainerPath, bytes: u64) -> Result<Outcome<u64>, CgroupError> {
        let dir = self.memory_dir(container);
        let usage_file = dir.join("memory.usage_in_bytes");
        let usage =
            |f: &Path| fsio::read_parsed(f, |t| ByteCount::parse("memory.usage_in_bytes", t));
        let before = done_or_return!(usage(&usage_file)?).0;
        let limit_file = dir.join("memory.limit_in_bytes");
        let old = done_or_return!(fsio::read(&limit_file)?);
        // The kernel reclaims down to a lowered limit before accepting it;
        // EBUSY means it could not get all the way: what it got stays taken.
        // An interrupted write (the agent killed mid-reclaim) leaves the old
        // limit, so a squeezed one can outlive the agent only if it dies in
        // the instant between these two writes.
        let squeezed =
            fsio::write(&limit_file, &before.saturating_sub(bytes).max(1 << 20).to_string());
        let restored = fsio::write(&limit_file, old.trim());
        match squeezed {
            Err(CgroupError::Io { source, .. }) if source.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => return Err(e),
            Ok(o) => done_or_return!(o),
        }
        done_or_return!(restored?);
        let after = done_or_return!(usage(&usage_file)?).0;
        Ok(Outcome::Done(before.saturating_sub(after)))
    }

    fn release_empty(&self, container: &ContainerPath) -> Result<Outcome<()>, CgroupError> {
        let dir = self.memory_dir(container);
        if !done_or_return!(fsio::read_procs_tree(&dir)?).is_empty() {
            return Err(CgroupError::Busy { path: dir });
        }
        match fsio::write(&dir.join("memory.force_empty"), "0") {
            // A member arrived meanwhile, or pages could not all be dropped.
            Err(CgroupError::Io { source, .. }) if source.raw_os_error() == Some(libc::EBUSY) => {
                Err(CgroupError::Busy { path: dir })
            }
            other => other,
        }
    }

    fn set_cpu_share(
        &self,
        container: &ContainerPath,
        share: CpuShare,
    ) -> Result<Outcome<String>, CgroupError> {
        let dir = done_or_return!(self.cpu_mirror(container, "CPU shares")?);
        let idle = dir.join("cpu.idle");
        let shares = dir.join("cpu.shares");
        Ok(match share {
            CpuShare::Idle if idle.exists() => {
                fsio::write(&idle, "1")?.map(|()| "cpu.idle = 1".into())
            }
            CpuShare::Idle => fsio::write(&shares, "2")?.map(|()| "cpu.shares = 2".into()),
            CpuShare::Weight(w) => {
                if idle.exists() {
                    done_or_return!(fsio::write(&idle, "0")?);
                }
                let s = CpuShare::v1_shares(w);
                fsio::write(&shares, &s.to_string())?.map(|()| format!("cpu.shares = {s}"))
            }
        })
    }

    fn set_cpu_max(
        &self,
        container: &ContainerPath,
        max: CpuMax,
    ) -> Result<Outcome<String>, CgroupError> {
        let dir = done_or_return!(self.cpu_mirror(container, "CPU ceilings")?);
        let quota = dir.join("cpu.cfs_quota_us");
        Ok(match max {
            CpuMax::Unlimited => {
                fsio::write(&quota, "-1")?.map(|()| "cpu.cfs_quota_us = -1".into())
            }
            CpuMax::Quota(us) => {
                done_or_return!(fsio::write(
                    &dir.join("cpu.cfs_period_us"),
                    &CpuMax::PERIOD_US.to_string()
                )?);
                fsio::write(&quota, &us.to_string())?.map(|()| {
                    format!("cpu.cfs_quota_us = {us} of cpu.cfs_period_us = {}", CpuMax::PERIOD_US)
                })
            }
        })
    }

    fn cpu_used(&self, container: &ContainerPath) -> Result<Outcome<Duration>, CgroupError> {
        let Some(dir) = self.cpuacct_dir(container) else {
            return Err(CgroupError::Unsupported {
                what: "CPU time on cgroup v1 needs the cpuacct hierarchy, which is not mounted"
                    .into(),
            });
        };
        let dir = done_or_return!(self.mirror_with_members(container, dir)?);
        Ok(fsio::read_parsed(&dir.join(CpuAcctUsage::FILE), CpuAcctUsage::parse)?.map(|u| u.0))
    }

    fn protect(
        &self,
        container: &ContainerPath,
        protection: &Protection,
    ) -> Result<Outcome<()>, CgroupError> {
        let unsupported = |what: &str| CgroupError::Unsupported {
            what: format!("{what} has no cgroup v1 equivalent"),
        };
        if protection.min.is_some() {
            return Err(unsupported("memory.min"));
        }
        if protection.high.is_some() {
            return Err(unsupported("memory.high"));
        }
        let swappiness = match protection.swap {
            None => None,
            Some(SwapPolicy::Never) => Some(0),
            Some(SwapPolicy::Swappiness(s)) => Some(s),
            Some(SwapPolicy::Limit(_)) => {
                return Err(unsupported("a swap limit (memory.swap.max)"))
            }
        };
        let dir = self.memory_dir(container);
        let mut writes: Vec<(&str, String)> = Vec::new();
        if let Some(low) = protection.low {
            writes.push(("memory.soft_limit_in_bytes", low.v1_text()));
        }
        if let Some(max) = protection.max {
            writes.push(("memory.limit_in_bytes", max.v1_text()));
        }
        if let Some(s) = swappiness {
            writes.push(("memory.swappiness", s.to_string()));
        }
        for (file, value) in writes {
            done_or_return!(fsio::write(&dir.join(file), &value)?);
        }
        Ok(Outcome::Done(()))
    }
}
