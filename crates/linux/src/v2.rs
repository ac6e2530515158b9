//! cgroup v2: one unified hierarchy with every controller.
//!
//! Why: v2 is the primary target; it has what the fast path needs:
//! per-cgroup PSI (`memory.pressure`), `cgroup.kill`, `cgroup.freeze`, and
//! real protection (`memory.min/low/high`, `memory.swap.max`). A container is
//! one directory; its parent must delegate the memory controller to it
//! (`+memory` in the parent's `cgroup.subtree_control`), which `create` does.

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
    ByteCount, CgroupEvents, CgroupProcs, CpuStat, FreezerState, Limit, MemoryEvents, MemoryStat,
    Mounts, Pid, Pressure, ProcCgroup,
};

/// Containers on cgroup v2, rooted at a directory of the unified hierarchy.
#[derive(Debug, Clone)]
pub struct V2Cgroups {
    root: PathBuf,
}

impl V2Cgroups {
    /// Containers under `root`, a directory in the unified hierarchy.
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    /// The container's directory with the cpu controller's files in it:
    /// delegated now, from the top down, by every ancestor that has the
    /// controller to give (as `create` delegates memory).
    fn cpu_controlled(&self, container: &ContainerPath) -> Result<Outcome<PathBuf>, CgroupError> {
        let dir = self.dir(container);
        if !dir.is_dir() {
            return Ok(Outcome::Vanished);
        }
        let weight = dir.join("cpu.weight");
        if !weight.exists() {
            let mut ancestors = Vec::new();
            let mut at = container.parent();
            while let Some(p) = at {
                at = p.parent();
                ancestors.push(p);
            }
            for ancestor in ancestors.iter().rev().map(|a| self.dir(a)) {
                let has = |file: &str| {
                    fsio::read_optional(&ancestor.join(file)).is_ok_and(|o| {
                        matches!(o, Outcome::Done(Some(t)) if t.split_whitespace().any(|c| c == "cpu"))
                    })
                };
                if has("cgroup.controllers") && !has("cgroup.subtree_control") {
                    let _ = fsio::write(&ancestor.join("cgroup.subtree_control"), "+cpu");
                }
            }
        }
        if !weight.exists() {
            return Err(CgroupError::Unsupported {
                what: format!(
                    "{}: no cpu.weight (the cpu controller is not enabled in its parent's \
                     cgroup.subtree_control)",
                    dir.display()
                ),
            });
        }
        Ok(Outcome::Done(dir))
    }

    /// Rooted at this process's own v2 cgroup, found from `/proc/self/mounts`
    /// and `/proc/self/cgroup`.
    pub fn for_current_process() -> Result<Self, CgroupError> {
        let mounts = fsio::read_proc("/proc/self/mounts", Mounts::parse)?;
        let own = fsio::read_proc("/proc/self/cgroup", ProcCgroup::parse)?;
        let (Some(mount), Some(path)) = (mounts.v2(), own.unified_path()) else {
            return Err(CgroupError::Unsupported {
                what: "no cgroup v2 hierarchy is mounted".into(),
            });
        };
        Ok(Self::new(mount.join(path.trim_start_matches('/'))))
    }

    /// The container's directory.
    pub fn dir(&self, container: &ContainerPath) -> PathBuf {
        container.dir_under(&self.root)
    }

    /// Makes sure the parent of `container` delegates the memory controller.
    fn delegate_memory(&self, container: &ContainerPath) -> Result<Outcome<()>, CgroupError> {
        let Some(parent) = container.parent() else {
            return Ok(Outcome::Done(()));
        };
        let file = self.dir(&parent).join("cgroup.subtree_control");
        let enabled = done_or_return!(fsio::read(&file)?);
        if enabled.split_whitespace().any(|c| c == "memory") {
            return Ok(Outcome::Done(()));
        }
        fsio::write(&file, "+memory")
    }

    fn set_frozen(
        &self,
        container: &ContainerPath,
        frozen: bool,
        within: Duration,
    ) -> Result<Outcome<()>, CgroupError> {
        let dir = self.dir(container);
        let request = dir.join("cgroup.freeze");
        match fsio::write(&request, if frozen { "1" } else { "0" }) {
            Ok(o) => done_or_return!(o),
            Err(CgroupError::NoSuchFile { .. }) => {
                return Err(CgroupError::Unsupported {
                    what: "cgroup.freeze (needs Linux 5.2 or later)".into(),
                })
            }
            Err(e) => return Err(e),
        }
        let events = dir.join(CgroupEvents::FILE);
        let settled = done_or_return!(fsio::settle(within, || {
            Ok(fsio::read_parsed(&events, CgroupEvents::parse)?
                .map(|e| e.frozen.unwrap_or(false) == frozen))
        })?);
        if !settled {
            let what = if frozen { "freezing" } else { "thawing" };
            return Err(CgroupError::Timeout { path: dir, what, waited: within });
        }
        Ok(Outcome::Done(()))
    }
}

impl ContainerCgroups for V2Cgroups {
    fn version(&self) -> CgroupVersion {
        CgroupVersion::V2
    }

    fn discover_all(&self, parent: &ContainerPath) -> Result<Outcome<Discovery>, CgroupError> {
        fsio::discover_in(&self.dir(parent), parent)
    }

    fn counters(&self, container: &ContainerPath) -> Result<Outcome<MemoryCounters>, CgroupError> {
        let dir = self.dir(container);
        let usage = done_or_return!(fsio::read_parsed(&dir.join("memory.current"), |t| {
            ByteCount::parse("memory.current", t)
        })?);
        let stat =
            done_or_return!(fsio::read_parsed(&dir.join(MemoryStat::FILE), MemoryStat::parse)?);
        let swap =
            done_or_return!(fsio::read_parsed_optional(&dir.join("memory.swap.current"), |t| {
                ByteCount::parse("memory.swap.current", t)
            })?);
        // PSI may be compiled in but off (`psi=0`): reading then fails with
        // EOPNOTSUPP, which is "no pressure figures", not an error.
        let pressure =
            match fsio::read_parsed_optional(&dir.join(Pressure::CGROUP_FILE), Pressure::parse) {
                Ok(o) => done_or_return!(o),
                Err(CgroupError::Io { source, .. })
                    if source.raw_os_error() == Some(libc::EOPNOTSUPP) =>
                {
                    None
                }
                Err(e) => return Err(e),
            };
        let events = done_or_return!(fsio::read_parsed_optional(
            &dir.join(MemoryEvents::FILE),
            MemoryEvents::parse
        )?);
        Ok(Outcome::Done(MemoryCounters {
            usage: usage.0,
            major_faults: stat.pgmajfault,
            refault_anon: stat.workingset_refault_anon,
            refault_file: stat.refault_file_any(),
            swap: swap.map(|s| s.0),
            inactive_file: stat.inactive_file,
            oom_kills: events.as_ref().and_then(|e| e.oom_kill),
            limit_hits: events.as_ref().map(|e| e.max),
            pressure,
        }))
    }

    fn usage(&self, container: &ContainerPath) -> Result<Outcome<u64>, CgroupError> {
        let file = self.dir(container).join("memory.current");
        let usage =
            done_or_return!(fsio::read_parsed(&file, |t| ByteCount::parse("memory.current", t))?);
        Ok(Outcome::Done(usage.0))
    }

    fn members(&self, container: &ContainerPath) -> Result<Outcome<CgroupProcs>, CgroupError> {
        fsio::read_procs_tree(&self.dir(container))
    }

    fn create(
        &self,
        container: &ContainerPath,
        limit: Option<Limit>,
    ) -> Result<Outcome<()>, CgroupError> {
        done_or_return!(self.delegate_memory(container)?);
        let dir = self.dir(container);
        done_or_return!(fsio::mkdir(&dir)?);
        if let Some(limit) = limit {
            let set = fsio::write(&dir.join("memory.max"), &limit.to_string());
            if !matches!(set, Ok(Outcome::Done(()))) {
                let _ = fsio::rmdir(&dir);
            }
            done_or_return!(set?);
        }
        Ok(Outcome::Done(()))
    }

    fn remove(&self, container: &ContainerPath) -> Result<Outcome<()>, CgroupError> {
        fsio::rmdir_tree(&self.dir(container))
    }

    fn add_process(&self, container: &ContainerPath, pid: Pid) -> Result<Outcome<()>, CgroupError> {
        match fsio::write(&self.dir(container).join(CgroupProcs::FILE), &pid.to_string()) {
            Err(CgroupError::Io { source, .. }) if source.raw_os_error() == Some(libc::ESRCH) => {
                Err(CgroupError::NoSuchProcess { pid })
            }
            other => other,
        }
    }

    fn limit(&self, container: &ContainerPath) -> Result<Outcome<Limit>, CgroupError> {
        fsio::read_parsed(&self.dir(container).join("memory.max"), |t| {
            Limit::parse("memory.max", t)
        })
    }

    fn pressure_file(&self, container: &ContainerPath) -> Option<PathBuf> {
        Some(self.dir(container).join(Pressure::CGROUP_FILE))
    }

    fn limit_hits(&self, container: &ContainerPath) -> Result<Outcome<Option<u64>>, CgroupError> {
        Ok(self.counters(container)?.map(|c| c.limit_hits))
    }

    fn peak(&self, container: &ContainerPath) -> Result<Outcome<Option<u64>>, CgroupError> {
        let file = self.dir(container).join("memory.peak");
        Ok(fsio::read_parsed_optional(&file, |t| ByteCount::parse("memory.peak", t))?
            .map(|c| c.map(|c| c.0)))
    }

    fn join_files(&self, container: &ContainerPath) -> Vec<PathBuf> {
        vec![self.dir(container).join(CgroupProcs::FILE)]
    }
}

impl ContainerControl for V2Cgroups {
    fn freezer_state(
        &self,
        container: &ContainerPath,
    ) -> Result<Outcome<FreezerState>, CgroupError> {
        let dir = self.dir(container);
        let requested = done_or_return!(fsio::read(&dir.join("cgroup.freeze"))?).trim() == "1";
        let events =
            done_or_return!(fsio::read_parsed(&dir.join(CgroupEvents::FILE), CgroupEvents::parse)?);
        Ok(Outcome::Done(match (requested, events.frozen.unwrap_or(false)) {
            // Frozen because an ancestor is: frozen all the same.
            (_, true) => FreezerState::Frozen,
            (true, false) => FreezerState::Freezing,
            (false, false) => FreezerState::Thawed,
        }))
    }

    fn freeze(
        &self,
        container: &ContainerPath,
        within: Duration,
    ) -> Result<Outcome<()>, CgroupError> {
        self.set_frozen(container, true, within)
    }

    fn thaw(
        &self,
        container: &ContainerPath,
        within: Duration,
    ) -> Result<Outcome<()>, CgroupError> {
        self.set_frozen(container, false, within)
    }

    fn kill(&self, container: &ContainerPath) -> Result<Outcome<KillReport>, CgroupError> {
        let dir = self.dir(container);
        let cgroup_kill = dir.join("cgroup.kill");
        if cgroup_kill.exists() {
            let report = done_or_return!(kill::kill_members(&dir, Some(&cgroup_kill))?);
            // Frozen members die of SIGKILL all the same, but the cgroup would
            // stay frozen and freeze whatever joins it next: leave it thawed.
            // The kill is done whatever follows: a cgroup gone meanwhile has
            // nothing left frozen.
            let freeze = fsio::read_optional(&dir.join("cgroup.freeze"))?;
            if matches!(freeze, Outcome::Done(Some(f)) if f.trim() == "1") {
                let _gone_is_thawed = self.thaw(container, FREEZE_BEFORE_KILL)?;
            }
            return Ok(Outcome::Done(report));
        }
        // Before 5.14: freeze so no member forks away, signal, thaw (v2
        // frozen tasks do die of SIGKILL, but the cgroup must not stay frozen).
        let frozen = match self.freeze(container, FREEZE_BEFORE_KILL) {
            Ok(_) | Err(CgroupError::Timeout { .. }) => true,
            Err(CgroupError::Unsupported { .. }) => false,
            Err(e) => return Err(e),
        };
        let report = kill::kill_members(&dir, None);
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
        let dir = self.dir(container);
        let current = dir.join("memory.current");
        let usage = |f: &Path| fsio::read_parsed(f, |t| ByteCount::parse("memory.current", t));
        let before = done_or_return!(usage(&current)?).0;
        match fsio::write(&dir.join("memory.reclaim"), &bytes.to_string()) {
            // Reclaimed less than asked; what it got stays taken.
            Err(CgroupError::Io { source, .. }) if source.raw_os_error() == Some(libc::EAGAIN) => {}
            Err(CgroupError::NoSuchFile { .. }) => {
                return Err(CgroupError::Unsupported {
                    what: "memory.reclaim (needs Linux 5.19 or later)".into(),
                })
            }
            Err(e) => return Err(e),
            Ok(o) => done_or_return!(o),
        }
        let after = done_or_return!(usage(&current)?).0;
        Ok(Outcome::Done(before.saturating_sub(after)))
    }

    fn release_empty(&self, container: &ContainerPath) -> Result<Outcome<()>, CgroupError> {
        let dir = self.dir(container);
        if !done_or_return!(fsio::read_procs_tree(&dir)?).is_empty() {
            return Err(CgroupError::Busy { path: dir });
        }
        let usage = done_or_return!(fsio::read_parsed(&dir.join("memory.current"), |t| {
            ByteCount::parse("memory.current", t)
        })?);
        match fsio::write(&dir.join("memory.reclaim"), &usage.0.to_string()) {
            // Reclaimed less than asked: what is left is not droppable.
            Err(CgroupError::Io { source, .. }) if source.raw_os_error() == Some(libc::EAGAIN) => {
                Ok(Outcome::Done(()))
            }
            Err(CgroupError::NoSuchFile { .. }) => Err(CgroupError::Unsupported {
                what: "memory.reclaim (needs Linux 5.19 or later)".into(),
            }),
            other => other,
        }
    }

    fn set_cpu_share(
        &self,
        container: &ContainerPath,
        share: CpuShare,
    ) -> Result<Outcome<String>, CgroupError> {
        let dir = done_or_return!(self.cpu_controlled(container)?);
        let weight = dir.join("cpu.weight");
        let idle = dir.join("cpu.idle");
        Ok(match share {
            CpuShare::Idle if idle.exists() => {
                fsio::write(&idle, "1")?.map(|()| "cpu.idle = 1".into())
            }
            CpuShare::Idle => fsio::write(&weight, "1")?.map(|()| "cpu.weight = 1".into()),
            CpuShare::Weight(w) => {
                let w = w.clamp(1, 10_000);
                if idle.exists() {
                    done_or_return!(fsio::write(&idle, "0")?);
                }
                fsio::write(&weight, &w.to_string())?.map(|()| format!("cpu.weight = {w}"))
            }
        })
    }

    fn set_cpu_max(
        &self,
        container: &ContainerPath,
        max: CpuMax,
    ) -> Result<Outcome<String>, CgroupError> {
        let dir = done_or_return!(self.cpu_controlled(container)?);
        let value = match max {
            CpuMax::Unlimited => format!("max {}", CpuMax::PERIOD_US),
            CpuMax::Quota(us) => format!("{us} {}", CpuMax::PERIOD_US),
        };
        let written = fsio::write(&dir.join("cpu.max"), &value)?;
        Ok(written.map(|()| format!("cpu.max = {value}")))
    }

    fn cpu_used(&self, container: &ContainerPath) -> Result<Outcome<Duration>, CgroupError> {
        let file = self.dir(container).join(CpuStat::FILE);
        Ok(fsio::read_parsed(&file, CpuStat::parse)?.map(|s| s.used()))
    }

    fn protect(
        &self,
        container: &ContainerPath,
        protection: &Protection,
    ) -> Result<Outcome<()>, CgroupError> {
        let swap = match protection.swap {
            None => None,
            Some(SwapPolicy::Never) => Some(Limit::Bytes(0)),
            Some(SwapPolicy::Limit(l)) => Some(l),
            Some(SwapPolicy::Swappiness(_)) => {
                return Err(CgroupError::Unsupported {
                    what: "per-cgroup swappiness does not exist on cgroup v2; use a swap limit"
                        .into(),
                })
            }
        };
        let dir = self.dir(container);
        let knobs = [
            ("memory.min", protection.min),
            ("memory.low", protection.low),
            ("memory.high", protection.high),
            ("memory.max", protection.max),
            ("memory.swap.max", swap),
        ];
        // Check every file first, so a missing one (no swap accounting, an old
        // kernel) leaves the container as it was.
        if !dir.is_dir() {
            return Ok(Outcome::Vanished);
        }
        for (file, value) in knobs {
            let path = dir.join(file);
            if value.is_some() && !path.exists() {
                return Err(CgroupError::NoSuchFile { path });
            }
        }
        for (file, value) in knobs {
            if let Some(value) = value {
                done_or_return!(fsio::write(&dir.join(file), &value.to_string())?);
            }
        }
        Ok(Outcome::Done(()))
    }
}
