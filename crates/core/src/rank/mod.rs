//! Rankers: which best-effort container pays. Only preemptible (best-effort),
//! running containers are ever candidates, whatever the ranker.

mod rankers;

use crate::config::ConfigError;
use crate::model::{ContainerId, ContainerStats, Observation, RunState};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;

/// One ranker stage: a score per candidate; the highest score pays first.
pub trait Ranker: fmt::Debug + Send {
    fn name(&self) -> &'static str;
    fn score(&self, c: &ContainerStats, obs: &Observation<'_>) -> f64;
}

/// Which ranker (`[ranker]` in config).
///
/// Variants without parameters are empty struct variants, not unit variants,
/// so that a stray key next to `kind` is refused (serde ignores every other
/// key next to the tag of an internally tagged unit variant).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum RankerConfig {
    /// 000: memory over execution time, so the big young task pays.
    MemoryPerRuntime {},
    /// 000's `score_only`: the user's score decides.
    Score {},
    /// Kuber / kubelet: the most recently started pays.
    NewestFirst {},
    /// 004 §5.2.2: cheapest to checkpoint first (size / write bandwidth).
    ///
    /// All candidates of a node dump to the same store, so `write_bandwidth`
    /// does not change the order; it only makes the score (minus the dump
    /// time, in seconds) readable in the evidence. Set it to the node's store.
    CheckpointCost {
        /// Bytes per second; the default is 004's SSD (Table 3: 5 GiB in
        /// 43.73 s).
        #[serde(default = "default_write_bandwidth")]
        write_bandwidth: f64,
        /// Count only the dirty share of a container that already has an
        /// image, as an incremental dump would write.
        #[serde(default = "default_true")]
        incremental: bool,
    },
}

impl Default for RankerConfig {
    fn default() -> RankerConfig {
        RankerConfig::MemoryPerRuntime {}
    }
}

fn default_write_bandwidth() -> f64 {
    (5u64 << 30) as f64 / 43.73
}

fn default_true() -> bool {
    true
}

/// Faster than any storage or memory bus; catches unit mistakes.
const MAX_BANDWIDTH: f64 = 1e13;

impl RankerConfig {
    pub fn name(&self) -> &'static str {
        match self {
            RankerConfig::MemoryPerRuntime {} => "memory-per-runtime",
            RankerConfig::Score {} => "score",
            RankerConfig::NewestFirst {} => "newest-first",
            RankerConfig::CheckpointCost { .. } => "checkpoint-cost",
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            RankerConfig::CheckpointCost { write_bandwidth: bw, .. }
                if !(bw.is_finite() && bw > 0.0 && bw <= MAX_BANDWIDTH) =>
            {
                Err(ConfigError::new(
                    "write_bandwidth",
                    format!("{bw} is outside (0, {MAX_BANDWIDTH}] bytes per second"),
                ))
            }
            _ => Ok(()),
        }
    }

    pub fn build(&self) -> Box<dyn Ranker> {
        match *self {
            RankerConfig::MemoryPerRuntime {} => Box::new(rankers::MemoryPerRuntime),
            RankerConfig::Score {} => Box::new(rankers::Score),
            RankerConfig::NewestFirst {} => Box::new(rankers::NewestFirst),
            RankerConfig::CheckpointCost { write_bandwidth, incremental } => {
                Box::new(rankers::CheckpointCost { write_bandwidth, incremental })
            }
        }
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
    out.clear();
    let eligible = obs.containers.iter().filter(|c| {
        c.class.is_preemptible()
            && c.state == RunState::Running
            && match among {
                Some(ids) => ids.contains(&c.id),
                None => true,
            }
    });
    // A ranker written elsewhere might divide by zero; NaN would make the
    // order meaningless, so it ranks last instead.
    out.extend(eligible.map(|c| (c.id, finite_or_last(ranker.score(c, obs)))));
    out.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(Ordering::Equal).then(a.0.cmp(&b.0)));
}

fn finite_or_last(score: f64) -> f64 {
    if score.is_nan() {
        f64::MIN
    } else {
        score.clamp(f64::MIN, f64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Class, ImageInfo, JobId, NodeStats};
    use crate::time::Time;
    use proptest::prelude::*;

    const ALL: [RankerConfig; 4] = [
        RankerConfig::MemoryPerRuntime {},
        RankerConfig::Score {},
        RankerConfig::NewestFirst {},
        RankerConfig::CheckpointCost { write_bandwidth: 1e9, incremental: true },
    ];

    fn be(id: u64, started_secs: u64, usage: u64) -> ContainerStats {
        let mut c = ContainerStats::new(
            ContainerId(id),
            JobId(id),
            Class::BestEffort,
            Time::from_secs(started_secs),
        );
        c.usage = usage;
        c
    }

    fn ranked(
        cfg: &RankerConfig,
        now: u64,
        cs: &[ContainerStats],
        among: Option<&[ContainerId]>,
    ) -> Vec<u64> {
        let obs =
            Observation { now: Time::from_secs(now), node: NodeStats::default(), containers: cs };
        let mut out = Vec::new();
        rank_candidates(&obs, cfg.build().as_ref(), among, &mut out);
        out.iter().map(|(id, _)| id.0).collect()
    }

    #[test]
    fn memory_per_runtime_prefers_the_big_young_task() {
        // c1: 4 GB over 100 s; c2: 1 GB over 10 s; c3: 2 GB just started (floored at 1 s).
        let cs = [be(1, 0, 4 << 30), be(2, 90, 1 << 30), be(3, 100, 2 << 30)];
        assert_eq!(ranked(&RankerConfig::MemoryPerRuntime {}, 100, &cs, None), vec![3, 2, 1]);
    }

    #[test]
    fn score_and_newest_first_follow_their_field() {
        let mut cs = [be(1, 5, 0), be(2, 50, 0), be(3, 20, 0)];
        cs[0].score = 10;
        cs[1].score = -3;
        cs[2].score = 4;
        assert_eq!(ranked(&RankerConfig::Score {}, 100, &cs, None), vec![1, 3, 2]);
        assert_eq!(ranked(&RankerConfig::NewestFirst {}, 100, &cs, None), vec![2, 3, 1]);
    }

    #[test]
    fn checkpoint_cost_prefers_the_cheapest_dump() {
        let mut cs = [be(1, 0, 4 << 30), be(2, 0, 1 << 30), be(3, 0, 8 << 30)];
        // c3 is big but has an image and little dirty memory: cheapest incrementally.
        cs[2].image = Some(ImageInfo { size: 8 << 30, taken_at: Time::ZERO, shared: false });
        cs[2].dirty_fraction = Some(0.05);
        let inc = RankerConfig::CheckpointCost { write_bandwidth: 1e9, incremental: true };
        let full = RankerConfig::CheckpointCost { write_bandwidth: 1e9, incremental: false };
        assert_eq!(ranked(&inc, 10, &cs, None), vec![3, 2, 1]);
        assert_eq!(ranked(&full, 10, &cs, None), vec![2, 1, 3]);
        let obs = Observation { now: Time::ZERO, node: NodeStats::default(), containers: &cs };
        let secs = -full.build().score(&cs[1], &obs);
        assert!((secs - (1u64 << 30) as f64 / 1e9).abs() < 1e-9);
    }

    #[test]
    fn ties_go_to_the_lower_id_and_among_restricts() {
        let cs = [be(5, 0, 0), be(2, 0, 0), be(9, 0, 0)];
        for cfg in &ALL {
            assert_eq!(ranked(cfg, 10, &cs, None), vec![2, 5, 9], "{cfg:?}");
            assert_eq!(ranked(cfg, 10, &cs, Some(&[ContainerId(9), ContainerId(5)])), vec![5, 9]);
            assert!(ranked(cfg, 10, &cs, Some(&[])).is_empty());
        }
    }

    #[test]
    fn out_is_cleared_and_its_allocation_reused() {
        let cs = [be(1, 0, 10)];
        let obs =
            Observation { now: Time::from_secs(1), node: NodeStats::default(), containers: &cs };
        let mut out = Vec::with_capacity(64);
        out.push((ContainerId(99), 1.0));
        let cap = out.capacity();
        rank_candidates(&obs, RankerConfig::Score {}.build().as_ref(), None, &mut out);
        assert_eq!(out, vec![(ContainerId(1), 0.0)]);
        assert_eq!(out.capacity(), cap);
    }

    #[test]
    fn a_nan_score_from_a_foreign_ranker_ranks_last() {
        #[derive(Debug)]
        struct Broken;
        impl Ranker for Broken {
            fn name(&self) -> &'static str {
                "broken"
            }
            fn score(&self, c: &ContainerStats, _: &Observation<'_>) -> f64 {
                if c.id.0 == 1 {
                    f64::NAN
                } else {
                    f64::INFINITY
                }
            }
        }
        let cs = [be(1, 0, 0), be(2, 0, 0)];
        let obs = Observation { now: Time::ZERO, node: NodeStats::default(), containers: &cs };
        let mut out = Vec::new();
        rank_candidates(&obs, &Broken, None, &mut out);
        assert_eq!(out, vec![(ContainerId(2), f64::MAX), (ContainerId(1), f64::MIN)]);
    }

    #[test]
    fn every_ranker_parses_from_toml() {
        let parse =
            |t: &str| toml::from_str::<RankerConfig>(t).unwrap_or_else(|e| panic!("{t}: {e}"));
        assert_eq!(parse("kind = \"memory-per-runtime\""), RankerConfig::MemoryPerRuntime {});
        assert_eq!(parse("kind = \"score\""), RankerConfig::Score {});
        assert_eq!(parse("kind = \"newest-first\""), RankerConfig::NewestFirst {});
        let RankerConfig::CheckpointCost { write_bandwidth, incremental } =
            parse("kind = \"checkpoint-cost\"")
        else {
            panic!()
        };
        assert!((write_bandwidth - 122.77e6).abs() < 0.01e6, "{write_bandwidth}");
        assert!(incremental);
        assert_eq!(
            parse("kind = \"checkpoint-cost\"\nwrite_bandwidth = 2e9\nincremental = false"),
            RankerConfig::CheckpointCost { write_bandwidth: 2e9, incremental: false }
        );
        assert!(toml::from_str::<RankerConfig>("kind = \"checkpoint-cost\"\nweight = 1").is_err());
        for cfg in ALL {
            assert_eq!(cfg.validate(), Ok(()));
            assert_eq!(cfg.build().name(), cfg.name());
        }
    }

    #[test]
    fn validation_names_the_bad_key() {
        for bw in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e20] {
            let err = RankerConfig::CheckpointCost { write_bandwidth: bw, incremental: true }
                .validate()
                .unwrap_err();
            assert_eq!(err.key, "write_bandwidth");
        }
    }

    fn any_container() -> impl Strategy<Value = ContainerStats> {
        (
            0u64..50,
            prop::sample::select(Class::ALL.to_vec()),
            any::<bool>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<i64>(),
            prop::option::of(any::<f64>()),
            any::<bool>(),
        )
            .prop_map(|(id, class, frozen, started, usage, swap, score, dirty, image)| {
                let mut c = ContainerStats::new(ContainerId(id), JobId(id), class, Time(started));
                c.state = if frozen { RunState::Frozen } else { RunState::Running };
                c.usage = usage;
                c.swap = swap;
                c.score = score;
                c.dirty_fraction = dirty;
                c.image =
                    image.then_some(ImageInfo { size: usage, taken_at: Time::ZERO, shared: false });
                c
            })
    }

    proptest! {
        /// Whatever the containers, only running best-effort ones are ever
        /// ranked, all of them are, in order, with finite scores.
        #[test]
        fn only_running_best_effort_is_ever_ranked(
            cs in prop::collection::vec(any_container(), 0..40),
            now in any::<u64>(),
            which in 0usize..4,
        ) {
            let cfg = &ALL[which];
            let obs = Observation { now: Time(now), node: NodeStats::default(), containers: &cs };
            let mut out = Vec::new();
            rank_candidates(&obs, cfg.build().as_ref(), None, &mut out);
            let eligible = |c: &ContainerStats| {
                c.class == Class::BestEffort && c.state == RunState::Running
            };
            prop_assert_eq!(out.len(), cs.iter().filter(|c| eligible(c)).count());
            for (id, score) in &out {
                prop_assert!(score.is_finite());
                // Ids may repeat among random containers: some eligible one has it.
                prop_assert!(cs.iter().any(|c| c.id == *id && eligible(c)));
            }
            for w in out.windows(2) {
                prop_assert!(w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 <= w[1].0));
            }
        }
    }
}
