//! Reclaimers: before anyone thrashes, steer which container's memory the
//! kernel takes, so the right memory goes first.
//!
//! A reclaimer acts when the node's free memory (available, and no more
//! than capacity less what the containers are charged) falls below a
//! headroom (a fraction of capacity) and asks for exactly the shortfall, as
//! `Action::Reclaim { id, bytes }` per container, at most once per
//! `interval` (the kernel needs the time to do it). The agent turns each
//! into the kernel's own mechanism (v2 `memory.reclaim`; v1 a brief squeeze
//! of the container's limit); the simulator may take it from the container.
//!
//! * `recency` (001, ACDC): the container whose last memory demand is the
//!   oldest pays first, as much as it has, then the next;
//! * `weighted` (003): expected allocation `EA = TU × W / TW`, exceed
//!   `EX = U − EA`; the shortfall is taken from the largest exceed first, by
//!   water-filling usage per weight, so that under growing pressure usage
//!   converges to the weights, the same way every time.
//!
//! Critical containers are never asked (their memory is protected). With
//! `best_effort_only`, production is not asked either: the first step of
//! overbook's production-first policy, which pushes best-effort memory out
//! before anyone has to be preempted, and never production's.

mod recency;
mod weighted;

pub use weighted::water_fill;

use crate::action::Action;
use crate::config::{check_range, ConfigError};
use crate::model::{Bytes, Class, ContainerId, ContainerStats, Observation};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// One reclaimer stage.
pub trait Reclaimer: fmt::Debug + Send {
    /// The name used in config and events.
    fn name(&self) -> &'static str;

    /// Take one observation; append `Reclaim` actions if memory is short.
    fn plan(&mut self, obs: &Observation<'_>, out: &mut Vec<Action>);

    /// Forget a container that left the node.
    fn forget(&mut self, id: ContainerId);
}

/// Which reclaimer (`[reclaimer]` in config); `none` leaves reclaim to the
/// kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ReclaimerConfig {
    None {},
    Recency {
        /// Free memory to keep, as a fraction of capacity.
        #[serde(default = "default_headroom")]
        headroom: f64,
        /// Seconds between two plans.
        #[serde(default = "default_interval")]
        interval: f64,
        /// Growth of usage (bytes) that counts as a new memory demand.
        #[serde(default = "default_growth")]
        growth: u64,
        /// Ask only best-effort containers (production keeps its memory).
        #[serde(default)]
        best_effort_only: bool,
    },
    Weighted {
        #[serde(default = "default_headroom")]
        headroom: f64,
        #[serde(default = "default_interval")]
        interval: f64,
        #[serde(default)]
        best_effort_only: bool,
    },
}

fn default_headroom() -> f64 {
    0.05
}
fn default_interval() -> f64 {
    1.0
}
fn default_growth() -> u64 {
    1 << 20
}

impl Default for ReclaimerConfig {
    fn default() -> ReclaimerConfig {
        ReclaimerConfig::None {}
    }
}

impl ReclaimerConfig {
    /// The error's key is relative to `[reclaimer]`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            ReclaimerConfig::None {} => Ok(()),
            ReclaimerConfig::Recency { headroom, interval, .. }
            | ReclaimerConfig::Weighted { headroom, interval, .. } => {
                check_range("headroom", headroom, 0.0, 0.9)?;
                check_range("interval", interval, 0.01, 600.0)
            }
        }
    }

    /// The free memory the reclaimer keeps, as a fraction of capacity;
    /// `None` for `none`.
    pub fn headroom(&self) -> Option<f64> {
        match *self {
            ReclaimerConfig::None {} => None,
            ReclaimerConfig::Recency { headroom, .. }
            | ReclaimerConfig::Weighted { headroom, .. } => Some(headroom),
        }
    }

    /// `None` for `none`.
    pub fn build(&self) -> Option<Box<dyn Reclaimer>> {
        match *self {
            ReclaimerConfig::None {} => None,
            ReclaimerConfig::Recency { headroom, interval, growth, best_effort_only } => {
                let pacing = Pacing::new(headroom, interval, best_effort_only);
                Some(Box::new(recency::Recency::new(pacing, growth)))
            }
            ReclaimerConfig::Weighted { headroom, interval, best_effort_only } => {
                let pacing = Pacing::new(headroom, interval, best_effort_only);
                Some(Box::new(weighted::Weighted::new(pacing)))
            }
        }
    }
}

/// When to plan, how much, and who may be asked: the shared part of every
/// reclaimer.
#[derive(Clone, Copy, Debug)]
struct Pacing {
    headroom: f64,
    interval: Duration,
    best_effort_only: bool,
    next: Option<crate::time::Time>,
}

impl Pacing {
    fn new(headroom: f64, interval: f64, best_effort_only: bool) -> Pacing {
        Pacing {
            headroom,
            interval: Duration::from_secs_f64(interval),
            best_effort_only,
            next: None,
        }
    }

    /// Whether `c` may be asked to give memory back.
    fn asks(&self, c: &ContainerStats) -> bool {
        c.usage > 0
            && match c.class {
                Class::Critical => false,
                Class::Production => !self.best_effort_only,
                Class::BestEffort => true,
            }
    }

    /// The shortfall to reclaim now, if it is time and memory is short.
    fn shortfall(&mut self, obs: &Observation<'_>) -> Option<Bytes> {
        if self.next.is_some_and(|n| obs.now < n) {
            return None;
        }
        let want = crate::convert::to_u64(obs.node.capacity as f64 * self.headroom);
        // What nobody is charged for: the kernel reclaims when this runs
        // out, even while `available` still counts idle page cache (the
        // kubelet's working set leaves inactive cache out of use).
        let charged: Bytes = obs.containers.iter().map(|c| c.usage).sum();
        let free = obs.node.available.min(obs.node.capacity.saturating_sub(charged));
        let short = want.saturating_sub(free);
        if short == 0 {
            return None;
        }
        self.next = Some(obs.now + self.interval);
        Some(short)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_parse_validate_and_refuse_strays() {
        let cfg: ReclaimerConfig =
            toml::from_str("kind = \"weighted\"\nheadroom = 0.1\n").expect("ok");
        assert!(cfg.validate().is_ok() && cfg.build().is_some());
        let none: ReclaimerConfig = toml::from_str("kind = \"none\"\n").expect("ok");
        assert!(none.build().is_none());
        let bad: ReclaimerConfig =
            toml::from_str("kind = \"recency\"\nheadroom = 2.0\n").expect("parses");
        assert_eq!(bad.validate().unwrap_err().key, "headroom");
        assert!(toml::from_str::<ReclaimerConfig>("kind = \"weighted\"\ngrowth = 1\n").is_err());
    }

    /// Idle page cache counts as available (the kubelet's view) but the
    /// kernel still has to reclaim it when the containers' charges reach
    /// capacity: the shortfall is reckoned on what is charged.
    #[test]
    fn the_shortfall_counts_charged_page_cache() {
        use crate::model::{JobId, NodeStats};
        use crate::time::Time;
        let mut p = Pacing::new(0.1, 1.0, false);
        let mut c = ContainerStats::new(ContainerId(1), JobId(1), Class::Production, Time::ZERO);
        c.usage = 950;
        let node = NodeStats { capacity: 1000, available: 600, ..NodeStats::default() };
        let cs = [c];
        let obs = Observation { now: Time::ZERO, node, containers: &cs };
        assert_eq!(p.shortfall(&obs), Some(50));
    }
}
