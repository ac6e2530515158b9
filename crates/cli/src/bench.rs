//! `overbook bench`: measurements of overbook itself, reported as numbers with
//! the command that produced them (never as pass/fail thresholds in tests).

use anyhow::{Context, Result};
use clap::Subcommand;
use overbook_lab::bench::kill_latency::{self, KillLatencyReport, KillPlan, Killer, Progress};
use overbook_lab::bench::overhead::{self, OverheadPlan, OverheadReport};
use overbook_lab::bench::{Percentiles, WorkloadProgram};
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod grid;
mod rounds;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Simulator speed at Google scale: a day of a 12,500-node cell with about
    /// 600,000 tasks and usage every 5 minutes, under Charon's policy.
    /// Prints wall time, events per second, peak memory and whether it ran
    /// on huge pages (OVERBOOK_HUGE_PAGES=0: not). With --grid, how
    /// time and memory grow with the cluster (1,000 to 12,500 nodes, a day)
    /// and with the span (1, 7 and 29 days, 1,000 nodes), each point a
    /// process of its own, drawn as plots.
    Sim(grid::SimArgs),
    /// Kill latency under real thrashing in a node cgroup (root): the
    /// overbook agent, a 10%-free threshold killer and the kernel OOM killer,
    /// each killing best-effort victims of every size; p50/p99 of pressure →
    /// awake, decision → kill issued, kill issued → memory released (also
    /// as a ratio to the victim's unloaded exit).
    KillLatency(KillLatencyArgs),
    /// The agent's own cost (root): `overbook agent` watching N containers
    /// with one sleeping process each; CPU as % of one core, peak RSS.
    AgentOverhead(OverheadArgs),
    /// How progress falls on this node as memory is squeezed into swap
    /// (`anon`) and page cache is reclaimed (`file`) (root): writes the
    /// calibration file `overbook sim` reads (`--set sim.calibration=FILE`).
    Calibrate(CalibrateArgs),
    /// Steered reclaim on this host's real kernel (root): 001's scenario (A
    /// active, B idle, C boots: A's memory lost and throughput dip) and
    /// 003's (weights 1:2:3 under stepwise pressure: the reclaimed split,
    /// repeated; two services 1:2: their throughput ratio), each with the
    /// kernel alone and with overbook's reclaimer.
    Reclaim(ReclaimArgs),
    /// Preemptors compared on real containers (root; CRIU for checkpoint
    /// and adaptive: the VM of docs/testbed.md, `scripts/vm`): the same seeded best-effort
    /// hash chains under repeated production bursts, once with kill, once
    /// with checkpoint, once with adaptive (004 Algorithm 1). Work lost,
    /// best-effort completion, production's burst time against a burst
    /// alone, kills, dumps and restores; every answer checked.
    Preemption(PreemptionArgs),
    /// Checkpoint costs with CRIU (root; 004 Table 3): the store's raw write
    /// and read bandwidth, then full and incremental (pre-dump, a share of
    /// memory rewritten, dump on top) dumps of workers of each size, their
    /// restores and the restored workers' checksums; median and range of
    /// the repeats. CRIU must work here (it does in `scripts/vm`'s guest,
    /// not on kernels 6.13+ with Debian's CRIU 3.17).
    Checkpoint(CheckpointArgs),
    /// Head-to-head on a whole machine (root; the VM of docs/testbed.md, `scripts/vm`, with
    /// swap): Debian's Redis and PostgreSQL as production, a seeded stream
    /// of memory-hungry best-effort jobs, under isolated, static
    /// partitioning, the kernel OOM killer, earlyoom, a 10%-free threshold
    /// killer, and overbook (kill, adaptive). Production throughput and
    /// p50/p99 against isolated, best-effort work against static, work
    /// lost, kills, suspensions, checkpoints, seconds production stalled,
    /// and PostgreSQL's transactions over 2 ms with the share of them
    /// within 1 s after a best-effort start.
    Colocation(ColocationArgs),
    /// Issue 17's goals on a real control plane (root; `scripts/kube up`):
    /// the bench plays the kubelet of a Node it registers, with N pods
    /// bound to it (a few production, the rest best-effort requesting
    /// overbook.io/batch-memory), and runs `overbook agent` on them, a
    /// fresh one per repeat: its CPU and peak RSS, the offer on the Node
    /// following a 128 MiB change of production's usage, and a
    /// preemption's Event reaching the API server.
    Kubernetes(KubernetesArgs),
    /// The worker `bench checkpoint` dumps and restores (internal).
    #[command(hide = true)]
    CheckpointWorker(CheckpointWorkerArgs),
}

#[derive(Debug, clap::Args)]
pub struct PreemptionArgs {
    /// Preemptors, comma-separated: kill, checkpoint, adaptive.
    #[arg(long, value_delimiter = ',', default_value = "kill,checkpoint,adaptive")]
    preemptors: Vec<String>,
    /// Best-effort tasks.
    #[arg(long, default_value_t = 6)]
    tasks: usize,
    /// Production bursts (each starts 6 s after the last one ended).
    #[arg(long, default_value_t = 4)]
    bursts: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Every size times this (0.1..2); 1: a 320 MiB node, 192 MiB bursts.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Where task logs and images go (removed after).
    #[arg(long, default_value = "/var/tmp")]
    scratch: PathBuf,
    /// Write the report as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct ColocationArgs {
    /// Policies, comma-separated (isolated is the reference; static the
    /// best-effort baseline; overbook the production-first policy). An
    /// overbook scene may carry detector settings, compared in the same run:
    /// overbook@floor=0.10 (several joined by +), and a CPU ceiling for its
    /// best-effort jobs: cpu_max=CPUS, or cpu_leftover=TARGET (what a node
    /// CPU target leaves, docs/agent.md [cpu]); headroom=SHARE sets its
    /// launcher's headroom (0.1 by default), sample=SECONDS its agent's
    /// sample period (0.1 by default), launch_gap=SECONDS the least time
    /// between two of its launcher's starts (0 by default).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "isolated,static,kernel,earlyoom,threshold,overbook-kill,overbook-adaptive,overbook"
    )]
    policies: Vec<String>,
    /// Seconds each scene runs (30..3600).
    #[arg(long, default_value_t = 120)]
    seconds: u64,
    /// Times every policy runs, each repeat in its own seeded order (the
    /// table shows 95% bootstrap intervals over them), 1..20.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Skip the warm-up scene (an isolated scene run first and not counted).
    #[arg(long)]
    no_warmup: bool,
    /// Run a scene again (up to twice) when the hypervisor took more than
    /// this percentage of the machine's CPU time in it (`steal` in
    /// /proc/stat): on a shared host, production slowed that way was slowed
    /// by a neighbour, not by the policy. 100: never. Bare metal has none.
    #[arg(long, default_value_t = 5.0)]
    max_steal: f64,
    /// The native mode: the node is a memory cgroup of this machine limited
    /// to --capacity (the services and jobs run natively in it), not the
    /// whole machine; a swap file of --swap is made for the run if the
    /// machine has no swap. earlyoom watches whole machines: not here.
    #[arg(long)]
    native: bool,
    /// The native node's memory (e.g. 2GiB; the services' sizes and the job
    /// stream scale with it).
    #[arg(long, default_value = "2GiB", requires = "native")]
    capacity: String,
    /// The swap file's size when the machine has no swap (native mode).
    #[arg(long, default_value = "1GiB", requires = "native")]
    swap: String,
    /// Seeds the best-effort job stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Pin pgbench's rate (transactions a second) instead of calibrating
    /// it at a tenth of what PostgreSQL does alone here now: to drive two
    /// runs at one load, give the rate a report (or the first run's
    /// progress) shows.
    #[arg(long)]
    pg_rate: Option<f64>,
    /// Pin the GETs of each Redis round (20..100000) instead of
    /// calibrating them; see --pg-rate.
    #[arg(long)]
    redis_round: Option<u64>,
    /// Where the services' data, logs and job output go (removed after):
    /// a disk, so PostgreSQL's tables are page cache. Default: the VM's
    /// disk ($OVERBOOK_VM_DISK) in scripts/vm's guest, else /var/tmp.
    #[arg(long)]
    scratch: Option<PathBuf>,
    /// Where overbook-adaptive's checkpoint images go (a directory made in
    /// it, removed after); default: in --scratch.
    #[arg(long)]
    images: Option<PathBuf>,
    /// Write the report as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Draw the comparison here (.svg or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write the agent's events of every overbook scene here
    /// (POLICY-REPEAT.jsonl), to see each decision and its evidence.
    #[arg(long)]
    events: Option<PathBuf>,
    /// Run nothing: summarize again the scenes of a report an earlier run
    /// wrote with --out, print the table (and draw --plot).
    #[arg(long, value_name = "REPORT.json", conflicts_with_all = ["out", "events"])]
    from: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct CheckpointArgs {
    /// The image store to measure: the bench works in a fresh directory
    /// made in it (removed after, unless --keep).
    #[arg(long, default_value = "/var/tmp")]
    store: PathBuf,
    /// Keep that directory, with the last repeat's images.
    #[arg(long)]
    keep: bool,
    /// Workers' memory sizes, comma-separated (times --scale).
    #[arg(long, value_delimiter = ',', default_value = "64MiB,128MiB,256MiB")]
    sizes: Vec<String>,
    /// Every size times this (0.01..64).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Share of memory rewritten between the pre-dump and the incremental
    /// dump, (0, 1].
    #[arg(long, default_value_t = 0.1)]
    dirty: f64,
    /// Repeats of every measure at every size.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Write every run and the summary as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct CheckpointWorkerArgs {
    /// Its directory (files it reads and writes).
    #[arg(long)]
    dir: PathBuf,
    /// Bytes of anonymous memory.
    #[arg(long)]
    size: u64,
    /// Bytes rewritten when told.
    #[arg(long)]
    dirty: u64,
}

#[derive(Debug, clap::Args)]
pub struct ReclaimArgs {
    /// Scenarios, comma-separated: recency, weighted, services.
    #[arg(long, value_delimiter = ',', default_value = "recency,weighted,services")]
    scenarios: Vec<String>,
    /// Runs of the weighted scenario with overbook (after one with the kernel alone); the
    /// services scenario runs overbook this many times too, at most 3, and tells the median.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Every size times this (0.05..4); 1 is the documented sizes (a 320 MiB node for 001).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Where the working-set files go (a disk, not tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    scratch: PathBuf,
    /// Write every run as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {
    /// Where to write the calibration file.
    #[arg(long, default_value = "calibration.toml")]
    out: PathBuf,
    /// The node's memory limit.
    #[arg(long, default_value = "256MiB")]
    limit: String,
    /// Squeezes (working set / limit) for anonymous memory, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0.8,0.9,1.0,1.05,1.1,1.2,1.3,1.5,2.0")]
    anon: Vec<f64>,
    /// Squeezes for page cache, comma-separated (empty: none).
    #[arg(long, value_delimiter = ',', default_value = "0.9,1.0,1.1,1.2,1.5,2.0")]
    file: Vec<f64>,
    /// Seconds each worker warms up before it is measured.
    #[arg(long, default_value_t = 1.5)]
    warm: f64,
    /// Seconds each point is measured.
    #[arg(long, default_value_t = 3.0)]
    window: f64,
    /// Where workers' files and the temporary swap file go (a disk, not tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    scratch: PathBuf,
    /// For CI: a 64 MiB node, squeezes 0.9 and 1.5 of each kind, 2.5 s windows.
    #[arg(long)]
    quick: bool,
}

#[derive(Debug, clap::Args)]
pub struct KillLatencyArgs {
    /// Kills per killer and victim size (and unloaded exits per size).
    #[arg(long, default_value_t = 30)]
    kills: usize,
    /// Victim sizes, comma-separated (`1GiB,4GiB`).
    #[arg(long, value_delimiter = ',', default_value = "1GiB,4GiB")]
    sizes: Vec<String>,
    /// For CI: 3 kills of 256 MiB victims (overrides --kills and --sizes).
    #[arg(long)]
    quick: bool,
    /// Killers to measure, comma-separated: agent, threshold, kernel-oom.
    #[arg(long, value_delimiter = ',', default_value = "agent,threshold,kernel-oom")]
    killers: Vec<String>,
    /// Production's file working set, which the squeeze makes thrash.
    #[arg(long, default_value = "256MiB")]
    reader: String,
    /// The agent's constraint-thrashing tolerance, seconds (the window
    /// between pressure and decision; it is not part of (a), (b) or (c)).
    #[arg(long, default_value_t = 0.5)]
    tolerance: f64,
    /// Where production's working-set file is written (a disk, not tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    scratch: PathBuf,
    /// Write every trial and the summary as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct KubernetesArgs {
    /// An admin's kubeconfig for the control plane (`scripts/kube up
    /// DIR` writes DIR/kubeconfig).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Pods bound to the node (the kubelet's default maximum: 110).
    #[arg(long, default_value_t = 110)]
    pods: usize,
    /// Seconds of each repeat's CPU window (after a 5 s warm-up).
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Repeats, each with a fresh agent: two offer changes and two
    /// preemptions each.
    #[arg(long, default_value_t = 10)]
    repeats: usize,
    /// Write the report as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct OverheadArgs {
    /// Containers, each with one `sleep 3600`.
    #[arg(long, default_value_t = 200)]
    containers: usize,
    /// Seconds measured (after a 5 s warm-up).
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// The agent's sampling period, seconds.
    #[arg(long, default_value_t = 0.1)]
    period: f64,
    /// Write the result as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Sim(args) => grid::bench_sim(args),
        BenchCommand::KillLatency(args) => kill_latency(args),
        BenchCommand::AgentOverhead(args) => agent_overhead(args),
        BenchCommand::Calibrate(args) => calibrate(args),
        BenchCommand::Reclaim(args) => reclaim(args),
        BenchCommand::Preemption(args) => preemption(args),
        BenchCommand::Checkpoint(args) => checkpoint(args),
        BenchCommand::Colocation(args) => colocation(args),
        BenchCommand::Kubernetes(args) => kubernetes(args),
        BenchCommand::CheckpointWorker(args) => checkpoint_worker(args),
    }
}

const MIB: u64 = 1 << 20;

fn need_root(what: &str) -> Result<()> {
    if !overbook_linux::process::is_root() {
        anyhow::bail!("{what} makes a node cgroup and runs real workloads in it: it needs root");
    }
    Ok(())
}

fn kill_latency(args: KillLatencyArgs) -> Result<()> {
    need_root("bench kill-latency")?;
    check_out(args.out.as_deref())?;
    let size = |s: &str| {
        overbook_agent::config::parse_size_text(s).map_err(|e| anyhow::anyhow!("{s:?}: {e}"))
    };
    let (kills, sizes) = if args.quick {
        (3, vec![256 * MIB])
    } else {
        (args.kills, args.sizes.iter().map(|s| size(s)).collect::<Result<Vec<_>>>()?)
    };
    let killers = args
        .killers
        .iter()
        .map(|k| match k.as_str() {
            "agent" => Ok(Killer::Agent),
            "threshold" => Ok(Killer::Threshold),
            "kernel-oom" => Ok(Killer::KernelOom),
            other => anyhow::bail!("unknown killer {other:?} (agent, threshold, kernel-oom)"),
        })
        .collect::<Result<Vec<_>>>()?;
    if !(args.tolerance > 0.0 && args.tolerance <= 600.0) {
        anyhow::bail!("--tolerance must be in (0, 600] seconds");
    }
    let plan = KillPlan {
        workload: WorkloadProgram {
            program: std::env::current_exe().context("finding the overbook binary")?,
            prefix: vec!["workload".into()],
        },
        sizes,
        kills,
        killers,
        reader: size(&args.reader)?,
        scratch: args.scratch,
        tolerance: args.tolerance,
        period: Duration::from_millis(100),
        threshold: 0.1,
        released_below: 0.05,
    };
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} trials  {msg}",
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .progress_chars("=> "),
    );
    let say = |m: String| {
        if bar.is_hidden() {
            eprintln!("{m}");
        } else {
            bar.println(m);
        }
    };
    let mut progress = |p: Progress<'_>| match p {
        Progress::Total(n) => bar.set_length(n),
        Progress::Phase(m) => say(m),
        Progress::Trial(t) => {
            bar.inc(1);
            let who = t.killer.map_or("unloaded exit", Killer::as_str);
            let c = t.issue_to_release_ms.map_or("-".into(), |v| format!("{v:.0} ms"));
            bar.set_message(format!("{} MiB, {who}: released in {c}", t.size / MIB));
            if let Some(p) = &t.problem {
                say(format!("  {} MiB, {who}, round {}: {p}", t.size / MIB, t.round));
            }
        }
    };
    let report = kill_latency::run(&plan, &mut progress).map_err(|e| anyhow::anyhow!("{e}"))?;
    bar.finish_and_clear();
    print!("{}", kill_table(&report));
    finish(args.out.as_deref(), &report)?;
    Ok(())
}

fn p_ms(p: &Percentiles) -> String {
    let f = |v: Option<f64>| {
        v.map_or("-".to_string(), |v| {
            if v.abs() < 10.0 {
                format!("{v:.2}")
            } else {
                format!("{v:.0}")
            }
        })
    };
    format!("{} / {}", f(p.p50), f(p.p99))
}

fn kill_table(r: &KillLatencyReport) -> String {
    let mut out = format!(
        "kill latency on Linux {} (cgroup {}), production reads {} MiB, agent tolerance {} s, \
         sampling {} ms; p50 / p99 in ms\n",
        r.kernel,
        r.cgroup_version,
        r.reader / MIB,
        r.tolerance_s,
        r.period_ms
    );
    for s in &r.sizes {
        out += &format!(
            "\nvictim {} MiB (node {} MiB): unloaded exit {} ms (n={})\n",
            s.size / MIB,
            s.node_limit / MIB,
            p_ms(&s.unloaded_exit_ms),
            s.unloaded_exit_ms.n
        );
        out += &format!(
            "{:<22} {:>5} {:>6} {:>16} {:>16} {:>16} {:>13} {:>16}\n",
            "KILLER",
            "KILLS",
            "FAILED",
            "(a) PRESS→AWAKE",
            "(b) DECIDE→KILL",
            "(c) KILL→FREED",
            "(c)/UNLOADED",
            "PRESS→KILL"
        );
        for k in &s.killers {
            let ratio = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
            let b = if k.killer == Killer::KernelOom {
                "(in (a))".to_string()
            } else {
                p_ms(&k.decision_to_issue_ms)
            };
            out += &format!(
                "{:<22} {:>5} {:>6} {:>16} {:>16} {:>16} {:>13} {:>16}\n",
                k.killer.as_str(),
                k.kills,
                k.failed,
                p_ms(&k.pressure_to_awake_ms),
                b,
                p_ms(&k.issue_to_release_ms),
                format!(
                    "{} / {}",
                    ratio(k.release_vs_unloaded_p50),
                    ratio(k.release_vs_unloaded_p99)
                ),
                p_ms(&k.pressure_to_issue_ms)
            );
            let mut notes = Vec::new();
            if k.before_stall > 0 {
                notes.push(format!("{} of {} killed before any stall", k.before_stall, k.kills));
            }
            if k.killer == Killer::Agent {
                notes.push(format!(
                    "woken by its PSI trigger at (a): {} of {}",
                    k.woken_by_psi, k.kills
                ));
            }
            if !notes.is_empty() {
                out += &format!("{:<22} ({})\n", "", notes.join("; "));
            }
        }
    }
    out
}

fn agent_overhead(args: OverheadArgs) -> Result<()> {
    need_root("bench agent-overhead")?;
    check_out(args.out.as_deref())?;
    if !(args.period >= 0.01 && args.period <= 60.0) {
        anyhow::bail!("--period must be in [0.01, 60] seconds");
    }
    let plan = OverheadPlan {
        overbook: std::env::current_exe().context("finding the overbook binary")?,
        containers: args.containers,
        seconds: args.seconds.max(1),
        period: Duration::from_secs_f64(args.period),
        warmup: Duration::from_secs(5),
    };
    let bar = indicatif::ProgressBar::new(plan.seconds);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} s")
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .progress_chars("=> "),
    );
    let say = |m: &str| {
        if bar.is_hidden() {
            eprintln!("{m}");
        } else {
            bar.println(m);
        }
    };
    let r =
        overhead::run(&plan, say, |s| bar.set_position(s)).map_err(|e| anyhow::anyhow!("{e}"))?;
    bar.finish_and_clear();
    print!("{}", overhead_table(&r));
    finish(args.out.as_deref(), &r)?;
    Ok(())
}

fn overhead_table(r: &OverheadReport) -> String {
    let mut out = format!(
        "overbook agent watching {} containers ({} seen) every {} s, measured {:.1} s\n",
        r.containers, r.containers_seen, r.period_s, r.seconds
    );
    out += &format!(
        "CPU:        {:.2}% of one core (user {:.2}%, system {:.2}%); {:.2} ms per sample\n",
        r.cpu_percent_of_core, r.user_percent, r.system_percent, r.cpu_ms_per_sample
    );
    out += &format!(
        "CPU/second: p50 {:.2}%, p99 {:.2}%\n",
        r.cpu_percent_per_second.p50.unwrap_or(0.0),
        r.cpu_percent_per_second.p99.unwrap_or(0.0)
    );
    out += &format!(
        "memory:     peak RSS (VmHWM) {:.1} MiB, RSS {:.1} MiB, locked {:.1} MiB, {} threads\n",
        r.vm_hwm_kib as f64 / 1024.0,
        r.vm_rss_kib as f64 / 1024.0,
        r.vm_lck_kib as f64 / 1024.0,
        r.threads
    );
    out
}

fn kubernetes(args: KubernetesArgs) -> Result<()> {
    use overbook_lab::bench::kubernetes::{self, KubePlan, Progress};
    need_root("bench kubernetes")?;
    check_out(args.out.as_deref())?;
    if !(2..=1000).contains(&args.pods) {
        anyhow::bail!("--pods must be from 2 to 1000, not {}", args.pods);
    }
    if args.repeats == 0 || args.repeats > 100 {
        anyhow::bail!("--repeats must be from 1 to 100, not {}", args.repeats);
    }
    if args.seconds == 0 || args.seconds > 3600 {
        anyhow::bail!("--seconds must be from 1 to 3600, not {}", args.seconds);
    }
    if !args.kubeconfig.is_file() {
        anyhow::bail!(
            "--kubeconfig {}: no such file (`scripts/kube up DIR` writes DIR/kubeconfig)",
            args.kubeconfig.display()
        );
    }
    let overbook = std::env::current_exe().context("finding the overbook binary")?;
    let plan = KubePlan {
        workload: WorkloadProgram { program: overbook.clone(), prefix: vec!["workload".into()] },
        overbook,
        kubeconfig: args.kubeconfig,
        pods: args.pods,
        seconds: args.seconds,
        repeats: args.repeats,
        warmup: Duration::from_secs(5),
        hog: 128 * MIB,
        capacity: 2048 * MIB,
        stop: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
    };
    // Ctrl-C or a SIGTERM ends the repeat under way cleanly: its agent,
    // pods, cgroups and Node go with it.
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        // A second one, while the first is being taken, ends the process.
        signal_hook::flag::register_conditional_shutdown(
            signal,
            1,
            std::sync::Arc::clone(&plan.stop),
        )
        .context("installing signal handlers")?;
        signal_hook::flag::register(signal, std::sync::Arc::clone(&plan.stop))
            .context("installing signal handlers")?;
    }
    let bar = indicatif::ProgressBar::new(plan.repeats as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} repeats")
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .progress_chars("=> "),
    );
    let mut progress = |p: Progress<'_>| match p {
        Progress::Say(m) => {
            if bar.is_hidden() {
                eprintln!("{m}");
            } else {
                bar.println(m);
            }
        }
        Progress::Repeat(n) => bar.set_position(n as u64),
    };
    let r = kubernetes::run(&plan, &mut progress).map_err(|e| anyhow::anyhow!("{e}"))?;
    bar.finish_and_clear();
    print!("{}", kubernetes_table(&r));
    finish(args.out.as_deref(), &r)?;
    Ok(())
}

fn kubernetes_table(r: &overbook_lab::bench::kubernetes::KubeReport) -> String {
    use overbook_lab::bench::kubernetes::Stat;
    let mut out = format!(
        "overbook agent on Kubernetes node {} ({}; Linux {}, cgroup {}): {} pods ({} production, \
         {} best-effort), {} MiB node, {} repeats, a fresh agent each; the API server read every \
         {} ms (a latency is late by at most that)\n",
        r.node_name,
        r.kubernetes_version,
        r.kernel,
        r.cgroup_version,
        r.pods,
        r.production_pods,
        r.best_effort_pods,
        r.capacity_mib,
        r.repeats,
        r.poll_ms
    );
    let f = |v: Option<f64>| {
        v.map_or("-".to_string(), |v| {
            if v.abs() < 10.0 {
                format!("{v:.2}")
            } else {
                format!("{v:.0}")
            }
        })
    };
    let ci = |s: &Stat| {
        s.ci95.map_or("-".to_string(), |[a, b]| format!("[{}, {}]", f(Some(a)), f(Some(b))))
    };
    out += &format!(
        "\n{:<48} {:>4} {:>8} {:>18} {:>8} {:>8} {:>8}  {}\n",
        "WHAT", "N", "MEAN", "95% CI OF MEAN", "P50", "P99", "MAX", "GOAL"
    );
    let rows: [(&str, &Stat, Option<&str>); 9] = [
        (
            &format!("agent CPU, % of one core ({} s windows)", r.seconds_per_window),
            &r.cpu_percent_of_core,
            Some("≤ 1%"),
        ),
        ("agent peak RSS (VmHWM), MiB", &r.vm_hwm_mib, Some("≤ 30 MiB")),
        ("offer follows production, ms (both ways)", &r.offer_follow_ms, Some("≤ 2000 ms")),
        (
            &format!("  production +{} MiB (hog started) → offer −100", r.hog_mib),
            &r.offer_down_ms,
            None,
        ),
        ("    (the same from the hog's ready)", &r.offer_down_from_ready_ms, None),
        ("    (the hog's own start → ready)", &r.hog_ready_ms, None),
        (
            &format!("  production −{} MiB (hog killed) → offer +100", r.hog_mib),
            &r.offer_up_ms,
            None,
        ),
        ("preemption sent → its Event readable, ms", &r.event_ms, Some("≤ 1000 ms")),
        ("  (preemption sent → the agent's answer, ms)", &r.preempt_reply_ms, None),
    ];
    for (what, s, goal) in rows {
        let verdict = goal.map_or(String::new(), |g| {
            let met = r.goals.iter().any(|x| x.goal == g && x.met);
            format!("{g}: {}", if met { "met" } else { "NOT met" })
        });
        out += &format!(
            "{:<48} {:>4} {:>8} {:>18} {:>8} {:>8} {:>8}  {}\n",
            what,
            s.n,
            f(s.mean),
            ci(s),
            f(s.p50),
            f(s.p99),
            f(s.max),
            verdict
        );
    }
    let problems: Vec<String> = r
        .runs
        .iter()
        .flat_map(|run| run.problems.iter().map(move |p| format!("repeat {}: {p}", run.repeat)))
        .collect();
    if !problems.is_empty() {
        out += &format!("\nmissing samples:\n  {}\n", problems.join("\n  "));
    }
    out
}

fn calibrate(args: CalibrateArgs) -> Result<()> {
    use overbook_lab::bench::calibrate::{self, CalibratePlan};
    need_root("bench calibrate")?;
    let (limit, anon, file, warm, window) = if args.quick {
        (64 << 20, vec![0.9, 1.5], vec![0.9, 1.5], 0.5, 2.5)
    } else {
        let limit = overbook_agent::config::parse_size_text(&args.limit)
            .map_err(|e| anyhow::anyhow!("--limit {:?}: {e}", args.limit))?;
        (limit, args.anon.clone(), args.file.clone(), args.warm, args.window)
    };
    for (key, points) in [("--anon", &anon), ("--file", &file)] {
        if points.iter().any(|s| !(s.is_finite() && *s > 0.0 && *s <= 8.0))
            || points.windows(2).any(|w| w[0] >= w[1])
        {
            anyhow::bail!("{key}: squeezes must be increasing numbers in (0, 8]");
        }
    }
    if anon.is_empty() {
        anyhow::bail!(
            "--anon: the simulator's model needs the anon curve: give at least one squeeze"
        );
    }
    if !(warm.is_finite() && warm >= 0.0 && window.is_finite() && window >= 2.0) {
        anyhow::bail!("--warm must be ≥ 0 s and --window ≥ 2 s (workers report once a second)");
    }
    // Anonymous memory squeezed needs somewhere to go.
    let _swap = if overbook_linux::swap::machine_has_swap().unwrap_or(false) {
        None
    } else {
        let swap = overbook_linux::swap::SwapFile::add(&args.scratch, 2 * limit).map_err(|e| {
            anyhow::anyhow!("the anon curve needs swap and none could be added: {e}")
        })?;
        eprintln!("added {} MiB of swap for the measurement (removed after)", (2 * limit) >> 20);
        Some(swap)
    };
    let plan = CalibratePlan {
        workload: WorkloadProgram {
            program: std::env::current_exe().context("finding the overbook binary")?,
            prefix: vec!["workload".into()],
        },
        limit,
        anon_points: anon,
        file_points: file,
        warm: std::time::Duration::from_secs_f64(warm),
        window: std::time::Duration::from_secs_f64(window),
        scratch: args.scratch.clone(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let text = calibrate::run(&plan, |line| eprintln!("{line}"))
        .map_err(|e| anyhow::anyhow!("calibrate: {e}"))?;
    // What the simulator will read must be valid: check before writing.
    overbook_sim::calibration::Calibration::from_toml(&text).map_err(|e| {
        anyhow::anyhow!("the measured curve is not usable by the simulator: {e}\n{text}")
    })?;
    std::fs::write(&args.out, &text).with_context(|| format!("writing {}", args.out.display()))?;
    println!("wrote {}", args.out.display());
    Ok(())
}

fn reclaim(args: ReclaimArgs) -> Result<()> {
    use overbook_lab::bench::reclaim::{self, ReclaimPlan, Scenario};
    need_root("bench reclaim")?;
    check_out(args.out.as_deref())?;
    if !(args.scale.is_finite() && (0.05..=4.0).contains(&args.scale)) {
        anyhow::bail!("--scale must be from 0.05 to 4, not {}", args.scale);
    }
    if args.repeats == 0 || args.repeats > 100 {
        anyhow::bail!("--repeats must be from 1 to 100, not {}", args.repeats);
    }
    let scenarios = args
        .scenarios
        .iter()
        .map(|s| {
            Scenario::ALL.into_iter().find(|k| k.as_str() == s).with_context(|| {
                format!("--scenarios: unknown scenario {s:?} (recency, weighted, services)")
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let plan = ReclaimPlan {
        workload: WorkloadProgram {
            program: std::env::current_exe().context("finding the overbook binary")?,
            prefix: vec!["workload".into()],
        },
        scratch: args.scratch,
        scale: args.scale,
        repeats: args.repeats,
        scenarios,
    };
    let report = reclaim::run(&plan, |line| eprintln!("{line}"))
        .map_err(|e| anyhow::anyhow!("bench reclaim: {e}"))?;
    print!("{}", reclaim::table(&report));
    finish(args.out.as_deref(), &report)?;
    Ok(())
}

fn preemption(args: PreemptionArgs) -> Result<()> {
    use overbook_lab::bench::preemption::{self, PreemptionPlan};
    need_root("bench preemption")?;
    check_out(args.out.as_deref())?;
    if !(args.scale.is_finite() && (0.1..=2.0).contains(&args.scale)) {
        anyhow::bail!("--scale must be from 0.1 to 2, not {}", args.scale);
    }
    if args.tasks == 0 || args.tasks > 50 {
        anyhow::bail!("--tasks must be from 1 to 50, not {}", args.tasks);
    }
    if args.bursts == 0 || args.bursts > 50 {
        anyhow::bail!("--bursts must be from 1 to 50, not {}", args.bursts);
    }
    for p in &args.preemptors {
        if !["kill", "checkpoint", "adaptive"].contains(&p.as_str()) {
            anyhow::bail!("--preemptors: unknown preemptor {p:?} (kill, checkpoint, adaptive)");
        }
    }
    let plan = PreemptionPlan {
        workload: WorkloadProgram {
            program: std::env::current_exe().context("finding the overbook binary")?,
            prefix: vec!["workload".into()],
        },
        scratch: args.scratch,
        scale: args.scale,
        seed: args.seed,
        tasks: args.tasks,
        bursts: args.bursts,
        preemptors: args.preemptors.clone(),
    };
    let report = preemption::run(&plan, &mut |line| eprintln!("{line}"))
        .map_err(|e| anyhow::anyhow!("bench preemption: {e}"))?;
    print!("{}", preemption::table(&report));
    finish(args.out.as_deref(), &report)?;
    Ok(())
}

/// Refuse an `--out` the report could not be written to, before a run of
/// minutes is spent: a directory, or a file in a directory that is not there.
fn check_out(out: Option<&std::path::Path>) -> Result<()> {
    let Some(out) = out else { return Ok(()) };
    if out.is_dir() {
        anyhow::bail!("--out {}: is a directory; give the report's file name", out.display());
    }
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent.filter(|p| !p.is_dir()) {
        anyhow::bail!("--out {}: no directory {}", out.display(), parent.display());
    }
    Ok(())
}

/// The end of a real-node benchmark: its report as JSON where asked, and
/// the word that it cleaned up after itself.
fn finish(out: Option<&std::path::Path>, report: &impl serde::Serialize) -> Result<()> {
    if let Some(out) = out {
        std::fs::write(out, serde_json::to_string_pretty(report)?)
            .with_context(|| format!("writing {}", out.display()))?;
        println!("JSON: {}", out.display());
    }
    println!("everything the benchmark made has been removed");
    Ok(())
}

fn checkpoint(args: CheckpointArgs) -> Result<()> {
    use overbook_lab::bench::checkpoint::{self, CheckpointPlan};
    need_root("bench checkpoint")?;
    check_out(args.out.as_deref())?;
    if !(args.scale.is_finite() && (0.01..=64.0).contains(&args.scale)) {
        anyhow::bail!("--scale must be from 0.01 to 64, not {}", args.scale);
    }
    if !(args.dirty.is_finite() && args.dirty > 0.0 && args.dirty <= 1.0) {
        anyhow::bail!("--dirty must be in (0, 1], not {}", args.dirty);
    }
    if args.repeats == 0 || args.repeats > 100 {
        anyhow::bail!("--repeats must be from 1 to 100, not {}", args.repeats);
    }
    let sizes = args
        .sizes
        .iter()
        .map(|s| {
            let bytes = overbook_agent::config::parse_size_text(s)
                .map_err(|e| anyhow::anyhow!("--sizes {s:?}: {e}"))?;
            // Whole pages, 4 MiB at least: below that CRIU's fixed costs are
            // all there is to see.
            let scaled = overbook_core::convert::to_u64(bytes as f64 * args.scale) / 4096 * 4096;
            Ok(scaled.max(4 * MIB))
        })
        .collect::<Result<Vec<u64>>>()?;
    if sizes.is_empty() {
        anyhow::bail!("--sizes: give at least one size");
    }
    let plan = CheckpointPlan {
        worker_program: std::env::current_exe().context("finding the overbook binary")?,
        worker_prefix: vec!["bench".into(), "checkpoint-worker".into()],
        store: args.store,
        keep: args.keep,
        sizes,
        dirty: args.dirty,
        repeats: args.repeats,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let report = checkpoint::run(&plan, |line| eprintln!("{line}"))
        .map_err(|e| anyhow::anyhow!("bench checkpoint: {e}"))?;
    print!("{}", checkpoint::table(&report));
    if let Some(out) = &args.out {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(out, text).with_context(|| format!("writing {}", out.display()))?;
        println!("wrote {}", out.display());
    }
    if report.kept.is_some() {
        println!("every cgroup and process the benchmark made has been removed; its store directory is kept");
    } else {
        println!("everything the benchmark made has been removed");
    }
    Ok(())
}

fn colocation(args: ColocationArgs) -> Result<()> {
    use overbook_lab::bench::colocation::{self, ColocationPlan, ColocationReport};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    if let Some(plot) = &args.plot {
        if !plot.extension().is_some_and(|e| e == "svg" || e == "png") {
            anyhow::bail!("--plot {}: give a .svg or .png file", plot.display());
        }
    }
    check_out(args.out.as_deref())?;
    if let Some(from) = &args.from {
        let text =
            std::fs::read_to_string(from).with_context(|| format!("--from {}", from.display()))?;
        let de = &mut serde_json::Deserializer::from_str(&text);
        let mut report: ColocationReport = serde_path_to_error::deserialize(de)
            .map_err(|e| anyhow::anyhow!("--from {}: {e}", from.display()))?;
        // Summarized again: the figures are this version's, from the scenes.
        let policies: Vec<String> = report.summary.iter().map(|s| s.policy.clone()).collect();
        report.summary = colocation::summarize(&policies, &report.scenes);
        print!("{}", colocation::table(&report));
        if let Some(plot) = &args.plot {
            colocation_plot(plot, &report)?;
        }
        return Ok(());
    }
    need_root("bench colocation")?;
    if !(0.0..=100.0).contains(&args.max_steal) {
        anyhow::bail!("--max-steal must be a percentage from 0 to 100, not {}", args.max_steal);
    }
    if !(30..=3600).contains(&args.seconds) {
        anyhow::bail!("--seconds must be from 30 to 3600, not {}", args.seconds);
    }
    if args.repeats == 0 || args.repeats > 20 {
        anyhow::bail!("--repeats must be from 1 to 20, not {}", args.repeats);
    }
    colocation::check_policies(&args.policies).map_err(|e| anyhow::anyhow!("--policies: {e}"))?;
    if let Some(rate) = args.pg_rate {
        if !(rate.is_finite() && (1.0..=1e6).contains(&rate)) {
            anyhow::bail!("--pg-rate must be from 1 to 1000000 transactions a second, not {rate}");
        }
    }
    if let Some(round) = args.redis_round {
        if !(20..=100_000).contains(&round) {
            anyhow::bail!("--redis-round must be from 20 to 100000 GETs, not {round}");
        }
    }
    let native = if args.native {
        let size = |flag: &str, s: &str| {
            overbook_agent::config::parse_size_text(s)
                .map_err(|e| anyhow::anyhow!("--{flag} {s:?}: {e}"))
        };
        let (capacity, swap) = (size("capacity", &args.capacity)?, size("swap", &args.swap)?);
        if capacity < 512 << 20 {
            anyhow::bail!("--capacity {}: the comparison needs 512MiB at least", args.capacity);
        }
        if args.policies.iter().any(|p| p == "earlyoom") {
            anyhow::bail!(
                "--policies: earlyoom watches the whole machine, not a node cgroup: leave it \
                 out of --native runs (it runs in scripts/vm's whole-machine mode)"
            );
        }
        Some(colocation::NativeNode { capacity, swap })
    } else {
        None
    };
    if !args.policies.iter().any(|p| p == "isolated") {
        anyhow::bail!("--policies: include isolated, the reference every ratio is of");
    }
    let scratch = args.scratch.unwrap_or_else(|| {
        std::env::var_os("OVERBOOK_VM_DISK")
            .map_or_else(|| PathBuf::from("/var/tmp"), PathBuf::from)
    });
    let plan = ColocationPlan {
        overbook: std::env::current_exe().context("finding the overbook binary")?,
        scratch,
        images: args.images,
        seed: args.seed,
        seconds: args.seconds,
        repeats: args.repeats,
        policies: args.policies,
        warmup: !args.no_warmup,
        max_steal: args.max_steal / 100.0,
        native,
        events: args.events,
        pg_rate: args.pg_rate,
        redis_round: args.redis_round,
        stop: Arc::new(AtomicBool::new(false)),
    };
    // Ctrl-C or a SIGTERM ends the scene under way cleanly: its services,
    // jobs, node cgroup and swap file go with it.
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        // A second one, while the first is being taken, ends the process.
        signal_hook::flag::register_conditional_shutdown(signal, 1, Arc::clone(&plan.stop))
            .context("installing signal handlers")?;
        signal_hook::flag::register(signal, Arc::clone(&plan.stop))
            .context("installing signal handlers")?;
    }
    if let Some(dir) = &plan.events {
        std::fs::create_dir_all(dir).with_context(|| format!("--events {}", dir.display()))?;
    }
    let started = Instant::now();
    let report = colocation::run(&plan, &mut |line| {
        eprintln!("[{:>5.0} s] {line}", started.elapsed().as_secs_f64())
    })
    .map_err(|e| anyhow::anyhow!("bench colocation: {e}"))?;
    print!("{}", colocation::table(&report));
    if let Some(plot) = &args.plot {
        colocation_plot(plot, &report)?;
    }
    finish(args.out.as_deref(), &report)?;
    Ok(())
}

/// The comparison as grouped bars, ratios cut at 4 (the table has them
/// whole: a manager that lets production thrash reaches hundreds).
fn colocation_plot(
    plot: &std::path::Path,
    report: &overbook_lab::bench::colocation::ColocationReport,
) -> Result<()> {
    use overbook_lab::bench::colocation::PolicySummary;
    let categories: Vec<String> = report.summary.iter().map(|s| s.policy.clone()).collect();
    type Figure = fn(&PolicySummary) -> (f64, [f64; 2]);
    let series = |name: &str, f: Figure| {
        let values = report.summary.iter().map(|s| Some(f(s).0).filter(|x| x.is_finite()));
        let intervals = report.summary.iter().map(|s| {
            let [lo, hi] = f(s).1;
            (lo.is_finite() && hi.is_finite() && lo < hi).then_some([lo, hi])
        });
        (name.to_string(), values.collect::<Vec<_>>(), intervals.collect::<Vec<_>>())
    };
    let repeats = report.scenes.iter().map(|s| s.repeat + 1).max().unwrap_or(1);
    overbook_sim::report::draw_bars_with_intervals(
        plot,
        &format!(
            "Colocation on one node: seed {}, {} s a scene, {repeats} repeat(s), 95% intervals; \
             ratios cut at 4",
            report.seed, report.seconds
        ),
        "ratio (production: to isolated; best-effort work: to static)",
        Some(4.0),
        categories,
        vec![
            series("Redis throughput", |s| (s.redis_throughput, s.redis_throughput_ci)),
            series("Redis p99", |s| (s.redis_p99, s.redis_p99_ci)),
            series("PostgreSQL throughput", |s| (s.pg_throughput, s.pg_throughput_ci)),
            series("PostgreSQL p99", |s| (s.pg_p99, s.pg_p99_ci)),
            series("best-effort work", |s| (s.be_work, s.be_work_ci)),
        ],
    )
    .map_err(|e| anyhow::anyhow!("--plot {}: {e}", plot.display()))?;
    println!("plot: {}", plot.display());
    Ok(())
}

fn checkpoint_worker(args: CheckpointWorkerArgs) -> Result<()> {
    use overbook_lab::bench::checkpoint::{worker, WorkerArgs};
    worker(&WorkerArgs { dir: args.dir, size: args.size, dirty: args.dirty })
        .context("checkpoint worker")
}
