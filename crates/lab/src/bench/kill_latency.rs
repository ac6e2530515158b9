//! `overbook bench kill-latency`: how fast a killer relieves a node that
//! really thrashes, for the overbook agent, a user-space threshold killer
//! (Kuber) and the kernel's OOM killer.
//!
//! The node (one per victim size V) is a cgroup with a memory limit
//! `L = V + W + H` (W: production's file working set, H = max(512 MiB, V/4)
//! of headroom). In it run, for the whole size:
//! `prod-reader`, reading a W-byte file at random (its working set is page
//! cache), and for each trial `be-victim`, holding V bytes of anonymous
//! memory. The squeeze is `prod-grow`, a production container that
//! allocates G = H + W/2 bytes of anonymous memory (G = H + W + V/2 for the
//! kernel OOM killer, which acts only when nothing is left to reclaim):
//! the node hits its limit, the kernel evicts the reader's file pages and
//! the reader faults them back, so memory stall grows (real thrashing).
//!
//! A sampler thread reads, about every millisecond: the system PSI `some
//! total` (`/proc/pressure/memory`), the victim's and the node's memory
//! usage and the node's `oom_kill` counter. Every figure below is computed
//! from those samples and the killer's own instants:
//!
//! * **t0, pressure visible**: the first sample after the squeeze starts
//!   whose PSI `some total` is larger than before the squeeze.
//! * **(a) pressure → awake**: t0 to the first wake-up of the killer's loop
//!   after t0 (agent: the start of its first tick after t0, woken by its PSI
//!   trigger or its sampling timer; threshold killer: its first 100 ms poll
//!   after t0). For the kernel it is t0 to the OOM kill (the first sample
//!   whose `oom_kill` counter grew): the kernel decides and kills at once.
//! * **(b) decision → kill issued**: agent: its own `decision_to_issue_us`
//!   (from just before the policy step that decided to the call of
//!   `ContainerControl::kill`); threshold killer: from the moment its read
//!   of the node's usage is below the threshold to its first `kill(2)`.
//! * **(c) kill issued → released**: from the kill issued (agent: entry into
//!   `ContainerControl::kill`, timed by a wrapper; threshold: its first
//!   `kill(2)`; kernel: the OOM kill sample) to the first sample where the
//!   victim container's memory usage is at most 5% of its last sample before
//!   the kill.
//! * **unloaded exit**: the same-size victim in the same node, nothing
//!   squeezing it, killed with a plain SIGKILL: from the signal to its
//!   usage at most 5% of before. (c) is reported as a ratio to it.
//! * **pressure → kill issued**: t0 to the kill issued, end to end (the
//!   agent's includes its tolerance window). A threshold killer can kill
//!   before any stall: those kills are counted as `before stall`.

use super::timed::Timed;
use super::{set_oom_score_adj, BenchNode, Percentiles, Worker, WorkloadProgram, MIB};
use overbook_agent::agent::Agent;
use overbook_agent::config::AgentConfig;
use overbook_agent::events::details::Preempted;
use overbook_agent::events::EventLog;
use overbook_agent::EventKind;
use overbook_core::Time;
use overbook_linux::psi::PsiTrigger;
use overbook_linux::{
    fastread, host, host_cgroups, process, ContainerPath, HostSupport, Outcome, Pid,
};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Who kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Killer {
    /// The overbook agent, ticking the daemon's way.
    Agent,
    /// Kuber-like: polls free memory every 100 ms, kills the newest
    /// best-effort container below 10% free.
    Threshold,
    /// The kernel's OOM killer at the node's limit.
    KernelOom,
}

impl Killer {
    pub const ALL: [Killer; 3] = [Killer::Agent, Killer::Threshold, Killer::KernelOom];

    pub fn as_str(self) -> &'static str {
        match self {
            Killer::Agent => "overbook agent",
            Killer::Threshold => "threshold 10% (Kuber)",
            Killer::KernelOom => "kernel OOM killer",
        }
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct KillPlan {
    pub workload: WorkloadProgram,
    /// Victim sizes, bytes.
    pub sizes: Vec<u64>,
    /// Kills per killer and size (and unloaded exits per size).
    pub kills: usize,
    pub killers: Vec<Killer>,
    /// Production's file working set (W), bytes.
    pub reader: u64,
    /// Where the reader's file lives (a disk, not tmpfs).
    pub scratch: PathBuf,
    /// The agent's constraint-thrashing tolerance, seconds.
    pub tolerance: f64,
    /// The agent's sampling period and the threshold killer's poll.
    pub period: Duration,
    /// The threshold killer acts below this fraction of the node free.
    pub threshold: f64,
    /// Released: victim usage at most this fraction of before the kill.
    pub released_below: f64,
}

/// One kill (or unloaded exit).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Trial {
    /// `None`: the unloaded exit.
    pub killer: Option<Killer>,
    pub size: u64,
    pub round: usize,
    /// The victim's usage at its last sample before the kill.
    pub victim_usage: u64,
    pub pressure_to_awake_ms: Option<f64>,
    /// What woke the agent at (a): `psi` or `timer`.
    pub woken_by: Option<String>,
    pub decision_to_issue_ms: Option<f64>,
    pub issue_to_release_ms: Option<f64>,
    pub pressure_to_issue_ms: Option<f64>,
    /// The kill came before any stall was seen.
    pub before_stall: bool,
    /// Samples the sampler took, and their mean interval.
    pub samples: usize,
    pub sample_interval_ms: f64,
    pub max_sample_gap_ms: f64,
    /// Why this trial did not measure what it should have.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Summary of one killer at one size.
#[derive(Clone, Debug, Serialize)]
pub struct KillerSummary {
    pub killer: Killer,
    pub kills: usize,
    pub failed: usize,
    pub before_stall: usize,
    pub woken_by_psi: usize,
    pub pressure_to_awake_ms: Percentiles,
    pub decision_to_issue_ms: Percentiles,
    pub issue_to_release_ms: Percentiles,
    pub pressure_to_issue_ms: Percentiles,
    /// (c) over the unloaded exit, at p50 and at p99.
    pub release_vs_unloaded_p50: Option<f64>,
    pub release_vs_unloaded_p99: Option<f64>,
}

/// Everything measured at one victim size.
#[derive(Clone, Debug, Serialize)]
pub struct SizeSummary {
    pub size: u64,
    pub node_limit: u64,
    pub grower: u64,
    pub grower_oom: u64,
    pub unloaded_exit_ms: Percentiles,
    pub killers: Vec<KillerSummary>,
}

/// The whole benchmark.
#[derive(Clone, Debug, Serialize)]
pub struct KillLatencyReport {
    pub kernel: String,
    pub cgroup_version: String,
    pub reader: u64,
    pub tolerance_s: f64,
    pub period_ms: f64,
    pub threshold: f64,
    pub released_below: f64,
    pub sizes: Vec<SizeSummary>,
    pub trials: Vec<Trial>,
}

/// What the benchmark tells its caller as it goes.
#[derive(Debug)]
pub enum Progress<'a> {
    /// How many trials there will be.
    Total(u64),
    /// What it is doing now.
    Phase(String),
    /// A trial finished.
    Trial(&'a Trial),
}

/// Runs every trial; `progress` hears about each.
pub fn run(
    plan: &KillPlan,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<KillLatencyReport, String> {
    if plan.kills == 0 || plan.sizes.is_empty() {
        return Err("nothing to measure (no kills or no sizes)".into());
    }
    let probe = HostSupport::probe();
    let version = probe.memory.as_ref().map(|m| format!("{:?}", m.version)).unwrap_or_default();
    let per_size = plan.kills * (plan.killers.len() + 1);
    progress(Progress::Total((per_size * plan.sizes.len()) as u64));
    let mut trials = Vec::new();
    let mut sizes = Vec::new();
    for &size in &plan.sizes {
        let (summary, mut t) = one_size(plan, size, progress)?;
        sizes.push(summary);
        trials.append(&mut t);
    }
    Ok(KillLatencyReport {
        kernel: host::kernel_release().unwrap_or_default(),
        cgroup_version: version,
        reader: plan.reader,
        tolerance_s: plan.tolerance,
        period_ms: plan.period.as_secs_f64() * 1e3,
        threshold: plan.threshold,
        released_below: plan.released_below,
        sizes,
        trials,
    })
}

/// The node of one size, with production's reader running.
struct SizeNode {
    node: BenchNode,
    _reader: Worker,
    _scratch: tempfile::TempDir,
    limit: u64,
    victim: ContainerPath,
}

fn one_size(
    plan: &KillPlan,
    size: u64,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<(SizeSummary, Vec<Trial>), String> {
    let headroom = (512 * MIB).max(size / 4);
    let limit = size + plan.reader + headroom;
    let grower = headroom + plan.reader / 2;
    let grower_oom = headroom + plan.reader + size / 2;
    let name = format!("overbook-bench-kill-{}", std::process::id());
    progress(Progress::Phase(format!(
        "{} MiB victims: node {} MiB, production reads {} MiB",
        size / MIB,
        limit / MIB,
        plan.reader / MIB
    )));
    let mut node = BenchNode::new(&name, Some(limit))?;
    let scratch =
        tempfile::Builder::new().prefix("overbook-bench-").tempdir_in(&plan.scratch).map_err(
            |e| format!("cannot make a scratch directory in {}: {e}", plan.scratch.display()),
        )?;
    let file = scratch.path().join("production-working-set").to_string_lossy().to_string();
    let mut reader = node.worker(
        &plan.workload,
        "prod-reader",
        &["file".into(), file, plan.reader.to_string()],
    )?;
    reader.ready(Duration::from_secs(300))?;
    // Lowering needs CAP_SYS_RESOURCE; the victim's +1000 is what matters.
    let _ = set_oom_score_adj(reader.pid(), -1000);
    let victim = node.root.child("be-victim").map_err(|e| e.to_string())?;
    let mut sn = SizeNode { node, _reader: reader, _scratch: scratch, limit, victim };

    let mut trials = Vec::new();
    for round in 0..plan.kills {
        let mut t = unloaded(plan, &mut sn, size)?;
        t.round = round;
        progress(Progress::Trial(&t));
        trials.push(t);
        for &killer in &plan.killers {
            let g = if killer == Killer::KernelOom { grower_oom } else { grower };
            let mut t = loaded(plan, &mut sn, size, killer, g)?;
            t.round = round;
            progress(Progress::Trial(&t));
            trials.push(t);
        }
    }
    let unloaded_ms: Vec<f64> = trials
        .iter()
        .filter(|t| t.killer.is_none())
        .filter_map(|t| t.issue_to_release_ms)
        .collect();
    let unloaded_exit_ms = Percentiles::of(&unloaded_ms);
    let killers = plan.killers.iter().map(|&k| summarize(k, &trials, &unloaded_exit_ms)).collect();
    Ok((
        SizeSummary { size, node_limit: limit, grower, grower_oom, unloaded_exit_ms, killers },
        trials,
    ))
}

fn summarize(killer: Killer, trials: &[Trial], unloaded: &Percentiles) -> KillerSummary {
    let mine: Vec<&Trial> = trials.iter().filter(|t| t.killer == Some(killer)).collect();
    let ok: Vec<&Trial> = mine.iter().copied().filter(|t| t.problem.is_none()).collect();
    let of = |f: fn(&Trial) -> Option<f64>| {
        Percentiles::of(&ok.iter().filter_map(|t| f(t)).collect::<Vec<_>>())
    };
    let release = of(|t| t.issue_to_release_ms);
    let ratio = |a: Option<f64>, b: Option<f64>| Some(a? / b.filter(|b| *b > 0.0)?);
    KillerSummary {
        killer,
        kills: ok.len(),
        failed: mine.len() - ok.len(),
        before_stall: ok.iter().filter(|t| t.before_stall).count(),
        woken_by_psi: ok.iter().filter(|t| t.woken_by.as_deref() == Some("psi")).count(),
        pressure_to_awake_ms: of(|t| t.pressure_to_awake_ms),
        decision_to_issue_ms: of(|t| t.decision_to_issue_ms),
        pressure_to_issue_ms: of(|t| t.pressure_to_issue_ms),
        release_vs_unloaded_p50: ratio(release.p50, unloaded.p50),
        release_vs_unloaded_p99: ratio(release.p99, unloaded.p99),
        issue_to_release_ms: release,
    }
}

/// One reading of the sampler.
#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Instant,
    psi: u64,
    victim: u64,
    node: u64,
    oom: u64,
}

/// The ~1 ms sampler thread.
struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Vec<Sample>>>,
}

impl Sampler {
    fn start(sn: &SizeNode) -> Sampler {
        let victim_usage = sn.node.usage_file(Some(&sn.victim));
        let node_usage = sn.node.usage_file(None);
        // v1 counts an OOM kill in the victim's own memory cgroup.
        let oom = sn.node.oom_file(Some(&sn.victim));
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            // The instrument must not starve behind the workloads (2 cores,
            // three busy workers): nice -10 for this thread only (Linux nice
            // is per thread); without CAP_SYS_NICE it samples at nice 0.
            let _ = process::set_thread_nice(-10);
            let psi = Path::new(host::SYSTEM_PRESSURE);
            let mut out = Vec::with_capacity(64 * 1024);
            loop {
                // One last sample after being told to stop.
                let last = flag.load(Ordering::Relaxed);
                let s = Sample {
                    psi: fastread::psi_some_total(psi).unwrap_or(0),
                    victim: fastread::number(&victim_usage).unwrap_or(u64::MAX),
                    node: fastread::number(&node_usage).unwrap_or(0),
                    oom: fastread::keyed(&oom, "oom_kill").unwrap_or(0),
                    at: Instant::now(),
                };
                out.push(s);
                if last {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            out
        });
        Sampler { stop, handle: Some(handle) }
    }

    fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Waits until neither system PSI `some total` nor production's major
/// faults and refaults have grown for `still` (production reads its working
/// set back after a squeeze), at most `max`.
fn wait_quiet(sn: &SizeNode, still: Duration, max: Duration) -> bool {
    let psi = Path::new(host::SYSTEM_PRESSURE);
    let reader = sn.node.root.child("prod-reader").ok();
    let state = || {
        let faults = reader
            .as_ref()
            .and_then(|r| sn.node.cg.counters(r).ok()?.done())
            .map(|c| c.major_faults + c.refault_file.unwrap_or(0) + c.refault_anon.unwrap_or(0));
        (fastread::psi_some_total(psi).ok(), faults)
    };
    let until = Instant::now() + max;
    let mut last = state();
    let mut since = Instant::now();
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
        let now = state();
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= still {
            return true;
        }
    }
    false
}

/// Starts the victim and waits until it holds its memory and the node is calm.
fn start_victim(plan: &KillPlan, sn: &mut SizeNode, size: u64) -> Result<Worker, String> {
    let mut victim =
        sn.node.worker(&plan.workload, "be-victim", &["anon".into(), size.to_string()])?;
    // Should anything make the kernel OOM-kill, the victim is its choice.
    set_oom_score_adj(victim.pid(), 1000)?;
    victim.ready(Duration::from_secs(300))?;
    if !wait_quiet(sn, Duration::from_millis(500), Duration::from_secs(30)) {
        return Err("the node did not calm down within 30 s (is something else thrashing?)".into());
    }
    Ok(victim)
}

/// Kills whatever is left of a trial's containers.
fn end_trial(sn: &mut SizeNode, workers: &mut [&mut Worker]) {
    let grow = sn.node.root.child("prod-grow").ok();
    for path in grow.iter().chain(std::iter::once(&sn.victim.clone())) {
        sn.node.drop_container(path);
    }
    for w in workers {
        let _ = w.child.kill();
        let _ = w.child.wait();
    }
}

/// Waits until the victim has exited and its usage is at most the released
/// fraction of `size` (or `max` passed).
fn wait_released(plan: &KillPlan, sn: &SizeNode, victim: &mut Worker, size: u64, max: Duration) {
    let file = sn.node.usage_file(Some(&sn.victim));
    let until = Instant::now() + max;
    while Instant::now() < until {
        let usage = fastread::number(&file).unwrap_or(0);
        if victim.exited() && (usage as f64) <= plan.released_below * size as f64 {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    // A few more samples past the point.
    std::thread::sleep(Duration::from_millis(20));
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn signed_ms(from: Instant, to: Instant) -> f64 {
    if to >= from {
        ms(to - from)
    } else {
        -ms(from - to)
    }
}

/// Release time from the samples: the first at or after `issued` whose
/// victim usage is at most the fraction of the last one before it.
fn release_of(plan: &KillPlan, samples: &[Sample], issued: Instant) -> (u64, Option<f64>) {
    let before = samples.iter().rev().find(|s| s.at < issued).map_or(0, |s| s.victim);
    let released = samples
        .iter()
        .find(|s| s.at >= issued && (s.victim as f64) <= plan.released_below * before as f64)
        .map(|s| ms(s.at - issued));
    (before, released)
}

fn sample_stats(samples: &[Sample], t: &mut Trial) {
    t.samples = samples.len();
    if let (Some(a), Some(b)) = (samples.first(), samples.last()) {
        if samples.len() > 1 {
            t.sample_interval_ms = ms(b.at - a.at) / (samples.len() - 1) as f64;
        }
    }
    t.max_sample_gap_ms = samples.windows(2).map(|w| ms(w[1].at - w[0].at)).fold(0.0, f64::max);
}

fn unloaded(plan: &KillPlan, sn: &mut SizeNode, size: u64) -> Result<Trial, String> {
    let mut victim = start_victim(plan, sn, size)?;
    let sampler = Sampler::start(sn);
    std::thread::sleep(Duration::from_millis(20));
    let pid = Pid::new(victim.pid()).ok_or("bad pid")?;
    let issued = Instant::now();
    let sent = process::kill(pid);
    wait_released(plan, sn, &mut victim, size, Duration::from_secs(60));
    let samples = sampler.finish();
    let mut t = Trial { killer: None, size, ..Trial::default() };
    if let Err(e) = sent {
        t.problem = Some(format!("kill: {e}"));
    }
    let (before, released) = release_of(plan, &samples, issued);
    t.victim_usage = before;
    t.issue_to_release_ms = released;
    if released.is_none() {
        t.problem.get_or_insert_with(|| "memory not released within 60 s".into());
    }
    sample_stats(&samples, &mut t);
    end_trial(sn, &mut [&mut victim]);
    Ok(t)
}

/// What a killer's loop saw and did.
#[derive(Debug, Default)]
struct Acted {
    /// Its loop's wake-ups, with what woke it.
    wakes: Vec<(Instant, &'static str)>,
    squeezed: Option<Instant>,
    issued: Option<Instant>,
    decision_to_issue: Option<Duration>,
    problem: Option<String>,
}

fn loaded(
    plan: &KillPlan,
    sn: &mut SizeNode,
    size: u64,
    killer: Killer,
    grower: u64,
) -> Result<Trial, String> {
    let mut victim = start_victim(plan, sn, size)?;
    let sampler = Sampler::start(sn);
    let mut grow: Option<Worker> = None;
    let mut squeeze = |sn: &mut SizeNode| -> Result<Instant, String> {
        let at = Instant::now();
        let w =
            sn.node.worker(&plan.workload, "prod-grow", &["anon".into(), grower.to_string()])?;
        let _ = set_oom_score_adj(w.pid(), -1000);
        grow = Some(w);
        Ok(at)
    };
    let acted = match killer {
        Killer::Agent => agent_loop(plan, sn, &mut squeeze),
        Killer::Threshold => threshold_loop(plan, sn, &mut squeeze),
        Killer::KernelOom => oom_loop(sn, &mut victim, &mut squeeze),
    };
    let acted = match acted {
        Ok(a) => a,
        Err(e) => {
            drop(sampler);
            let mut workers: Vec<&mut Worker> = vec![&mut victim];
            workers.extend(grow.as_mut());
            end_trial(sn, &mut workers);
            return Err(e);
        }
    };
    if acted.issued.is_some() {
        wait_released(plan, sn, &mut victim, size, Duration::from_secs(60));
    }
    let samples = sampler.finish();
    let mut t =
        Trial { killer: Some(killer), size, problem: acted.problem.clone(), ..Trial::default() };
    sample_stats(&samples, &mut t);
    let squeezed = acted.squeezed.unwrap_or_else(Instant::now);
    let base = samples.iter().rev().find(|s| s.at < squeezed);
    let (psi0, oom0) = base.map_or((0, 0), |s| (s.psi, s.oom));
    let t0 = samples.iter().find(|s| s.at >= squeezed && s.psi > psi0).map(|s| s.at);
    // What each killer reacts to: pressure, or (threshold) free memory low.
    let low = plan.threshold * sn.limit as f64;
    let signal = match killer {
        Killer::Threshold => samples
            .iter()
            .find(|s| s.at >= squeezed && (sn.limit as f64 - s.node as f64) < low)
            .map(|s| s.at),
        _ => t0,
    };
    let oom_at = samples.iter().find(|s| s.at >= squeezed && s.oom > oom0).map(|s| s.at);
    let issued = match killer {
        Killer::KernelOom => oom_at,
        _ => {
            if oom_at.is_some_and(|o| !matches!(acted.issued, Some(i) if i <= o)) {
                t.problem.get_or_insert_with(|| "the kernel OOM-killed first".into());
            }
            acted.issued
        }
    };
    let Some(issued) = issued else {
        t.problem.get_or_insert_with(|| "no kill".into());
        end_trial(sn, &mut [&mut victim]);
        return Ok(t);
    };
    let (before, released) = release_of(plan, &samples, issued);
    t.victim_usage = before;
    t.issue_to_release_ms = released;
    if released.is_none() {
        t.problem.get_or_insert_with(|| "memory not released within 60 s".into());
    }
    t.decision_to_issue_ms = acted.decision_to_issue.map(ms);
    if let Some(signal) = signal.filter(|s| *s <= issued) {
        match killer {
            Killer::KernelOom => t.pressure_to_awake_ms = Some(ms(issued - signal)),
            _ => {
                if let Some(&(w, by)) = acted.wakes.iter().find(|(w, _)| *w >= signal) {
                    if w <= issued {
                        t.pressure_to_awake_ms = Some(ms(w - signal));
                        t.woken_by = Some(by.to_string());
                    }
                }
            }
        }
    }
    match t0 {
        Some(t0) if t0 <= issued => t.pressure_to_issue_ms = Some(ms(issued - t0)),
        Some(t0) => {
            t.before_stall = true;
            t.pressure_to_issue_ms = Some(signed_ms(t0, issued));
        }
        None => t.before_stall = true,
    }
    let mut workers: Vec<&mut Worker> = vec![&mut victim];
    workers.extend(grow.as_mut());
    end_trial(sn, &mut workers);
    Ok(t)
}

/// How long each killer watches the calm node before the squeeze, and how
/// long a trial may wait for its kill.
const WARM: Duration = Duration::from_millis(350);
const GIVE_UP: Duration = Duration::from_secs(60);

/// The agent, ticking as the daemon does: woken by the system PSI trigger or
/// its sampling timer (or the policy's own wake-up), whichever comes first.
fn agent_loop(
    plan: &KillPlan,
    sn: &mut SizeNode,
    squeeze: &mut dyn FnMut(&mut SizeNode) -> Result<Instant, String>,
) -> Result<Acted, String> {
    let text = format!(
        "[node]\nroot = \"{}\"\n[agent]\nstate_db = \"\"\nsample_period = {}\n\
         [[classes]]\npattern = \"be-*\"\nclass = \"best-effort\"\n\
         [policy]\ndetector = {{ kind = \"constraint-thrashing\", tolerance = {} }}\n",
        sn.node.root.as_str(),
        plan.period.as_secs_f64(),
        plan.tolerance
    );
    let config = AgentConfig::parse(&text, "bench").map_err(|e| e.to_string())?;
    let cg = host_cgroups(&HostSupport::probe()).map_err(|e| e.to_string())?;
    let timed = Timed::new(cg);
    let entered = Rc::clone(&timed.kill_entered);
    let mut agent =
        Agent::new(&config, timed, EventLog::in_memory(100)).map_err(|e| e.to_string())?;
    let psi = Path::new(host::SYSTEM_PRESSURE);
    let trigger = PsiTrigger::new(psi, Duration::from_millis(100), Duration::from_secs(1))
        .or_else(|_| PsiTrigger::new(psi, Duration::from_millis(200), Duration::from_secs(2)))
        .ok();
    let start = Instant::now();
    let mut acted = Acted::default();
    let mut woken_by = "timer";
    let mut fired = Vec::new();
    loop {
        let woke = Instant::now();
        acted.wakes.push((woke, woken_by));
        let now = Time::from_duration(start.elapsed());
        let tick = agent.tick(now).map_err(|e| format!("agent tick: {e}"))?;
        if !tick.preempted.is_empty() {
            acted.issued = entered.get();
            let e = agent.events().recent().filter(|e| e.kind == EventKind::Preempted).last();
            acted.decision_to_issue = e
                .and_then(|e| e.detail_as::<Preempted>().ok())
                .map(|p| Duration::from_micros(p.timings.decision_to_issue_us));
            if !tick.preempted.iter().any(|(p, _)| *p == sn.victim) {
                acted.problem = Some(format!("the agent preempted {:?}", tick.preempted));
            }
            return Ok(acted);
        }
        if let Some(e) = agent.events().recent().find(|e| {
            matches!(
                e.kind,
                EventKind::PreemptFailed | EventKind::PreemptVanished | EventKind::PreemptRefused
            )
        }) {
            acted.problem = Some(format!("{}: {}", e.kind, e.detail));
            return Ok(acted);
        }
        if acted.squeezed.is_none() && start.elapsed() >= WARM {
            acted.squeezed = Some(squeeze(sn)?);
        }
        if start.elapsed() > GIVE_UP + WARM {
            acted.problem = Some("the agent did not kill within 60 s".into());
            return Ok(acted);
        }
        let until_wake =
            tick.wake_at.map_or(plan.period, |w| w.since(Time::from_duration(start.elapsed())));
        let timeout = plan.period.min(until_wake);
        woken_by = "timer";
        match &trigger {
            Some(t) => {
                PsiTrigger::wait_any(&[t], timeout, &mut fired)
                    .map_err(|e| format!("PSI wait: {e}"))?;
                if !fired.is_empty() {
                    woken_by = "psi";
                }
            }
            None => std::thread::sleep(timeout),
        }
    }
}

use std::rc::Rc;

/// Kuber's killer: every period, free = limit − usage of the node; below the
/// threshold, SIGKILL every process of the newest best-effort container.
fn threshold_loop(
    plan: &KillPlan,
    sn: &mut SizeNode,
    squeeze: &mut dyn FnMut(&mut SizeNode) -> Result<Instant, String>,
) -> Result<Acted, String> {
    let usage_file = sn.node.usage_file(None);
    let node_dir = sn.node.dir(None);
    let limit = sn.limit as f64;
    let start = Instant::now();
    let mut acted = Acted::default();
    let mut next = start;
    loop {
        let woke = Instant::now();
        acted.wakes.push((woke, "timer"));
        let usage = fastread::number(&usage_file)
            .map_err(|e| format!("cannot read the node's usage: {}", e.at(&usage_file)))?;
        let free = limit - usage as f64;
        if free < plan.threshold * limit {
            let decided = Instant::now();
            if acted.squeezed.is_none() {
                return Err(format!(
                    "the node is below {:.0}% free before the squeeze ({:.0} MiB free)",
                    plan.threshold * 100.0,
                    free / MIB as f64
                ));
            }
            let newest = newest_best_effort(&node_dir).ok_or("no best-effort container")?;
            let members = newest_members(sn, &newest)?;
            let mut issued = None;
            for pid in members {
                issued.get_or_insert_with(Instant::now);
                let _ = process::kill(pid);
            }
            acted.issued = issued;
            acted.decision_to_issue = issued.map(|i| i - decided);
            if newest.file_name() != Some(std::ffi::OsStr::new("be-victim")) {
                acted.problem = Some(format!("killed {}", newest.display()));
            }
            return Ok(acted);
        }
        if acted.squeezed.is_none() && start.elapsed() >= WARM {
            acted.squeezed = Some(squeeze(sn)?);
        }
        if start.elapsed() > GIVE_UP + WARM {
            acted.problem = Some("no kill within 60 s".into());
            return Ok(acted);
        }
        next += plan.period;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

/// The newest `be-*` container directory under `node` (by creation time).
/// The processes of the container whose directory is `dir` (under the
/// node), as Kuber's killer lists them: its `cgroup.procs`.
fn newest_members(sn: &SizeNode, dir: &Path) -> Result<Vec<Pid>, String> {
    let name = dir.file_name().and_then(|n| n.to_str()).ok_or("a container without a name")?;
    let container = sn.node.root.child(name).map_err(|e| e.to_string())?;
    match sn.node.cg.members(&container) {
        Ok(Outcome::Done(procs)) => Ok(procs.pids),
        Ok(Outcome::Vanished) => Err(format!("{}: vanished", dir.display())),
        Err(e) => Err(format!("{}: {e}", dir.display())),
    }
}

fn newest_best_effort(node: &Path) -> Option<PathBuf> {
    std::fs::read_dir(node)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("be-"))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some((m.created().or_else(|_| m.modified()).ok()?, e.path()))
        })
        .max()
        .map(|(_, p)| p)
}

/// Nobody in user space acts: the grower runs into the limit and the kernel
/// OOM-kills (the victim has the highest `oom_score_adj`).
fn oom_loop(
    sn: &mut SizeNode,
    victim: &mut Worker,
    squeeze: &mut dyn FnMut(&mut SizeNode) -> Result<Instant, String>,
) -> Result<Acted, String> {
    std::thread::sleep(WARM);
    let mut acted = Acted { squeezed: Some(squeeze(sn)?), ..Acted::default() };
    let until = Instant::now() + GIVE_UP;
    while !victim.exited() {
        if Instant::now() > until {
            acted.problem = Some("the kernel did not kill within 60 s".into());
            return Ok(acted);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Issued is read from the samples (the oom_kill counter).
    acted.issued = Some(Instant::now());
    Ok(acted)
}
