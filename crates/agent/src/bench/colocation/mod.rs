//! `overbook bench colocation`: production services and a best-effort job
//! stream on one machine, under each of the memory managers operators use,
//! in one run (000 §5's comparison, on a real node).
//!
//! The node is the whole machine: earlyoom and the kernel's OOM killer
//! watch all of it, so the benchmark is meant for a machine (or VM, see
//! `scripts/vm`) of its own, with swap. Every scene runs the same script:
//!
//! * production is Debian's Redis (`redis-benchmark` GETs over its data, a
//!   round a second) and PostgreSQL (`pgbench -S`, throttled, its tables in
//!   the page cache), each in its container, both reserved at their peak;
//! * from 40% to 60% of the scene Redis takes in a cache fill that brings
//!   production up to its reservation, then drops it;
//! * best-effort work is a seeded stream of hash-chain jobs
//!   ([`batch::job_stream`]), kept queued the whole scene, retried from
//!   scratch when killed;
//! * the policies differ only in who admits and who takes memory back:
//!   `isolated` (no best-effort work: the reference), `static` (best-effort
//!   only in unreserved memory), `kernel` (oversubscribed, the kernel's OOM
//!   killer only), `earlyoom`, `threshold` (000's Kuber), and overbook's
//!   agent with its built-in policy, killing (`overbook-kill`) or with 004's
//!   adaptive checkpointing (`overbook-adaptive`).
//!
//! Every scene makes its own node cgroup and removes it, with every process
//! and file, on error paths too.

pub mod batch;
pub mod latency;
pub mod services;

use super::{BenchNode, MIB};
use crate::agent::Agent;
use crate::config::AgentConfig;
use crate::events::{Event, EventLog};
use crate::tasks::{RunError, RunRequest};
use batch::{Admission, BatchCounts, BeJob, MemInfo, Runner};
use overbook_core::{Class, Time};
use overbook_linux::{host_cgroups, HostSupport, NodeCgroups};
use serde::{Deserialize, Serialize};
use services::{Measured, Programs, ServiceSizes, Templates};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The managers compared.
pub const POLICIES: [&str; 7] =
    ["isolated", "static", "kernel", "earlyoom", "threshold", "overbook-kill", "overbook-adaptive"];

/// How the benchmark runs.
#[derive(Clone, Debug)]
pub struct ColocationPlan {
    /// The overbook binary (best-effort jobs run its chain workload).
    pub overbook: PathBuf,
    /// Where the run's directory is made (and removed).
    pub scratch: PathBuf,
    /// Where overbook's checkpoint images go; default: in the run's directory.
    pub images: Option<PathBuf>,
    pub seed: u64,
    /// Length of each scene.
    pub seconds: u64,
    pub repeats: usize,
    pub policies: Vec<String>,
    /// Where overbook scenes' agent events go, as JSON lines (one file a
    /// scene); none: kept in the report as counts only.
    pub events: Option<PathBuf>,
}

/// A production service's figures in one scene.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ServiceResult {
    pub requests: u64,
    /// Requests a second while the driver ran.
    pub throughput: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// What the driver could not do (a dead or silent service), in order.
    pub failures: Vec<String>,
}

impl ServiceResult {
    fn of(m: &Measured) -> ServiceResult {
        ServiceResult {
            requests: m.requests,
            throughput: if m.busy_s > 0.0 { m.requests as f64 / m.busy_s } else { 0.0 },
            p50_ms: m.latency.percentile_ms(0.50).unwrap_or(f64::NAN),
            p99_ms: m.latency.percentile_ms(0.99).unwrap_or(f64::NAN),
            failures: m.failures.clone(),
        }
    }
}

/// One policy's scene.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SceneResult {
    pub policy: String,
    pub repeat: usize,
    pub redis: ServiceResult,
    pub postgres: ServiceResult,
    pub batch: BatchCounts,
    pub suspensions: usize,
    pub checkpoints: usize,
    pub restores: usize,
    /// The kernel's OOM kills in the scene (`/proc/vmstat` `oom_kill`).
    pub oom_kills: u64,
    /// Seconds in which some production task stalled on memory (the
    /// containers' PSI `some`, summed).
    pub prod_stall_s: f64,
    /// Seconds in which every task of the machine stalled on memory (PSI
    /// `full`).
    pub machine_full_stall_s: f64,
    /// Seconds Redis took to take in the cache fill.
    pub fill_s: f64,
    /// Most swap in use at any look, bytes.
    pub swap_peak: u64,
    /// Least memory available at any look, bytes.
    pub available_min: u64,
    /// Pages production read back after the kernel had evicted them
    /// (`workingset_refault_anon` + `_file` of both containers).
    pub prod_refaults: u64,
    /// What went wrong in the scene without stopping it.
    pub notes: Vec<String>,
    /// Share of the machine's CPU time busy, and waiting for I/O, over the
    /// scene (`/proc/stat`).
    pub cpu_busy: f64,
    pub cpu_iowait: f64,
    /// overbook scenes: the agent's events by kind.
    pub agent_events: std::collections::BTreeMap<String, usize>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ColocationReport {
    pub seed: u64,
    pub seconds: u64,
    pub machine_memory: u64,
    /// Memory the benchmark counts as the node's: available at start, less
    /// what the drivers and the agent need.
    pub capacity: u64,
    /// Production's reservation (its peak); `static` runs best-effort work
    /// only in `capacity` less this.
    pub reserved: u64,
    pub headroom: u64,
    pub sizes: ServiceSizes,
    pub pg_bytes: u64,
    /// pgbench's rate, a share of what the node sustains alone.
    pub pg_rate: f64,
    pub redis_round: u64,
    pub jobs: Vec<BeJob>,
    pub scenes: Vec<SceneResult>,
    pub summary: Vec<PolicySummary>,
    pub earlyoom_args: Vec<String>,
}

/// A policy over its repeats, relative to `isolated` and `static`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PolicySummary {
    pub policy: String,
    pub redis_throughput: f64,
    pub redis_p50: f64,
    pub redis_p99: f64,
    pub pg_throughput: f64,
    pub pg_p50: f64,
    pub pg_p99: f64,
    /// Largest minus smallest over the repeats (0 with one).
    pub redis_p99_spread: f64,
    pub pg_p99_spread: f64,
    pub be_completed: f64,
    /// Best-effort work over `static`'s.
    pub be_work: f64,
    pub be_work_spread: f64,
    pub lost_s: f64,
    pub kills: f64,
    pub suspensions: f64,
    pub checkpoints: f64,
    pub oom_kills: f64,
    pub prod_stall_s: f64,
    /// Driver rounds that failed (a dead or silent service), all repeats.
    pub failures: usize,
}

/// Sizes from the node's capacity: the shares the README explains.
fn sizes(capacity: u64) -> ServiceSizes {
    let c = capacity as f64;
    ServiceSizes {
        redis_base: (c * 0.04) as u64,
        redis_burst: (c * 0.50) as u64,
        pg_scale: ((c * 0.10) / (15.0 * MIB as f64)).round().max(1.0) as u32,
    }
}

/// When Redis's cache fill comes and goes, as shares of the scene:
/// production reaches its reservation a fifth of the time.
const FILL_FROM: f64 = 0.4;
const FILL_UNTIL: f64 = 0.6;

/// What the drivers, the benchmark and the agent themselves need.
const OWN_MEMORY: u64 = 160 * MIB;
/// Memory server processes take beyond their data.
const SERVER_OVERHEAD: u64 = 64 * MIB;

struct Run<'a> {
    plan: &'a ColocationPlan,
    programs: Programs,
    dir: PathBuf,
    be_chain: PathBuf,
    templates: Templates,
    capacity: u64,
    reserved: u64,
    headroom: u64,
    jobs: Vec<BeJob>,
    pg_rate: f64,
    redis_round: u64,
}

/// Runs every policy `repeats` times; `say` hears progress.
pub fn run(plan: &ColocationPlan, say: &mut dyn FnMut(&str)) -> Result<ColocationReport, String> {
    for p in &plan.policies {
        if !POLICIES.contains(&p.as_str()) {
            return Err(format!("unknown policy {p:?} (one of {})", POLICIES.join(", ")));
        }
    }
    let programs = Programs::find()?;
    // Never the OOM killer's or earlyoom's victim; the drivers inherit it,
    // as programs on another machine would be out of reach. Production and
    // best-effort set their own (a kubelet's -997 and 1000).
    super::set_oom_score_adj(std::process::id(), -1000)?;
    let swaps = std::fs::read_to_string("/proc/swaps").map_err(|e| format!("/proc/swaps: {e}"))?;
    if swaps.lines().count() < 2 {
        return Err("no swap: the comparison needs a machine with swap (scripts/vm gives its \
                    guest zram)"
            .into());
    }
    let mem = MemInfo::read()?;
    let capacity = mem.available.saturating_sub(OWN_MEMORY);
    if capacity < 512 * MIB {
        return Err(format!(
            "{} MiB available: the comparison needs 672 MiB at least",
            mem.available / MIB
        ));
    }
    let scratch = tempfile::Builder::new()
        .prefix("overbook-colocation-")
        .tempdir_in(&plan.scratch)
        .map_err(|e| format!("a directory in {}: {e}", plan.scratch.display()))?;
    // Others (the postgres account) walk through it to their directories.
    std::fs::set_permissions(scratch.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", scratch.path().display()))?;
    let dir = scratch.path().to_path_buf();
    if in_memory(&dir) {
        say(&format!(
            "warning: {} is in memory (tmpfs): PostgreSQL's tables will not be page cache \
             and checkpoint images will take memory; give --scratch a disk",
            dir.display()
        ));
    }
    let be_chain = dir.join("be-chain");
    std::os::unix::fs::symlink(&plan.overbook, &be_chain)
        .map_err(|e| format!("{}: {e}", be_chain.display()))?;
    let sizes = sizes(capacity);
    say(&format!(
        "machine {} MiB, node capacity {} MiB; templates of the services",
        mem.total / MIB,
        capacity / MIB
    ));
    let templates = {
        let mut node = BenchNode::new(&node_name("template"), None)?;
        Templates::make(&programs, &mut node, &dir.join("templates"), sizes, say)?
    };
    let reserved = sizes.redis_base + sizes.redis_burst + templates.pg_bytes + 2 * SERVER_OVERHEAD;
    let (pg_rate, redis_round) = calibrate(&programs, &templates, &dir, say)?;
    let mut run = Run {
        plan,
        programs,
        dir: dir.clone(),
        be_chain,
        templates,
        capacity,
        reserved,
        headroom: capacity / 10,
        jobs: batch::job_stream(plan.seed, 400, capacity),
        pg_rate,
        redis_round,
    };
    let mut scenes = Vec::new();
    for repeat in 0..plan.repeats {
        for policy in &plan.policies {
            say(&format!("{policy} (repeat {}/{}): {} s", repeat + 1, plan.repeats, plan.seconds));
            let r = run.scene(policy, repeat, say)?;
            say(&format!(
                "{policy}: Redis {:.0} req/s p99 {:.2} ms, PostgreSQL {:.0} tx/s p99 {:.2} ms, \
                 {} jobs done of {} started, {} kills ({} OOM), swap peak {} MiB, available min {} MiB, production refaults {}, CPU {:.0}% busy {:.0}% iowait{}",
                r.redis.throughput,
                r.redis.p99_ms,
                r.postgres.throughput,
                r.postgres.p99_ms,
                r.batch.completed,
                r.batch.started,
                r.batch.kills,
                r.oom_kills,
                r.swap_peak / MIB,
                r.available_min / MIB,
                r.prod_refaults,
                r.cpu_busy * 100.0,
                r.cpu_iowait * 100.0,
                if r.notes.is_empty() {
                    String::new()
                } else {
                    format!("; {}", r.notes.join("; "))
                }
            ));
            scenes.push(r);
        }
    }
    let summary = summarize(&plan.policies, &scenes);
    run.jobs.truncate(scenes.iter().map(|s| s.batch.started).max().unwrap_or(0));
    Ok(ColocationReport {
        seed: plan.seed,
        seconds: plan.seconds,
        machine_memory: mem.total,
        capacity,
        reserved: run.reserved,
        headroom: run.headroom,
        sizes,
        pg_bytes: run.templates.pg_bytes,
        pg_rate,
        redis_round,
        jobs: run.jobs,
        scenes,
        summary,
        earlyoom_args: earlyoom_args(),
    })
}

/// Whether `dir` is on a filesystem kept in memory (tmpfs, or an overlay,
/// which in scripts/vm's guest keeps its writes in /run).
fn in_memory(dir: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const OVERLAYFS_MAGIC: i64 = 0x794c_7630;
    rustix::fs::statfs(dir).is_ok_and(|s| {
        // `f_type`'s width is the architecture's.
        #[allow(clippy::unnecessary_cast)]
        let t = s.f_type as i64;
        t == TMPFS_MAGIC || t == OVERLAYFS_MAGIC
    })
}

fn node_name(what: &str) -> String {
    format!("overbook-colocation-{}-{what}", std::process::id())
}

/// pgbench's rate, as a share of what it reaches alone: low enough that
/// the drivers' own CPU (under emulation, all of it slow) does not put it
/// behind its schedule in the isolated scene.
const PG_SHARE: f64 = 0.2;

/// Production alone, unthrottled, once: pgbench's rate is [`PG_SHARE`] of
/// what it reaches, and a Redis round is as many GETs as take about a fifth
/// of a second. Production then leaves about half of the machine's CPU idle
/// (under emulation, where everything is CPU).
fn calibrate(
    programs: &Programs,
    templates: &Templates,
    dir: &Path,
    say: &mut dyn FnMut(&str),
) -> Result<(f64, u64), String> {
    let mut node = BenchNode::new(&node_name("calibrate"), None)?;
    let scene = dir.join("calibrate");
    let (redis, pg) = templates.start(programs, &mut node, &scene)?;
    let tps = services::pg_capacity(programs, &pg, 5)?;
    let rate = tps * PG_SHARE;
    let started = Instant::now();
    let probe = 2000;
    services::output(
        Command::new(&programs.redis_benchmark).arg("-s").arg(&redis.socket).args([
            "-q",
            "-t",
            "get",
            "-c",
            "4",
            "-n",
            &probe.to_string(),
        ]),
        "redis-benchmark (calibration)",
    )?;
    let per_s = probe as f64 / started.elapsed().as_secs_f64().max(1e-3);
    let round = ((per_s / 5.0) as u64).clamp(200, 100_000);
    say(&format!(
        "alone: pgbench -S {tps:.0} tx/s (throttled to {rate:.0}), Redis ~{per_s:.0} GET/s \
         (rounds of {round})"
    ));
    drop(node);
    let _ = std::fs::remove_dir_all(&scene);
    Ok((rate, round))
}

/// earlyoom's settings: act at 10% available (Kuber's line) whatever the
/// swap (`-s 100`: by default it also waits for swap to fall below 10%,
/// and zram swap would let production thrash first); best-effort jobs
/// first, production and the benchmark's own programs never.
fn earlyoom_args() -> Vec<String> {
    [
        "-m",
        "10",
        "-s",
        "100",
        "-r",
        "0",
        "--prefer",
        "^be-chain$",
        "--avoid",
        "^(redis-server|postgres|pgbench|redis-benchmark|redis-cli|overbook)$",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The earlyoom daemon of a scene: it runs outside the node, so the node's
/// cleanup does not reach it; stopped when dropped, on error paths too.
struct Earlyoom(Child);

impl Drop for Earlyoom {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Who manages best-effort work in a scene.
enum Manager {
    None,
    Peer(Box<Runner>, Option<Earlyoom>),
    Overbook(Box<OverbookScene>),
}

impl Run<'_> {
    fn scene(
        &mut self,
        policy: &str,
        repeat: usize,
        say: &mut dyn FnMut(&str),
    ) -> Result<SceneResult, String> {
        let mut node = BenchNode::new(&node_name(policy), None)?;
        let dir = self.dir.join(format!("{policy}-{repeat}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let (redis, pg) = self.templates.start(&self.programs, &mut node, &dir)?;
        let p = &self.programs;
        let snapshot = Admission::Snapshot { headroom: self.headroom };
        let runner = |admission, killer| {
            Box::new(Runner::new(self.jobs.clone(), admission, killer, &self.be_chain, p))
        };
        let mut manager = match policy {
            "isolated" => Manager::None,
            "static" => Manager::Peer(
                runner(
                    Admission::Static { be_bytes: self.capacity.saturating_sub(self.reserved) },
                    false,
                ),
                None,
            ),
            "kernel" => Manager::Peer(runner(snapshot, false), None),
            "threshold" => Manager::Peer(runner(snapshot, true), None),
            "earlyoom" => {
                let child = Command::new(&p.earlyoom)
                    .args(earlyoom_args())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| format!("cannot start earlyoom: {e}"))?;
                Manager::Peer(runner(snapshot, false), Some(Earlyoom(child)))
            }
            _ => Manager::Overbook(Box::new(OverbookScene::new(
                &node,
                policy,
                &dir,
                self.plan.images.as_deref(),
                self.capacity,
                self.headroom,
            )?)),
        };
        let logs = dir.join("pgbench");
        std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
        let oom0 = vmstat("oom_kill");
        let full0 = psi_total(Path::new("/proc/pressure/memory"), "full");
        let prod_psi = |node: &BenchNode| -> f64 {
            [&redis.container, &pg.container]
                .iter()
                .map(|c| psi_total(&node.dir(Some(c)).join("memory.pressure"), "some"))
                .sum()
        };
        let stall0 = prod_psi(&node);
        let prod_refaults = |node: &BenchNode| -> u64 {
            [&redis.container, &pg.container]
                .iter()
                .map(|c| {
                    let stat = node.dir(Some(c)).join("memory.stat");
                    ["workingset_refault_anon", "workingset_refault_file"]
                        .iter()
                        .map(|k| super::read_keyed(&stat, k).unwrap_or(0))
                        .sum::<u64>()
                })
                .sum()
        };
        let refaults0 = prod_refaults(&node);
        let cpu0 = cpu_times();
        let mut available_min = u64::MAX;
        let stop = Arc::new(AtomicBool::new(false));
        let redis_load = services::redis_load(
            p,
            &redis,
            self.templates.redis_keys,
            self.redis_round,
            stop.clone(),
        );
        let pg_load = services::pg_load(p, &pg, self.pg_rate, self.plan.seconds, &logs);
        let start = Instant::now();
        let span = Duration::from_secs(self.plan.seconds);
        let mut fill = None;
        let (mut fill_s, mut filled, mut swap_peak) = (f64::NAN, false, 0u64);
        let mut result = SceneResult { policy: policy.into(), repeat, ..SceneResult::default() };
        while start.elapsed() < span {
            let t = start.elapsed().as_secs_f64() / span.as_secs_f64();
            let mem = MemInfo::read()?;
            available_min = available_min.min(mem.available);
            swap_peak = swap_peak.max(swap_used().unwrap_or(0));
            match &mut manager {
                Manager::None => {}
                Manager::Peer(r, _) => r.tick(&mut node, &mem)?,
                Manager::Overbook(o) => o.tick(start, &self.jobs, &self.be_chain, p)?,
            }
            if fill.is_none() && !filled && t >= FILL_FROM {
                fill = Some(redis.fill(self.templates.sizes.redis_burst));
                say(&format!(
                    "{policy}: Redis cache fill at {:.0} s",
                    start.elapsed().as_secs_f64()
                ));
            }
            if !filled && t >= FILL_UNTIL {
                if let Some(f) = fill.take() {
                    // The fill is production's: it gets to finish.
                    match f.join().map_err(|_| "the Redis fill panicked".to_string()) {
                        Ok(Ok(s)) => fill_s = s,
                        Ok(Err(e)) | Err(e) => result.notes.push(e),
                    }
                }
                if let Err(e) = redis.drop_fill(p) {
                    result.notes.push(e);
                }
                filled = true;
                say(&format!(
                    "{policy}: Redis fill dropped at {:.0} s",
                    start.elapsed().as_secs_f64()
                ));
            }
            // The managers' own period (100 ms: the threshold killer's).
            std::thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, Ordering::Relaxed);
        let redis_m = redis_load.join().map_err(|_| "the Redis driver panicked")??;
        let pg_m = pg_load.join().map_err(|_| "the PostgreSQL driver panicked")??;
        result.redis = ServiceResult::of(&redis_m);
        result.postgres = ServiceResult::of(&pg_m);
        result.prod_stall_s = (prod_psi(&node) - stall0).max(0.0);
        result.machine_full_stall_s =
            (psi_total(Path::new("/proc/pressure/memory"), "full") - full0).max(0.0);
        result.oom_kills = vmstat("oom_kill").saturating_sub(oom0);
        result.fill_s = fill_s;
        result.swap_peak = swap_peak;
        result.available_min = available_min;
        if let (Some(a), Some(b)) = (cpu0, cpu_times()) {
            let total = (b.0 - a.0).max(1) as f64;
            result.cpu_busy =
                (b.0 - a.0).saturating_sub(b.1 - a.1).saturating_sub(b.2 - a.2) as f64 / total;
            result.cpu_iowait = (b.2 - a.2) as f64 / total;
        }
        result.prod_refaults = prod_refaults(&node).saturating_sub(refaults0);
        match manager {
            Manager::None => {}
            Manager::Peer(mut r, earlyoom) => {
                drop(earlyoom);
                r.stop(&mut node);
                result.batch = r.counts.clone();
            }
            Manager::Overbook(o) => {
                let file =
                    self.plan.events.as_ref().map(|d| d.join(format!("{policy}-{repeat}.jsonl")));
                o.finish(&mut result, &self.jobs, file.as_deref())?;
            }
        }
        drop(node);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(result)
    }
}

/// overbook's agent on the scene's node, the job stream submitted to it.
/// The services are its `critical` class: they bypass swap and keep their
/// memory (`memory.min` raised to their usage), so when memory runs short
/// the kernel reclaims from best-effort jobs, whose thrashing the agent
/// then ends. The peers get what they allow instead: earlyoom's
/// `--avoid`, and production's `oom_score_adj` everywhere.
struct OverbookScene {
    agent: Agent<Box<dyn NodeCgroups>>,
    /// The next job of the stream to submit.
    next: usize,
    /// Jobs the kernel killed under the agent (it retries only its own
    /// kills), to resubmit under a new name.
    retry: VecDeque<usize>,
    retries: u32,
    kernel_kills: usize,
}

impl OverbookScene {
    fn new(
        node: &BenchNode,
        policy: &str,
        dir: &Path,
        images: Option<&Path>,
        capacity: u64,
        headroom: u64,
    ) -> Result<OverbookScene, String> {
        let preemptor = policy.strip_prefix("overbook-").unwrap_or(policy);
        let images = images.map_or_else(|| dir.join("images"), |i| i.join(node.root.as_str()));
        let text = format!(
            "[node]\nroot = \"{}\"\ncapacity = {capacity}\n\
             [agent]\nstate_db = \"\"\nsample_period = 0.1\ntask_log_dir = \"{}\"\n\
             [[classes]]\npattern = \"be-*\"\nclass = \"best-effort\"\n\
             [[classes]]\npattern = \"prod-*\"\nclass = \"critical\"\n\
             [policy.launcher]\nheadroom = {:.4}\ncharge_until_peak = true\n\
             [policy.preemptor]\nkind = \"{preemptor}\"\n\
             [checkpoint]\nimages_dir = \"{}\"\npre_dump_interval = 0\ntimeout = 120\n",
            node.root.as_str(),
            dir.join("tasks").display(),
            headroom as f64 / capacity as f64,
            images.display(),
        );
        let cfg = AgentConfig::parse(&text, "bench colocation").map_err(|e| e.to_string())?;
        let cg = host_cgroups(&HostSupport::probe()).map_err(|e| e.to_string())?;
        let mut agent =
            Agent::new(&cfg, cg, EventLog::in_memory(200_000)).map_err(|e| e.to_string())?;
        agent.note_checkpoint_support(Time::ZERO);
        Ok(OverbookScene { agent, next: 0, retry: VecDeque::new(), retries: 0, kernel_kills: 0 })
    }

    fn tick(
        &mut self,
        start: Instant,
        jobs: &[BeJob],
        be_chain: &Path,
        p: &Programs,
    ) -> Result<(), String> {
        let now = Time::from_micros(start.elapsed().as_micros() as u64);
        let from = self.agent.events().recent().count();
        self.agent.tick(now).map_err(|e| e.to_string())?;
        let failed: Vec<String> = self
            .agent
            .events()
            .recent()
            .skip(from)
            .filter(|e| e.kind == "finished" && e.detail["status"] != "exit status: 0")
            .map(|e| task_of(e).to_string())
            .collect();
        for name in failed {
            if let Some(j) = jobs.iter().position(|j| j.name == job_of(&name)) {
                self.kernel_kills += 1;
                self.retry.push_back(j);
            }
        }
        // The launcher's line holds `queue_limit` tasks: the stream is fed
        // to it as it takes them, retries first.
        loop {
            let (job, retry) = match self.retry.front() {
                Some(&j) => (j, true),
                None if self.next < jobs.len() => (self.next, false),
                None => return Ok(()),
            };
            let j = &jobs[job];
            let name =
                if retry { format!("{}-r{}", j.name, self.retries + 1) } else { j.name.clone() };
            match self.submit(now, j, &name, be_chain, p) {
                Ok(()) => {}
                Err(RunError::Rejected(why)) if why == "QueueFull" => return Ok(()),
                Err(e) => return Err(format!("{name}: {e}")),
            }
            if retry {
                self.retry.pop_front();
                self.retries += 1;
            } else {
                self.next += 1;
            }
        }
    }

    fn submit(
        &mut self,
        now: Time,
        job: &BeJob,
        name: &str,
        be_chain: &Path,
        p: &Programs,
    ) -> Result<(), RunError> {
        let req = RunRequest {
            name: name.into(),
            class: Class::BestEffort,
            mem_peak: Some(job.peak()),
            job: Some(job.name.clone()),
            weight: None,
            command: batch::command(job, be_chain, p),
            cwd: None,
        };
        self.agent.submit(now, req).map(drop)
    }

    fn finish(
        self,
        r: &mut SceneResult,
        jobs: &[BeJob],
        file: Option<&Path>,
    ) -> Result<(), String> {
        let events: Vec<Event> = self.agent.events().recent().cloned().collect();
        drop(self.agent);
        if let Some(file) = file {
            let mut text = String::new();
            for e in &events {
                text.push_str(&serde_json::to_string(e).map_err(|e| e.to_string())?);
                text.push('\n');
            }
            std::fs::write(file, text).map_err(|e| format!("{}: {e}", file.display()))?;
        }
        for e in &events {
            *r.agent_events.entry(e.kind.clone()).or_insert(0) += 1;
        }
        for e in &events {
            match e.kind.as_str() {
                "finished" if e.detail["status"] == "exit status: 0" => {
                    let base = job_of(task_of(e));
                    if let Some(j) = jobs.iter().find(|j| j.name == base) {
                        r.batch.completed += 1;
                        r.batch.work_mib_steps += j.size / MIB * u64::from(j.steps);
                    }
                }
                "started" if task_of(e).starts_with("be-") => r.batch.started += 1,
                "preempted" => match e.detail["how"].as_str().unwrap_or("") {
                    "kill" => {
                        r.batch.kills += 1;
                        r.batch.lost_s += e.detail["lost_s"].as_f64().unwrap_or(0.0);
                    }
                    h if h.contains("checkpoint") => r.checkpoints += 1,
                    _ => r.suspensions += 1,
                },
                "resumed" if e.detail["how"] == "restore" => r.restores += 1,
                _ => {}
            }
        }
        r.batch.kills += self.kernel_kills;
        Ok(())
    }
}

/// The job a task runs: `be-3` for `be-3` and its retry `be-3-r1`.
fn job_of(task: &str) -> &str {
    task.split("-r").next().unwrap_or(task)
}

fn task_of(e: &Event) -> &str {
    e.container.as_deref().and_then(|c| c.rsplit('/').next()).unwrap_or("")
}

/// The machine's CPU time so far from `/proc/stat`: total, idle, iowait
/// (clock ticks).
fn cpu_times() -> Option<(u64, u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = cpu.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is in user).
    let total = f.iter().take(8).sum();
    Some((total, *f.get(3)?, *f.get(4)?))
}

/// A `/proc/vmstat` counter (0 when absent).
fn vmstat(key: &str) -> u64 {
    super::read_keyed(Path::new("/proc/vmstat"), key).unwrap_or(0)
}

/// Swap in use, from /proc/meminfo.
fn swap_used() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = |key: &str| -> Option<u64> {
        text.lines().find(|l| l.starts_with(key))?.split_whitespace().nth(1)?.parse().ok()
    };
    Some((kib("SwapTotal:")?.saturating_sub(kib("SwapFree:")?)) * 1024)
}

/// A PSI file's `some` or `full` total, seconds (0 when unreadable).
fn psi_total(path: &Path, line: &str) -> f64 {
    let Ok(text) = std::fs::read_to_string(path) else { return 0.0 };
    text.lines()
        .find(|l| l.starts_with(line))
        .and_then(|l| l.split_whitespace().find_map(|f| f.strip_prefix("total=")))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0.0, |us| us as f64 / 1e6)
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn spread(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.filter(|x| x.is_finite()).collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.is_empty() {
        f64::NAN
    } else {
        hi - lo
    }
}

/// Each policy over its repeats: production against `isolated`'s mean,
/// best-effort work against `static`'s.
pub fn summarize(policies: &[String], scenes: &[SceneResult]) -> Vec<PolicySummary> {
    fn of<'a>(scenes: &'a [SceneResult], p: &'a str) -> impl Iterator<Item = &'a SceneResult> {
        scenes.iter().filter(move |s| s.policy == p)
    }
    let of = |p: &'static str| of(scenes, p);
    let base = |f: fn(&SceneResult) -> f64| mean(of("isolated").map(f));
    let (rt, r50, r99) =
        (base(|s| s.redis.throughput), base(|s| s.redis.p50_ms), base(|s| s.redis.p99_ms));
    let (pt, p50, p99) =
        (base(|s| s.postgres.throughput), base(|s| s.postgres.p50_ms), base(|s| s.postgres.p99_ms));
    let static_work = mean(of("static").map(|s| s.batch.work_mib_steps as f64));
    policies
        .iter()
        .map(|p| {
            let m = |f: &dyn Fn(&SceneResult) -> f64| {
                mean(scenes.iter().filter(|s| &s.policy == p).map(f))
            };
            let sp = |f: &dyn Fn(&SceneResult) -> f64| {
                spread(scenes.iter().filter(|s| &s.policy == p).map(f))
            };
            PolicySummary {
                policy: p.clone(),
                redis_throughput: m(&|s| s.redis.throughput) / rt,
                redis_p50: m(&|s| s.redis.p50_ms) / r50,
                redis_p99: m(&|s| s.redis.p99_ms) / r99,
                pg_throughput: m(&|s| s.postgres.throughput) / pt,
                pg_p50: m(&|s| s.postgres.p50_ms) / p50,
                pg_p99: m(&|s| s.postgres.p99_ms) / p99,
                redis_p99_spread: sp(&|s| s.redis.p99_ms) / r99,
                pg_p99_spread: sp(&|s| s.postgres.p99_ms) / p99,
                be_completed: m(&|s| s.batch.completed as f64),
                be_work: m(&|s| s.batch.work_mib_steps as f64) / static_work,
                be_work_spread: sp(&|s| s.batch.work_mib_steps as f64) / static_work,
                lost_s: m(&|s| s.batch.lost_s),
                kills: m(&|s| s.batch.kills as f64),
                suspensions: m(&|s| s.suspensions as f64),
                checkpoints: m(&|s| s.checkpoints as f64),
                oom_kills: m(&|s| s.oom_kills as f64),
                prod_stall_s: m(&|s| s.prod_stall_s),
                failures: scenes
                    .iter()
                    .filter(|s| &s.policy == p)
                    .map(|s| s.redis.failures.len() + s.postgres.failures.len())
                    .sum(),
            }
        })
        .collect()
}

/// The report as a table.
pub fn table(r: &ColocationReport) -> String {
    let mut out = format!(
        "seed {}, {} s a scene, node {} MiB (machine {} MiB), production reserved {} MiB, \
         static best-effort {} MiB\n\
         production relative to isolated (x: ratio; ±: spread over repeats), best-effort \
         work relative to static\n",
        r.seed,
        r.seconds,
        r.capacity / MIB,
        r.machine_memory / MIB,
        r.reserved / MIB,
        r.capacity.saturating_sub(r.reserved) / MIB,
    );
    out.push_str(&format!(
        "{:<18} {:>7} {:>7} {:>12} {:>7} {:>7} {:>12} {:>6} {:>11} {:>7} {:>6} {:>5} {:>5} {:>4} {:>8} {:>5}\n",
        "policy",
        "redis t",
        "r p50",
        "r p99",
        "pg t",
        "pg p50",
        "pg p99",
        "BE ok",
        "BE work",
        "lost s",
        "kills",
        "susp",
        "ckpt",
        "oom",
        "stall s",
        "fail"
    ));
    let f = |x: f64, d: usize| if x.is_finite() { format!("{x:.d$}") } else { "-".into() };
    for s in &r.summary {
        out.push_str(&format!(
            "{:<18} {:>7} {:>7} {:>12} {:>7} {:>7} {:>12} {:>6} {:>11} {:>7} {:>6} {:>5} {:>5} {:>4} {:>8} {:>5}\n",
            s.policy,
            f(s.redis_throughput, 2),
            f(s.redis_p50, 2),
            format!("{}±{}", f(s.redis_p99, 2), f(s.redis_p99_spread, 2)),
            f(s.pg_throughput, 2),
            f(s.pg_p50, 2),
            format!("{}±{}", f(s.pg_p99, 2), f(s.pg_p99_spread, 2)),
            f(s.be_completed, 1),
            format!("{}±{}", f(s.be_work, 2), f(s.be_work_spread, 2)),
            f(s.lost_s, 1),
            f(s.kills, 1),
            f(s.suspensions, 1),
            f(s.checkpoints, 1),
            f(s.oom_kills, 1),
            f(s.prod_stall_s, 1),
            s.failures,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scene(policy: &str, p99: f64, work: u64) -> SceneResult {
        SceneResult {
            policy: policy.into(),
            redis: ServiceResult {
                requests: 10,
                throughput: 100.0,
                p50_ms: 1.0,
                p99_ms: p99,
                failures: vec![],
            },
            postgres: ServiceResult {
                requests: 10,
                throughput: 50.0,
                p50_ms: 2.0,
                p99_ms: 4.0,
                failures: vec![],
            },
            batch: BatchCounts { work_mib_steps: work, ..BatchCounts::default() },
            ..SceneResult::default()
        }
    }

    #[test]
    fn the_summary_is_relative_to_isolated_and_static() {
        let policies: Vec<String> =
            ["isolated", "static", "kernel"].iter().map(|s| s.to_string()).collect();
        let scenes = [
            scene("isolated", 2.0, 0),
            scene("static", 2.0, 100),
            scene("kernel", 5.0, 300),
            scene("kernel", 3.0, 100),
        ];
        let s = summarize(&policies, &scenes);
        assert_eq!(s[0].redis_p99, 1.0);
        assert_eq!(s[2].redis_p99, 2.0);
        assert_eq!(s[2].redis_p99_spread, 1.0);
        assert_eq!(s[2].be_work, 2.0);
        assert_eq!(s[2].be_work_spread, 2.0);
        assert!(s[0].be_work == 0.0);
    }

    #[test]
    fn sizes_follow_the_capacity() {
        let s = sizes(1600 * MIB);
        assert_eq!(s.pg_scale, 11);
        assert!(s.redis_burst > 10 * s.redis_base);
    }
}
