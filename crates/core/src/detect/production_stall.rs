//! Production's own stall, as the kernel measures it: the share of time
//! some of a production or critical container's tasks waited on memory
//! (its cgroup's PSI `some`, cgroup v2), held above `share` for
//! `tolerance`.
//!
//! 000's counters see thrashing once pages come back; PSI sees the wait
//! itself, reclaim included, which is the harm overbook exists to prevent.
//! For best-effort containers that would fire on pressure that is not
//! thrashing (see `constraint_thrashing`), so only protected classes are
//! watched here. Where a container's stall is not known (cgroup v1, the
//! simulator) this part never fires.

use super::{Reason, Trigger, Verdict};
use crate::model::{Class, ContainerId, Observation};
use crate::time::Time;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

#[derive(Debug)]
pub(super) struct ProductionStall {
    share: f64,
    tolerance: Duration,
    seen: BTreeMap<ContainerId, Seen>,
}

#[derive(Clone, Copy, Debug)]
struct Seen {
    at: Time,
    stall: Duration,
    /// Start of the current stretch above `share`, and its share so far.
    since: Option<(Time, Duration)>,
}

impl ProductionStall {
    pub fn new(share: f64, tolerance: Duration) -> ProductionStall {
        ProductionStall { share, tolerance, seen: BTreeMap::new() }
    }

    pub fn observe(&mut self, obs: &Observation<'_>) -> Verdict {
        let now = obs.now;
        let mut decide_at: Option<Time> = None;
        let mut hits: Vec<(ContainerId, Class, f64, Duration)> = Vec::new();
        for c in obs.containers.iter().filter(|c| !c.class.is_preemptible()) {
            let Some(stall) = c.stall else { continue };
            let seen = self.seen.entry(c.id).or_insert(Seen { at: now, stall, since: None });
            if now > seen.at {
                let grew = stall.saturating_sub(seen.stall);
                let share = grew.as_secs_f64() / (now - seen.at).as_secs_f64();
                seen.since = if share >= self.share {
                    let (from, stalled) = seen.since.unwrap_or((seen.at, Duration::ZERO));
                    Some((from, stalled + grew))
                } else {
                    None
                };
                seen.at = now;
                seen.stall = stall;
            } else if stall < seen.stall {
                // A counter that went back is a new cgroup of the same name.
                *seen = Seen { at: now, stall, since: None };
            }
            if let Some((from, stalled)) = seen.since {
                let lasted = now - from;
                if lasted >= self.tolerance {
                    let share = stalled.as_secs_f64() / lasted.as_secs_f64().max(f64::MIN_POSITIVE);
                    hits.push((c.id, c.class, share, lasted));
                } else {
                    let at = from + self.tolerance;
                    decide_at = Some(decide_at.map_or(at, |d| d.min(at)));
                }
            }
        }
        if hits.is_empty() {
            return match decide_at {
                Some(decide_at) => Verdict::Watching { decide_at },
                None => Verdict::Calm,
            };
        }
        let mut reason = String::new();
        for (i, (id, class, share, lasted)) in hits.iter().enumerate() {
            let sep = if i == 0 { "" } else { "; " };
            let _ = write!(
                reason,
                "{sep}{id} ({class}) stalled on memory {:.0}% of the time for {:.1}s (PSI some)",
                share * 100.0,
                lasted.as_secs_f64()
            );
        }
        Verdict::Fire(Trigger {
            suspects: hits.iter().map(|h| h.0).collect(),
            victim_among_suspects: false,
            protected_stalled: true,
            lasted: hits.iter().map(|h| h.3).max().unwrap_or_default(),
            reason: Reason::Text(reason),
        })
    }

    /// A preemption was made: the stall must last its tolerance again.
    pub fn clear(&mut self) {
        for s in self.seen.values_mut() {
            s.since = None;
        }
    }

    pub fn forget(&mut self, id: ContainerId) {
        self.seen.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ContainerStats, JobId, NodeStats};

    fn look(d: &mut ProductionStall, ms: u64, class: Class, stall_ms: Option<u64>) -> Verdict {
        let mut c = ContainerStats::new(ContainerId(1), JobId(1), class, Time::ZERO);
        c.stall = stall_ms.map(Duration::from_millis);
        d.observe(&Observation {
            now: Time::from_duration(Duration::from_millis(ms)),
            node: NodeStats::default(),
            containers: &[c],
        })
    }

    fn detector() -> ProductionStall {
        ProductionStall::new(0.1, Duration::from_millis(300))
    }

    #[test]
    fn a_production_stall_held_for_the_tolerance_fires() {
        let mut d = detector();
        assert_eq!(look(&mut d, 0, Class::Production, Some(0)), Verdict::Calm);
        // 30 ms stalled of every 100 ms: 30%, above 10%.
        assert_eq!(
            look(&mut d, 100, Class::Production, Some(30)),
            Verdict::Watching { decide_at: Time::from_duration(Duration::from_millis(300)) }
        );
        assert!(matches!(look(&mut d, 200, Class::Production, Some(60)), Verdict::Watching { .. }));
        let Verdict::Fire(t) = look(&mut d, 300, Class::Production, Some(90)) else {
            panic!("fires at 0.3 s")
        };
        assert!(t.protected_stalled && t.suspects == vec![ContainerId(1)]);
        assert!(
            t.reason.to_string().contains("(production) stalled on memory 30%"),
            "{}",
            t.reason
        );
        // Cleared by a preemption: it must last its tolerance again.
        d.clear();
        assert!(matches!(
            look(&mut d, 400, Class::Production, Some(120)),
            Verdict::Watching { .. }
        ));
    }

    #[test]
    fn a_short_or_light_stall_and_best_effort_s_own_never_fire() {
        let mut d = detector();
        let mut stall = 0;
        for ms in (0..=2000).step_by(100) {
            // 5%: below the share, however long.
            let v = look(&mut d, ms, Class::Critical, Some(stall));
            assert_eq!(v, Verdict::Calm, "{ms}");
            stall += 5;
        }
        let mut d = detector();
        for ms in (0..=2000).step_by(100) {
            let v = look(&mut d, ms, Class::BestEffort, Some(ms));
            assert_eq!(v, Verdict::Calm, "best-effort is not watched here");
        }
        let mut d = detector();
        assert_eq!(look(&mut d, 0, Class::Production, None), Verdict::Calm);
        assert_eq!(look(&mut d, 1000, Class::Production, None), Verdict::Calm, "unknown: v1");
        // Stalled for 0.2 s, then calm: a burst, not acted on.
        let mut d = detector();
        look(&mut d, 0, Class::Production, Some(0));
        look(&mut d, 100, Class::Production, Some(50));
        look(&mut d, 200, Class::Production, Some(100));
        assert_eq!(look(&mut d, 300, Class::Production, Some(100)), Verdict::Calm);
        assert_eq!(look(&mut d, 400, Class::Production, Some(100)), Verdict::Calm);
    }
}
