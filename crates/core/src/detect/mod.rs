//! Detectors: is any container thrashing, is the node under pressure, and has
//! it lasted long enough to act on?
//!
//! A detector sees one observation at a time, in time order, and keeps what it
//! needs of the past itself. It never reads a clock or the kernel.

mod constraint_thrashing;
mod fault_rate;
mod production_first;
mod production_stall;
mod samples;
mod r#static;
mod threshold;

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
    /// Whether a production or critical container's own thrashing fired:
    /// production is waiting now, so a preemption must free memory fast.
    pub protected_stalled: bool,
    /// How long the condition had lasted.
    pub lasted: Duration,
    /// The evidence, put in words only where it is shown ([`Reason`]).
    pub reason: Reason,
}

/// A trigger's evidence, kept as figures and written out where it is
/// shown (the agent's events). The simulator never shows it, and written
/// at every fire the words cost it 2.5% of its instructions.
#[derive(Clone, Debug, PartialEq)]
pub enum Reason {
    Text(String),
    /// Containers whose faults or refaults rose through their tolerance.
    Thrashing(Vec<ThrashHit>),
    /// Another detector's reason, said as serving this end.
    For(&'static str, Box<Reason>),
}

/// A container whose increase has lasted its tolerance, with its rates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThrashHit {
    pub id: ContainerId,
    pub class: crate::model::Class,
    pub lasted: Duration,
    pub major_rate: Option<f64>,
    pub refault_rate: Option<f64>,
}

/// As the words: what the event log and any reader want.
impl Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Reason::Text)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Text(text) => f.write_str(text),
            Reason::Thrashing(hits) => {
                for (i, h) in hits.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    let (id, class, lasted) = (h.id, h.class, h.lasted.as_secs_f64());
                    write!(f, "{sep}{id} ({class}) thrashing for {lasted:.1}s:")?;
                    if let Some(r) = h.major_rate {
                        write!(f, " major faults {r:.0}/s")?;
                    }
                    if let Some(r) = h.refault_rate {
                        write!(f, " refaults {r:.0}/s")?;
                    }
                }
                Ok(())
            }
            Reason::For(end, reason) => write!(f, "{end}: {reason}"),
        }
    }
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

    /// Where what `observe` reads next lives outside the detector itself,
    /// as (address, bytes); `(0, 0)` for nowhere. For a caller that steps
    /// thousands of nodes and asks the cache for it ahead: only a hint,
    /// read through nothing, stale once the state moves.
    fn state_span(&self) -> (usize, usize) {
        (0, 0)
    }
}

/// Which detector, with its parameters (`[detector]` in config).
///
/// Variants without parameters are empty struct variants (`Static {}`), not
/// unit variants: serde ignores every other key next to the tag of an
/// internally tagged unit variant, so `kind = "static"` with a stray
/// `fraction = 0.1` would parse without complaint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum DetectorConfig {
    /// Mercury: no planned oversubscription; its user-space OOM killer acts
    /// only when the node is out of memory.
    Static {},
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
    /// overbook's production-first detector: 000's, with production and
    /// critical containers acted on once their own thrashing has lasted
    /// `production_tolerance` seconds; best-effort thrashing among
    /// themselves keeps `tolerance`.
    ProductionFirst {
        #[serde(default = "default_tolerance")]
        tolerance: f64,
        #[serde(default = "default_production_tolerance")]
        production_tolerance: f64,
        #[serde(default = "default_min_rate")]
        min_rate: f64,
        /// The share of time a production or critical container's tasks
        /// may wait on memory (its cgroup's PSI `some`, where the kernel
        /// gives it) before it counts as stalling, held for
        /// `production_tolerance`. 0: not watched.
        #[serde(default = "default_production_stall")]
        production_stall: f64,
        /// Available memory kept free for production, a fraction of the
        /// node's capacity: below it a best-effort container pays before
        /// anyone thrashes. 0: no floor.
        #[serde(default = "default_floor")]
        floor: f64,
    },
    /// 002: a best-effort container's fault rate (major faults + refaults)
    /// stays above `threshold` per second for `duration` seconds while its
    /// resident set does not grow. Defaults are 002's prototype (§3.3):
    /// 20 pages/s over N = 2 s.
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
fn default_production_tolerance() -> f64 {
    0.3
}
fn default_production_stall() -> f64 {
    0.1
}
fn default_floor() -> f64 {
    0.05
}
fn default_min_rate() -> f64 {
    1.0
}
fn default_fault_threshold() -> f64 {
    20.0
}
fn default_fault_duration() -> f64 {
    2.0
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
    /// `production-first` with its defaults.
    pub fn production_first() -> DetectorConfig {
        DetectorConfig::ProductionFirst {
            tolerance: default_tolerance(),
            production_tolerance: default_production_tolerance(),
            min_rate: default_min_rate(),
            production_stall: default_production_stall(),
            floor: default_floor(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            DetectorConfig::Static {} => "static",
            DetectorConfig::Threshold { .. } => "threshold",
            DetectorConfig::ConstraintThrashing { .. } => "constraint-thrashing",
            DetectorConfig::ProductionFirst { .. } => "production-first",
            DetectorConfig::FaultRate { .. } => "fault-rate",
        }
    }

    /// The tolerance window: how long a condition must last, and how long the
    /// node stays quiet after a preemption (one victim per window).
    pub fn window(&self) -> Duration {
        match *self {
            // The node-level killers (Mercury's and Kuber's): one kill, then
            // a second for its memory to come back before the next.
            DetectorConfig::Static {} | DetectorConfig::Threshold { .. } => Duration::from_secs(1),
            DetectorConfig::ConstraintThrashing { tolerance, .. } => secs(tolerance),
            // A production stall is acted on again once the last victim's
            // memory had the shorter window to come back; best-effort
            // thrashing must last its own tolerance again after a clear.
            DetectorConfig::ProductionFirst { tolerance, production_tolerance, .. } => {
                secs(production_tolerance.min(tolerance))
            }
            DetectorConfig::FaultRate { duration, .. } => secs(duration),
        }
    }

    /// The share of capacity the detector keeps available (production-first's
    /// `floor`; 0 for the others). The launcher never fills it.
    pub fn floor(&self) -> f64 {
        match *self {
            DetectorConfig::ProductionFirst { floor, .. } => floor,
            _ => 0.0,
        }
    }

    /// Every number finite and within what the detector can work with; the
    /// error's key is relative to `[detector]`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            DetectorConfig::Static {} => Ok(()),
            DetectorConfig::Threshold { fraction } => check_open("fraction", fraction, 0.0, 1.0),
            DetectorConfig::ConstraintThrashing { tolerance, min_rate } => {
                check_above_zero("tolerance", tolerance, MAX_WINDOW_SECS)?;
                check_above_zero("min_rate", min_rate, MAX_RATE)
            }
            DetectorConfig::ProductionFirst {
                tolerance,
                production_tolerance,
                min_rate,
                production_stall,
                floor,
            } => {
                check_above_zero("tolerance", tolerance, MAX_WINDOW_SECS)?;
                check_above_zero("production_tolerance", production_tolerance, tolerance)?;
                check_above_zero("min_rate", min_rate, MAX_RATE)?;
                crate::config::check_range("production_stall", production_stall, 0.0, 1.0)?;
                crate::config::check_range("floor", floor, 0.0, 0.5)
            }
            DetectorConfig::FaultRate { threshold, duration, rss_growth } => {
                check_above_zero("threshold", threshold, MAX_RATE)?;
                check_above_zero("duration", duration, MAX_WINDOW_SECS)?;
                crate::config::check_range("rss_growth", rss_growth, 0.0, 1.0)
            }
        }
    }

    /// The detector this config describes. Never panics, even unvalidated:
    /// out-of-range numbers make a useless detector, not a crash.
    pub fn build(&self) -> Box<dyn Detector> {
        match *self {
            DetectorConfig::Static {} => Box::new(r#static::Static::default()),
            DetectorConfig::Threshold { fraction } => Box::new(threshold::Threshold::new(fraction)),
            DetectorConfig::ConstraintThrashing { tolerance, min_rate } => {
                Box::new(constraint_thrashing::ConstraintThrashing::new(secs(tolerance), min_rate))
            }
            DetectorConfig::ProductionFirst {
                tolerance,
                production_tolerance,
                min_rate,
                production_stall,
                floor,
            } => {
                let stall = (production_stall > 0.0).then(|| {
                    production_stall::ProductionStall::new(
                        production_stall,
                        secs(production_tolerance.min(tolerance)),
                    )
                });
                let thrashing = constraint_thrashing::ConstraintThrashing::production_first(
                    secs(tolerance),
                    secs(production_tolerance),
                    min_rate,
                );
                Box::new(production_first::ProductionFirst::new(thrashing, stall, floor))
            }
            DetectorConfig::FaultRate { threshold, duration, rss_growth } => {
                Box::new(fault_rate::FaultRate::new(threshold, secs(duration), rss_growth))
            }
        }
    }
}

/// Windows longer than ten minutes stop being "thrashing tolerated briefly".
const MAX_WINDOW_SECS: f64 = 600.0;
/// Far beyond any device's page-fault rate; catches unit mistakes.
const MAX_RATE: f64 = 1e9;

/// `value` finite and in (lo, hi).
fn check_open(key: &str, value: f64, lo: f64, hi: f64) -> Result<(), ConfigError> {
    if value.is_finite() && value > lo && value < hi {
        return Ok(());
    }
    Err(ConfigError::new(key, format!("{value} is outside ({lo}, {hi})")))
}

/// `value` finite and in (0, hi].
fn check_above_zero(key: &str, value: f64, hi: f64) -> Result<(), ConfigError> {
    if value.is_finite() && value > 0.0 && value <= hi {
        return Ok(());
    }
    Err(ConfigError::new(key, format!("{value} is outside (0, {hi}]")))
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(if s.is_finite() && s > 0.0 { s } else { 0.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> DetectorConfig {
        match toml::from_str(text) {
            Ok(c) => c,
            Err(e) => panic!("{text}: {e}"),
        }
    }

    #[test]
    fn a_reason_is_written_as_the_words_it_stands_for() {
        let hit = |id, class, major_rate, refault_rate| ThrashHit {
            id: ContainerId(id),
            class,
            lasted: Duration::from_millis(3250),
            major_rate,
            refault_rate,
        };
        let thrashing = Reason::Thrashing(vec![
            hit(3, crate::model::Class::BestEffort, Some(120.4), None),
            hit(7, crate::model::Class::Production, Some(9.0), Some(2000.0)),
        ]);
        let words = "c3 (best-effort) thrashing for 3.2s: major faults 120/s; c7 (production) \
                     thrashing for 3.2s: major faults 9/s refaults 2000/s";
        assert_eq!(thrashing.to_string(), words);
        let floor = Reason::For("making room for production", Box::new(thrashing));
        assert_eq!(floor.to_string(), format!("making room for production: {words}"));
        // Kept as words wherever it is written, and read back as them.
        let value = toml::Value::try_from(&floor).expect("serializes");
        assert_eq!(value, toml::Value::String(floor.to_string()));
        let back = Reason::deserialize(value).expect("deserializes");
        assert_eq!(back, Reason::Text(floor.to_string()));
    }

    #[test]
    fn every_detector_parses_from_toml_with_defaults() {
        assert_eq!(parse("kind = \"static\""), DetectorConfig::Static {});
        assert_eq!(parse("kind = \"threshold\""), DetectorConfig::Threshold { fraction: 0.1 });
        assert_eq!(
            parse("kind = \"threshold\"\nfraction = 0.2"),
            DetectorConfig::Threshold { fraction: 0.2 }
        );
        assert_eq!(
            parse("kind = \"constraint-thrashing\"\ntolerance = 5.0"),
            DetectorConfig::ConstraintThrashing { tolerance: 5.0, min_rate: 1.0 }
        );
        assert_eq!(parse("kind = \"constraint-thrashing\""), DetectorConfig::default());
        assert_eq!(
            parse("kind = \"fault-rate\"\nrss_growth = 0.05"),
            DetectorConfig::FaultRate { threshold: 20.0, duration: 2.0, rss_growth: 0.05 }
        );
        for cfg in [
            DetectorConfig::Static {},
            DetectorConfig::Threshold { fraction: 0.1 },
            DetectorConfig::default(),
            parse("kind = \"fault-rate\""),
        ] {
            cfg.validate().unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
            assert_eq!(cfg.build().name(), cfg.name());
        }
    }

    #[test]
    fn unknown_kinds_and_keys_are_refused() {
        assert!(toml::from_str::<DetectorConfig>("kind = \"psi\"").is_err());
        assert!(toml::from_str::<DetectorConfig>("kind = \"threshold\"\ntolerance = 3.0").is_err());
    }

    #[test]
    fn validation_names_the_bad_key() {
        let bad = [
            (DetectorConfig::Threshold { fraction: 1.0 }, "fraction"),
            (DetectorConfig::Threshold { fraction: f64::NAN }, "fraction"),
            (DetectorConfig::ConstraintThrashing { tolerance: 0.0, min_rate: 1.0 }, "tolerance"),
            (DetectorConfig::ConstraintThrashing { tolerance: 601.0, min_rate: 1.0 }, "tolerance"),
            (
                DetectorConfig::ConstraintThrashing { tolerance: 3.0, min_rate: f64::INFINITY },
                "min_rate",
            ),
            (DetectorConfig::ConstraintThrashing { tolerance: 3.0, min_rate: -1.0 }, "min_rate"),
            (
                DetectorConfig::FaultRate { threshold: 0.0, duration: 2.0, rss_growth: 0.0 },
                "threshold",
            ),
            (
                DetectorConfig::FaultRate { threshold: 20.0, duration: -2.0, rss_growth: 0.0 },
                "duration",
            ),
            (
                DetectorConfig::FaultRate { threshold: 20.0, duration: 2.0, rss_growth: 1.5 },
                "rss_growth",
            ),
        ];
        for (cfg, key) in bad {
            let err = cfg.validate().expect_err(key);
            assert_eq!(err.key, key, "{cfg:?}");
            assert_eq!(err.under("detector").key, format!("detector.{key}"));
        }
    }

    #[test]
    fn an_unvalidated_config_still_builds() {
        let cfg = DetectorConfig::ConstraintThrashing { tolerance: f64::NAN, min_rate: -1.0 };
        let mut d = cfg.build();
        let obs = Observation { now: Time::ZERO, node: Default::default(), containers: &[] };
        assert_eq!(d.observe(&obs), Verdict::Calm);
    }
}
