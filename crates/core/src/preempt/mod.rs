//! Preemptors: how the chosen container pays (kill, freeze, checkpoint, or
//! the adaptive choice of 004 Algorithm 1), and where a checkpointed task is
//! resumed (004 Algorithm 2).

use crate::action::{Preemption, ResumeSite};
use crate::config::ConfigError;
use crate::model::{Bytes, ContainerStats};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// What a preemptor knows of the node's checkpoint machinery right now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PreemptContext {
    pub now: Time,
    /// Write and read bandwidth of the image store, bytes per second.
    pub store: StoreBandwidth,
    /// How long until the node's checkpoint queue is free (one dump at a time).
    pub dump_backlog: Duration,
    /// Whether checkpoints can be taken at all here (CRIU works).
    pub can_checkpoint: bool,
    /// Whether incremental dumps work here (soft-dirty tracking).
    pub can_incremental: bool,
}

/// Bandwidths of an image store, bytes per second.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoreBandwidth {
    pub write: f64,
    pub read: f64,
    /// Network bandwidth to the shared store, for remote resume.
    pub net: f64,
}

/// One preemptor stage.
pub trait Preemptor: fmt::Debug + Send {
    fn name(&self) -> &'static str;
    fn choose(&self, victim: &ContainerStats, ctx: &PreemptContext) -> Preemption;
}

/// Which preemptor (`[preemptor]` in config).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PreemptorConfig {
    #[default]
    Kill,
    Suspend,
    SuspendAndSwapOut,
    Checkpoint {
        #[serde(default = "default_true")]
        incremental: bool,
    },
    Adaptive {
        #[serde(default = "default_true")]
        incremental: bool,
    },
}

fn default_true() -> bool {
    true
}

impl PreemptorConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        todo!("preemptor helper")
    }

    pub fn build(&self) -> Box<dyn Preemptor> {
        todo!("preemptor helper")
    }
}

/// 004 Algorithm 2: restore where it is cheaper, local or remote; restart
/// when there is no image.
pub fn choose_resume_site(
    image: Option<Bytes>,
    store: &StoreBandwidth,
    local_queue: Duration,
    remote_queue: Duration,
) -> ResumeSite {
    let _ = (image, store, local_queue, remote_queue);
    todo!("preemptor helper")
}
