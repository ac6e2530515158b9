//! Policy configuration: raw TOML (serde) is checked once, at load, into a
//! validated form; a bad value is refused with the key it sits at.

use crate::detect::DetectorConfig;
use crate::launch::LaunchConfig;
use crate::preempt::PreemptorConfig;
use crate::rank::RankerConfig;
use serde::{Deserialize, Serialize};

/// A configuration value that cannot work, with the dotted key it sits at.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct ConfigError {
    pub key: String,
    pub problem: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
        ConfigError { key: key.into(), problem: problem.into() }
    }

    /// The same error, one level deeper: `detector` + `tolerance` → `detector.tolerance`.
    pub fn under(self, parent: &str) -> ConfigError {
        ConfigError { key: format!("{parent}.{}", self.key), problem: self.problem }
    }
}

/// Check that a number is finite and within `[lo, hi]`.
pub fn check_range(key: &str, value: f64, lo: f64, hi: f64) -> Result<(), ConfigError> {
    if !value.is_finite() || value < lo || value > hi {
        return Err(ConfigError::new(key, format!("{value} is outside [{lo}, {hi}]")));
    }
    Ok(())
}

/// The whole node policy: one choice per stage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    pub detector: DetectorConfig,
    pub ranker: RankerConfig,
    pub preemptor: PreemptorConfig,
    pub launcher: LaunchConfig,
}

impl PolicyConfig {
    /// Every key checked; the first problem found is returned with its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.detector.validate().map_err(|e| e.under("detector"))?;
        self.ranker.validate().map_err(|e| e.under("ranker"))?;
        self.preemptor.validate().map_err(|e| e.under("preemptor"))?;
        self.launcher.validate().map_err(|e| e.under("launcher"))?;
        Ok(())
    }
}
