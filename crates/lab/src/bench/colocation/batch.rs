//! Best-effort work for `bench colocation`: a seeded stream of hash-chain
//! jobs ([`crate::chain`]) of mixed sizes, and the runner the peers use to
//! start them (overbook's scenes hand them to the agent's launcher instead).
//!
//! The runner admits a job when it fits: under `static` into the memory the
//! production reservation leaves (000's Mercury), otherwise against the
//! machine's available memory charged with each running job's profiled peak
//! and a headroom (the same rule overbook's launcher follows, so the
//! comparison is of what happens once memory runs short, not of
//! admission). A job that dies of a signal is retried from scratch at the
//! head of the queue. The `threshold` peer (000's Kuber) also lives here:
//! every 100 ms, below 10% of memory free, it kills the newest job.

use super::super::{BenchNode, MIB};
use super::services::Programs;
use overbook_linux::parse::MemInfo;
use overbook_linux::{ContainerPath, CpuShare};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Instant;

/// One best-effort job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BeJob {
    pub name: String,
    pub size: u64,
    pub steps: u32,
}

impl BeJob {
    /// What it is charged at admission: its memory and the program's own.
    pub fn peak(&self) -> u64 {
        self.size + 8 * MIB
    }
}

/// `n` jobs from `seed`, sized from 4% to 12% of `capacity`.
pub fn job_stream(seed: u64, n: usize, capacity: u64) -> Vec<BeJob> {
    let mut rng = crate::workload::XorShift(seed ^ 0x2545_f491_4f6c_dd1d);
    let mut next = move || rng.next();
    (0..n)
        .map(|i| {
            let share = 0.04 + (next() % 5) as f64 * 0.02;
            BeJob {
                name: format!("be-{i}"),
                size: (overbook_core::convert::to_u64(capacity as f64 * share) / MIB).max(8) * MIB,
                steps: 4 + (next() % 5) as u32 * 2,
            }
        })
        .collect()
}

/// Seconds each job pauses between steps: jobs hold memory more than they
/// compute, so how much best-effort work a node gets done depends on the
/// memory it gives them, not on the batch CPU.
pub const PACE: &str = "3";
/// Share of its pages a job rewrites each step.
pub const DIRTY: &str = "0.25";

/// The command that runs `job`: the chain workload under the OOM score a
/// kubelet gives best-effort pods, at idle CPU priority and on the last CPU
/// only (a batch CPU pool: CPU is not what this benchmark compares, and
/// under emulation a job's hashing would otherwise slow production on
/// every CPU), through a program named `be-chain` (a link to overbook) so
/// earlyoom can tell it by name.
pub fn command(job: &BeJob, be_chain: &Path, p: &Programs) -> Vec<String> {
    let mut argv = vec![p.choom.display().to_string(), "-n".into(), "1000".into(), "--".into()];
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus > 1 {
        argv.extend([p.taskset.display().to_string(), "-c".into(), (cpus - 1).to_string()]);
    }
    argv.extend([
        p.chrt.display().to_string(),
        "--idle".into(),
        "0".into(),
        be_chain.display().to_string(),
        "workload".into(),
        "chain".into(),
        job.size.to_string(),
        job.steps.to_string(),
        "--pace".into(),
        PACE.into(),
        "--dirty".into(),
        DIRTY.into(),
    ]);
    argv
}

/// How a peer admits and stops best-effort work.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Admission {
    /// Only into this many bytes (capacity less the production reservation).
    Static { be_bytes: u64 },
    /// Against available memory, keeping `headroom` bytes free.
    Snapshot { headroom: u64 },
}

/// What the runner counted.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BatchCounts {
    pub completed: usize,
    /// MiB-steps of the completed jobs: their size times their steps.
    pub work_mib_steps: u64,
    pub kills: usize,
    /// Run time of the incarnations a kill discarded, seconds.
    pub lost_s: f64,
    pub started: usize,
}

#[derive(Debug)]
struct Running {
    job: usize,
    container: ContainerPath,
    child: Child,
    started: Instant,
}

/// Runs the job stream for a peer.
#[derive(Debug)]
pub struct Runner {
    jobs: Vec<BeJob>,
    queue: VecDeque<usize>,
    running: Vec<Running>,
    admission: Admission,
    threshold_killer: bool,
    be_chain: PathBuf,
    programs: Programs,
    tries: Vec<u32>,
    pub counts: BatchCounts,
    /// When each job started, for where production's tail falls.
    pub start_times: Vec<Instant>,
}

impl Runner {
    pub fn new(
        jobs: Vec<BeJob>,
        admission: Admission,
        threshold_killer: bool,
        be_chain: &Path,
        programs: &Programs,
    ) -> Runner {
        let n = jobs.len();
        Runner {
            jobs,
            queue: (0..n).collect(),
            running: Vec::new(),
            admission,
            threshold_killer,
            be_chain: be_chain.to_path_buf(),
            programs: programs.clone(),
            tries: vec![0; n],
            counts: BatchCounts::default(),
            start_times: Vec::new(),
        }
    }

    /// One look: reaps what ended, kills (threshold peer), admits.
    pub fn tick(&mut self, node: &mut BenchNode, mem: &MemInfo) -> Result<(), String> {
        self.reap(node);
        if self.threshold_killer && mem.available_or_free() * 10 < mem.total {
            if let Some(newest) = self.running.iter().max_by_key(|r| r.started) {
                let _ = node.cg.kill(&newest.container);
            }
        }
        self.admit(node, mem)
    }

    fn reap(&mut self, node: &mut BenchNode) {
        let mut i = 0;
        while i < self.running.len() {
            let status = match self.running[i].child.try_wait() {
                Ok(Some(s)) => s,
                Ok(None) => {
                    i += 1;
                    continue;
                }
                // Not waitable: it is gone; count it as killed.
                Err(_) => std::os::unix::process::ExitStatusExt::from_raw(9),
            };
            let r = self.running.swap_remove(i);
            node.drop_container(&r.container);
            if status.success() {
                let j = &self.jobs[r.job];
                self.counts.completed += 1;
                self.counts.work_mib_steps += j.size / MIB * u64::from(j.steps);
            } else {
                self.counts.kills += 1;
                self.counts.lost_s += r.started.elapsed().as_secs_f64();
                self.queue.push_front(r.job);
            }
        }
    }

    fn admit(&mut self, node: &mut BenchNode, mem: &MemInfo) -> Result<(), String> {
        while let Some(&next) = self.queue.front() {
            let peak = self.jobs[next].peak();
            let fits = match self.admission {
                Admission::Static { be_bytes } => {
                    let held: u64 = self.running.iter().map(|r| self.jobs[r.job].peak()).sum();
                    held + peak <= be_bytes
                }
                Admission::Snapshot { headroom } => {
                    // A job not yet at its peak will still take the rest.
                    let owed: u64 = self
                        .running
                        .iter()
                        .map(|r| {
                            let used = overbook_linux::fastread::number(
                                &node.usage_file(Some(&r.container)),
                            )
                            .unwrap_or(0);
                            self.jobs[r.job].peak().saturating_sub(used)
                        })
                        .sum();
                    mem.available_or_free().saturating_sub(owed) >= peak + headroom
                }
            };
            if !fits {
                return Ok(());
            }
            self.queue.pop_front();
            self.start(node, next)?;
        }
        Ok(())
    }

    fn start(&mut self, node: &mut BenchNode, job: usize) -> Result<(), String> {
        self.tries[job] += 1;
        let name = format!("{}-try{}", self.jobs[job].name, self.tries[job]);
        let container = node.container(&name)?;
        // Best-effort work gets the CPU production leaves, under every
        // policy alike (the agent's own `[cpu]` default), so the scenes
        // differ in memory management only. A node without the cpu
        // controller leaves every policy at the kernel's equal shares.
        let _done_or_unsupported = node
            .cg
            .set_cpu_share(&container, CpuShare::Idle)
            .map_err(|e| format!("{name}: cannot lower its CPU weight: {e}"))?;
        let argv = command(&self.jobs[job], &self.be_chain, &self.programs);
        let child = overbook_agent::spawn::command_in(&*node.cg, &container, &argv[0], &argv[1..])
            .map_err(|e| e.to_string())?
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        self.counts.started += 1;
        let started = Instant::now();
        self.start_times.push(started);
        self.running.push(Running { job, container, child, started });
        Ok(())
    }

    /// Kills every running job (the scene is over).
    pub fn stop(&mut self, node: &mut BenchNode) {
        for mut r in self.running.drain(..) {
            let _ = node.cg.kill(&r.container);
            let _ = r.child.kill();
            let _ = r.child.wait();
            node.drop_container(&r.container);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_the_seed_s_and_sized_to_the_node() {
        let cap = 1600 * MIB;
        let a = job_stream(3, 20, cap);
        let b = job_stream(3, 20, cap);
        assert_eq!(serde_json::to_string(&a).ok(), serde_json::to_string(&b).ok());
        assert_ne!(
            serde_json::to_string(&a).ok(),
            serde_json::to_string(&job_stream(4, 20, cap)).ok()
        );
        assert!(a.iter().all(|j| j.size >= 64 * MIB && j.size <= 193 * MIB), "{a:?}");
        assert!(a.iter().any(|j| j.size != a[0].size), "mixed sizes");
    }
}
