//! The Kubernetes / earlyoom baseline (000 §2.2): the node's available memory
//! below a fixed fraction of its capacity. Node-level, so it names no
//! suspect, and it has no window of its own: Kuber acts as soon as it sees the
//! threshold crossed (its kill delay is modelled by whoever applies actions).

use super::{Detector, Reason, Trigger, Verdict};
use crate::model::{ContainerId, Observation};
use crate::time::Time;

#[derive(Debug)]
pub(super) struct Threshold {
    fraction: f64,
    /// When available memory went below the threshold, for the evidence.
    below_since: Option<Time>,
}

impl Threshold {
    pub fn new(fraction: f64) -> Threshold {
        Threshold { fraction, below_since: None }
    }
}

impl Detector for Threshold {
    fn name(&self) -> &'static str {
        "threshold"
    }

    fn observe(&mut self, obs: &Observation<'_>) -> Verdict {
        let node = &obs.node;
        let limit = self.fraction * node.capacity as f64;
        if (node.available as f64) >= limit {
            self.below_since = None;
            return Verdict::Calm;
        }
        let since = *self.below_since.get_or_insert(obs.now);
        Verdict::Fire(Trigger {
            suspects: Vec::new(),
            victim_among_suspects: false,
            protected_stalled: false,
            lasted: obs.now - since,
            reason: Reason::Text(format!(
                "available {} of {} bytes, below {:.1}% of capacity",
                node.available,
                node.capacity,
                self.fraction * 100.0
            )),
        })
    }

    fn clear(&mut self) {
        self.below_since = None;
    }

    fn forget(&mut self, _: ContainerId) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NodeStats;
    use std::time::Duration;

    fn at(d: &mut Threshold, secs: u64, available: u64) -> Verdict {
        let node = NodeStats { capacity: 1000, available, ..NodeStats::default() };
        d.observe(&Observation { now: Time::from_secs(secs), node, containers: &[] })
    }

    #[test]
    fn fires_at_once_below_the_fraction_and_only_then() {
        let mut d = Threshold::new(0.1);
        assert_eq!(at(&mut d, 0, 100), Verdict::Calm);
        let Verdict::Fire(t) = at(&mut d, 1, 99) else { panic!() };
        assert!(t.suspects.is_empty() && !t.victim_among_suspects);
        assert_eq!(t.lasted, Duration::ZERO);
        let Verdict::Fire(t) = at(&mut d, 3, 50) else { panic!() };
        assert_eq!(t.lasted, Duration::from_secs(2));
        assert!(t.reason.to_string().contains("available 50 of 1000"), "{}", t.reason);
        d.clear();
        let Verdict::Fire(t) = at(&mut d, 4, 50) else { panic!() };
        assert_eq!(t.lasted, Duration::ZERO);
        assert_eq!(at(&mut d, 5, 500), Verdict::Calm);
    }

    #[test]
    fn a_node_without_capacity_is_never_under_pressure() {
        let mut d = Threshold::new(0.5);
        let obs = Observation { now: Time::ZERO, node: NodeStats::default(), containers: &[] };
        assert_eq!(d.observe(&obs), Verdict::Calm);
    }
}
