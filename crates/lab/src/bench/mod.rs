//! Benchmarks of the agent on this host's real kernel (`overbook bench
//! kill-latency`, `overbook bench agent-overhead`, `overbook bench
//! kubernetes`, ...).
//!
//! Why here and not in tests: they report numbers (latency percentiles, CPU,
//! memory) with the command that produced them, and are not pass/fail. Both
//! make their node cgroup at the top of the memory hierarchy and remove it,
//! every container, process and file with it, through guards' `Drop`, on
//! error paths too.

pub mod calibrate;
pub mod checkpoint;
pub mod colocation;
pub mod kill_latency;
pub mod kubernetes;
pub mod overhead;
pub mod preemption;
pub mod reclaim;
mod timed;

use overbook_agent::spawn::command_in;
use overbook_linux::{
    host_cgroups, process, CgroupVersion, ContainerPath, HostSupport, Limit, NodeCgroups, Outcome,
    Pid, Protection,
};
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

pub const MIB: u64 = 1 << 20;

/// Nearest-rank percentiles of a set of samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub n: usize,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Percentiles {
    pub fn of(samples: &[f64]) -> Percentiles {
        let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        s.sort_by(f64::total_cmp);
        let rank = |p: f64| -> Option<f64> {
            if s.is_empty() {
                return None;
            }
            let k = overbook_core::convert::to_usize((p * s.len() as f64).ceil()).clamp(1, s.len());
            Some(s[k - 1])
        };
        Percentiles { n: s.len(), p50: rank(0.50), p99: rank(0.99), max: s.last().copied() }
    }
}

/// How to start the workload program (`overbook workload ...` or
/// `overbook-workload ...`).
#[derive(Clone, Debug)]
pub struct WorkloadProgram {
    pub program: PathBuf,
    pub prefix: Vec<String>,
}

/// A workload process in a container, with its output lines on a channel.
#[derive(Debug)]
pub struct Worker {
    pub child: Child,
    /// Its output, line by line.
    pub lines: Receiver<String>,
}

impl Worker {
    /// Waits for the worker's `ready` line.
    pub fn ready(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) if l == "ready" => return Ok(()),
                Ok(_) => {}
                Err(e) => {
                    let status = self.child.try_wait().ok().flatten();
                    return Err(format!("workload not ready within {within:?}: {e} ({status:?})"));
                }
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The `rate` lines printed so far, drained.
    pub fn drain_rates(&mut self) -> Vec<f64> {
        self.lines.try_iter().filter_map(|l| l.strip_prefix("rate ")?.parse().ok()).collect()
    }

    /// The next `rate` line, waiting at most `within`.
    pub fn rate_within(&mut self, within: Duration) -> Option<f64> {
        let until = Instant::now() + within;
        loop {
            let line =
                self.lines.recv_timeout(until.saturating_duration_since(Instant::now())).ok()?;
            if let Some(r) = line.strip_prefix("rate ").and_then(|r| r.parse().ok()) {
                return Some(r);
            }
        }
    }

    /// Whether the process has exited (and is reaped).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        !self.exited()
    }

    /// The last `rate` it reported, draining what it said.
    pub fn last_rate(&mut self) -> Option<f64> {
        self.drain_rates().last().copied()
    }
}

/// `(utime, stime)` of a process, in USER_HZ ticks (100 a second on every
/// Linux ABI); they keep the time of threads that have exited.
pub(crate) fn cpu_ticks(pid: Pid) -> Result<(u64, u64), String> {
    let stat = process::stat(pid).map_err(|e| format!("{e} (did the process exit?)"))?;
    Ok((stat.utime, stat.stime))
}

/// Sets a process's `oom_score_adj` (-1000 never chosen .. 1000 first).
pub fn set_oom_score_adj(pid: u32, adj: i32) -> Result<(), String> {
    let pid = Pid::new(pid).ok_or_else(|| format!("{pid} is no pid"))?;
    process::set_oom_score_adj(pid, adj).map_err(|e| e.to_string())
}

/// A node cgroup at the top of the memory hierarchy with containers and
/// processes in it, all killed and removed on drop.
#[derive(Debug)]
pub struct BenchNode {
    pub cg: Box<dyn NodeCgroups>,
    pub root: ContainerPath,
    /// The memory hierarchy's mount and version, for reading files directly.
    pub mount: PathBuf,
    pub version: CgroupVersion,
    made: Vec<ContainerPath>,
    children: Vec<Child>,
}

impl BenchNode {
    /// Makes `name` (with `limit`, if any) at the top of the hierarchy.
    pub fn new(name: &str, limit: Option<u64>) -> Result<BenchNode, String> {
        if !overbook_linux::process::is_root() {
            return Err("needs root (it makes cgroups and runs workloads in them)".into());
        }
        let probe = HostSupport::probe();
        let memory = probe.memory.clone().ok_or("no memory controller is mounted")?;
        let cg = host_cgroups(&probe).map_err(|e| e.to_string())?;
        let root = ContainerPath::new(name).map_err(|e| e.to_string())?;
        match cg.create(&root, limit.map(Limit::Bytes)) {
            Ok(Outcome::Done(())) => {}
            Ok(Outcome::Vanished) => return Err("the cgroup hierarchy vanished".into()),
            Err(e) => return Err(format!("cannot make the node cgroup {root}: {e}")),
        }
        Ok(BenchNode {
            cg,
            root,
            mount: memory.mount,
            version: memory.version,
            made: Vec::new(),
            children: Vec::new(),
        })
    }

    /// The directory of a container (or the node, for `None`) in the memory hierarchy.
    pub fn dir(&self, container: Option<&ContainerPath>) -> PathBuf {
        container.unwrap_or(&self.root).dir_under(&self.mount)
    }

    /// The memory usage file of a container (or the node).
    pub fn usage_file(&self, container: Option<&ContainerPath>) -> PathBuf {
        self.dir(container).join(self.version.usage_file())
    }

    /// Sets the node's memory limit.
    pub fn set_limit(&self, bytes: u64) -> Result<(), String> {
        let max = Protection { max: Some(Limit::Bytes(bytes)), ..Protection::default() };
        match self.cg.protect(&self.root, &max) {
            Ok(Outcome::Done(())) => Ok(()),
            Ok(Outcome::Vanished) => Err(format!("the node {} vanished", self.root)),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The file with a container's (or the node's) `oom_kill` counter.
    pub fn oom_file(&self, container: Option<&ContainerPath>) -> PathBuf {
        self.dir(container).join(self.version.oom_events_file())
    }

    /// Makes a container under the node (if this node did not yet).
    pub fn container(&mut self, name: &str) -> Result<ContainerPath, String> {
        let path = self.root.child(name).map_err(|e| e.to_string())?;
        if !self.made.contains(&path) {
            match self.cg.create(&path, None) {
                Ok(Outcome::Done(())) => self.made.push(path.clone()),
                Ok(Outcome::Vanished) => return Err("the node vanished".into()),
                Err(e) => return Err(format!("cannot make {path}: {e}")),
            }
        }
        Ok(path)
    }

    /// Makes `path` (any depth under the node; its parent must exist),
    /// with `limit` if any; one that exists already is taken as it is (a
    /// group several containers share).
    pub fn make(&mut self, path: &ContainerPath, limit: Option<u64>) -> Result<(), String> {
        match self.cg.create(path, limit.map(Limit::Bytes)) {
            Ok(Outcome::Done(())) => {
                self.adopt(path.clone());
                Ok(())
            }
            Err(overbook_linux::CgroupError::Exists { .. }) => Ok(()),
            Ok(Outcome::Vanished) => Err("the node vanished".into()),
            Err(e) => Err(format!("cannot make {path}: {e}")),
        }
    }

    /// Takes a container made by someone else (a test, an agent) under
    /// the node's teardown.
    pub fn adopt(&mut self, path: ContainerPath) {
        if !self.made.contains(&path) {
            self.made.push(path);
        }
    }

    /// Kills everything in a container and removes it.
    pub fn drop_container(&mut self, path: &ContainerPath) {
        let _ = self.cg.kill(path);
        self.reap_children();
        // A container is removable once its last member is gone.
        let until = Instant::now() + Duration::from_secs(10);
        while self.cg.remove(path).is_err() && Instant::now() < until {
            let _ = self.cg.kill(path);
            self.reap_children();
            std::thread::sleep(Duration::from_millis(5));
        }
        self.made.retain(|p| p != path);
    }

    fn reap_children(&mut self) {
        self.children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
    }

    /// Starts `program args...` in container `name` (made if needed),
    /// output discarded.
    pub fn spawn_quiet(
        &mut self,
        name: &str,
        program: &str,
        args: &[String],
    ) -> Result<u32, String> {
        let path = self.container(name)?;
        self.spawn_quiet_in(&path, program, args)
    }

    /// Starts `program args...` in an existing container at any depth,
    /// output discarded; killed and reaped with the node.
    pub fn spawn_quiet_in(
        &mut self,
        path: &ContainerPath,
        program: &str,
        args: &[String],
    ) -> Result<u32, String> {
        let child = command_in(&*self.cg, path, program, args)
            .map_err(|e| e.to_string())?
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {program}: {e}"))?;
        let pid = child.id();
        self.children.push(child);
        Ok(pid)
    }

    /// Starts the workload with `args` in container `name` (made if needed).
    /// The returned worker is the caller's to wait for; the container's
    /// members are killed when the node is dropped.
    pub fn worker(
        &mut self,
        w: &WorkloadProgram,
        name: &str,
        args: &[String],
    ) -> Result<Worker, String> {
        let path = self.container(name)?;
        self.worker_in(w, &path, args)
    }

    /// Starts the workload with `args` in an existing container at any
    /// depth (see [`BenchNode::worker`]).
    pub fn worker_in(
        &self,
        w: &WorkloadProgram,
        path: &ContainerPath,
        args: &[String],
    ) -> Result<Worker, String> {
        let mut all = w.prefix.clone();
        all.extend(args.iter().cloned());
        let mut child = command_in(&*self.cg, path, &w.program, &all)
            .map_err(|e| e.to_string())?
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", w.program.display()))?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Worker { child, lines })
    }
}

impl Drop for BenchNode {
    fn drop(&mut self) {
        if let Ok(Outcome::Done(all)) = self.cg.discover(&self.root) {
            for c in all {
                if !self.made.contains(&c) {
                    self.made.push(c);
                }
            }
        }
        for c in &self.made {
            let _ = self.cg.kill(c);
        }
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Killed members exit on their own time: a cgroup is removable once
        // its last member has left.
        for c in self.made.clone().iter().rev().chain(std::iter::once(&self.root.clone())) {
            let until = Instant::now() + Duration::from_secs(10);
            while self.cg.remove(c).is_err() && Instant::now() < until {
                let _ = self.cg.kill(c);
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Percentiles::of(&xs);
        assert_eq!((p.n, p.p50, p.p99, p.max), (100, Some(50.0), Some(99.0), Some(100.0)));
        let p = Percentiles::of(&[3.0, 1.0, 2.0]);
        assert_eq!((p.p50, p.p99), (Some(2.0), Some(3.0)));
        assert_eq!(Percentiles::of(&[]).p50, None);
    }
}
