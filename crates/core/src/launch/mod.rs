//! The launcher (000 §4.2, 002 §3.1): production starts at once; best-effort
//! tasks queue and start only while the memory snapshot still fits them;
//! preempted tasks resume first-come-first-served when they fit; after a kill,
//! launches wait.

use crate::action::{Action, RejectReason};
use crate::config::ConfigError;
use crate::model::{Bytes, Class, ContainerId, JobId, NodeStats};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How a node decides that a best-effort task fits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdmissionMode {
    /// Mercury: only into memory nobody reserved (requests never exceed capacity).
    Reserved,
    /// Kuber: whatever is available right now, no charging for what is coming.
    Available,
    /// Charon: available memory as of the last sync, charged at once with the
    /// profiled peak of every task launched since.
    #[default]
    Snapshot,
}

/// `[launcher]` in config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LaunchConfig {
    pub admission: AdmissionMode,
    /// Best-effort tasks waiting at most; beyond, submissions are rejected.
    pub queue_limit: usize,
    /// How many times a job resubmits a rejected task before giving up.
    pub retry_budget: u32,
    /// Finished tasks of a job whose peaks make its profile (000: 20).
    pub profile_history: usize,
    /// Upper bound of the snapshot sync period, seconds (000: 10 s; the period
    /// is min(mean runtime / 2, this)).
    pub max_sync_period: f64,
    /// Whether launches wait one sync period after a kill (000 §4.2).
    pub delay_after_kill: bool,
}

impl Default for LaunchConfig {
    fn default() -> LaunchConfig {
        LaunchConfig {
            admission: AdmissionMode::Snapshot,
            queue_limit: 1000,
            retry_budget: 3,
            profile_history: 20,
            max_sync_period: 10.0,
            delay_after_kill: true,
        }
    }
}

impl LaunchConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        todo!("launcher helper")
    }
}

/// A task asking to run on this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRequest {
    pub id: ContainerId,
    pub job: JobId,
    pub class: Class,
    /// Memory the task asked for (its reservation).
    pub request: Bytes,
    pub submitted: Time,
}

/// What became of a submission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Launch,
    Queued,
    Rejected(RejectReason),
}

/// One node's launcher. See the module doc.
#[derive(Debug)]
pub struct Launcher {
    cfg: LaunchConfig,
}

impl Launcher {
    pub fn new(cfg: LaunchConfig) -> Launcher {
        Launcher { cfg }
    }

    pub fn config(&self) -> &LaunchConfig {
        &self.cfg
    }

    /// A task arrives. Production and critical tasks launch at once.
    pub fn submit(&mut self, now: Time, task: TaskRequest, node: &NodeStats) -> Admission {
        let _ = (now, task, node);
        todo!("launcher helper")
    }

    /// A preempted (frozen or checkpointed) task waits to resume, holding `memory`
    /// when it comes back; resumes are first-come-first-served.
    pub fn suspended(&mut self, now: Time, task: TaskRequest, memory: Bytes) {
        let _ = (now, task, memory);
        todo!("launcher helper")
    }

    /// A task finished normally: its peak joins its job's profile.
    pub fn finished(&mut self, job: JobId, peak: Bytes, runtime: Duration) {
        let _ = (job, peak, runtime);
        todo!("launcher helper")
    }

    /// A task left the node (killed, finished, moved): it no longer holds a charge.
    pub fn departed(&mut self, id: ContainerId) {
        let _ = id;
        todo!("launcher helper")
    }

    /// A container was killed: launches wait one sync period (when configured).
    pub fn killed(&mut self, now: Time) {
        let _ = now;
        todo!("launcher helper")
    }

    /// Launch or resume what fits now, in order, into `out`
    /// (`Action::Resume` for preempted tasks first, then `Action::Launch`).
    pub fn poll(&mut self, now: Time, node: &NodeStats, out: &mut Vec<Action>) {
        let _ = (now, node, out);
        todo!("launcher helper")
    }

    /// When `poll` could next do something that it cannot do now (end of the
    /// post-kill delay, next sync), if anything waits.
    pub fn wake_at(&self) -> Option<Time> {
        todo!("launcher helper")
    }

    /// Best-effort tasks waiting to launch, and preempted tasks waiting to resume.
    pub fn waiting(&self) -> (usize, usize) {
        todo!("launcher helper")
    }
}
