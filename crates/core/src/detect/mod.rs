//! Detectors: is any container thrashing, is the node under pressure, and has
//! it lasted long enough to act on?
//!
//! A detector sees one observation at a time, in time order, and keeps what it
//! needs of the past itself. It never reads a clock or the kernel.

use crate::config::ConfigError;
use crate::model::{ContainerId, Observation};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// What a detector concludes from one observation.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Nothing to act on.
    Calm,
    /// A condition has started but not lasted long enough; look again no later
    /// than `decide_at` (the simulator schedules a sample then).
    Watching { decide_at: Time },
    /// Act now.
    Fire(Trigger),
}

/// Why a detector fired and whom it suspects.
#[derive(Clone, Debug, PartialEq)]
pub struct Trigger {
    /// Containers whose own evidence fired (empty for node-level detectors).
    pub suspects: Vec<ContainerId>,
    /// Whether the victim must be one of `suspects` (002: the guest job whose
    /// faults climb is the one suspended) or any best-effort container on the
    /// node (000: whoever thrashes, a best-effort container pays).
    pub victim_among_suspects: bool,
    /// How long the condition had lasted.
    pub lasted: Duration,
    /// The evidence in words, for the event log.
    pub reason: String,
}

/// One detector stage.
pub trait Detector: fmt::Debug + Send {
    /// The name used in config and events.
    fn name(&self) -> &'static str;

    /// Take one observation (times never go backwards) and conclude.
    fn observe(&mut self, obs: &Observation<'_>) -> Verdict;

    /// Forget the episode that just cost a victim, so it does not claim a
    /// second one (000 Algorithm 1, `clear_memcg_thrash`).
    fn clear(&mut self);

    /// Forget a container that left the node.
    fn forget(&mut self, id: ContainerId);
}

/// Which detector, with its parameters (`[detector]` in config).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum DetectorConfig {
    /// Mercury: no oversubscription, so nothing to detect.
    Static,
    /// Kuber / kubelet eviction: available memory below `fraction` of capacity.
    Threshold {
        #[serde(default = "default_threshold_fraction")]
        fraction: f64,
    },
    /// 000: a container's major faults or refaults keep increasing for
    /// `tolerance` seconds (`cgth_time`).
    ConstraintThrashing {
        #[serde(default = "default_tolerance")]
        tolerance: f64,
        /// Fault or refault events per second below which a sample does not
        /// count as increasing (filters background noise).
        #[serde(default = "default_min_rate")]
        min_rate: f64,
    },
    /// 002: a container's fault rate stays above `threshold` per second for
    /// `duration` seconds while its resident set does not grow.
    FaultRate {
        #[serde(default = "default_fault_threshold")]
        threshold: f64,
        #[serde(default = "default_fault_duration")]
        duration: f64,
        /// Growth of the resident set (fraction) that still counts as "not growing".
        #[serde(default = "default_rss_growth")]
        rss_growth: f64,
    },
}

fn default_threshold_fraction() -> f64 {
    0.1
}
fn default_tolerance() -> f64 {
    3.0
}
fn default_min_rate() -> f64 {
    1.0
}
fn default_fault_threshold() -> f64 {
    100.0
}
fn default_fault_duration() -> f64 {
    3.0
}
fn default_rss_growth() -> f64 {
    0.01
}

impl Default for DetectorConfig {
    fn default() -> DetectorConfig {
        DetectorConfig::ConstraintThrashing {
            tolerance: default_tolerance(),
            min_rate: default_min_rate(),
        }
    }
}

impl DetectorConfig {
    pub fn name(&self) -> &'static str {
        match self {
            DetectorConfig::Static => "static",
            DetectorConfig::Threshold { .. } => "threshold",
            DetectorConfig::ConstraintThrashing { .. } => "constraint-thrashing",
            DetectorConfig::FaultRate { .. } => "fault-rate",
        }
    }

    /// The tolerance window: how long a condition must last, and how long the
    /// node stays quiet after a preemption (one victim per window).
    pub fn window(&self) -> Duration {
        match *self {
            DetectorConfig::Static => Duration::ZERO,
            DetectorConfig::Threshold { .. } => Duration::from_secs(1),
            DetectorConfig::ConstraintThrashing { tolerance, .. } => secs(tolerance),
            DetectorConfig::FaultRate { duration, .. } => secs(duration),
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        todo!("detector helper")
    }

    pub fn build(&self) -> Box<dyn Detector> {
        todo!("detector helper")
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(if s.is_finite() && s > 0.0 { s } else { 0.0 })
}
