//! What the policy decides: actions as data, applied by the agent's executor
//! on a real node and by the simulator's engine in virtual time.

use crate::detect::Reason;
use crate::model::{Bytes, ContainerId};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How a preempted best-effort container gives its memory back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preemption {
    /// The whole container is killed; its work is lost and it restarts from nothing.
    Kill,
    /// Frozen: no CPU, memory kept (and coldest to reclaim). Resumed by a thaw.
    Freeze,
    /// Frozen, then its memory pushed out to swap so others get the RAM.
    FreezeAndSwapOut,
    /// Dumped to an image (all of its memory, or what changed since the last
    /// image when `incremental`), then removed; resumed by a restore.
    Checkpoint { incremental: bool },
}

impl Preemption {
    /// Whether the work done so far survives.
    pub fn keeps_work(self) -> bool {
        !matches!(self, Preemption::Kill)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Preemption::Kill => "kill",
            Preemption::Freeze => "freeze",
            Preemption::FreezeAndSwapOut => "freeze-and-swap-out",
            Preemption::Checkpoint { incremental: false } => "checkpoint",
            Preemption::Checkpoint { incremental: true } => "incremental-checkpoint",
        }
    }
}

/// Where a checkpointed task is restored (004 Algorithm 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResumeSite {
    /// On the node that dumped it, from its local store.
    Local,
    /// On another node, reading the image from the shared store.
    Remote,
    /// No usable image: started again from nothing.
    Restart,
}

/// Why a preemption was decided: enough to audit it after the fact.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The detector that fired (`constraint-thrashing`, `threshold`, ...).
    pub detector: String,
    /// What it saw, in its own words (rates, available memory, ...),
    /// written out when shown: the simulator never shows it.
    pub reason: Reason,
    /// Containers found thrashing (empty for node-level detectors).
    pub thrashing: Vec<ContainerId>,
    /// How long the condition had lasted when it fired.
    pub lasted: Duration,
    /// Every candidate with its ranker score, best victim first.
    pub candidates: Vec<(ContainerId, f64)>,
}

/// Why a task was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RejectReason {
    /// The best-effort queue is at its limit; the job may retry.
    QueueFull,
    /// The task alone asks for more than the node's capacity: it can never fit.
    TooLarge,
}

/// One thing the policy wants done.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Action {
    /// Start a queued (or just submitted) task now.
    Launch { id: ContainerId },
    /// Bring a preempted task back: thaw it, restore it, or restart it.
    Resume { id: ContainerId, site: ResumeSite },
    /// Refuse a submitted task.
    Reject { id: ContainerId, reason: RejectReason },
    /// Take a best-effort container's memory back.
    Preempt { id: ContainerId, how: Preemption, evidence: Evidence },
    /// Push `bytes` of a container's memory out (proactive reclaim).
    Reclaim { id: ContainerId, bytes: Bytes },
    /// Keep a critical container's memory: never swapped, and never
    /// reclaimed below `min` where the node has memory floors.
    Protect { id: ContainerId, min: Option<Bytes> },
    /// Keep a production container's memory (policy `protect.production`):
    /// reclaimed only once nothing unprotected is left (v2 `memory.low`),
    /// so best-effort work pays for the node's shortage first.
    ProtectProduction { id: ContainerId },
}

impl Action {
    pub fn container(&self) -> ContainerId {
        match *self {
            Action::Launch { id }
            | Action::Resume { id, .. }
            | Action::Reject { id, .. }
            | Action::Preempt { id, .. }
            | Action::Reclaim { id, .. }
            | Action::Protect { id, .. }
            | Action::ProtectProduction { id } => id,
        }
    }
}
