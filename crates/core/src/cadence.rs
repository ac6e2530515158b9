//! When the policy is consulted: the node looked at in full and the
//! policy stepped on what it shows.
//!
//! Why a stage of the core: how often the policy looks decides how soon it
//! acts (a thrashing it has not seen, it cannot time), so the simulator
//! must consult it by the rule the node does. The agent polls and the
//! simulator runs on events, so the rule has a face for each:
//! [`Cadence::look_due`] for a loop that wakes every sample period and must
//! decide whether to read every container, and [`Cadence::next_look`] for
//! a simulator that steps on every change it makes (arrivals, ends,
//! resumes) and must schedule the looks no event brings. They agree: the
//! policy looks every sample period while memory is busy, when it asked to
//! (its `wake`), and, on a calm node, only when something changes (in the
//! agent: work waits, or free memory nears the reclaimer's headroom;
//! otherwise once per calm period, for changes it cannot see cheaply).

use crate::Time;
use std::time::Duration;

/// The sampling rule of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cadence {
    /// The period of looks while memory is busy.
    pub sample_period: Duration,
    /// The longest a calm node goes without a full look (the agent's:
    /// what it cannot see cheaply, such as a container that appeared).
    pub calm_period: Duration,
}

/// What a polling loop sees cheaply at each period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheapSignals {
    /// The node's memory filled since the last period (its cgroup hit its
    /// limit, or memory stall grew), or that cannot be told cheaply.
    pub memory_busy: bool,
    /// Work waits for the policy: a queued task, a suspended container,
    /// a task an earlier agent left.
    pub work_waiting: bool,
    /// Free memory is near the reclaimer's headroom.
    pub near_headroom: bool,
    /// The node's usage moved by more than what is worth telling since the
    /// last look (a Kubernetes node's offer follows it within seconds,
    /// where the calm period alone would let it lag).
    pub usage_moved: bool,
}

impl Cadence {
    /// Whether a polling loop reads every container and consults the
    /// policy at `now`, having last done so at `last_look`, with the policy
    /// having asked to look again at `wake_at`.
    pub fn look_due(
        &self,
        now: Time,
        last_look: Option<Time>,
        wake_at: Option<Time>,
        seen: CheapSignals,
    ) -> bool {
        let calm_over = last_look.is_none_or(|t| now.since(t) >= self.calm_period);
        let asked = wake_at.is_some_and(|w| now >= w);
        seen.memory_busy
            || seen.work_waiting
            || seen.near_headroom
            || seen.usage_moved
            || asked
            || calm_over
    }

    /// The next look an event-driven simulator schedules after consulting
    /// the policy at `now`: a sample period on while the node thrashes (its
    /// memory is busy), and when the policy asked (`wake`), whichever comes
    /// first; none if neither.
    pub fn next_look(&self, now: Time, thrashing: bool, wake: Option<Time>) -> Option<Time> {
        let busy = thrashing.then(|| now + self.sample_period);
        [wake, busy].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cadence() -> Cadence {
        Cadence { sample_period: Duration::from_millis(100), calm_period: Duration::from_secs(3) }
    }

    #[test]
    fn a_calm_node_is_looked_at_once_per_calm_period_unless_something_calls() {
        let c = cadence();
        let calm = CheapSignals::default();
        let t = Time::from_secs;
        assert!(c.look_due(t(0), None, None, calm), "the first look");
        assert!(!c.look_due(t(2), Some(t(0)), None, calm));
        assert!(c.look_due(t(3), Some(t(0)), None, calm), "the calm period is over");
        assert!(c.look_due(t(1), Some(t(0)), Some(t(1)), calm), "the policy asked");
        assert!(!c.look_due(t(1), Some(t(0)), Some(t(2)), calm), "not yet");
        for seen in [
            CheapSignals { memory_busy: true, ..calm },
            CheapSignals { work_waiting: true, ..calm },
            CheapSignals { near_headroom: true, ..calm },
            CheapSignals { usage_moved: true, ..calm },
        ] {
            assert!(c.look_due(t(1), Some(t(0)), None, seen), "{seen:?}");
        }
    }

    #[test]
    fn a_thrashing_node_is_looked_at_every_sample_period_or_sooner_if_asked() {
        let c = cadence();
        let now = Time::from_secs(10);
        let period = now + Duration::from_millis(100);
        assert_eq!(c.next_look(now, true, None), Some(period));
        assert_eq!(c.next_look(now, false, None), None);
        let soon = now + Duration::from_millis(30);
        assert_eq!(c.next_look(now, true, Some(soon)), Some(soon));
        assert_eq!(c.next_look(now, false, Some(Time::from_secs(20))), Some(Time::from_secs(20)));
        assert_eq!(c.next_look(now, true, Some(Time::from_secs(20))), Some(period));
    }
}
