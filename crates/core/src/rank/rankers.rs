//! The four rankers. Each returns a finite score, higher = preempted first.

use super::Ranker;
use crate::model::{ContainerStats, Observation};

/// 000 Algorithm 1 line 21: memory over execution time, so one kill frees the
/// most memory while losing the least work. Runtime is floored at one second
/// so that a container started this instant does not score infinity.
#[derive(Debug)]
pub(super) struct MemoryPerRuntime;

impl Ranker for MemoryPerRuntime {
    fn name(&self) -> &'static str {
        "memory-per-runtime"
    }

    fn score(&self, c: &ContainerStats, obs: &Observation<'_>) -> f64 {
        let runtime = obs.now.since(c.started).as_secs_f64().max(1.0);
        c.usage as f64 / runtime
    }
}

/// 000's `score_only`: the user's `mem_adj_score` alone.
#[derive(Debug)]
pub(super) struct Score;

impl Ranker for Score {
    fn name(&self) -> &'static str {
        "score"
    }

    fn score(&self, c: &ContainerStats, _: &Observation<'_>) -> f64 {
        c.score as f64
    }
}

/// Kuber / kubelet: the most recently started loses the least work.
#[derive(Debug)]
pub(super) struct NewestFirst;

impl Ranker for NewestFirst {
    fn name(&self) -> &'static str {
        "newest-first"
    }

    fn score(&self, c: &ContainerStats, _: &Observation<'_>) -> f64 {
        c.started.as_secs_f64()
    }
}

/// 004 §5.2.2: the cheapest to checkpoint first. The score is minus the
/// seconds its dump would take, so it reads as a cost in the evidence.
#[derive(Debug)]
pub(super) struct CheckpointCost {
    /// Bytes per second; validated > 0, and guarded anyway.
    pub write_bandwidth: f64,
    pub incremental: bool,
}

impl Ranker for CheckpointCost {
    fn name(&self) -> &'static str {
        "checkpoint-cost"
    }

    fn score(&self, c: &ContainerStats, _: &Observation<'_>) -> f64 {
        let size = c.checkpoint_size(self.incremental) as f64;
        if self.write_bandwidth.is_finite() && self.write_bandwidth > 0.0 {
            -(size / self.write_bandwidth)
        } else {
            // Without a usable bandwidth the order by size is still right.
            -size
        }
    }
}
