//! What `bench colocation` watches of the machine and of production in a
//! scene, besides the drivers' own figures: read at the start, at every
//! look, and at the end, through `overbook-linux`'s readers.

use super::SceneResult;
use crate::bench::BenchNode;
use overbook_linux::parse::{CpuTimes, MemInfo, SchedStat};
use overbook_linux::{host, process, ContainerPath, Pid};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How often production's processes' scheduler times are read (each read
/// is a few files a thread: not every 100 ms look).
const SCHED_EVERY: Duration = Duration::from_secs(1);

/// Production's memory counters, summed over its containers.
#[derive(Clone, Copy, Default)]
struct Production {
    /// Seconds some task stalled on memory (PSI `some`).
    stall_s: f64,
    /// Pages read back after eviction (anonymous and file).
    refaults: u64,
}

impl Production {
    fn read(node: &BenchNode, containers: &[ContainerPath]) -> Result<Production, String> {
        let mut sum = Production::default();
        for c in containers {
            let counters = node
                .cg
                .counters(c)
                .map_err(|e| e.to_string())?
                .done()
                .ok_or_else(|| format!("{c}: production's container is gone"))?;
            sum.stall_s += counters.pressure.map_or(0.0, |p| p.some.total.as_secs_f64());
            sum.refaults += counters.refault_anon.unwrap_or(0) + counters.refault_file.unwrap_or(0);
        }
        Ok(sum)
    }
}

/// The machine's counters that only grow.
#[derive(Clone, Copy)]
struct Machine {
    oom_kills: u64,
    /// Seconds every task stalled on memory (PSI `full`; 0 without PSI).
    full_stall_s: f64,
    cpu: CpuTimes,
}

impl Machine {
    fn read() -> Result<Machine, String> {
        let vmstat = host::vmstat().map_err(|e| e.to_string())?;
        let pressure = host::system_pressure().map_err(|e| e.to_string())?;
        Ok(Machine {
            oom_kills: vmstat.oom_kill.unwrap_or(0),
            full_stall_s: pressure.and_then(|p| p.full).map_or(0.0, |l| l.total.as_secs_f64()),
            cpu: host::cpu_times().map_err(|e| e.to_string())?,
        })
    }
}

/// This process's CPU seconds (`utime + stime`: an agent's swap-out
/// workers that have exited count too).
fn own_cpu_s() -> Option<f64> {
    let (user, system) = crate::bench::cpu_ticks(Pid::new(std::process::id())?).ok()?;
    Some((user + system) as f64 / 100.0)
}

/// One scene's watch.
pub(super) struct SceneWatch {
    production: Vec<ContainerPath>,
    /// Each production process's scheduler times: at the scene's start (or
    /// zero, for one born during it) and at the last read; one that exits
    /// keeps its last read (at most `SCHED_EVERY` of its time is lost).
    sched: BTreeMap<Pid, (SchedStat, SchedStat)>,
    /// The same of every other process in the node's containers: the
    /// best-effort jobs, whoever started them (a job's last second of CPU
    /// before it exits is not counted).
    be_sched: BTreeMap<Pid, (SchedStat, SchedStat)>,
    sched_read: Option<Instant>,
    /// This process's CPU seconds at the start: the scene's loop and
    /// drivers' threads, and in overbook's scenes the agent it runs (at
    /// normal priority, beside production, as a real agent runs).
    own0: Option<f64>,
    machine0: Machine,
    production0: Production,
    available_min: u64,
    swap_peak: u64,
}

impl SceneWatch {
    /// The readings at the scene's start.
    pub(super) fn start(
        node: &BenchNode,
        production: Vec<ContainerPath>,
    ) -> Result<SceneWatch, String> {
        let mut watch = SceneWatch {
            machine0: Machine::read()?,
            production0: Production::read(node, &production)?,
            production,
            sched: BTreeMap::new(),
            be_sched: BTreeMap::new(),
            sched_read: None,
            own0: own_cpu_s(),
            available_min: u64::MAX,
            swap_peak: 0,
        };
        watch.read_sched(node, true);
        Ok(watch)
    }

    /// Production's processes' scheduler times, once a `SCHED_EVERY`.
    pub(super) fn look_at_production(&mut self, node: &BenchNode) {
        if self.sched_read.is_none_or(|t| t.elapsed() >= SCHED_EVERY) {
            self.read_sched(node, false);
        }
    }

    fn read_sched(&mut self, node: &BenchNode, at_start: bool) {
        self.sched_read = Some(Instant::now());
        let record = |times: &mut BTreeMap<Pid, (SchedStat, SchedStat)>, c: &ContainerPath| {
            let Ok(members) = node.cg.members(c) else { return };
            for pid in members.done().map(|m| m.pids).unwrap_or_default() {
                let Ok(now) = process::schedstat(pid) else { continue };
                let first = if at_start { now } else { SchedStat::default() };
                times.entry(pid).or_insert((first, now)).1 = now;
            }
        };
        for c in &self.production {
            record(&mut self.sched, c);
        }
        let others = node.cg.discover(&node.root).ok().and_then(|d| d.done()).unwrap_or_default();
        for c in others.iter().filter(|c| !self.production.contains(c)) {
            record(&mut self.be_sched, c);
        }
    }

    /// A look at the machine's memory.
    pub(super) fn look(&mut self, mem: &MemInfo) {
        self.available_min = self.available_min.min(mem.available_or_free());
        self.swap_peak = self.swap_peak.max(mem.swap_total.saturating_sub(mem.swap_free));
    }

    /// The scene's figures into `r`; what cannot be read is noted there.
    pub(super) fn finish(mut self, node: &BenchNode, r: &mut SceneResult) {
        self.read_sched(node, false);
        let since = |times: &BTreeMap<Pid, (SchedStat, SchedStat)>,
                     f: fn(&SchedStat) -> Duration| {
            // From +0.0: a sum of nothing is -0.0, shown as "-0.0".
            times
                .values()
                .map(|(a, b)| f(b).saturating_sub(f(a)).as_secs_f64())
                .fold(0.0, |t, x| t + x)
        };
        r.prod_cpu_s = since(&self.sched, |s| s.on_cpu);
        r.prod_runq_wait_s = since(&self.sched, |s| s.run_delay);
        r.be_cpu_s = since(&self.be_sched, |s| s.on_cpu);
        match (self.own0, own_cpu_s()) {
            (Some(a), Some(b)) => r.bench_cpu_s = (b - a).max(0.0),
            _ => r.notes.push("the benchmark's own CPU time could not be read".into()),
        }
        r.available_min = self.available_min;
        r.swap_peak = self.swap_peak;
        match Machine::read() {
            Ok(m) => {
                r.oom_kills = m.oom_kills.saturating_sub(self.machine0.oom_kills);
                r.machine_full_stall_s = (m.full_stall_s - self.machine0.full_stall_s).max(0.0);
                (r.cpu_busy, r.cpu_iowait) = m.cpu.shares_since(&self.machine0.cpu);
                r.cpu_steal = m.cpu.steal_since(&self.machine0.cpu);
            }
            Err(e) => r.notes.push(format!("the machine's counters at the end: {e}")),
        }
        match Production::read(node, &self.production) {
            Ok(p) => {
                r.prod_stall_s = (p.stall_s - self.production0.stall_s).max(0.0);
                r.prod_refaults = p.refaults.saturating_sub(self.production0.refaults);
            }
            Err(e) => r.notes.push(format!("production's counters at the end: {e}")),
        }
    }
}
