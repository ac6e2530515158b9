//! 003: reclaim from the largest exceed over the weighted expected
//! allocation first.

use super::{Pacing, Reclaimer};
use crate::action::Action;
use crate::model::{Bytes, ContainerId, Observation};

#[derive(Debug)]
pub(super) struct Weighted {
    pacing: Pacing,
    /// Reused between plans.
    usage: Vec<(ContainerId, Bytes, u32)>,
    take: Vec<Bytes>,
}

impl Weighted {
    pub fn new(pacing: Pacing) -> Weighted {
        Weighted { pacing, usage: Vec::new(), take: Vec::new() }
    }
}

impl Reclaimer for Weighted {
    fn name(&self) -> &'static str {
        "weighted"
    }

    fn plan(&mut self, obs: &Observation<'_>, out: &mut Vec<Action>) {
        let Some(short) = self.pacing.shortfall(obs) else { return };
        self.usage.clear();
        self.usage.extend(
            obs.containers
                .iter()
                .filter(|c| self.pacing.asks(c))
                .map(|c| (c.id, c.usage, c.weight.max(1))),
        );
        let pairs: Vec<(Bytes, u32)> = self.usage.iter().map(|&(_, u, w)| (u, w)).collect();
        water_fill(&pairs, short, &mut self.take);
        // Largest exceed first, as the kernel would be asked in turn.
        let mut order: Vec<usize> = (0..self.usage.len()).filter(|&i| self.take[i] > 0).collect();
        order.sort_by(|&a, &b| {
            self.take[b].cmp(&self.take[a]).then(self.usage[a].0.cmp(&self.usage[b].0))
        });
        for i in order {
            out.push(Action::Reclaim { id: self.usage[i].0, bytes: self.take[i] });
        }
    }

    fn forget(&mut self, _id: ContainerId) {}
}

/// How much to take from each of `(usage, weight)` so that `need` bytes
/// come from the largest usage per weight first: the level `L` with
/// `Σ max(0, Uᵢ − L·Wᵢ) = need`, and `takeᵢ = max(0, Uᵢ − L·Wᵢ)`. With
/// equal usage and weights 1:2:3 this gives 003's table "Variation of usage
/// over time". If `need` exceeds everything, everything is taken.
pub fn water_fill(containers: &[(Bytes, u32)], need: Bytes, take: &mut Vec<Bytes>) {
    take.clear();
    take.resize(containers.len(), 0);
    let total: Bytes = containers.iter().map(|&(u, _)| u).sum();
    if need == 0 || containers.is_empty() {
        return;
    }
    if need >= total {
        take.iter_mut().zip(containers).for_each(|(t, &(u, _))| *t = u);
        return;
    }
    // Levels at which each container starts giving, highest first.
    let mut by_level: Vec<usize> = (0..containers.len()).collect();
    let level = |i: usize| containers[i].0 as f64 / f64::from(containers[i].1.max(1));
    by_level.sort_by(|&a, &b| level(b).total_cmp(&level(a)).then(a.cmp(&b)));
    // Add containers to the giving set while the level they start at still
    // leaves `need` unmet.
    let (mut sum_u, mut sum_w) = (0.0, 0.0);
    let mut l = 0.0;
    for (k, &i) in by_level.iter().enumerate() {
        sum_u += containers[i].0 as f64;
        sum_w += f64::from(containers[i].1.max(1));
        l = (sum_u - need as f64) / sum_w;
        let next = by_level.get(k + 1).map_or(0.0, |&j| level(j));
        if l >= next {
            break;
        }
    }
    let l = l.max(0.0);
    for (t, &(u, w)) in take.iter_mut().zip(containers) {
        let keep = crate::convert::to_u64((l * f64::from(w.max(1))).round());
        *t = u.saturating_sub(keep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Class, ContainerStats, JobId, NodeStats};
    use crate::time::Time;

    /// 003, "Variation of usage over time": three containers of 2000 MB,
    /// weights 1:2:3, 500 MB reclaimed per step. Rows as the slides give
    /// them, with their two slips corrected (1338 → 1333; row 6 is
    /// 583/1167/1750, which the slides' own rule gives).
    #[test]
    fn reproduces_003s_table_step_by_step() {
        let expected: [[u64; 3]; 8] = [
            [2000, 2000, 2000],
            [1500, 2000, 2000],
            [1000, 2000, 2000],
            [833, 1667, 2000],
            [667, 1333, 2000],
            [583, 1167, 1750],
            [500, 1000, 1500],
            [417, 833, 1250],
        ];
        let weights = [1u32, 2, 3];
        let mut usage = expected[0];
        let mut take = Vec::new();
        for row in &expected[1..] {
            let pairs: Vec<(Bytes, u32)> = usage.iter().copied().zip(weights).collect();
            water_fill(&pairs, 500, &mut take);
            for (u, t) in usage.iter_mut().zip(&take) {
                *u -= t;
            }
            for (got, want) in usage.iter().zip(row) {
                assert!(got.abs_diff(*want) <= 1, "{usage:?} vs {row:?}");
            }
            assert!(take.iter().sum::<u64>().abs_diff(500) <= 2, "{take:?}");
        }
    }

    #[test]
    fn takes_everything_when_asked_for_more_and_nothing_for_zero() {
        let mut take = Vec::new();
        water_fill(&[(10, 1), (20, 1)], 100, &mut take);
        assert_eq!(take, vec![10, 20]);
        water_fill(&[(10, 1), (20, 1)], 0, &mut take);
        assert_eq!(take, vec![0, 0]);
    }

    #[test]
    fn plans_the_shortfall_largest_exceed_first_and_spares_critical() {
        let mut r = Weighted::new(Pacing::new(0.1, 1.0, false));
        let mk = |id: u64, class, usage, weight| {
            let mut c = ContainerStats::new(ContainerId(id), JobId(id), class, Time::ZERO);
            c.usage = usage;
            c.weight = weight;
            c
        };
        let cs = [
            mk(1, Class::BestEffort, 400, 1),
            mk(2, Class::Production, 400, 3),
            mk(3, Class::Critical, 200, 1),
        ];
        let node = NodeStats { capacity: 1000, available: 0, ..NodeStats::default() };
        let mut out = Vec::new();
        r.plan(&Observation { now: Time::ZERO, node, containers: &cs }, &mut out);
        // 100 bytes short: all of it from c1 (400/1 is the largest level).
        assert_eq!(out, vec![Action::Reclaim { id: ContainerId(1), bytes: 100 }]);
        // Not again within the interval.
        out.clear();
        r.plan(&Observation { now: Time::from_millis(500), node, containers: &cs }, &mut out);
        assert!(out.is_empty());
    }
}
