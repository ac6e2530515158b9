//! `overbook bench agent-overhead`: what the agent itself costs on a node
//! with many containers.
//!
//! A node cgroup (no limit) holds `containers` containers, each with one
//! sleeping process (`sleep 3600`). The agent runs as its own process,
//! `overbook agent --config ... --socket ...`, exactly as deployed (PSI
//! trigger, sampling timer, API thread, `mlockall`), watching them at the
//! configured period. After a warm-up, its CPU time (`utime + stime` of
//! `/proc/<pid>/stat`, all its threads) over the measured window is reported
//! as a percentage of one core, with its peak (`VmHWM`) and current
//! (`VmRSS`) resident memory from `/proc/<pid>/status`.

use super::{cpu_ticks, BenchNode, Percentiles};
use overbook_linux::{process, Pid};
use serde::Serialize;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to measure.
#[derive(Clone, Debug)]
pub struct OverheadPlan {
    /// The `overbook` binary (run as `overbook agent`).
    pub overbook: PathBuf,
    pub containers: usize,
    pub seconds: u64,
    pub period: Duration,
    /// Warm-up before the measured window.
    pub warmup: Duration,
}

/// What was measured.
#[derive(Clone, Debug, Serialize)]
pub struct OverheadReport {
    pub containers: usize,
    /// Containers the agent reported in its status at the end.
    pub containers_seen: usize,
    pub period_s: f64,
    pub seconds: f64,
    pub cpu_percent_of_core: f64,
    pub user_percent: f64,
    pub system_percent: f64,
    /// CPU per sample of all containers, ms (if the period held).
    pub cpu_ms_per_sample: f64,
    pub vm_hwm_kib: u64,
    pub vm_rss_kib: u64,
    pub vm_lck_kib: u64,
    pub threads: u64,
    /// CPU % of each one-second slice of the window.
    pub cpu_percent_per_second: Percentiles,
    pub agent_pid: u32,
}

/// The agent process, stopped (SIGTERM, then SIGKILL) on drop.
#[derive(Debug)]
struct AgentProcess(Child);

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Some(pid) = Pid::new(self.0.id()) {
            let _ = process::terminate(pid);
        }
        let until = Instant::now() + Duration::from_secs(5);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the benchmark, telling `tick` each second of the window as it passes.
pub fn run(
    plan: &OverheadPlan,
    mut say: impl FnMut(&str),
    mut tick: impl FnMut(u64),
) -> Result<OverheadReport, String> {
    let name = format!("overbook-bench-overhead-{}", std::process::id());
    let mut node = BenchNode::new(&name, None)?;
    say(&format!("starting {} containers with `sleep 3600` under {}", plan.containers, node.root));
    for i in 0..plan.containers {
        let class = if i % 2 == 0 { "be" } else { "prod" };
        node.spawn_quiet(&format!("{class}-{i:04}"), "sleep", &["3600".to_string()])?;
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let config = dir.path().join("agent.toml");
    let socket = dir.path().join("agent.sock");
    std::fs::write(
        &config,
        format!(
            "[node]\nroot = \"{}\"\n[agent]\nstate_db = \"\"\nsample_period = {}\n\
             [[classes]]\npattern = \"be-*\"\nclass = \"best-effort\"\n",
            node.root.as_str(),
            plan.period.as_secs_f64()
        ),
    )
    .map_err(|e| e.to_string())?;
    let child = Command::new(&plan.overbook)
        .arg("agent")
        .arg("--config")
        .arg(&config)
        .arg("--socket")
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {} agent: {e}", plan.overbook.display()))?;
    let agent = AgentProcess(child);
    let pid = agent.0.id();
    let agent_pid = Pid::new(pid).ok_or("the agent has no pid")?;
    say(&format!("agent pid {pid}; warming up {:?}", plan.warmup));
    std::thread::sleep(plan.warmup);
    // /proc reports CPU time in USER_HZ ticks, 100 per second on every Linux ABI.
    let hz = 100.0;
    let (u0, s0) = cpu_ticks(agent_pid)?;
    let start = Instant::now();
    let mut last = (u0 + s0, start);
    let mut per_second = Vec::new();
    for s in 1..=plan.seconds {
        let next = start + Duration::from_secs(s);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let (u, st) = cpu_ticks(agent_pid)?;
        let now = Instant::now();
        let d = (u + st).saturating_sub(last.0) as f64 / hz;
        per_second.push(100.0 * d / (now - last.1).as_secs_f64());
        last = (u + st, now);
        tick(s);
    }
    let (u1, s1) = cpu_ticks(agent_pid)?;
    let wall = start.elapsed().as_secs_f64();
    let user = (u1 - u0) as f64 / hz;
    let system = (s1 - s0) as f64 / hz;
    let seen = overbook_agent::api::get(&socket, "/v1/status")
        .ok()
        .and_then(|b| serde_json::from_str::<overbook_agent::NodeStatus>(&b).ok())
        .map_or(0, |s| s.containers.len());
    let samples = wall / plan.period.as_secs_f64();
    let status = process::status(agent_pid).ok();
    let report = OverheadReport {
        containers: plan.containers,
        containers_seen: seen,
        period_s: plan.period.as_secs_f64(),
        seconds: wall,
        cpu_percent_of_core: 100.0 * (user + system) / wall,
        user_percent: 100.0 * user / wall,
        system_percent: 100.0 * system / wall,
        cpu_ms_per_sample: 1e3 * (user + system) / samples,
        vm_hwm_kib: status.and_then(|s| s.vm_hwm).unwrap_or(0) / 1024,
        vm_rss_kib: status.and_then(|s| s.vm_rss).unwrap_or(0) / 1024,
        vm_lck_kib: status.and_then(|s| s.vm_lck).unwrap_or(0) / 1024,
        threads: status.map_or(0, |s| s.threads),
        cpu_percent_per_second: Percentiles::of(&per_second),
        agent_pid: pid,
    };
    drop(agent);
    drop(node);
    Ok(report)
}
