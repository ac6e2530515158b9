//! overbook's production-first detector: production's own thrashing acted
//! on at once, room made before production needs it, and best-effort
//! thrashing among itself tolerated as 000 does.
//!
//! Thrashing shows only once memory is already short: on a real node
//! production's page cache (a database's tables) is evicted, and its tail
//! latency lost, before any counter has risen for long. So besides 000's
//! per-container test (with production's short tolerance), this detector
//! keeps a floor of available memory: below `floor` × capacity a
//! best-effort container pays before production has to wait. The launcher
//! (with its `headroom` at least the floor) never fills that room itself.
//! Where the kernel measures a cgroup's own stall (v2 PSI), production's
//! stall fires too ([`super::production_stall`]).

use super::constraint_thrashing::ConstraintThrashing;
use super::production_stall::ProductionStall;
use super::threshold::Threshold;
use super::{Detector, Reason, Verdict};
use crate::model::{ContainerId, Observation};

#[derive(Debug)]
pub(super) struct ProductionFirst {
    thrashing: ConstraintThrashing,
    /// Production's PSI stall; none when its share is 0.
    stall: Option<ProductionStall>,
    /// No floor when the fraction is 0.
    floor: Option<Threshold>,
    /// Which part fired last: a preemption then clears only its episode.
    /// Production thrashing meanwhile keeps its count; were it cleared too,
    /// a floor firing every window would keep production's own evidence
    /// from ever reaching its tolerance.
    fired: Part,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Part {
    Thrashing,
    Stall,
    Floor,
}

impl ProductionFirst {
    pub fn new(
        thrashing: ConstraintThrashing,
        stall: Option<ProductionStall>,
        floor: f64,
    ) -> ProductionFirst {
        let floor = (floor > 0.0).then(|| Threshold::new(floor));
        ProductionFirst { thrashing, stall, floor, fired: Part::Thrashing }
    }
}

/// The earlier of two verdicts' next looks (`Calm` has none).
fn sooner(a: Verdict, b: Verdict) -> Verdict {
    match (a, b) {
        (Verdict::Watching { decide_at: x }, Verdict::Watching { decide_at: y }) => {
            Verdict::Watching { decide_at: x.min(y) }
        }
        (Verdict::Calm, other) | (other, Verdict::Calm) => other,
        (a, _) => a,
    }
}

impl Detector for ProductionFirst {
    fn name(&self) -> &'static str {
        "production-first"
    }

    fn observe(&mut self, obs: &Observation<'_>) -> Verdict {
        let thrashing = self.thrashing.observe(obs);
        self.fired = Part::Thrashing;
        if matches!(thrashing, Verdict::Fire(_)) {
            return thrashing;
        }
        let stall = self.stall.as_mut().map_or(Verdict::Calm, |s| s.observe(obs));
        if matches!(stall, Verdict::Fire(_)) {
            self.fired = Part::Stall;
            return stall;
        }
        let watching = sooner(thrashing, stall);
        match self.floor.as_mut().map(|f| f.observe(obs)) {
            Some(Verdict::Fire(mut trigger)) => {
                self.fired = Part::Floor;
                trigger.reason =
                    Reason::For("making room for production", Box::new(trigger.reason));
                // Room is made for production while its demand rises: a
                // victim must free its memory within what production can
                // wait (a kill, or a freeze or dump that quick). Taken as a
                // margin instead (a victim's work kept at leisure), the
                // floor's freezes kept every job's work on the real node
                // but their swap traffic cost production its tail
                // (PostgreSQL p99 2-3x isolated against about 1.2x with
                // kills; the simulator too: production's thrashing 1.7
                // task-hours at X2 against 0.9, best-effort JCR 78% and 77%).
                trigger.protected_stalled = true;
                Verdict::Fire(trigger)
            }
            _ => watching,
        }
    }

    fn clear(&mut self) {
        match self.fired {
            Part::Thrashing => self.thrashing.clear(),
            Part::Stall => self.stall.iter_mut().for_each(ProductionStall::clear),
            Part::Floor => self.floor.iter_mut().for_each(Threshold::clear),
        }
    }

    fn forget(&mut self, id: ContainerId) {
        self.thrashing.forget(id);
        if let Some(s) = &mut self.stall {
            s.forget(id);
        }
    }

    /// Its thrashing detector's: the stall detector's state is small.
    fn state_span(&self) -> (usize, usize) {
        self.thrashing.state_span()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Class, ContainerStats, JobId, NodeStats};
    use crate::time::Time;
    use std::time::Duration;

    const GB: u64 = 1 << 30;

    fn detector(floor: f64) -> ProductionFirst {
        let thrashing = ConstraintThrashing::production_first(
            Duration::from_secs(3),
            Duration::from_millis(300),
            1.0,
        );
        ProductionFirst::new(thrashing, None, floor)
    }

    fn look(d: &mut ProductionFirst, secs: f64, available: u64, refaults: u64) -> Verdict {
        let mut prod = ContainerStats::new(ContainerId(1), JobId(1), Class::Production, Time::ZERO);
        prod.faults.refault_file = refaults;
        d.observe(&Observation {
            now: Time::from_secs_f64(secs),
            node: NodeStats { capacity: 10 * GB, available, ..NodeStats::default() },
            containers: &[prod],
        })
    }

    #[test]
    fn below_the_floor_it_makes_room_before_anyone_thrashes() {
        let mut d = detector(0.1);
        assert_eq!(look(&mut d, 0.0, 2 * GB, 0), Verdict::Calm);
        let Verdict::Fire(t) = look(&mut d, 0.1, GB - 1, 0) else { panic!("fires below 10%") };
        assert!(t.reason.to_string().starts_with("making room for production"), "{}", t.reason);
        assert!(t.protected_stalled, "room is made at once, not at leisure");
        assert_eq!(look(&mut d, 0.2, GB, 0), Verdict::Calm, "at the floor: calm");
        // No floor: only thrashing counts.
        let mut d = detector(0.0);
        assert_eq!(look(&mut d, 0.0, 0, 0), Verdict::Calm);
        assert_eq!(look(&mut d, 0.1, 0, 0), Verdict::Calm);
    }

    #[test]
    fn production_s_own_thrashing_comes_first() {
        let mut d = detector(0.1);
        let mut fired = None;
        for i in 0..10u32 {
            if let Verdict::Fire(t) = look(&mut d, f64::from(i) / 10.0, 0, 100 * u64::from(i)) {
                fired = Some((i, t));
                break;
            }
        }
        // Below the floor from the first look; once production has
        // thrashed for 0.3 s the evidence is its own.
        let (i, t) = fired.expect("fires");
        assert_eq!(i, 0, "the floor fires first");
        assert!(t.reason.to_string().starts_with("making room"), "{}", t.reason);
        let mut d = detector(0.1);
        let mut last = None;
        for i in 0..=3u32 {
            last = Some(look(&mut d, f64::from(i) / 10.0, 5 * GB, 100 * u64::from(i)));
        }
        let Some(Verdict::Fire(t)) = last else { panic!("{last:?}") };
        assert!(
            t.protected_stalled && t.reason.to_string().contains("(production)"),
            "{}",
            t.reason
        );
    }

    #[test]
    fn a_preemption_for_the_floor_leaves_production_s_evidence_counting() {
        // Production thrashes below the floor: the floor fires every look
        // and each preemption clears only its own episode, so production's
        // thrashing still reaches its tolerance.
        let mut d = detector(0.1);
        let mut own = None;
        for i in 0..10u32 {
            let v = look(&mut d, f64::from(i) / 10.0, 0, 100 * u64::from(i));
            if let Verdict::Fire(t) = v {
                if t.reason.to_string().contains("(production) thrashing") {
                    own = Some(i);
                    break;
                }
                d.clear();
            }
        }
        assert_eq!(own, Some(3), "production's own evidence at 0.3 s");
    }

    /// Where the kernel gives a cgroup's PSI (v2), production's stall on
    /// memory is acted on in its tolerance even when no counter climbs.
    #[test]
    fn production_s_psi_stall_fires_within_its_tolerance() {
        let mut d = crate::detect::DetectorConfig::production_first().build();
        let mut fired = None;
        for i in 0..10u32 {
            let mut prod =
                ContainerStats::new(ContainerId(1), JobId(1), Class::Production, Time::ZERO);
            // Half of every 100 ms stalled, no fault nor refault.
            prod.stall = Some(Duration::from_millis(50 * u64::from(i)));
            let v = d.observe(&Observation {
                now: Time::from_secs_f64(f64::from(i) / 10.0),
                node: NodeStats { capacity: 10 * GB, available: 5 * GB, ..NodeStats::default() },
                containers: &[prod],
            });
            if let Verdict::Fire(t) = v {
                fired = Some((i, t));
                break;
            }
        }
        let (i, t) = fired.expect("fires");
        assert_eq!(i, 3, "0.3 s after the stall began");
        assert!(t.protected_stalled && t.reason.to_string().contains("PSI"), "{}", t.reason);
    }
}
