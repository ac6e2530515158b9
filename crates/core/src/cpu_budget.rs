//! How much CPU best-effort containers may use together: what the node's
//! CPU target leaves once everything else has what it used (Koordinator's
//! CPU suppression: `node × target − (node used − best-effort used)`).
//!
//! Why "everything else" and not production alone: the kernel's threads,
//! the runtime and this agent compete with production for the same CPUs;
//! what is not best-effort is what best-effort work must leave room for.
//! Why the busiest of the last few readings and not the last: production's
//! load rises within a reading and falls back; a budget that followed it
//! down at once would hand the CPU back just before the next burst. It
//! rises with production at once and falls back only when production has
//! stayed low for `hold` readings.

use crate::{ContainerId, Time};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// The rule the budget follows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuBudgetRule {
    /// The node's CPUs.
    pub node_cpus: f64,
    /// The share of the node's CPUs the node may keep busy (0 to 1]: the
    /// rest is production's headroom.
    pub busy_target: f64,
    /// The least best-effort containers get together, in CPUs, however
    /// busy the rest is (so that they still progress, and can be checked
    /// on and stopped).
    pub floor: f64,
    /// How many readings a burst of the rest's use is remembered for.
    pub hold: usize,
}

/// Cumulative CPU time, as the kernel counts it, at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuReading {
    pub at: Time,
    /// The whole node's busy CPU time.
    pub node_used: Duration,
    /// Each best-effort container's own CPU time.
    pub best_effort_used: BTreeMap<ContainerId, Duration>,
}

/// What the budget was made of, for the event that explains it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuBudgetEvidence {
    /// The budget, in CPUs.
    pub cpus: f64,
    /// What everything but best-effort work used over the last reading,
    /// in CPUs (`None` before two readings).
    pub others_now: Option<f64>,
    /// The most it used over the readings held, in CPUs: what the budget
    /// leaves room for.
    pub others_held: f64,
}

/// The best-effort CPU budget of one node, from its readings.
#[derive(Clone, Debug)]
pub struct CpuBudget {
    rule: CpuBudgetRule,
    last: Option<CpuReading>,
    held: VecDeque<f64>,
}

impl CpuBudget {
    pub fn new(rule: CpuBudgetRule) -> Self {
        Self { rule, last: None, held: VecDeque::new() }
    }

    /// The budget after `reading`. Before a second reading nothing is
    /// known of the rest's use, and production comes first: the floor.
    /// A container in only one of two readings (started or gone between
    /// them) counts nothing to best-effort work: what it used, the node's
    /// figure counts to the rest, which errs towards production.
    pub fn observe(&mut self, reading: CpuReading) -> CpuBudgetEvidence {
        let others_now = self.last.as_ref().and_then(|last| others_used(last, &reading));
        if let Some(others) = others_now {
            self.held.push_back(others.clamp(0.0, self.rule.node_cpus.max(0.0)));
            while self.held.len() > self.rule.hold.max(1) {
                self.held.pop_front();
            }
        }
        self.last = Some(reading);
        let ceiling = self.rule.node_cpus * self.rule.busy_target;
        let (cpus, others_held) = match self.held.iter().copied().reduce(f64::max) {
            None => (self.rule.floor, self.rule.node_cpus),
            Some(held) => ((ceiling - held).max(self.rule.floor), held),
        };
        CpuBudgetEvidence { cpus, others_now, others_held }
    }
}

/// What everything but best-effort work used between two readings, in
/// CPUs; `None` when no time passed (or the clock went back).
fn others_used(earlier: &CpuReading, later: &CpuReading) -> Option<f64> {
    let elapsed = later.at.since(earlier.at).as_secs_f64();
    if elapsed <= 0.0 || later.at <= earlier.at {
        return None;
    }
    let node = later.node_used.saturating_sub(earlier.node_used);
    let best_effort: Duration = (later.best_effort_used.iter())
        .filter_map(|(id, now)| {
            earlier.best_effort_used.get(id).map(|then| now.saturating_sub(*then))
        })
        .sum();
    Some(node.saturating_sub(best_effort).as_secs_f64() / elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const RULE: CpuBudgetRule =
        CpuBudgetRule { node_cpus: 4.0, busy_target: 0.75, floor: 0.2, hold: 3 };

    /// Readings one second apart in which the rest uses `others[i]` CPUs
    /// and one best-effort container `be[i]`.
    fn readings(others: &[f64], be: &[f64]) -> Vec<CpuReading> {
        let mut node = Duration::ZERO;
        let mut mine = Duration::ZERO;
        let mut out = vec![CpuReading {
            at: Time::from_secs(10),
            node_used: node,
            best_effort_used: [(ContainerId(1), mine)].into(),
        }];
        for (i, (o, b)) in others.iter().zip(be).enumerate() {
            node += Duration::from_secs_f64(o + b);
            mine += Duration::from_secs_f64(*b);
            out.push(CpuReading {
                at: Time::from_secs(11 + i as u64),
                node_used: node,
                best_effort_used: [(ContainerId(1), mine)].into(),
            });
        }
        out
    }

    #[test]
    fn the_floor_until_the_rest_s_use_is_known_then_what_the_target_leaves() {
        let mut b = CpuBudget::new(RULE);
        let mut seen = readings(&[1.0], &[2.5]).into_iter().map(|r| b.observe(r));
        let first = seen.next().expect("first");
        assert_eq!((first.cpus, first.others_now), (0.2, None));
        let second = seen.next().expect("second");
        assert!((second.cpus - 2.0).abs() < 1e-6, "3 of 4 CPUs less 1 used: {second:?}");
        assert!((second.others_now.expect("known") - 1.0).abs() < 1e-6);
    }

    #[test]
    fn a_burst_is_held_for_hold_readings_then_let_go() {
        let mut b = CpuBudget::new(RULE);
        let others = [0.5, 2.0, 0.5, 0.5, 0.5];
        let got: Vec<f64> =
            (readings(&others, &[1.0; 5]).into_iter()).map(|r| b.observe(r).cpus).skip(1).collect();
        let want = [2.5, 1.0, 1.0, 1.0, 2.5];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{got:?} against {want:?}");
        }
    }

    #[test]
    fn a_container_that_came_or_went_counts_to_the_rest() {
        let mut b = CpuBudget::new(RULE);
        let at = |s, node: f64, be: &[(u64, f64)]| CpuReading {
            at: Time::from_secs(s),
            node_used: Duration::from_secs_f64(node),
            best_effort_used: (be.iter())
                .map(|&(id, used)| (ContainerId(id), Duration::from_secs_f64(used)))
                .collect(),
        };
        b.observe(at(0, 100.0, &[(1, 50.0)]));
        // Container 1 used 1 s more, container 2 is new with 5 s: of the
        // node's 2 s, 1 s is the rest's.
        let e = b.observe(at(1, 102.0, &[(1, 51.0), (2, 5.0)]));
        assert!((e.others_now.expect("known") - 1.0).abs() < 1e-6, "{e:?}");
    }

    #[test]
    fn no_time_passed_changes_nothing() {
        let mut b = CpuBudget::new(RULE);
        let r = readings(&[1.0], &[1.0]);
        b.observe(r[0].clone());
        let before = b.observe(r[1].clone());
        let again = b.observe(r[1].clone());
        assert_eq!(again.others_now, None);
        assert_eq!(again.cpus, before.cpus);
    }

    proptest! {
        /// Whatever the readings: never below the floor, never above what
        /// the target allows (unless the floor is), and never more than
        /// the target leaves once the rest's busiest held reading is taken.
        #[test]
        fn the_budget_stays_between_the_floor_and_the_target(
            others in prop::collection::vec(0.0f64..4.0, 1..20),
            be in prop::collection::vec(0.0f64..4.0, 20),
            floor in 0.01f64..4.0,
            target in 0.05f64..=1.0,
            hold in 1usize..6,
        ) {
            let rule = CpuBudgetRule { node_cpus: 4.0, busy_target: target, floor, hold };
            let mut b = CpuBudget::new(rule);
            let mut seen = Vec::new();
            for r in readings(&others, &be[..others.len()]) {
                let e = b.observe(r);
                prop_assert!(e.cpus >= floor - 1e-9);
                prop_assert!(e.cpus <= (4.0 * target).max(floor) + 1e-9);
                if let Some(o) = e.others_now {
                    seen.push(o);
                    let start = seen.len().saturating_sub(hold);
                    let held = seen[start..].iter().copied().fold(0.0, f64::max);
                    prop_assert!((e.cpus - (4.0 * target - held).max(floor)).abs() < 1e-6);
                }
            }
        }

        /// The more the rest uses, the less best-effort work gets.
        #[test]
        fn more_used_by_the_rest_never_gives_best_effort_more(
            base in prop::collection::vec(0.0f64..3.0, 1..10),
            extra in 0.0f64..1.0,
            at in 0usize..10,
        ) {
            let more: Vec<f64> = (base.iter().enumerate())
                .map(|(i, o)| if i == at % base.len() { o + extra } else { *o })
                .collect();
            let be = vec![0.5; base.len()];
            let (mut lo, mut hi) = (CpuBudget::new(RULE), CpuBudget::new(RULE));
            for (a, b) in readings(&base, &be).into_iter().zip(readings(&more, &be)) {
                prop_assert!(hi.observe(b).cpus <= lo.observe(a).cpus + 1e-9);
            }
        }
    }
}
