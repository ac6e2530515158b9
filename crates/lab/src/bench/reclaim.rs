//! `overbook bench reclaim`: 001's and 003's scenarios on this host's real
//! kernel, each run with the kernel alone and with overbook's reclaimer, on
//! a node cgroup made for it (and removed after).
//!
//! * `recency` (001): A reads its working set at random and keeps paging in
//!   new data (a database: a steady memory demand); B read its data once and
//!   went idle; C boots, growing at a fixed pace, and needs half of B's
//!   memory more than is free. Measured: the share of A's memory lost, and A's throughput dip.
//! * `weighted` (003): three containers of equal usage with weights 1:2:3,
//!   under pressure growing in steps (a critical container arrives each
//!   step). Measured: each container's usage after each step, and the share
//!   of the reclaimed memory each gave, repeated to show it is the same
//!   every run.
//! * `services` (003 Table 2): two readers with weights 1:2 and working sets
//!   1:2 squeezed together. Measured: their throughput ratio.
//!
//! The working sets are files in the page cache, so the kernel can reclaim
//! them without swap (the host may have none), and each worker drops its
//! file's cache first so its pages are charged to it. Every run has files
//! of its own, removed with it: on a tmpfs scratch (the VM's), pages stay
//! charged to whoever first wrote them, whatever later reads them.

use super::{BenchNode, Worker, WorkloadProgram, MIB};
use overbook_agent::agent::Agent;
use overbook_agent::config::AgentConfig;
use overbook_agent::events::details::Reclaimed;
use overbook_agent::events::EventLog;
use overbook_agent::EventKind;
use overbook_core::reclaim::water_fill;
use overbook_core::Time;
use overbook_linux::fastread;
use overbook_linux::{host_cgroups, HostSupport, NodeCgroups};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A `services` run takes about 25 s, and its throughput ratio is one
/// 10 s sample of two readers sharing the CPU: three runs give a median
/// that one slow second cannot move, for a third of five runs' time.
pub const SERVICES_RUNS_MAX: usize = 3;

/// How the benchmark runs.
#[derive(Clone, Debug)]
pub struct ReclaimPlan {
    pub workload: WorkloadProgram,
    /// Where the working-set files go (a disk, not tmpfs).
    pub scratch: PathBuf,
    /// Every size is multiplied by this (1.0: the sizes in the docs).
    pub scale: f64,
    /// Runs of the `weighted` scenario with overbook; the `services`
    /// scenario runs overbook this many times too, at most
    /// [`SERVICES_RUNS_MAX`].
    pub repeats: usize,
    pub scenarios: Vec<Scenario>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    Recency,
    Weighted,
    Services,
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [Scenario::Recency, Scenario::Weighted, Scenario::Services];

    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::Recency => "recency",
            Scenario::Weighted => "weighted",
            Scenario::Services => "services",
        }
    }
}

/// 001's scenario, one run.
#[derive(Clone, Debug, Serialize)]
pub struct RecencyRun {
    /// `kernel` (no reclaimer) or `recency`.
    pub reclaimer: String,
    pub a_before: u64,
    pub a_min: u64,
    /// Share of A's memory lost while C booted.
    pub a_lost: f64,
    pub b_before: u64,
    pub b_min: u64,
    pub b_lost: f64,
    /// A's reads per second before C, and the worst second while C booted.
    pub a_rate_before: f64,
    pub a_rate_worst: f64,
    /// A's mean reads per second from C's start to 4 s after it booted.
    pub a_rate_during: f64,
    /// `1 − worst / before`.
    pub a_dip: f64,
    /// What overbook asked the kernel to take, per container, bytes.
    pub asked: BTreeMap<String, u64>,
}

/// 003's stepwise scenario, one run.
#[derive(Clone, Debug, Serialize)]
pub struct WeightedRun {
    pub reclaimer: String,
    pub weights: [u32; 3],
    /// Usage of the three containers before the first step and after each.
    pub usage: Vec<[u64; 3]>,
    /// Share of all reclaimed memory each gave.
    pub split: [f64; 3],
    /// The split water-filling gives for the same total (what `weighted`
    /// aims at).
    pub expected_split: [f64; 3],
}

/// 003 Table 2: two services, one run.
#[derive(Clone, Debug, Serialize)]
pub struct ServicesRun {
    pub reclaimer: String,
    pub weights: [u32; 2],
    pub working_sets: [u64; 2],
    /// Reads per second of each, alone and squeezed.
    pub alone: [f64; 2],
    pub squeezed: [f64; 2],
    /// Squeezed throughput of the first over the second.
    pub ratio: f64,
    pub usage: [u64; 2],
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ReclaimReport {
    pub version: String,
    pub scale: f64,
    pub recency: Vec<RecencyRun>,
    pub weighted: Vec<WeightedRun>,
    pub services: Vec<ServicesRun>,
}

impl ReclaimReport {
    /// The median throughput ratio of one reclaimer's `services` runs (the
    /// mean of the two middle ones for an even count), or `None` when it has
    /// none.
    pub fn services_median_ratio(&self, reclaimer: &str) -> Option<f64> {
        let mut ratios: Vec<f64> =
            self.services.iter().filter(|x| x.reclaimer == reclaimer).map(|x| x.ratio).collect();
        ratios.sort_by(f64::total_cmp);
        let n = ratios.len();
        let (low, high) = (ratios.get(n.checked_sub(1)? / 2)?, ratios.get(n / 2)?);
        Some((low + high) / 2.0)
    }
}

const PERIOD: Duration = Duration::from_millis(100);

/// A node with workers in it and, optionally, the agent, driven in one
/// loop: the agent ticks every period and the caller samples.
struct Scene {
    node: BenchNode,
    agent: Option<Agent<Box<dyn NodeCgroups>>>,
    start: Instant,
    workers: BTreeMap<String, Worker>,
    files: tempfile::TempDir,
}

impl Scene {
    fn new(plan: &ReclaimPlan, name: &str, limit: u64) -> Result<Scene, String> {
        let files = tempfile::Builder::new()
            .prefix("overbook-bench-reclaim-")
            .tempdir_in(&plan.scratch)
            .map_err(|e| {
                format!("cannot make a scratch directory in {}: {e}", plan.scratch.display())
            })?;
        let node =
            BenchNode::new(&format!("overbook-bench-{name}-{}", std::process::id()), Some(limit))?;
        Ok(Scene { node, agent: None, start: Instant::now(), workers: BTreeMap::new(), files })
    }

    /// Starts the agent on the node with this reclaimer and class rules.
    fn start_agent(&mut self, reclaimer: &str, classes: &str) -> Result<(), String> {
        let text = format!(
            "[node]\nroot = \"{}\"\n[agent]\nstate_db = \"\"\nsample_period = 0.1\n{classes}\n[policy]\nreclaimer = {reclaimer}\n",
            self.node.root.as_str()
        );
        let config = AgentConfig::parse(&text, "bench reclaim").map_err(|e| e.to_string())?;
        let cg = host_cgroups(&HostSupport::probe()).map_err(|e| e.to_string())?;
        let agent =
            Agent::new(&config, cg, EventLog::in_memory(10_000)).map_err(|e| e.to_string())?;
        self.agent = Some(agent);
        Ok(())
    }

    /// A path for a working-set file of this run.
    fn file(&self, name: &str) -> String {
        self.files.path().join(name).to_string_lossy().to_string()
    }

    fn start(&mut self, w: &WorkloadProgram, name: &str, args: &[String]) -> Result<(), String> {
        let worker = self.node.worker(w, name, args)?;
        self.workers.insert(name.to_string(), worker);
        Ok(())
    }

    fn ready(&mut self, name: &str, within: Duration) -> Result<(), String> {
        let until = Instant::now() + within;
        loop {
            self.tick()?;
            let w = self.workers.get_mut(name).ok_or("no such worker")?;
            match w.ready(PERIOD) {
                Ok(()) => return Ok(()),
                Err(_) if Instant::now() < until && !w.exited() => {}
                Err(e) => return Err(format!("{name}: {e}")),
            }
        }
    }

    fn tick(&mut self) -> Result<(), String> {
        if let Some(agent) = &mut self.agent {
            let now = Time::from_duration(self.start.elapsed());
            agent.tick(now).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Drives the scene for `span`, calling `sample` every period.
    fn run_for(
        &mut self,
        span: Duration,
        mut sample: impl FnMut(&mut Scene),
    ) -> Result<(), String> {
        let until = Instant::now() + span;
        let mut next = Instant::now();
        while Instant::now() < until {
            self.tick()?;
            sample(self);
            next += PERIOD;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        Ok(())
    }

    fn usage(&self, name: &str) -> u64 {
        self.node
            .root
            .child(name)
            .ok()
            .and_then(|p| fastread::number(&self.node.usage_file(Some(&p))).ok())
            .unwrap_or(0)
    }

    fn rates(&mut self, name: &str) -> Vec<f64> {
        self.workers.get_mut(name).map(Worker::drain_rates).unwrap_or_default()
    }

    /// Bytes the agent asked the kernel to reclaim, per container name.
    fn asked(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        if let Some(agent) = &self.agent {
            for e in agent.events().after(0).filter(|e| e.kind == EventKind::Reclaimed) {
                let name = e.container.as_deref().and_then(|c| c.rsplit('/').next()).unwrap_or("?");
                *out.entry(name.to_string()).or_insert(0) +=
                    e.detail_as::<Reclaimed>().map_or(0, |r| r.asked);
            }
        }
        out
    }
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// A size of `m` MiB at the plan's scale (4 MiB at least).
fn mib(plan: &ReclaimPlan, m: u64) -> u64 {
    per_s(plan, m).max(4 * MIB)
}

/// A rate of `m` MiB/s at the plan's scale.
fn per_s(plan: &ReclaimPlan, m: u64) -> u64 {
    overbook_core::convert::to_u64(m as f64 * plan.scale * MIB as f64)
}

fn size_arg(bytes: u64) -> String {
    bytes.to_string()
}

/// Runs what the plan asks, telling `say` what happens.
pub fn run(plan: &ReclaimPlan, mut say: impl FnMut(&str)) -> Result<ReclaimReport, String> {
    let mut report = ReclaimReport {
        version: env!("CARGO_PKG_VERSION").to_string(),
        scale: plan.scale,
        ..ReclaimReport::default()
    };
    for s in &plan.scenarios {
        match s {
            Scenario::Recency => {
                for reclaimer in [None, Some("recency")] {
                    let r = recency_run(plan, reclaimer, &mut say)?;
                    say(&format!(
                        "  {:>8}: A lost {:.1}% of its memory ({} → {} MiB), B lost {:.1}%, A's throughput dipped {:.1}%; asked of {:?}",
                        r.reclaimer,
                        100.0 * r.a_lost,
                        r.a_before / MIB,
                        r.a_min / MIB,
                        100.0 * r.b_lost,
                        100.0 * r.a_dip,
                        r.asked.iter().map(|(k, v)| format!("{k} {} MiB", v / MIB)).collect::<Vec<_>>()
                    ));
                    report.recency.push(r);
                }
            }
            Scenario::Weighted => {
                let runs = std::iter::once(None)
                    .chain(std::iter::repeat_n(Some("weighted"), plan.repeats));
                for (i, reclaimer) in runs.enumerate() {
                    let r = weighted_run(plan, reclaimer, &mut say)?;
                    say(&format!(
                        "  {:>8} #{i}: reclaimed split {:.1}% / {:.1}% / {:.1}% (water-filling: {:.1}% / {:.1}% / {:.1}%)",
                        r.reclaimer,
                        100.0 * r.split[0],
                        100.0 * r.split[1],
                        100.0 * r.split[2],
                        100.0 * r.expected_split[0],
                        100.0 * r.expected_split[1],
                        100.0 * r.expected_split[2],
                    ));
                    report.weighted.push(r);
                }
            }
            Scenario::Services => {
                let runs = std::iter::once(None).chain(std::iter::repeat_n(
                    Some("weighted"),
                    plan.repeats.clamp(1, SERVICES_RUNS_MAX),
                ));
                for reclaimer in runs {
                    let r = services_run(plan, reclaimer, &mut say)?;
                    say(&format!(
                        "  {:>8}: throughput {:.0} / {:.0} reads/s squeezed, ratio {:.2} (alone {:.0} / {:.0})",
                        r.reclaimer, r.squeezed[0], r.squeezed[1], r.ratio, r.alone[0], r.alone[1]
                    ));
                    report.services.push(r);
                }
                if let Some(m) = report.services_median_ratio("weighted") {
                    say(&format!("  weighted: median ratio {m:.2}"));
                }
            }
        }
    }
    Ok(report)
}

fn recency_run(
    plan: &ReclaimPlan,
    reclaimer: Option<&str>,
    say: &mut impl FnMut(&str),
) -> Result<RecencyRun, String> {
    let name = reclaimer.unwrap_or("kernel");
    say(&format!("recency (001): A active, B idle, C boots; {name}"));
    let (a_size, b_size, c_size) = (mib(plan, 96), mib(plan, 128), mib(plan, 128));
    // Roomy until C comes; then the limit is set so that C needs half of
    // B's memory back, whatever A grew to by then.
    let mut scene = Scene::new(plan, "recency", mib(plan, 640))?;
    let (a_file, b_file) = (scene.file("a"), scene.file("b"));
    let w = &plan.workload;
    let fresh = per_s(plan, 1).to_string();
    scene.start(
        w,
        "a-active",
        &["file".into(), a_file, size_arg(a_size), "--fresh".into(), fresh],
    )?;
    scene.ready("a-active", Duration::from_secs(300))?;
    scene.start(w, "b-idle", &["file".into(), b_file, size_arg(b_size), "--idle".into()])?;
    scene.ready("b-idle", Duration::from_secs(300))?;
    if let Some(r) = reclaimer {
        scene.start_agent(&format!("{{ kind = \"{r}\", headroom = 0.1, interval = 0.2 }}"), "")?;
    }
    // Settle: the agent sees A's demand go on and B's stop.
    scene.run_for(Duration::from_secs(3), |_| {})?;
    let _ = scene.rates("a-active");
    scene.run_for(Duration::from_secs(3), |_| {})?;
    let a_rate_before = mean(&scene.rates("a-active"));
    let (a_before, b_before) = (scene.usage("a-active"), scene.usage("b-idle"));
    let node_usage = {
        let file = scene.node.usage_file(None);
        fastread::number(&file)
            .map_err(|e| format!("cannot read the node's usage: {}", e.at(&file)))?
    };
    scene.node.set_limit(node_usage + c_size - b_before / 2)?;
    let ramp = per_s(plan, 32).to_string();
    scene.start(
        w,
        "c-boots",
        &["anon".into(), size_arg(c_size), "--ramp".into(), ramp, "--idle".into()],
    )?;
    let (mut a_min, mut b_min) = (a_before, b_before);
    let mut track = |s: &mut Scene| {
        a_min = a_min.min(s.usage("a-active"));
        b_min = b_min.min(s.usage("b-idle"));
    };
    let boot = Instant::now();
    while scene.workers.get_mut("c-boots").is_some_and(|c| !c.exited()) {
        scene.run_for(PERIOD, &mut track)?;
        let c = scene.workers.get_mut("c-boots").ok_or("no c")?;
        if c.ready(Duration::ZERO).is_ok() {
            break;
        }
        if boot.elapsed() > Duration::from_secs(300) {
            return Err("C did not boot within 300 s".into());
        }
    }
    scene.run_for(Duration::from_secs(4), &mut track)?;
    let rates = scene.rates("a-active");
    let a_rate_worst = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let a_rate_worst = if a_rate_worst.is_finite() { a_rate_worst } else { 0.0 };
    let lost = |before: u64, min: u64| before.saturating_sub(min) as f64 / before.max(1) as f64;
    Ok(RecencyRun {
        reclaimer: name.to_string(),
        a_before,
        a_min,
        a_lost: lost(a_before, a_min),
        b_before,
        b_min,
        b_lost: lost(b_before, b_min),
        a_rate_before,
        a_rate_worst,
        a_rate_during: mean(&rates),
        a_dip: if a_rate_before > 0.0 {
            (1.0 - a_rate_worst / a_rate_before).max(0.0)
        } else {
            0.0
        },
        asked: scene.asked(),
    })
}

const WEIGHTS: [u32; 3] = [1, 2, 3];
const STEPS: usize = 6;

fn weighted_run(
    plan: &ReclaimPlan,
    reclaimer: Option<&str>,
    say: &mut impl FnMut(&str),
) -> Result<WeightedRun, String> {
    let name = reclaimer.unwrap_or("kernel");
    say(&format!("weighted (003): weights 1:2:3, equal usage, {STEPS} steps of pressure; {name}"));
    let mut scene = Scene::new(plan, "weighted", mib(plan, 400))?;
    let names = ["w1", "w2", "w3"];
    for n in names {
        let path = scene.file(n);
        scene.start(
            &plan.workload,
            n,
            &["file".into(), path, size_arg(mib(plan, 96)), "--idle".into()],
        )?;
        scene.ready(n, Duration::from_secs(300))?;
    }
    if let Some(r) = reclaimer {
        let classes: String = names
            .iter()
            .zip(WEIGHTS)
            .map(|(n, w)| {
                format!("[[classes]]\npattern = \"{n}\"\nclass = \"production\"\nweight = {w}\n")
            })
            .chain(std::iter::once(
                "[[classes]]\npattern = \"p*\"\nclass = \"critical\"\n".to_string(),
            ))
            .collect();
        scene.start_agent(
            &format!("{{ kind = \"{r}\", headroom = 0.15, interval = 0.2 }}"),
            &classes,
        )?;
    }
    scene.run_for(Duration::from_secs(1), |_| {})?;
    let read = |s: &Scene| -> [u64; 3] { [s.usage("w1"), s.usage("w2"), s.usage("w3")] };
    let mut usage = vec![read(&scene)];
    for step in 1..=STEPS {
        let p = format!("p{step}");
        let args = [
            "anon".into(),
            size_arg(mib(plan, 32)),
            "--ramp".into(),
            size_arg(per_s(plan, 64)),
            "--idle".into(),
        ];
        scene.start(&plan.workload, &p, &args)?;
        scene.ready(&p, Duration::from_secs(300))?;
        scene.run_for(Duration::from_millis(1500), |_| {})?;
        usage.push(read(&scene));
    }
    let (first, last) = (usage[0], usage[usage.len() - 1]);
    let taken: Vec<u64> = (0..3).map(|i| first[i].saturating_sub(last[i])).collect();
    let total: u64 = taken.iter().sum();
    let share = |v: &[u64]| -> [f64; 3] {
        let t: u64 = v.iter().sum();
        let f = |i: usize| if t == 0 { 0.0 } else { v[i] as f64 / t as f64 };
        [f(0), f(1), f(2)]
    };
    let pairs: Vec<(u64, u32)> = first.iter().copied().zip(WEIGHTS).collect();
    let mut expected = Vec::new();
    water_fill(&pairs, total, &mut expected);
    Ok(WeightedRun {
        reclaimer: name.to_string(),
        weights: WEIGHTS,
        usage,
        split: share(&taken),
        expected_split: share(&expected),
    })
}

fn services_run(
    plan: &ReclaimPlan,
    reclaimer: Option<&str>,
    say: &mut impl FnMut(&str),
) -> Result<ServicesRun, String> {
    let name = reclaimer.unwrap_or("kernel");
    say(&format!("services (003 Table 2): weights 1:2, working sets 1:2, squeezed; {name}"));
    let sets = [mib(plan, 64), mib(plan, 128)];
    // Room for three quarters of both working sets.
    let mut scene = Scene::new(plan, "services", (sets[0] + sets[1]) * 3 / 4 + mib(plan, 16))?;
    let names = ["s1", "s2"];
    let mut alone = [0.0; 2];
    for (i, n) in names.iter().enumerate() {
        let path = scene.file(n);
        scene.start(&plan.workload, n, &["file".into(), path, size_arg(sets[i])])?;
        scene.ready(n, Duration::from_secs(300))?;
        if i == 0 {
            let _ = scene.rates(n);
            scene.run_for(Duration::from_secs(3), |_| {})?;
            alone[0] = mean(&scene.rates(n));
        }
    }
    if let Some(r) = reclaimer {
        let classes = "[[classes]]\npattern = \"s1\"\nclass = \"production\"\nweight = 1\n\
                       [[classes]]\npattern = \"s2\"\nclass = \"production\"\nweight = 2\n";
        scene.start_agent(
            &format!("{{ kind = \"{r}\", headroom = 0.2, interval = 0.05 }}"),
            classes,
        )?;
    }
    scene.run_for(Duration::from_secs(4), |_| {})?;
    let _ = (scene.rates("s1"), scene.rates("s2"));
    let mut usage = [0u64; 2];
    let mut n = 0u64;
    scene.run_for(Duration::from_secs(10), |s| {
        usage[0] += s.usage("s1");
        usage[1] += s.usage("s2");
        n += 1;
    })?;
    let squeezed = [mean(&scene.rates("s1")), mean(&scene.rates("s2"))];
    // s2 alone for its own reference, after s1 is gone.
    scene.node.drop_container(&scene.node.root.child("s1").map_err(|e| e.to_string())?);
    scene.run_for(Duration::from_secs(2), |_| {})?;
    let _ = scene.rates("s2");
    scene.run_for(Duration::from_secs(3), |_| {})?;
    alone[1] = mean(&scene.rates("s2"));
    let n = n.max(1);
    Ok(ServicesRun {
        reclaimer: name.to_string(),
        weights: [1, 2],
        working_sets: sets,
        alone,
        squeezed,
        ratio: if squeezed[1] > 0.0 { squeezed[0] / squeezed[1] } else { 0.0 },
        usage: [usage[0] / n, usage[1] / n],
    })
}

/// The report as the tables the README shows.
pub fn table(r: &ReclaimReport) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    if !r.recency.is_empty() {
        let _ = writeln!(t, "\n001: A active, B idle, C boots (scale {})", r.scale);
        let _ = writeln!(t, "| reclaimer | A lost | B lost | A's throughput: mean during C's boot, worst second | asked of |");
        let _ = writeln!(t, "|---|---|---|---|---|");
        for x in &r.recency {
            let asked: Vec<String> =
                x.asked.iter().map(|(k, v)| format!("{k} {} MiB", v / MIB)).collect();
            let asked = if asked.is_empty() { "-".to_string() } else { asked.join(", ") };
            let _ = writeln!(
                t,
                "| {} | {} ({} → {} MiB) | {} | {}, {} of before | {asked} |",
                x.reclaimer,
                pct(x.a_lost),
                x.a_before / MIB,
                x.a_min / MIB,
                pct(x.b_lost),
                pct(x.a_rate_during / x.a_rate_before.max(1.0)),
                pct(x.a_rate_worst / x.a_rate_before.max(1.0)),
            );
        }
    }
    if !r.weighted.is_empty() {
        let _ = writeln!(
            t,
            "\n003: weights 1:2:3, equal usage, pressure in steps (MiB after each step)"
        );
        let _ = writeln!(t, "| run | usage per step | reclaimed split | water-filling |");
        let _ = writeln!(t, "|---|---|---|---|");
        for (i, x) in r.weighted.iter().enumerate() {
            let steps: Vec<String> = x
                .usage
                .iter()
                .map(|u| format!("{}/{}/{}", u[0] / MIB, u[1] / MIB, u[2] / MIB))
                .collect();
            let split = |s: &[f64; 3]| format!("{} / {} / {}", pct(s[0]), pct(s[1]), pct(s[2]));
            let _ = writeln!(
                t,
                "| {} #{i} | {} | {} | {} |",
                x.reclaimer,
                steps.join(" → "),
                split(&x.split),
                split(&x.expected_split)
            );
        }
    }
    if !r.services.is_empty() {
        let _ = writeln!(t, "\n003 Table 2: two services, weights 1:2, working sets 1:2, squeezed");
        let _ = writeln!(t, "| reclaimer | s1 reads/s | s2 reads/s | ratio s1/s2 | usage MiB |");
        let _ = writeln!(t, "|---|---|---|---|---|");
        for x in &r.services {
            let _ = writeln!(
                t,
                "| {} | {:.0} (alone {:.0}) | {:.0} (alone {:.0}) | {:.2} | {}/{} |",
                x.reclaimer,
                x.squeezed[0],
                x.alone[0],
                x.squeezed[1],
                x.alone[1],
                x.ratio,
                x.usage[0] / MIB,
                x.usage[1] / MIB
            );
        }
        let weighted = r.services.iter().filter(|x| x.reclaimer == "weighted").count();
        if let (true, Some(m)) = (weighted > 1, r.services_median_ratio("weighted")) {
            let _ = writeln!(t, "weighted, median of {weighted} runs: ratio {m:.2}");
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn services(reclaimer: &str, ratio: f64) -> ServicesRun {
        ServicesRun {
            reclaimer: reclaimer.into(),
            weights: [1, 2],
            working_sets: [64 * MIB, 128 * MIB],
            alone: [1.0, 1.0],
            squeezed: [ratio, 1.0],
            ratio,
            usage: [42 * MIB, 85 * MIB],
        }
    }

    #[test]
    fn the_services_median_is_one_reclaimer_s_middle_run() {
        let mut r = ReclaimReport::default();
        assert_eq!(r.services_median_ratio("weighted"), None);
        r.services = vec![services("kernel", 15.0), services("weighted", 1.25)];
        assert_eq!(r.services_median_ratio("weighted"), Some(1.25));
        r.services.push(services("weighted", 0.98));
        assert_eq!(r.services_median_ratio("weighted"), Some((0.98 + 1.25) / 2.0));
        r.services.push(services("weighted", 1.04));
        assert_eq!(r.services_median_ratio("weighted"), Some(1.04));
        assert_eq!(r.services_median_ratio("kernel"), Some(15.0));
        assert!(table(&r).contains("weighted, median of 3 runs: ratio 1.04"), "{}", table(&r));
    }
}
