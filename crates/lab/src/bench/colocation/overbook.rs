//! The overbook scenes of `bench colocation`: the agent in-process on the
//! scene's node, the job stream submitted to it as its launcher takes jobs.

use super::batch::{self, BeJob};
use super::services::Programs;
use super::SceneResult;
use crate::bench::{BenchNode, MIB};
use overbook_agent::agent::Agent;
use overbook_agent::config::AgentConfig;
use overbook_agent::events::details::{Finished, Preempted, Resumed};
use overbook_agent::events::{Event, EventKind, EventLog};
use overbook_agent::tasks::{RunError, RunRequest};
use overbook_core::action::RejectReason;
use overbook_core::{Class, Time};
use overbook_linux::{host_cgroups, HostSupport, NodeCgroups};
use std::collections::VecDeque;
use std::path::Path;
use std::time::Instant;

/// overbook's agent on the scene's node, the job stream submitted to it.
/// The services are its `critical` class: they bypass swap and keep their
/// memory (`memory.min` raised to their usage), so when memory runs short
/// the kernel reclaims from best-effort jobs, whose thrashing the agent
/// then ends. The peers get what they allow instead: earlyoom's
/// `--avoid`, and production's `oom_score_adj` everywhere.
pub(super) struct OverbookScene {
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
    pub(super) fn new(
        node: &BenchNode,
        policy: &str,
        dir: &Path,
        images: Option<&Path>,
        capacity: u64,
        headroom: u64,
    ) -> Result<OverbookScene, String> {
        let images = images.map_or_else(|| dir.join("images"), |i| i.join(node.root.as_str()));
        let text = config_text(
            node.root.as_str(),
            policy,
            &dir.join("tasks"),
            &images,
            capacity,
            headroom,
        )?;
        let cfg = AgentConfig::parse(&text, policy).map_err(|e| e.to_string())?;
        let cg = host_cgroups(&HostSupport::probe()).map_err(|e| e.to_string())?;
        let mut agent =
            Agent::new(&cfg, cg, EventLog::in_memory(200_000)).map_err(|e| e.to_string())?;
        agent.note_checkpoint_support(Time::ZERO);
        Ok(OverbookScene { agent, next: 0, retry: VecDeque::new(), retries: 0, kernel_kills: 0 })
    }

    pub(super) fn tick(
        &mut self,
        start: Instant,
        jobs: &[BeJob],
        be_chain: &Path,
        p: &Programs,
    ) -> Result<(), String> {
        let now = Time::from_duration(start.elapsed());
        let from = self.agent.events().recent().count();
        self.agent.tick(now).map_err(|e| e.to_string())?;
        let failed: Vec<String> = self
            .agent
            .events()
            .recent()
            .skip(from)
            .filter(|e| {
                e.kind == EventKind::Finished
                    && !e.detail_as::<Finished>().is_ok_and(|f| f.succeeded())
            })
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
                Err(RunError::Rejected { reason: RejectReason::QueueFull, .. }) => return Ok(()),
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

    pub(super) fn finish(
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
            *r.agent_events.entry(e.kind.to_string()).or_insert(0) += 1;
        }
        if let Some(e) = events.iter().find(|e| e.kind == EventKind::CheckpointsUnavailable) {
            r.notes.push(format!(
                "CRIU cannot checkpoint here ({}): the preemptor fell back",
                e.detail["why_not"].as_str().unwrap_or("see the agent's events")
            ));
        }
        for e in &events {
            match e.kind {
                EventKind::Finished if e.detail_as::<Finished>().is_ok_and(|f| f.succeeded()) => {
                    let base = job_of(task_of(e));
                    if let Some(j) = jobs.iter().find(|j| j.name == base) {
                        r.batch.completed += 1;
                        r.batch.work_mib_steps += j.size / MIB * u64::from(j.steps);
                    }
                }
                EventKind::Started if task_of(e).starts_with("be-") => {
                    r.batch.started += 1;
                    // The agent's clock is the scene's (`tick`).
                    r.be_starts_s.push(e.at);
                }
                EventKind::Preempted => {
                    let p = e.detail_as::<Preempted>().map_err(|err| format!("{e:?}: {err}"))?;
                    match p.how.as_str() {
                        "kill" => {
                            r.batch.kills += 1;
                            r.batch.lost_s += p.lost_s.unwrap_or(0.0);
                        }
                        h if h.contains("checkpoint") => r.checkpoints += 1,
                        _ => r.suspensions += 1,
                    }
                }
                EventKind::Resumed
                    if e.detail_as::<Resumed>().is_ok_and(|r| r.how == "restore") =>
                {
                    r.restores += 1
                }
                _ => {}
            }
        }
        r.batch.kills += self.kernel_kills;
        Ok(())
    }
}

/// Whether `policy` names an overbook scene the benchmark can run: its
/// agent configuration is made and parsed, so a bad setting fails before
/// the first scene, naming the key.
pub(super) fn check_policy(policy: &str) -> Result<(), String> {
    let text = config_text(
        "overbook-colocation-check",
        policy,
        Path::new("/tmp/tasks"),
        Path::new("/tmp/images"),
        2 << 30,
        200 << 20,
    )?;
    AgentConfig::parse(&text, policy).map(drop).map_err(|e| e.to_string())
}

/// The agent's configuration for the scene of `policy`: `overbook` (the
/// agent's default, production-first policy) or `overbook-<preemptor>`
/// (000's detector with that preemptor), either with detector settings
/// after an `@` (`overbook@floor=0.10+production_stall=0.05`), and the
/// best-effort CPU ceiling: `cpu_max=CPUS` (`[cpu] best-effort-max`) or
/// `cpu_leftover=TARGET` (`best-effort-max = "leftover"` with that
/// `busy-target`), the launcher's `headroom=SHARE` of the node (a
/// tenth by default, as the static partition's jobs keep) and its
/// `launch_gap=SECONDS` (starts that far apart), and the agent's
/// `sample=SECONDS` (`agent.sample_period`, 0.1 by default).
fn config_text(
    root: &str,
    policy: &str,
    tasks: &Path,
    images: &Path,
    capacity: u64,
    headroom: u64,
) -> Result<String, String> {
    let (base, settings) = match policy.split_once('@') {
        Some((base, settings)) => (base, settings.split('+').collect()),
        None => (policy, Vec::new()),
    };
    let mut detector_keys = String::new();
    let mut cpu_keys = String::new();
    let mut headroom_share = headroom as f64 / capacity as f64;
    let mut sample_period = 0.1;
    let mut launcher_keys = String::new();
    for setting in settings {
        // `overbook@` or `a=1++b=2` would name a scene apart from the one
        // its settings make, and two names for one scene compare nothing.
        if setting.is_empty() {
            return Err(format!(
                "policy {policy:?}: an empty setting (after `@`, each is KEY=NUMBER, joined by `+`)"
            ));
        }
        let (key, value) = setting.split_once('=').ok_or_else(|| {
            format!("policy {policy:?}: {setting:?}: a detector setting is KEY=NUMBER")
        })?;
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            return Err(format!("policy {policy:?}: {key:?} is not a detector key"));
        }
        let number = value.parse::<f64>().ok().filter(|n| n.is_finite()).ok_or_else(|| {
            format!("policy {policy:?}: {key}={value:?}: the value must be a number")
        })?;
        match key {
            "headroom" => headroom_share = number,
            "sample" => sample_period = number,
            "launch_gap" => launcher_keys.push_str(&format!("launch_gap = {number:?}\n")),
            "cpu_max" => cpu_keys.push_str(&format!("best-effort-max = {number:?}\n")),
            "cpu_leftover" => cpu_keys
                .push_str(&format!("best-effort-max = \"leftover\"\nbusy-target = {number:?}\n")),
            _ => detector_keys.push_str(&format!("{key} = {number:?}\n")),
        }
    }
    // 000's detector waits a sync period after its kills; the
    // production-first launcher holds while anyone thrashes instead.
    let (detector, preemptor, delay_after_kill) = match base {
        "overbook" => ("production-first", "production-first", false),
        _ => match base.strip_prefix("overbook-") {
            Some(preemptor) if super::POLICIES.contains(&base) => {
                ("constraint-thrashing", preemptor, true)
            }
            _ => return Err(format!("{policy:?} is not one of overbook's scenes")),
        },
    };
    // `node.swap_mb_s` is left at the agent's default: the swap file's
    // own write pace (1.7 GB/s, sequential) said nothing of a
    // swap-out's (170-260 MB in 0.2-1.6 s), and freezes promised at
    // that pace held production's memory for seconds.
    Ok(format!(
        "[node]\nroot = \"{root}\"\ncapacity = {capacity}\n\
         [agent]\nstate_db = \"\"\nsample_period = {sample_period:?}\ntask_log_dir = \"{}\"\n\
         [[classes]]\npattern = \"be-*\"\nclass = \"best-effort\"\n\
         [[classes]]\npattern = \"prod-*\"\nclass = \"critical\"\n\
         [policy.launcher]\nheadroom = {:.4}\ncharge_until_peak = true\n\
         hold_while_thrashing = true\ndelay_after_kill = {delay_after_kill}\n{launcher_keys}\
         [policy.detector]\nkind = \"{detector}\"\n{detector_keys}\
         [policy.preemptor]\nkind = \"{preemptor}\"\n\
         [checkpoint]\nimages_dir = \"{}\"\npre_dump_interval = 0\ntimeout = 120\n\
         [cpu]\n{cpu_keys}",
        tasks.display(),
        headroom_share,
        images.display(),
    ))
}

/// The job a task runs: `be-3` for `be-3` and its retry `be-3-r1`.
fn job_of(task: &str) -> &str {
    task.split("-r").next().unwrap_or(task)
}

fn task_of(e: &Event) -> &str {
    e.container.as_deref().and_then(|c| c.rsplit('/').next()).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_scene_s_detector_settings_reach_its_agent_or_fail_by_name() {
        // The agent's configuration of a scene of `policy` on a 1 GiB node.
        let parsed = |policy: &str| {
            let text = config_text("n", policy, Path::new("/t"), Path::new("/i"), 1 << 30, 1 << 20)
                .expect("valid");
            AgentConfig::parse(&text, "test").expect("parses")
        };
        let cfg = parsed("overbook@floor=0.1+production_stall=0.05");
        assert_eq!(cfg.policy.detector.floor(), 0.1);
        let cpu = |policy: &str| parsed(policy).cpu.best_effort_max;
        use overbook_agent::config::CpuCeiling;
        assert_eq!(cpu("overbook"), CpuCeiling::Unlimited);
        let launcher = parsed("overbook@headroom=0.2").policy.launcher;
        assert_eq!(launcher.headroom, 0.2, "the scene's headroom, not the bench's");
        assert_eq!(parsed("overbook@launch_gap=1").policy.launcher.launch_gap, 1.0);
        let agent = |policy: &str| parsed(policy).sample_period;
        assert_eq!(agent("overbook"), Duration::from_millis(100));
        assert_eq!(agent("overbook@sample=1"), Duration::from_secs(1));
        assert_eq!(cpu("overbook@cpu_max=0.25"), CpuCeiling::Fixed(0.25));
        assert_eq!(
            cpu("overbook@floor=0.1+cpu_leftover=0.4"),
            CpuCeiling::Leftover { busy_target: 0.4, floor: CpuCeiling::FLOOR }
        );
        assert!(check_policy("overbook").is_ok());
        assert!(check_policy("overbook-kill@tolerance=5").is_ok());
        for (bad, says) in [
            ("overbook@floor", "KEY=NUMBER"),
            ("overbook@", "an empty setting"),
            ("overbook@floor=0.1+", "an empty setting"),
            ("overbook@floor=0.1++tolerance=1", "an empty setting"),
            ("overbook@floor=ten", "must be a number"),
            ("overbook@floor=NaN", "must be a number"),
            ("overbook@Floor=0.1", "not a detector key"),
            ("overbook@flor=0.1", "flor"),
            ("overbook@cpu_leftover=2", "cpu.busy-target"),
            ("overbook@cpu_max=0", "cpu.best-effort-max"),
            ("overbook@headroom=2", "headroom"),
            ("overbook@sample=0", "sample_period"),
            ("overbook@launch_gap=-1", "launch_gap"),
            ("overbook-kill@floor=0.1", "floor"),
            ("overbook-fast@floor=0.1", "not one of overbook's scenes"),
            ("static@floor=0.1", "not one of overbook's scenes"),
        ] {
            let e = check_policy(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_retry_counts_as_its_job() {
        assert_eq!(job_of("be-3"), "be-3");
        assert_eq!(job_of("be-3-r1"), "be-3");
        assert_eq!(job_of("be-12-r10"), "be-12");
    }
}
