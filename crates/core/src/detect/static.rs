//! The Mercury baseline (000 §5.1): best-effort work only gets memory nobody
//! reserved, so oversubscription is never planned. Production can still claim
//! memory a best-effort task was admitted into (its reservation is
//! guaranteed, the best-effort one is not), and then Mercury's user-space OOM
//! killer acts: only when the node is out of memory, never before. Out of
//! memory means nothing available and, where the node reports its memory
//! stall time (PSI `some total`), tasks stalling on memory since the last
//! look: a node that is exactly full but not stalling is left alone.

use super::{Detector, Reason, Trigger, Verdict};
use crate::model::{ContainerId, Observation};

#[derive(Debug, Default)]
pub(super) struct Static {
    /// The node's stall time at the last observation.
    last_stall: Option<std::time::Duration>,
}

impl Detector for Static {
    fn name(&self) -> &'static str {
        "static"
    }

    fn observe(&mut self, obs: &Observation<'_>) -> Verdict {
        let node = &obs.node;
        let before = std::mem::replace(&mut self.last_stall, node.stall);
        if node.capacity == 0 || node.available > 0 {
            return Verdict::Calm;
        }
        let stalling = match (before, node.stall) {
            (Some(before), Some(now)) => now > before,
            (None, Some(_)) => false,
            (_, None) => true,
        };
        if !stalling {
            return Verdict::Calm;
        }
        Verdict::Fire(Trigger {
            suspects: Vec::new(),
            victim_among_suspects: false,
            protected_stalled: false,
            lasted: std::time::Duration::ZERO,
            reason: Reason::Text(format!(
                "out of memory: none of {} bytes available",
                node.capacity
            )),
        })
    }

    fn clear(&mut self) {}

    fn forget(&mut self, _: ContainerId) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NodeStats;
    use crate::time::Time;

    use std::time::Duration;

    fn at(d: &mut Static, available: u64, stall_ms: Option<u64>) -> Verdict {
        let stall = stall_ms.map(Duration::from_millis);
        let node = NodeStats { capacity: 1000, available, stall, ..NodeStats::default() };
        d.observe(&Observation { now: Time::ZERO, node, containers: &[] })
    }

    #[test]
    fn without_stall_figures_acts_only_when_the_node_is_out_of_memory() {
        let mut d = Static::default();
        assert_eq!(at(&mut d, 1000, None), Verdict::Calm);
        assert_eq!(at(&mut d, 1, None), Verdict::Calm);
        let Verdict::Fire(t) = at(&mut d, 0, None) else { panic!("out of memory must fire") };
        assert!(t.suspects.is_empty() && !t.victim_among_suspects);
        assert!(t.reason.to_string().contains("out of memory"), "{}", t.reason);
    }

    #[test]
    fn a_full_node_fires_only_while_its_tasks_stall_on_memory() {
        let mut d = Static::default();
        assert_eq!(at(&mut d, 0, Some(0)), Verdict::Calm, "no earlier stall figure to compare");
        assert_eq!(at(&mut d, 0, Some(0)), Verdict::Calm, "full but not stalling");
        assert!(matches!(at(&mut d, 0, Some(300)), Verdict::Fire(_)));
        assert_eq!(at(&mut d, 500, Some(900)), Verdict::Calm, "stalling with memory free");
        assert_eq!(at(&mut d, 0, Some(900)), Verdict::Calm);
    }
}
