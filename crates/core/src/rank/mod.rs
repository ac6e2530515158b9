//! Rankers: which best-effort container pays. Only preemptible (best-effort),
//! running containers are ever candidates, whatever the ranker.

use crate::config::ConfigError;
use crate::model::{ContainerId, ContainerStats, Observation};
use serde::{Deserialize, Serialize};
use std::fmt;

/// One ranker stage: a score per candidate; the highest score pays first.
pub trait Ranker: fmt::Debug + Send {
    fn name(&self) -> &'static str;
    fn score(&self, c: &ContainerStats, obs: &Observation<'_>) -> f64;
}

/// Which ranker (`[ranker]` in config).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum RankerConfig {
    /// 000: memory over execution time, so the big young task pays.
    #[default]
    MemoryPerRuntime,
    /// 000's `score_only`: the user's score decides.
    Score,
    /// Kuber / kubelet: the most recently started pays.
    NewestFirst,
    /// 004 §5.2.2: cheapest to checkpoint first (size / write bandwidth).
    CheckpointCost,
}

impl RankerConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        todo!("ranker helper")
    }

    pub fn build(&self) -> Box<dyn Ranker> {
        todo!("ranker helper")
    }
}

/// Rank the candidates of `obs` (preemptible and running; restricted to
/// `among` when given), best victim first, into `out`. Ties go to the lower id
/// so that the choice is deterministic.
pub fn rank_candidates(
    obs: &Observation<'_>,
    ranker: &dyn Ranker,
    among: Option<&[ContainerId]>,
    out: &mut Vec<(ContainerId, f64)>,
) {
    let _ = (obs, ranker, among, out);
    todo!("ranker helper")
}
