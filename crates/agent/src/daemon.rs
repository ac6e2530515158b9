//! `overbook agent`: the loop around [`Agent::tick`], woken by the kernel's
//! PSI trigger or by the sampling timer, whichever comes first, with the
//! local API beside it.

use crate::agent::{Agent, AgentError};
use crate::api::{self, ApiError, Order, Shared};
use crate::config::AgentConfig;
use crate::events::EventKind;
use crate::events::{Event, EventLog};
use overbook_core::Time;
use overbook_linux::psi::PsiTrigger;
use overbook_linux::{
    host, host_cgroups, CgroupError, ContainerCgroups, ContainerPath, HostSupport,
};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where the API listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/overbook/agent.sock";

/// A trigger fires on 100 ms of memory stall within 1 s.
const PSI_STALL: Duration = Duration::from_millis(100);
const PSI_WINDOW: Duration = Duration::from_secs(1);

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Lock(#[from] crate::lock::LockError),
    #[error("event log {path}: {source}")]
    EventLog { path: PathBuf, source: std::io::Error },
}

/// Runs the agent until `stop` is set; `say` gets one line per notable
/// thing (start-up facts, preemptions) for the terminal.
pub fn run(
    config: &AgentConfig,
    socket: &Path,
    stop: &AtomicBool,
    mut say: impl FnMut(&str),
) -> Result<(), DaemonError> {
    // Before anything touches the node, its database or its socket.
    let _lock = crate::lock::lock_node(
        &config.root,
        config.state_db.as_deref(),
        crate::lock::LOCK_WAIT,
        |path| {
            say(&format!(
                "overbook agent: waiting for {} (an earlier agent, or a child it was starting)",
                path.display()
            ))
        },
    )?;
    let protection = host::protect_self();
    let probe = HostSupport::probe();
    let cgroups = host_cgroups(&probe)?;
    let root = ContainerPath::new(&config.root).map_err(AgentError::from)?;
    match cgroups.create(&root, None) {
        Ok(_) | Err(CgroupError::Exists { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let log = match &config.event_log {
        Some(path) => EventLog::to_file(path, 1000)
            .map_err(|source| DaemonError::EventLog { path: path.clone(), source })?,
        None => EventLog::in_memory(1000),
    };
    let version = cgroups.version();
    let mut agent = Agent::new(config, cgroups, log)?;
    // What the state database could not give (moved aside, unwritable,
    // rows set aside) is on the terminal as well as in the log: each is
    // tasks not taken back, or no durability.
    for e in agent.events().recent().filter(|e| e.kind.as_str().starts_with("state-")) {
        let message = e.detail["message"].as_str().unwrap_or(e.kind.as_str());
        say(&format!("overbook agent: warning: {message}"));
    }
    let shared = Arc::new(Shared::default());
    let _server = api::serve(socket, Arc::clone(&shared))?;

    let mut triggers = Triggers::default();
    let psi = match arm(Path::new(host::SYSTEM_PRESSURE)) {
        Ok(t) => {
            triggers.system = Some(t);
            "system-wide PSI trigger armed".to_string()
        }
        Err(e) => format!("no system PSI trigger ({e}); sampling only"),
    };
    let started = json!({
        "root": root.to_string(),
        "cgroup_version": format!("{version:?}"),
        "sample_period_s": config.sample_period.as_secs_f64(),
        "memory_locked": protection.memory_locked,
        "oom_exempt": protection.oom_exempt,
        "problems": protection.problems,
        "psi": psi,
        "socket": socket.display().to_string(),
    });
    // Said once the first sample is published: a status asked the moment
    // the agent says it is watching shows the node, not an empty one.
    let mut watching = Some(format!(
        "overbook agent: watching {root} ({version:?}); {psi}; API on {}",
        socket.display()
    ));

    let start = Instant::now();
    let now = || Time::from_duration(start.elapsed());
    let mut published = 0;
    let mut fired = Vec::new();
    let mut said_refused = shared.refusals();
    let mut said_refused_at: Option<Instant> = None;
    agent.note(Time::ZERO, EventKind::Started, started);
    agent.note_checkpoint_support(Time::ZERO);
    while !stop.load(Ordering::Relaxed) {
        let t = now();
        let wake_at = match agent.tick(t) {
            Ok(tick) => {
                for (path, how) in &tick.preempted {
                    say(&format!("overbook agent: preempted {path} ({})", how.as_str()));
                }
                for path in &tick.resumed {
                    say(&format!("overbook agent: resumed {path}"));
                }
                tick.wake_at
            }
            // The node's root gone is the end; anything else is logged and
            // retried at the next sample.
            Err(AgentError::Cgroup(CgroupError::Unsupported { what })) => {
                shared.stop();
                return Err(CgroupError::Unsupported { what }.into());
            }
            Err(e) => {
                say(&format!("overbook agent: sample failed: {e}"));
                None
            }
        };
        for (order, reply) in shared.take_submissions() {
            let answer = match order {
                Order::Run(run) => {
                    agent.submit(now(), run).map(|r| serde_json::to_string(&r).unwrap_or_default())
                }
                Order::Preempt(p) => agent.preempt_by_name(now(), &p).map(|v| v.to_string()),
                Order::Adopt(a) => agent.adopt(now(), &a.name).map(|v| v.to_string()),
            };
            let _ = reply.send(answer.map_err(|e| e.to_string()));
        }
        // What the API turned away, said at most every 10 s: a flood of
        // clients must not flood the log too.
        let refused = shared.refusals();
        if refused != said_refused
            && said_refused_at.is_none_or(|at| at.elapsed() >= REFUSALS_EVERY)
        {
            let grew = refused.iter().zip(&said_refused).filter(|(n, was)| n.1 > was.1);
            let detail: serde_json::Map<String, serde_json::Value> =
                grew.map(|(n, was)| (n.0.to_string(), json!(n.1 - was.1))).collect();
            agent.note(now(), EventKind::ApiRefused, serde_json::Value::Object(detail));
            said_refused = refused;
            said_refused_at = Some(Instant::now());
        }
        let new: Vec<Event> = agent.events().after(published).cloned().collect();
        published = agent.events().recent().last().map_or(published, |e| e.seq);
        shared.publish(agent.status(), new.into_iter());
        if let Some(line) = watching.take() {
            say(&line);
            for p in &protection.problems {
                say(&format!("overbook agent: warning: self-protection: {p}"));
            }
        }

        triggers.follow(&agent, &mut say);
        let until_wake = wake_at.map_or(config.sample_period, |w| w.since(now()));
        let timeout = config.sample_period.min(until_wake);
        let armed = triggers.all();
        if armed.is_empty() {
            std::thread::sleep(timeout);
        } else if let Err(e) = PsiTrigger::wait_any(&armed, timeout, &mut fired) {
            say(&format!("overbook agent: PSI wait failed ({e}); sampling only"));
            triggers = Triggers::default();
        }
    }
    shared.stop();
    let _ = std::fs::remove_file(socket);
    Ok(())
}

/// How often, at most, the API's refusals are told as an event.
const REFUSALS_EVERY: Duration = Duration::from_secs(10);

/// Arms a trigger; without CAP_SYS_RESOURCE the kernel takes only windows
/// that are whole multiples of 2 s: then the same share of stall over 2 s.
fn arm(path: &Path) -> Result<PsiTrigger, CgroupError> {
    PsiTrigger::new(path, PSI_STALL, PSI_WINDOW)
        .or_else(|_| PsiTrigger::new(path, PSI_STALL * 2, PSI_WINDOW * 2))
}

/// The system-wide trigger and one per container where the kernel has
/// per-cgroup PSI (v2), so a container that stalls wakes the agent even
/// when the machine as a whole does not.
#[derive(Debug, Default)]
struct Triggers {
    system: Option<PsiTrigger>,
    containers: BTreeMap<String, PsiTrigger>,
    /// Containers whose trigger could not be armed (not retried).
    refused: BTreeSet<String>,
}

impl Triggers {
    fn follow<C: ContainerCgroups + overbook_linux::ContainerControl>(
        &mut self,
        agent: &Agent<C>,
        say: &mut impl FnMut(&str),
    ) {
        let mut present = BTreeSet::new();
        for k in agent.view().containers() {
            let key = k.path.as_str().to_string();
            present.insert(key.clone());
            if self.containers.contains_key(&key) || self.refused.contains(&key) {
                continue;
            }
            let Some(file) = agent.view().cgroups().pressure_file(&k.path) else { continue };
            match arm(&file) {
                Ok(t) => {
                    self.containers.insert(key, t);
                }
                Err(e) => {
                    say(&format!("overbook agent: no PSI trigger for {}: {e}", k.path));
                    self.refused.insert(key);
                }
            }
        }
        self.containers.retain(|k, _| present.contains(k));
        self.refused.retain(|k| present.contains(k));
    }

    fn all(&self) -> Vec<&PsiTrigger> {
        self.system.iter().chain(self.containers.values()).collect()
    }
}
