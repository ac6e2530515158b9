//! `overbook bench colocation`: production services and a best-effort job
//! stream on one machine, under each of the memory managers operators use,
//! in one run (000 §5's comparison, on a real node).
//!
//! The node is the whole machine: earlyoom and the kernel's OOM killer
//! watch all of it, so the benchmark is meant for a machine (or VM, see
//! `scripts/vm`) of its own, with swap. Every scene runs the same script:
//!
//! * production is Debian's Redis (`redis-benchmark` GETs over its data,
//!   short rounds ten times a second) and PostgreSQL (`pgbench -S`,
//!   throttled, each at a tenth of what it does alone, its tables in
//!   the page cache), each in its container, both reserved at their peak;
//! * from 40% to 60% of the scene Redis takes in a cache fill (paced over
//!   3 s) that brings production up to its reservation, then drops it;
//! * best-effort work is a seeded stream of hash-chain jobs
//!   ([`batch::job_stream`]), kept queued the whole scene, retried from
//!   scratch when killed;
//! * the policies differ only in who admits and who takes memory back:
//!   `isolated` (no best-effort work: the reference), `static` (best-effort
//!   only in unreserved memory), `kernel` (oversubscribed, the kernel's OOM
//!   killer only), `earlyoom`, `threshold` (000's Kuber), and overbook's
//!   agent with its built-in policy, killing (`overbook-kill`) or with 004's
//!   adaptive checkpointing (`overbook-adaptive`), and with its
//!   production-first policy (`overbook`).
//!
//! Best-effort jobs run at the lowest CPU weight under every policy alike,
//! so the scenes compare memory management, not CPU sharing.
//!
//! Every scene makes its own node cgroup and removes it, with every process
//! and file, on error paths too.

pub mod batch;
pub mod latency;
mod overbook;
pub mod services;
mod summary;
mod watch;

pub use summary::{summarize, table, PolicySummary};

use super::{BenchNode, MIB};
use batch::{Admission, BatchCounts, BeJob, Runner};
use overbook::OverbookScene;
use overbook_linux::host;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use services::{Measured, Programs, ServiceSizes, Templates};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The managers compared.
pub const POLICIES: [&str; 8] = [
    "isolated",
    "static",
    "kernel",
    "earlyoom",
    "threshold",
    "overbook-kill",
    "overbook-adaptive",
    "overbook",
];

/// How many times a scene runs again when the host took too much of the
/// CPU (`ColocationPlan::max_steal`); the last try counts, noted, after that.
pub const STEAL_RERUNS: usize = 2;

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
    /// The native mode: the node is a memory cgroup of this machine with
    /// this limit (and the machine's swap, a swap file made for the run if
    /// it has none), not the whole machine. `None`: the whole machine (a VM
    /// of its own, `scripts/vm`), the only mode where earlyoom can run.
    pub native: Option<NativeNode>,
    /// A scene from whose machine the hypervisor took more than this share
    /// of the CPU time (`steal`) runs again, up to [`STEAL_RERUNS`] times:
    /// on a shared host, production slowed that way was slowed by a
    /// neighbour, not by the policy. 1.0: never.
    pub max_steal: f64,
    /// Run an `isolated` scene first and count nothing of it: the page
    /// cache, the services' first allocations and the CPU's clocks settle
    /// before the first counted scene.
    pub warmup: bool,
    /// Where overbook scenes' agent events go, as JSON lines (one file a
    /// scene); none: kept in the report as counts only.
    pub events: Option<PathBuf>,
    /// Production's load, pinned (from an earlier run's report, to compare
    /// runs): pgbench's rate in transactions a second, and the GETs of each
    /// Redis round. Either one not given is calibrated, at a tenth of what
    /// production does alone on this machine now.
    pub pg_rate: Option<f64>,
    pub redis_round: Option<u64>,
    /// Set (by a signal handler) to stop the run: the scene under way ends
    /// at once, its processes, cgroups and files removed, and the run fails
    /// saying so.
    pub stop: Arc<AtomicBool>,
}

/// The native mode's node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NativeNode {
    /// The node cgroup's memory limit, bytes.
    pub capacity: u64,
    /// The swap file made for the run when the machine has none, bytes.
    pub swap: u64,
}

/// A production service's figures in one scene.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ServiceResult {
    pub requests: u64,
    /// Requests a second while the driver ran.
    pub throughput: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// p99 in each of the scene's phases ([`Phase`]: before the cache fill,
    /// during it, after it); empty in reports from before it.
    #[serde(default)]
    pub p99_ms_by_phase: Vec<f64>,
    /// What the driver could not do (a dead or silent service), in order.
    pub failures: Vec<String>,
}

impl ServiceResult {
    fn of(m: &Measured) -> ServiceResult {
        let mut whole = latency::Histogram::default();
        for h in &m.phases {
            whole.merge(h);
        }
        ServiceResult {
            requests: m.requests,
            throughput: if m.busy_s > 0.0 { m.requests as f64 / m.busy_s } else { 0.0 },
            p50_ms: whole.percentile_ms(0.50).unwrap_or(f64::NAN),
            p99_ms: whole.percentile_ms(0.99).unwrap_or(f64::NAN),
            p99_ms_by_phase: m
                .phases
                .iter()
                .map(|h| h.percentile_ms(0.99).unwrap_or(f64::NAN))
                .collect(),
            failures: m.failures.clone(),
        }
    }
}

/// One policy's scene.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
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
    /// Production's processes' time on a CPU, and runnable but waiting
    /// for one (their threads' `schedstat`, summed): its slowdown from CPU,
    /// apart from `prod_stall_s`, its slowdown from memory.
    pub prod_cpu_s: f64,
    pub prod_runq_wait_s: f64,
    /// Best-effort processes' time on a CPU (every process in a container
    /// of the node that is not production's, whoever started it: the
    /// bench's runner or the agent). Production's tail beside best-effort
    /// work follows it: a neighbour that only spins on the batch CPU, at
    /// idle priority and with no memory traffic, costs PostgreSQL's p99
    /// more than any policy's job stream.
    pub be_cpu_s: f64,
    /// The benchmark process's own CPU time over the scene (`utime +
    /// stime`: the scene's loop and its drivers' threads, alike in every
    /// scene, and in overbook's scenes the agent it runs in process, at
    /// normal priority beside production). Against isolated's and
    /// static's, what the agent itself costs in CPU.
    pub bench_cpu_s: f64,
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
    /// Share of the scene's CPU time the hypervisor took (a VM's `steal`):
    /// production slowed by it was slowed by the host, not the policy.
    pub cpu_steal: f64,
    /// Times the scene ran again before this one because the host took
    /// more than `max_steal` of the CPU.
    pub reruns: usize,
    /// overbook scenes: the agent's events by kind.
    pub agent_events: std::collections::BTreeMap<String, usize>,
    /// PostgreSQL's transactions and slow ones (over `latency::SLOW_US`)
    /// in each `latency::WINDOW_US` from its driver's start.
    pub pg_windows: Vec<[u32; 2]>,
    /// Seconds from the scene's start at which best-effort jobs started
    /// (whoever started them: the bench's runner or the agent).
    pub be_starts_s: Vec<f64>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ColocationReport {
    pub seed: u64,
    pub seconds: u64,
    pub machine_memory: u64,
    /// Memory the benchmark counts as the node's: available at start, less
    /// what the drivers and the agent need; or (native) the node cgroup's
    /// limit.
    pub capacity: u64,
    /// The native mode's node, if the run was native.
    #[serde(default)]
    pub native: Option<NativeNode>,
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
    /// `ColocationPlan::max_steal` of the run (1.0 in reports from before it).
    #[serde(default = "no_steal_limit")]
    pub max_steal: f64,
}

/// Sizes from the node's capacity: the shares the README explains.
fn sizes(capacity: u64) -> ServiceSizes {
    let c = capacity as f64;
    ServiceSizes {
        redis_base: overbook_core::convert::to_u64(c * 0.04),
        redis_burst: overbook_core::convert::to_u64(c * 0.50),
        pg_scale: overbook_core::convert::to_u32(
            ((c * 0.10) / (15.0 * MIB as f64)).round().max(1.0),
        ),
    }
}

/// When Redis's cache fill comes and goes, as shares of the scene:
/// production reaches its reservation a fifth of the time.
const FILL_FROM: f64 = 0.4;
const FILL_UNTIL: f64 = 0.6;

/// A scene's phases: production's latency is also told apart by when it
/// came, so a tail made while production takes its memory back (the fill,
/// when best-effort work is preempted) shows apart from one made all along
/// (CPU, memory bandwidth).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    BeforeFill = 0,
    Fill = 1,
    AfterFill = 2,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::BeforeFill, Phase::Fill, Phase::AfterFill];

    /// The phase `elapsed` seconds into a scene of `seconds`.
    pub fn at(elapsed: f64, seconds: u64) -> Phase {
        let share = elapsed / (seconds.max(1) as f64);
        if share < FILL_FROM {
            Phase::BeforeFill
        } else if share < FILL_UNTIL {
            Phase::Fill
        } else {
            Phase::AfterFill
        }
    }
}

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

/// Whether every one of `policies` can run, each once: one of
/// [`POLICIES`], or an overbook scene with detector settings
/// (`overbook@floor=0.10`), compared in the same run as the others.
pub fn check_policies(policies: &[String]) -> Result<(), String> {
    for (i, p) in policies.iter().enumerate() {
        if policies[..i].contains(p) {
            return Err(format!("policy {p:?} is given twice"));
        }
        if p.contains('@') {
            overbook::check_policy(p)?;
        } else if !POLICIES.contains(&p.as_str()) {
            return Err(format!(
                "unknown policy {p:?} (one of {}, or overbook@KEY=VALUE with a detector \
                 setting)",
                POLICIES.join(", ")
            ));
        }
    }
    Ok(())
}

/// Runs every policy `repeats` times; `say` hears progress.
pub fn run(plan: &ColocationPlan, say: &mut dyn FnMut(&str)) -> Result<ColocationReport, String> {
    check_policies(&plan.policies)?;
    let mut programs = Programs::find()?;
    // Never the OOM killer's or earlyoom's victim; the drivers inherit it,
    // as programs on another machine would be out of reach. Production and
    // best-effort set their own (a kubelet's -997 and 1000). In the native
    // mode the OOM killer is the node cgroup's, which never sees the
    // drivers; where this process may not lower scores, production keeps 0
    // and the jobs' 1000 still makes them its first victims.
    if let Err(e) = super::set_oom_score_adj(std::process::id(), -1000) {
        if plan.native.is_none() {
            return Err(e);
        }
        say(&format!(
            "cannot lower oom_score_adj here ({e}): production keeps 0, best-effort jobs 1000"
        ));
        programs.prod_oom_score_adj = 0;
    }
    if plan.native.is_some() && plan.policies.iter().any(|p| p == "earlyoom") {
        return Err("earlyoom watches the whole machine, not a node cgroup: it runs only in \
                    the whole-machine mode (scripts/vm), leave it out of --native runs"
            .into());
    }
    let mem = host::meminfo().map_err(|e| e.to_string())?;
    let capacity = match plan.native {
        None => mem.available_or_free().saturating_sub(OWN_MEMORY),
        Some(n) if n.capacity + OWN_MEMORY > mem.available_or_free() => {
            return Err(format!(
                "--capacity {} MiB: the machine has {} MiB available, and the drivers need {} \
                 MiB beside the node",
                n.capacity / MIB,
                mem.available_or_free() / MIB,
                OWN_MEMORY / MIB
            ))
        }
        Some(n) => n.capacity,
    };
    if capacity < 512 * MIB {
        return Err(format!(
            "a node of {} MiB: the comparison needs {} MiB at least",
            capacity / MIB,
            512 * MIB / MIB
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
    // Swap: the whole-machine mode needs the machine's own (the VM's zram);
    // the native mode makes a file for the run if the machine has none.
    // Kept until the run ends (then swapped off and removed).
    let _swap = match plan.native {
        _ if !host::swaps().map_err(|e| e.to_string())?.areas.is_empty() => None,
        None => {
            return Err("no swap: the comparison needs a machine with swap (scripts/vm gives \
                        its guest zram; --native makes a swap file)"
                .into())
        }
        Some(n) => {
            say(&format!("no swap here: a {} MiB swap file for the run", n.swap / MIB));
            let file = overbook_linux::swap::SwapFile::add(&dir, n.swap)
                .map_err(|e| format!("a swap file in {}: {e}", dir.display()))?;
            Some(file)
        }
    };
    let be_chain = dir.join("be-chain");
    std::os::unix::fs::symlink(&plan.overbook, &be_chain)
        .map_err(|e| format!("{}: {e}", be_chain.display()))?;
    let sizes = sizes(capacity);
    say(&format!(
        "machine {} MiB, node capacity {} MiB; templates of the services",
        mem.total / MIB,
        capacity / MIB
    ));
    let limit = plan.native.map(|n| n.capacity);
    let templates = {
        let mut node = BenchNode::new(&node_name("template"), limit)?;
        Templates::make(&programs, &mut node, &dir.join("templates"), sizes, say)?
    };
    let reserved = sizes.redis_base + sizes.redis_burst + templates.pg_bytes + 2 * SERVER_OVERHEAD;
    let (pg_rate, redis_round) = match (plan.pg_rate, plan.redis_round) {
        (Some(rate), Some(round)) => {
            say(&format!(
                "production's load pinned: pgbench at {rate:.0} tx/s, Redis rounds of {round}"
            ));
            (rate, round)
        }
        (rate, round) => {
            let (r, n) = calibrate(&programs, &templates, &dir, limit, say)?;
            (rate.unwrap_or(r), round.unwrap_or(n))
        }
    };
    say(&format!(
        "to drive another run at this load: --pg-rate {pg_rate:.0} --redis-round {redis_round}"
    ));
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
    if plan.warmup {
        say(&format!("warm-up (isolated, not counted): {} s", plan.seconds));
        run.scene("isolated", usize::MAX, say)?;
    }
    let mut scenes = Vec::new();
    for repeat in 0..plan.repeats {
        // Each repeat in its own seeded order: a policy that always ran
        // first (or after the one that fills the page cache) would carry
        // its place in every ratio.
        let mut order = plan.policies.clone();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
            plan.seed ^ (u64::try_from(repeat).unwrap_or(0) << 32),
        );
        rand::seq::SliceRandom::shuffle(order.as_mut_slice(), &mut rng);
        for policy in &order {
            let mut reruns = 0;
            let r = loop {
                interrupted(plan)?;
                say(&format!(
                    "{policy} (repeat {}/{}): {} s",
                    repeat + 1,
                    plan.repeats,
                    plan.seconds
                ));
                let mut r = run.scene(policy, repeat, say)?;
                say_scene(policy, &r, say);
                r.reruns = reruns;
                if r.cpu_steal <= plan.max_steal {
                    break r;
                }
                let stolen = format!(
                    "the host took {:.1}% of the CPU (over --max-steal {:.1}%)",
                    r.cpu_steal * 100.0,
                    plan.max_steal * 100.0
                );
                if reruns == STEAL_RERUNS {
                    r.notes.push(format!("{stolen} in each of {} tries: counted", reruns + 1));
                    break r;
                }
                reruns += 1;
                say(&format!("{policy}: {stolen}: it runs again ({reruns}/{STEAL_RERUNS})"));
            };
            scenes.push(r);
        }
    }
    let summary = summarize(&plan.policies, &scenes);
    run.jobs.truncate(scenes.iter().map(|s| s.batch.started).max().unwrap_or(0));
    Ok(ColocationReport {
        native: plan.native,
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
        max_steal: plan.max_steal,
    })
}

fn no_steal_limit() -> f64 {
    1.0
}

/// A scene's figures, one line.
fn say_scene(policy: &str, r: &SceneResult, say: &mut dyn FnMut(&str)) {
    say(&format!(
        "{policy}: Redis {:.0} req/s p99 {:.2} ms, PostgreSQL {:.0} tx/s p99 {:.2} ms \
         (before, during, after the fill: {:.2?}), \
         {} jobs done of {} started, {} kills ({} OOM), {} frozen, swap peak {} MiB, available min {} MiB, production refaults {}, CPU {:.0}% busy {:.0}% iowait {:.1}% stolen, production waited {:.1} s for a CPU, best-effort used {:.1} CPU-s, the bench (and its agent) {:.1}{}",
        r.redis.throughput,
        r.redis.p99_ms,
        r.postgres.throughput,
        r.postgres.p99_ms,
        r.postgres.p99_ms_by_phase,
        r.batch.completed,
        r.batch.started,
        r.batch.kills,
        r.oom_kills,
        r.suspensions,
        r.swap_peak / MIB,
        r.available_min / MIB,
        r.prod_refaults,
        r.cpu_busy * 100.0,
        r.cpu_iowait * 100.0,
        r.cpu_steal * 100.0,
        r.prod_runq_wait_s,
        r.be_cpu_s,
        r.bench_cpu_s,
        if r.notes.is_empty() {
            String::new()
        } else {
            format!("; {}", r.notes.join("; "))
        }
    ));
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

/// A cgroup's name for `what`: a policy with settings
/// (`overbook@floor=0.10`) keeps only letters, digits and dashes.
fn node_name(what: &str) -> String {
    let what: String =
        what.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    format!("overbook-colocation-{}-{what}", std::process::id())
}

/// pgbench's rate, as a share of what it reaches alone: low enough that
/// the drivers' own CPU does not put it behind its schedule in the
/// isolated scene (at a fifth, on 2 cores, the isolated scenes' PostgreSQL
/// p99 strayed ±30% from scene to scene: CPU queueing, not memory).
const PG_SHARE: f64 = 0.1;

/// Redis's load, as a share of what it reaches alone.
const REDIS_SHARE: f64 = 0.1;

/// How long Redis's cache fill takes at least (paced, see
/// [`services::Redis::fill`]).
const FILL_PACE: Duration = Duration::from_secs(3);

/// Production alone, unthrottled, once: pgbench's rate is [`PG_SHARE`] of
/// what it reaches, and Redis's rounds together ask [`REDIS_SHARE`] of what
/// it answers in a second. Production then leaves most of the machine's
/// CPU idle.
fn calibrate(
    programs: &Programs,
    templates: &Templates,
    dir: &Path,
    limit: Option<u64>,
    say: &mut dyn FnMut(&str),
) -> Result<(f64, u64), String> {
    let mut node = BenchNode::new(&node_name("calibrate"), limit)?;
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
    let round =
        overbook_core::convert::to_u64(per_s * REDIS_SHARE / f64::from(services::REDIS_ROUNDS))
            .clamp(20, 100_000);
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

/// An error once the run was asked to stop: returned, it unwinds every
/// scene's cleanup.
fn interrupted(plan: &ColocationPlan) -> Result<(), String> {
    if plan.stop.load(Ordering::Relaxed) {
        return Err("interrupted: what the scene under way made is removed".into());
    }
    Ok(())
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

/// Sets the drivers' stop flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Who manages best-effort work in a scene.
enum Manager {
    None,
    Peer(Box<Runner>, Option<Earlyoom>),
    Overbook(Box<OverbookScene>),
}

impl Run<'_> {
    /// The node's memory as the managers see it: the machine's, or (native)
    /// the node cgroup's, its limit as the total and what its page cache
    /// could give back counted as available, as `MemAvailable` does.
    fn memory(&self, node: &BenchNode) -> Result<overbook_linux::parse::MemInfo, String> {
        let machine = host::meminfo().map_err(|e| e.to_string())?;
        let Some(native) = self.plan.native else { return Ok(machine) };
        let c = node
            .cg
            .counters(&node.root)
            .map_err(|e| e.to_string())?
            .done()
            .ok_or("the node cgroup is gone")?;
        let used = c.usage.saturating_sub(c.inactive_file);
        let available = native.capacity.saturating_sub(used);
        Ok(overbook_linux::parse::MemInfo {
            total: native.capacity,
            free: native.capacity.saturating_sub(c.usage),
            available: Some(available),
            ..machine
        })
    }

    fn scene(
        &mut self,
        policy: &str,
        repeat: usize,
        say: &mut dyn FnMut(&str),
    ) -> Result<SceneResult, String> {
        let mut node = BenchNode::new(&node_name(policy), self.plan.native.map(|n| n.capacity))?;
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
        let mut watch =
            watch::SceneWatch::start(&node, vec![redis.container.clone(), pg.container.clone()])?;
        let stop = Arc::new(AtomicBool::new(false));
        // On an error return too, the Redis driver's thread ends.
        let _stop = StopOnDrop(stop.clone());
        let redis_load = services::redis_load(
            p,
            &redis,
            self.templates.redis_keys,
            self.redis_round,
            self.plan.seconds,
            stop.clone(),
        );
        let pg_load = services::pg_load(p, &pg, self.pg_rate, self.plan.seconds, &logs);
        let start = Instant::now();
        let span = Duration::from_secs(self.plan.seconds);
        let mut fill = None;
        let (mut fill_s, mut filled) = (f64::NAN, false);
        let mut result = SceneResult { policy: policy.into(), repeat, ..SceneResult::default() };
        while start.elapsed() < span {
            interrupted(self.plan)?;
            let t = start.elapsed().as_secs_f64() / span.as_secs_f64();
            let mem = self.memory(&node)?;
            watch.look(&mem);
            watch.look_at_production(&node);
            match &mut manager {
                Manager::None => {}
                Manager::Peer(r, _) => r.tick(&mut node, &mem)?,
                Manager::Overbook(o) => o.tick(start, &self.jobs, &self.be_chain, p)?,
            }
            if fill.is_none() && !filled && t >= FILL_FROM {
                fill = Some(redis.fill(self.templates.sizes.redis_burst, FILL_PACE));
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
        result.pg_windows = pg_m.windows.counts;
        result.fill_s = fill_s;
        watch.finish(&node, &mut result);
        match manager {
            Manager::None => {}
            Manager::Peer(mut r, earlyoom) => {
                drop(earlyoom);
                r.stop(&mut node);
                result.batch = r.counts.clone();
                result.be_starts_s = r
                    .start_times
                    .iter()
                    .map(|t| t.saturating_duration_since(start).as_secs_f64())
                    .collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_are_checked_before_the_run() {
        let list = |s: &str| s.split(',').map(str::to_string).collect::<Vec<_>>();
        assert!(check_policies(&list("isolated,overbook,overbook@floor=0.1")).is_ok());
        let twice = check_policies(&list("isolated,overbook,overbook")).expect_err("twice");
        assert!(twice.contains("\"overbook\" is given twice"), "{twice}");
        let unknown = check_policies(&list("isolated,oom")).expect_err("unknown");
        assert!(unknown.contains("unknown policy \"oom\""), "{unknown}");
        let bad = check_policies(&list("isolated,overbook@floor=x")).expect_err("bad");
        assert!(bad.contains("must be a number"), "{bad}");
        assert_eq!(
            node_name("overbook@floor=0.1"),
            format!("overbook-colocation-{}-overbook-floor-0-1", std::process::id())
        );
    }

    #[test]
    fn sizes_follow_the_capacity() {
        let s = sizes(1600 * MIB);
        assert_eq!(s.pg_scale, 11);
        assert!(s.redis_burst > 10 * s.redis_base);
    }
}
