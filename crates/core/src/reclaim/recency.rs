//! 001 (ACDC): reclaim first from the container whose last memory demand is
//! the oldest, one container at a time, until the shortfall is covered.
//!
//! ACDC stamps each cgroup when the kernel charges it a page. From outside
//! the kernel, a demand is what the counters show of one: usage growing by
//! at least `growth`, or major faults or refaults (pages it needed back).
//! A container reclaimed by mistake faults its pages back, becomes the most
//! recent, and is spared next time: ACDC's own self-correction (§IV-C).

use super::{Pacing, Reclaimer};
use crate::action::Action;
use crate::model::{Bytes, ContainerId, Observation};
use crate::time::Time;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug)]
struct Seen {
    /// The last demand (first sight counts as one).
    demand_at: Time,
    usage: Bytes,
    faults: u64,
}

#[derive(Debug)]
pub(super) struct Recency {
    pacing: Pacing,
    growth: Bytes,
    seen: BTreeMap<ContainerId, Seen>,
    order: Vec<(Time, ContainerId, Bytes)>,
}

impl Recency {
    pub fn new(pacing: Pacing, growth: Bytes) -> Recency {
        Recency { pacing, growth, seen: BTreeMap::new(), order: Vec::new() }
    }
}

impl Reclaimer for Recency {
    fn name(&self) -> &'static str {
        "recency"
    }

    fn plan(&mut self, obs: &Observation<'_>, out: &mut Vec<Action>) {
        for c in obs.containers {
            let faults = c.faults.major_faults.saturating_add(c.faults.refaults());
            let s = self.seen.entry(c.id).or_insert(Seen {
                demand_at: obs.now,
                usage: c.usage,
                faults,
            });
            let grew = c.usage >= s.usage.saturating_add(self.growth);
            if grew || faults > s.faults {
                s.demand_at = obs.now;
            }
            // The baseline follows usage down (reclaimed, freed) and jumps
            // on each demand, so slow creep adds up to one.
            if grew || c.usage < s.usage {
                s.usage = c.usage;
            }
            s.faults = faults;
        }
        let Some(mut short) = self.pacing.shortfall(obs) else { return };
        self.order.clear();
        for c in obs.containers.iter().filter(|c| self.pacing.asks(c)) {
            let at = self.seen.get(&c.id).map_or(obs.now, |s| s.demand_at);
            self.order.push((at, c.id, c.usage));
        }
        self.order.sort();
        for &(_, id, usage) in &self.order {
            if short == 0 {
                break;
            }
            let bytes = short.min(usage);
            out.push(Action::Reclaim { id, bytes });
            short -= bytes;
        }
    }

    fn forget(&mut self, id: ContainerId) {
        self.seen.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Class, ContainerStats, JobId, NodeStats};

    const MIB: Bytes = 1 << 20;

    fn c(id: u64, usage: Bytes, refaults: u64) -> ContainerStats {
        let mut s = ContainerStats::new(ContainerId(id), JobId(id), Class::Production, Time::ZERO);
        s.usage = usage;
        s.faults.refault_file = refaults;
        s
    }

    /// 001's scenario: A active (it keeps needing its pages), B idle but
    /// holding memory, C booting: the shortfall is taken from B, not A.
    #[test]
    fn the_idle_container_pays_before_the_active_one() {
        let mut r = Recency::new(Pacing::new(0.1, 1.0, false), MIB);
        let node_ok =
            NodeStats { capacity: 1000 * MIB, available: 500 * MIB, ..NodeStats::default() };
        let mut out = Vec::new();
        let obs =
            |now: u64, node, cs: &[ContainerStats], r: &mut Recency, out: &mut Vec<Action>| {
                r.plan(&Observation { now: Time::from_secs(now), node, containers: cs }, out);
            };
        // t=0..10: A and B grow; from t=10 B is idle, A keeps refaulting.
        obs(0, node_ok, &[c(1, 100 * MIB, 0), c(2, 100 * MIB, 0)], &mut r, &mut out);
        obs(10, node_ok, &[c(1, 400 * MIB, 0), c(2, 400 * MIB, 0)], &mut r, &mut out);
        for t in 11..20 {
            obs(t, node_ok, &[c(1, 400 * MIB, t), c(2, 400 * MIB, 0)], &mut r, &mut out);
        }
        assert!(out.is_empty(), "no shortfall, no reclaim");
        // C boots: 150 MiB short of the 100 MiB headroom.
        let short = NodeStats { capacity: 1000 * MIB, available: 0, ..NodeStats::default() };
        let cs = [c(1, 400 * MIB, 20), c(2, 400 * MIB, 0), c(3, 200 * MIB, 0)];
        obs(20, short, &cs, &mut r, &mut out);
        assert_eq!(out, vec![Action::Reclaim { id: ContainerId(2), bytes: 100 * MIB }]);
    }

    /// Production-first's first step: the shortfall is asked of best-effort
    /// containers alone, however old production's last demand is.
    #[test]
    fn best_effort_only_spares_production() {
        let mut r = Recency::new(Pacing::new(0.5, 1.0, true), MIB);
        let mut be = c(2, 300 * MIB, 0);
        be.class = Class::BestEffort;
        let cs = [c(1, 600 * MIB, 0), be];
        let node = NodeStats { capacity: 1000 * MIB, available: 0, ..NodeStats::default() };
        let mut out = Vec::new();
        r.plan(&Observation { now: Time::ZERO, node, containers: &cs }, &mut out);
        assert_eq!(out, vec![Action::Reclaim { id: ContainerId(2), bytes: 300 * MIB }]);
    }

    #[test]
    fn the_shortfall_spills_over_to_the_next_oldest_and_critical_is_spared() {
        let mut r = Recency::new(Pacing::new(0.5, 1.0, false), MIB);
        let mut crit = c(3, 900 * MIB, 0);
        crit.class = Class::Critical;
        let cs = [c(1, 100 * MIB, 0), c(2, 300 * MIB, 0), crit];
        let node = NodeStats { capacity: 1000 * MIB, available: 0, ..NodeStats::default() };
        let mut out = Vec::new();
        r.plan(&Observation { now: Time::ZERO, node, containers: &cs }, &mut out);
        // Same demand time: by id. 500 MiB short: all of c1, then 400 of c2's 300 → 300.
        assert_eq!(
            out,
            vec![
                Action::Reclaim { id: ContainerId(1), bytes: 100 * MIB },
                Action::Reclaim { id: ContainerId(2), bytes: 300 * MIB },
            ]
        );
    }
}
