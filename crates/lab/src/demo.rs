//! `overbook demo`: the agent on a real squeeze, in three phases, on a small
//! node cgroup made for it (and removed after):
//!
//! 1. production alone: a reader whose working set is a file in the page cache;
//! 2. squeezed: best-effort hogs take anonymous memory, the kernel evicts
//!    production's file pages and it refaults them, with no one acting;
//! 3. the same squeeze with the agent: it sees the thrashing, waits out the
//!    tolerance window, and preempts one best-effort container.
//!
//! Production's own throughput (page reads per second) is the measure.

use crate::bench::{BenchNode, Worker, WorkloadProgram};
use overbook_agent::agent::Agent;
use overbook_agent::config::AgentConfig;
use overbook_agent::events::EventLog;
use overbook_agent::EventKind;
use overbook_core::Time;
use overbook_linux::swap::{machine_has_swap, SwapFile};
use overbook_linux::{host_cgroups, ContainerPath, HostSupport};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// The demo's sizes and pace.
#[derive(Clone, Debug)]
pub struct DemoPlan {
    /// The program that runs workloads: called as `PROGRAM [PREFIX...] anon SIZE`
    /// and `PROGRAM [PREFIX...] file PATH SIZE`.
    pub workload: PathBuf,
    pub workload_prefix: Vec<String>,
    pub node: u64,
    pub production_working_set: u64,
    pub hogs: Vec<u64>,
    /// How long each phase is measured.
    pub phase: Duration,
    /// Where production's file lives (a disk, not tmpfs).
    pub scratch: PathBuf,
    /// A swap file of this size is added for the demo when the machine has
    /// no swap (and removed after), so best-effort memory can be pushed out
    /// as on a real node.
    pub swap: Option<u64>,
}

/// Production's throughput over one phase: the mean of its per-second
/// rates, and how far they ranged (how sure the mean is).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spread {
    pub mean: f64,
    pub lo: f64,
    pub hi: f64,
    /// How many per-second rates.
    pub seconds: usize,
}

impl Spread {
    pub fn of(rates: &[f64]) -> Spread {
        Spread {
            mean: mean(rates),
            lo: rates.iter().copied().fold(f64::INFINITY, f64::min).min(f64::MAX),
            hi: rates.iter().copied().fold(0.0, f64::max),
            seconds: rates.len(),
        }
    }
}

/// Production's throughput in each phase.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoSummary {
    pub alone: Spread,
    /// Beside the one hog that fits: what is left after one preemption.
    pub beside_one: Spread,
    pub squeezed: Spread,
    pub with_agent: Spread,
    /// Throughput in the with-agent phase after the preemption.
    pub after_preemption: Option<Spread>,
    pub preempted: Vec<String>,
    /// Swap the demo added, bytes (none when the machine had some, or it
    /// could not be added: the reason is in `swap_note`).
    pub swap_added: Option<u64>,
    pub swap_note: Option<String>,
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Runs the three phases, telling `say` what happens as it goes.
pub fn run(plan: &DemoPlan, mut say: impl FnMut(&str)) -> Result<DemoSummary, String> {
    let probe = HostSupport::probe();
    let scratch = tempfile_dir(&plan.scratch)?;
    // Dropped last (declared first): swap goes off after the node is gone.
    let (swap, swap_note) = match plan.swap {
        Some(size) if !machine_has_swap().unwrap_or(false) => {
            match SwapFile::add(scratch.path(), size) {
                Ok(s) => (Some((s, size)), None),
                Err(e) => (None, Some(format!("no swap added ({e}); the demo runs without swap"))),
            }
        }
        Some(_) => (None, Some("the machine has swap of its own; none added".to_string())),
        None => (None, None),
    };
    let mut node =
        BenchNode::new(&format!("overbook-demo-{}", std::process::id()), Some(plan.node))
            .map_err(|e| format!("cannot make the demo node: {e}"))?;
    let program =
        WorkloadProgram { program: plan.workload.clone(), prefix: plan.workload_prefix.clone() };
    let launch = |node: &mut BenchNode,
                  name: &str,
                  args: &[String]|
     -> Result<(ContainerPath, Worker), String> {
        let mut w = node.worker(&program, name, args)?;
        w.ready(Duration::from_secs(120))?;
        Ok((node.root.child(name).map_err(|e| e.to_string())?, w))
    };
    let stop = |node: &mut BenchNode, hogs: &mut Vec<(ContainerPath, Worker)>| {
        for (path, mut w) in hogs.drain(..) {
            node.drop_container(&path);
            let _ = w.child.wait();
        }
    };
    match (&swap, &swap_note) {
        (Some((_, size)), _) => say(&format!("added {} MiB of swap for the demo", size / MIB)),
        (None, Some(note)) => say(note),
        (None, None) => {}
    }
    let file = scratch.path().join("production-working-set");
    let file_arg = file.to_string_lossy().to_string();
    let prod_args = vec!["file".to_string(), file_arg, format!("{}", plan.production_working_set)];

    say(&format!(
        "node {} with {} MiB; production reads a {} MiB file at random; best-effort hogs: {:?} MiB",
        node.root,
        plan.node / MIB,
        plan.production_working_set / MIB,
        plan.hogs.iter().map(|h| h / MIB).collect::<Vec<_>>()
    ));
    let (_, mut prod) = launch(&mut node, "prod-reader", &prod_args)?;
    say("phase 1/4: production alone");
    let alone = measure(&mut prod, plan.phase, &mut say);

    // What production can do beside the best-effort work that fits: the
    // most the agent can give back after preempting the rest (the hogs
    // take CPU and memory bandwidth too).
    say("phase 2/4: production beside one best-effort hog that fits");
    let fits = *plan.hogs.first().ok_or("the demo needs a hog")?;
    let mut hogs = vec![launch(&mut node, "be-1", &["anon".into(), fits.to_string()])?];
    let beside_one = measure(&mut prod, plan.phase, &mut say);
    stop(&mut node, &mut hogs);

    say("phase 3/4: best-effort hogs squeeze the node, nobody acts");
    for (i, size) in plan.hogs.iter().enumerate() {
        hogs.push(launch(&mut node, &format!("be-{}", i + 1), &["anon".into(), size.to_string()])?);
    }
    let squeezed = measure(&mut prod, plan.phase, &mut say);
    stop(&mut node, &mut hogs);

    say("phase 4/4: the same squeeze, with the overbook agent");
    for (i, size) in plan.hogs.iter().enumerate() {
        hogs.push(launch(&mut node, &format!("be-{}", i + 1), &["anon".into(), size.to_string()])?);
    }
    let config = AgentConfig::parse(
        &format!(
            "[node]\nroot = \"{}\"\n[agent]\nstate_db = \"\"\n[[classes]]\npattern = \"be-*\"\nclass = \"best-effort\"\n",
            node.root.as_str()
        ),
        "demo",
    )
    .map_err(|e| e.to_string())?;
    let agent_cg = host_cgroups(&probe).map_err(|e| e.to_string())?;
    let mut agent =
        Agent::new(&config, agent_cg, EventLog::in_memory(1000)).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let mut rates = Vec::new();
    let mut after = Vec::new();
    let mut preempted = Vec::new();
    let mut next_report = Instant::now();
    let mut seen = 0;
    let mut last_line = String::new();
    while start.elapsed() < plan.phase * 2 {
        let now = Time::from_duration(start.elapsed());
        let tick = agent.tick(now).map_err(|e| e.to_string())?;
        for (path, how) in &tick.preempted {
            say(&format!(
                "  agent: preempted {path} ({}) at {:.1} s",
                how.as_str(),
                now.as_secs_f64()
            ));
            preempted.push(path.to_string());
        }
        for e in agent.events().after(seen) {
            if e.kind == EventKind::Preempted {
                let ev = &e.detail["evidence"];
                say(&format!(
                    "  agent: evidence: {} lasted {:.1} s: {}",
                    ev["detector"], ev["lasted_s"], ev["reason"]
                ));
            }
            seen = e.seq;
        }
        let r = prod.drain_rates();
        if preempted.is_empty() {
            rates.extend(&r);
        } else {
            after.extend(&r);
        }
        if Instant::now() >= next_report {
            next_report += Duration::from_secs(1);
            let s = agent.status();
            let line: Vec<String> = s
                .containers
                .iter()
                .filter(|c| c.processes > 0)
                .map(|c| {
                    format!("{} {} MiB {:.0} refaults/s", c.name, c.usage / MIB, c.refaults_per_s)
                })
                .collect();
            // A calm node's containers are read every few seconds: a line
            // is said only when there is a new reading to say.
            let line = line.join(" | ");
            if line != last_line {
                say(&format!("  t={:>4.1}s  {line}", start.elapsed().as_secs_f64()));
                last_line = line;
            }
        }
        std::thread::sleep(config.sample_period);
    }
    let all: Vec<f64> = rates.iter().chain(after.iter()).copied().collect();
    Ok(DemoSummary {
        alone,
        beside_one,
        squeezed,
        with_agent: Spread::of(&all),
        after_preemption: (!after.is_empty()).then(|| Spread::of(&after)),
        preempted,
        swap_added: swap.as_ref().map(|(_, size)| *size),
        swap_note,
    })
}

fn tempfile_dir(base: &Path) -> Result<tempfile::TempDir, String> {
    tempfile::Builder::new()
        .prefix("overbook-demo-")
        .tempdir_in(base)
        .map_err(|e| format!("cannot make a scratch directory in {}: {e}", base.display()))
}

/// Production's rates over `span`, printing each second's.
fn measure(prod: &mut Worker, span: Duration, say: &mut impl FnMut(&str)) -> Spread {
    let _ = prod.drain_rates();
    let until = Instant::now() + span;
    let mut rates = Vec::new();
    while let Some(r) = prod.rate_within(until.saturating_duration_since(Instant::now())) {
        say(&format!("  production: {r:>10.0} reads/s"));
        rates.push(r);
    }
    Spread::of(&rates)
}
