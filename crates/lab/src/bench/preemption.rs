//! `overbook bench preemption`: best-effort tasks with in-memory progress
//! under repeated production bursts, on a node cgroup made for it, once per
//! preemptor (004 §3.3.2's comparison, on real containers): `kill` (work
//! lost, restarted), `checkpoint` (every victim dumped with CRIU, restored
//! when memory is back) and `adaptive` (004 Algorithm 1, on the store's
//! bandwidths measured at start).
//!
//! The same seeded task list and burst schedule run under each preemptor:
//! best-effort hash chains ([`crate::chain`]) of mixed sizes and lengths,
//! admitted by the agent's launcher; production bursts, each a chain big
//! enough that the node must take memory back from best-effort work (the
//! `threshold` detector: below 10% free; the launcher keeps 15% free, so it
//! never fills the node into the detector's range by itself) and holding
//! it for seconds. Measured per preemptor: seconds
//! of work lost (the run time of incarnations a kill discarded), best-effort
//! completion times, production's burst time against a burst alone on the
//! same node in the same run, and the counts of kills, dumps and restores.
//! Every best-effort task's answer is checked against an uninterrupted
//! run's: a checkpoint that lost work would show.

use super::{BenchNode, WorkloadProgram, MIB};
use crate::chain::Chain;
use overbook_agent::agent::Agent;
use overbook_agent::config::AgentConfig;
use overbook_agent::events::details::{Finished, Preempted, Resumed};
use overbook_agent::events::{Event, EventKind, EventLog};
use overbook_agent::tasks::RunRequest;
use overbook_core::{Class, Time};
use overbook_linux::{host_cgroups, HostSupport, NodeCgroups};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How the benchmark runs.
#[derive(Clone, Debug)]
pub struct PreemptionPlan {
    pub workload: WorkloadProgram,
    /// Where a directory for task logs and images is made (and removed).
    pub scratch: PathBuf,
    /// Every size is multiplied by this.
    pub scale: f64,
    pub seed: u64,
    pub tasks: usize,
    pub bursts: usize,
    pub preemptors: Vec<String>,
}

/// One best-effort task of the list.
#[derive(Clone, Debug, Serialize)]
pub struct BeTask {
    pub name: String,
    pub size: u64,
    pub steps: u32,
}

/// What one preemptor did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PreemptorResult {
    pub preemptor: String,
    pub work_lost_s: f64,
    pub be_completed: usize,
    pub be_mean_completion_s: f64,
    pub be_makespan_s: f64,
    pub prod_mean_burst_s: f64,
    /// Mean burst time over the burst alone.
    pub prod_slowdown: f64,
    pub kills: usize,
    pub checkpoints: usize,
    pub restores: usize,
    pub restore_failures: usize,
    pub dump_s: f64,
    pub restore_s: f64,
    /// Best-effort tasks whose answer differs from an uninterrupted run's.
    pub wrong_answers: Vec<String>,
    /// For each of them, what its log ended with and what the agent did
    /// to it, in order: the evidence to find where the work went wrong.
    pub wrong_evidence: Vec<String>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct PreemptionReport {
    pub seed: u64,
    pub scale: f64,
    pub node_limit: u64,
    pub tasks: Vec<BeTask>,
    /// Seconds between one burst's end and the next one's start.
    pub burst_gap_s: f64,
    pub prod_alone_s: f64,
    pub results: Vec<PreemptorResult>,
}

const PACE: &str = "0.05";
const BURST_STEPS: u32 = 30;
/// Production holds its memory this long per step: a burst lasts seconds.
const BURST_PACE: &str = "0.1";

fn mib(x: f64, scale: f64) -> u64 {
    overbook_core::convert::to_u64((x * scale).max(4.0)) * MIB
}

/// The seeded best-effort list: sizes 24..64 MiB, 120..300 steps.
pub fn task_list(seed: u64, n: usize, scale: f64) -> Vec<BeTask> {
    let mut rng = crate::workload::XorShift(seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut next = move || rng.next();
    (0..n)
        .map(|i| BeTask {
            name: format!("be-{i}"),
            size: mib(24.0 + (next() % 5) as f64 * 10.0, scale),
            steps: 120 + (next() % 7) as u32 * 30,
        })
        .collect()
}

fn config(root: &str, preemptor: &str, dir: &Path) -> Result<AgentConfig, String> {
    let text = format!(
        "[node]\nroot = \"{root}\"\n[agent]\nstate_db = \"\"\nsample_period = 0.1\n\
         task_log_dir = \"{}\"\n\
         [[classes]]\npattern = \"be-*\"\nclass = \"best-effort\"\n\
         [[classes]]\npattern = \"prod-*\"\nclass = \"production\"\n\
         [policy.detector]\nkind = \"threshold\"\nfraction = 0.1\n\
         [policy.launcher]\nheadroom = 0.15\n\
         [policy.preemptor]\nkind = \"{preemptor}\"\n\
         [checkpoint]\nimages_dir = \"{}\"\npre_dump_interval = 0\ntimeout = 120\n",
        dir.join("tasks").display(),
        dir.join("images").display(),
    );
    AgentConfig::parse(&text, "bench preemption").map_err(|e| e.to_string())
}

fn chain_request(
    plan: &PreemptionPlan,
    name: &str,
    class: Class,
    size: u64,
    steps: u32,
    pace: &str,
) -> RunRequest {
    let mut command = vec![plan.workload.program.display().to_string()];
    command.extend(plan.workload.prefix.iter().cloned());
    command.extend(
        ["chain", &format!("{}", size), &steps.to_string(), "--pace", pace]
            .iter()
            .map(|s| s.to_string()),
    );
    RunRequest {
        name: name.into(),
        class,
        mem_peak: Some(size + 8 * MIB),
        job: None,
        weight: None,
        command,
        cwd: None,
    }
}

fn named(events: &[Event], kind: EventKind) -> impl Iterator<Item = &Event> + '_ {
    events.iter().filter(move |e| e.kind == kind)
}

fn task_of(e: &Event) -> &str {
    e.container.as_deref().and_then(|c| c.rsplit('/').next()).unwrap_or("")
}

/// Runs the production burst alone on a fresh node: its time.
fn burst_alone(
    plan: &PreemptionPlan,
    limit: u64,
    say: &mut dyn FnMut(&str),
) -> Result<f64, String> {
    let events = run_scene(plan, limit, "kill", &[], 1, Duration::ZERO, say)?.0;
    let runtime = named(&events, EventKind::Finished)
        .find(|e| task_of(e).starts_with("prod-"))
        .and_then(|e| e.detail_as::<Finished>().ok())
        .map(|f| f.runtime_s);
    runtime.ok_or_else(|| "the production burst did not finish alone".to_string())
}

/// One preemptor's run: every event of the agent, and the task logs' dir.
#[allow(clippy::too_many_arguments)]
fn run_scene(
    plan: &PreemptionPlan,
    limit: u64,
    preemptor: &str,
    tasks: &[BeTask],
    bursts: usize,
    burst_gap: Duration,
    say: &mut dyn FnMut(&str),
) -> Result<(Vec<Event>, PathBuf), String> {
    let name = format!("overbook-bench-preempt-{}-{preemptor}", std::process::id());
    let node = BenchNode::new(&name, Some(limit))?;
    let dir = plan.scratch.join(format!("{preemptor}-{}", tasks.len()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let cfg = config(node.root.as_str(), preemptor, &dir)?;
    let cg: Box<dyn NodeCgroups> =
        host_cgroups(&HostSupport::probe()).map_err(|e| e.to_string())?;
    let mut agent =
        Agent::new(&cfg, cg, EventLog::in_memory(100_000)).map_err(|e| e.to_string())?;
    agent.note_checkpoint_support(Time::ZERO);
    let start = Instant::now();
    let now = || Time::from_duration(start.elapsed());
    agent.tick(now()).map_err(|e| e.to_string())?;
    for t in tasks {
        let req = chain_request(plan, &t.name, Class::BestEffort, t.size, t.steps, PACE);
        agent.submit(now(), req).map_err(|e| format!("{}: {e}", t.name))?;
    }
    let burst_size = mib(192.0, plan.scale);
    let mut started_bursts = 0;
    // A burst starts `burst_gap` after the last one ended (the first after
    // one gap): production's own demand never exceeds the node, whatever
    // a burst's duration on this machine.
    let mut next_burst = burst_gap;
    let deadline = start + Duration::from_secs(600);
    loop {
        let elapsed = start.elapsed();
        let events: Vec<Event> = agent.events().recent().cloned().collect();
        let prod_done =
            named(&events, EventKind::Finished).filter(|e| task_of(e).starts_with("prod-")).count();
        let burst_on = prod_done < started_bursts;
        if burst_on {
            next_burst = elapsed + burst_gap;
        }
        if started_bursts < bursts && !burst_on && elapsed >= next_burst {
            let name = format!("prod-{started_bursts}");
            let req =
                chain_request(plan, &name, Class::Production, burst_size, BURST_STEPS, BURST_PACE);
            agent.submit(now(), req).map_err(|e| format!("{name}: {e}"))?;
            started_bursts += 1;
            say(&format!(
                "{preemptor}: burst {started_bursts}/{bursts} at {:.1} s",
                elapsed.as_secs_f64()
            ));
        }
        agent.tick(now()).map_err(|e| e.to_string())?;
        let finished = named(&events, EventKind::Finished).count();
        if started_bursts == bursts && finished >= tasks.len() + bursts {
            break;
        }
        if Instant::now() > deadline {
            let events: Vec<Event> = agent.events().recent().cloned().collect();
            let done: Vec<&str> = named(&events, EventKind::Finished).map(task_of).collect();
            let last: Vec<String> = events
                .iter()
                .rev()
                .take(12)
                .map(|e| format!("{:.1} {} {}", e.at, e.kind, task_of(e)))
                .collect();
            return Err(format!(
                "{preemptor}: not done within 600 s; finished: {done:?}; last events: {last:?}"
            ));
        }
        // The agent's own sampling period: its pace, not a wait for an event.
        std::thread::sleep(Duration::from_millis(100));
    }
    let events: Vec<Event> = agent.events().recent().cloned().collect();
    drop(agent);
    drop(node);
    Ok((events, dir))
}

fn summarize(
    preemptor: &str,
    events: &[Event],
    tasks: &[BeTask],
    logs: &Path,
    alone: f64,
) -> PreemptorResult {
    let mut r = PreemptorResult { preemptor: preemptor.to_string(), ..PreemptorResult::default() };
    for p in named(events, EventKind::Preempted).filter_map(|e| e.detail_as::<Preempted>().ok()) {
        match p.how.as_str() {
            "kill" => {
                r.kills += 1;
                r.work_lost_s += p.lost_s.unwrap_or(0.0);
            }
            "checkpoint" | "incremental-checkpoint" => {
                r.checkpoints += 1;
                r.dump_s += p.report.dump_s.unwrap_or(0.0);
            }
            _ => {}
        }
    }
    let restores = named(events, EventKind::Resumed).filter_map(|e| e.detail_as::<Resumed>().ok());
    for restore in restores.filter(|r| r.how == "restore") {
        r.restores += 1;
        r.restore_s += restore.restore_s.unwrap_or(0.0);
    }
    r.restore_failures = named(events, EventKind::RestoreFailed).count();
    let (mut be, mut prod) = (Vec::new(), Vec::new());
    for e in named(events, EventKind::Finished) {
        if task_of(e).starts_with("be-") {
            be.push(e.at);
        } else if let Ok(f) = e.detail_as::<Finished>() {
            prod.push(f.runtime_s);
        }
    }
    r.be_completed = be.len();
    r.be_mean_completion_s = be.iter().sum::<f64>() / be.len().max(1) as f64;
    r.be_makespan_s = be.iter().copied().fold(0.0, f64::max);
    r.prod_mean_burst_s = prod.iter().sum::<f64>() / prod.len().max(1) as f64;
    r.prod_slowdown = if alone > 0.0 { r.prod_mean_burst_s / alone } else { f64::NAN };
    for t in tasks {
        let chain =
            Chain { size: t.size, steps: t.steps, dirty: 1.0, pace: Duration::ZERO, gate: None };
        let want = chain.answer().map(|a| format!("{a:#018x}")).ok();
        let log = std::fs::read_to_string(logs.join("tasks").join(format!("{}.log", t.name)))
            .unwrap_or_default();
        let got = log.lines().find_map(|l| l.strip_prefix("answer ")).map(str::to_string);
        if got.is_none() || got != want {
            r.wrong_answers.push(t.name.clone());
            r.wrong_evidence.push(evidence(&t.name, &log, events, want.as_deref()));
        }
    }
    r
}

/// A wrong task's story: the answer wanted, its log's last lines, and the
/// agent's events for it.
fn evidence(name: &str, log: &str, events: &[Event], want: Option<&str>) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let tail = lines[lines.len().saturating_sub(8)..].join(" | ");
    let story: Vec<String> = events
        .iter()
        .filter(|e| task_of(e) == name)
        .map(|e| format!("{:.1} {} {}", e.at, e.kind, e.detail))
        .collect();
    format!(
        "{name}: wanted answer {}; its log ({} lines) ends: {tail}; its events: {}",
        want.unwrap_or("?"),
        lines.len(),
        story.join("; ")
    )
}

/// Runs every preemptor; `say` hears progress.
pub fn run(plan: &PreemptionPlan, say: &mut dyn FnMut(&str)) -> Result<PreemptionReport, String> {
    let scratch = tempfile::tempdir_in(&plan.scratch)
        .map_err(|e| format!("a scratch directory in {}: {e}", plan.scratch.display()))?;
    let plan = &PreemptionPlan { scratch: scratch.path().to_path_buf(), ..plan.clone() };
    let limit = mib(320.0, plan.scale);
    let tasks = task_list(plan.seed, plan.tasks, plan.scale);
    let burst_gap = Duration::from_secs(6);
    say("production burst alone");
    let alone = burst_alone(plan, limit, say)?;
    let mut results = Vec::new();
    for p in &plan.preemptors {
        say(&format!("{p}: {} best-effort tasks, {} bursts", tasks.len(), plan.bursts));
        let (events, dir) = run_scene(plan, limit, p, &tasks, plan.bursts, burst_gap, say)?;
        let r = summarize(p, &events, &tasks, &dir, alone);
        for e in &r.wrong_evidence {
            say(&format!("{p}: WRONG: {e}"));
        }
        let _ = std::fs::remove_dir_all(&dir);
        results.push(r);
    }
    Ok(PreemptionReport {
        seed: plan.seed,
        scale: plan.scale,
        node_limit: limit,
        tasks,
        burst_gap_s: burst_gap.as_secs_f64(),
        prod_alone_s: alone,
        results,
    })
}

/// The report as a table.
pub fn table(r: &PreemptionReport) -> String {
    let mut out = format!(
        "{} best-effort tasks (seed {}), production bursts {:.0} s apart ({:.2} s each alone), \
         node {} MiB\n",
        r.tasks.len(),
        r.seed,
        r.burst_gap_s,
        r.prod_alone_s,
        r.node_limit / MIB
    );
    out.push_str(&format!(
        "{:<11} {:>9} {:>6} {:>10} {:>10} {:>9} {:>6} {:>6} {:>8} {:>7} {:>7}\n",
        "preemptor",
        "lost s",
        "done",
        "mean BE s",
        "makespan",
        "prod x",
        "kills",
        "dumps",
        "restores",
        "dump s",
        "wrong"
    ));
    for x in &r.results {
        out.push_str(&format!(
            "{:<11} {:>9.1} {:>6} {:>10.1} {:>10.1} {:>9.2} {:>6} {:>6} {:>8} {:>7.1} {:>7}\n",
            x.preemptor,
            x.work_lost_s,
            x.be_completed,
            x.be_mean_completion_s,
            x.be_makespan_s,
            x.prod_slowdown,
            x.kills,
            x.checkpoints,
            x.restores,
            x.dump_s,
            x.wrong_answers.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_list_is_the_seed_s() {
        let a = task_list(7, 6, 1.0);
        assert_eq!(a.len(), 6);
        let b = task_list(7, 6, 1.0);
        assert_eq!(serde_json::to_string(&a).ok(), serde_json::to_string(&b).ok());
        assert_ne!(
            serde_json::to_string(&a).ok(),
            serde_json::to_string(&task_list(8, 6, 1.0)).ok()
        );
        assert!(a.iter().all(|t| (24 * MIB..=64 * MIB).contains(&t.size) && t.steps >= 120));
    }
}
