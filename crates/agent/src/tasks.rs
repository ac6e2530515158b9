//! Tasks started through `overbook run`: a command in a container of its
//! own, admitted by the core's launcher (production at once; best-effort
//! queued until the memory snapshot says it fits, and not during the delay
//! after a kill), reaped when it exits, and started again from scratch when a
//! preemption killed it (000 and 004: a killed task is requeued). A task
//! that was checkpointed instead waits to be restored, and one whose
//! restore fails starts again from scratch.

use overbook_core::{Class, ContainerId, JobId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

/// What `overbook run` asks for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// The container's name under the node's root.
    pub name: String,
    pub class: Class,
    /// The task's profiled memory peak, bytes: what the launcher charges the
    /// snapshot with until its job has history (000 §4.2).
    #[serde(default)]
    pub mem_peak: Option<u64>,
    /// The job whose history profiles this task; default: the name.
    #[serde(default)]
    pub job: Option<String>,
    /// Its share for the `weighted` reclaimer (1..=10000); default: its
    /// class rule's.
    #[serde(default)]
    pub weight: Option<u32>,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Working directory; default: `/`.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
}

/// What became of a run request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReply {
    /// The container's path.
    pub container: String,
    /// `started` or `queued`.
    pub state: String,
    /// Where the command's output goes.
    pub log: String,
}

/// Why a run request was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RunError {
    #[error("name {name:?}: {problem}")]
    Name { name: String, problem: String },
    #[error("the command is empty")]
    NoCommand,
    #[error("program {program:?}: {problem}")]
    Program { program: String, problem: String },
    #[error("weight {0} is not from 1 to 10000")]
    Weight(u32),
    #[error("a container named {0:?} already exists on this node")]
    Exists(String),
    #[error("refused by the launcher: {why}")]
    Rejected { reason: overbook_core::action::RejectReason, why: String },
    #[error("cannot start {name:?}: {problem}")]
    Start { name: String, problem: String },
    #[error("no task named {0:?} runs here")]
    NoSuchTask(String),
    #[error(
        "{0:?} is not a way to preempt (kill, freeze, freeze-and-swap-out, checkpoint, \
         full-checkpoint, policy)"
    )]
    How(String),
    #[error("{name:?} is {class}: never preempted")]
    Protected { name: String, class: String },
}

/// What `overbook preempt` asks for: an operator's preemption of one task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreemptRequest {
    pub name: String,
    /// `kill`, `freeze`, `freeze-and-swap-out`, `checkpoint` (incremental
    /// when the task has a pre-dump), `full-checkpoint`, or `policy`: what
    /// the configured preemptor would choose (`adaptive`: 004 Algorithm 1).
    pub how: String,
    /// Whether the reply waits for a checkpoint's dump (else it comes once
    /// the dump began, and the dump's end is a `preempted` event). Other
    /// ways are done at once either way.
    #[serde(default = "waits")]
    pub wait: bool,
}

fn waits() -> bool {
    true
}

/// One task the agent manages.
#[derive(Debug)]
pub(crate) struct Managed {
    pub request: RunRequest,
    pub job: JobId,
    pub path: overbook_linux::ContainerPath,
    pub child: Option<Child>,
    /// The root of its tree after a restore (not a child the standard
    /// library knows: reaped by pid, the agent being a child subreaper), or
    /// of a tree an earlier agent started.
    pub restored: Option<u32>,
    /// Started by an earlier agent and running when this one started: it
    /// is over once its root is gone and its container empty (its exit
    /// status is not this agent's to see).
    pub adopted: bool,
    /// Killed by a preemption, it waits until then before it queues again
    /// (the restart backoff).
    pub not_before: Option<overbook_core::Time>,
    pub started_at: Option<overbook_core::Time>,
    /// A preemption killed it: when it is reaped, it is requeued.
    pub killed: bool,
    pub restarts: u32,
    /// Highest usage seen in this incarnation (its peak, for the profile).
    pub peak: u64,
    /// Work done before this incarnation: kept across checkpoints, lost
    /// with a kill.
    pub progress_before: Duration,
    /// Its newest image: a pre-dump while it runs, or the checkpoint it
    /// waits to be restored from.
    pub image: Option<TaskImage>,
}

/// A checkpoint image of a task.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TaskImage {
    pub dir: PathBuf,
    pub kind: crate::checkpoint::ImageKind,
    /// Bytes of its images.
    pub size: u64,
    pub taken_at: overbook_core::Time,
    /// The task's memory when it was taken.
    pub usage: u64,
}

impl Managed {
    /// A task admitted now, not started yet.
    pub fn new(
        request: RunRequest,
        job: JobId,
        path: overbook_linux::ContainerPath,
        restarts: u32,
    ) -> Managed {
        Managed {
            request,
            job,
            path,
            child: None,
            restored: None,
            adopted: false,
            not_before: None,
            started_at: None,
            killed: false,
            restarts,
            peak: 0,
            progress_before: Duration::ZERO,
            image: None,
        }
    }

    /// Whether its command runs (started, restored, or adopted).
    pub fn running(&self) -> bool {
        self.child.is_some() || self.restored.is_some() || self.adopted
    }

    /// The pid of its tree's root, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id).or(self.restored)
    }

    /// The job it belongs to, as given (`--job`), else its own name.
    pub fn job_name(&self) -> String {
        self.request.job.clone().unwrap_or_else(|| self.request.name.clone())
    }

    /// Whether it waits to be restored from a checkpoint.
    pub fn checkpointed(&self) -> bool {
        !self.running()
            && self.image.as_ref().is_some_and(|i| i.kind == crate::checkpoint::ImageKind::Dump)
    }
}

/// Every managed task, and the jobs' ids.
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    pub by_id: BTreeMap<ContainerId, Managed>,
    jobs: BTreeMap<String, JobId>,
}

impl Tasks {
    pub fn job_id(&mut self, name: &str) -> JobId {
        // Ids apart from the containers' own, which also name jobs of tasks
        // the agent only watches.
        let next = JobId(u64::MAX / 2 + self.jobs.len() as u64);
        *self.jobs.entry(name.to_string()).or_insert(next)
    }

    /// Names of tasks waiting to start.
    pub fn queued(&self) -> Vec<String> {
        self.by_id.values().filter(|m| !m.running()).map(|m| m.request.name.clone()).collect()
    }
}

/// A container name: one path component of safe characters.
pub(crate) fn check_name(name: &str) -> Result<(), RunError> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(RunError::Name {
            name: name.to_string(),
            problem: "use letters, digits, '-', '_' and '.', not starting with '.'".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_single_safe_components() {
        assert!(check_name("batch-1_a.b").is_ok());
        for bad in ["", "../x", "a/b", ".hidden", "a b", "ä"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_request_with_an_unknown_field_is_refused() {
        let err = serde_json::from_str::<RunRequest>(
            r#"{"name":"a","class":"best-effort","command":["true"],"memory":1}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `memory`"), "{err}");
        let ok: RunRequest =
            serde_json::from_str(r#"{"name":"a","class":"production","command":["true"]}"#)
                .expect("minimal request");
        assert_eq!(ok.class, Class::Production);
    }
}
