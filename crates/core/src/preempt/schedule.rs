//! When a checkpoint cannot be taken, and when a running task is pre-dumped:
//! decisions the agent once made on its own, here so the simulator can make
//! the same ones.

use crate::action::Preemption;
use crate::model::{Bytes, ContainerId};
use crate::time::Time;
use std::time::Duration;

/// What a checkpoint becomes where it cannot be taken (CRIU missing or
/// failing, the task not a command the node started): freeze and swap the
/// memory out where the node has swap (the work is kept), else kill.
pub fn checkpoint_fallback(swap_total: Bytes) -> Preemption {
    if swap_total > 0 {
        Preemption::FreezeAndSwapOut
    } else {
        Preemption::Kill
    }
}

/// A running task's standing for a pre-dump (004 §3.3.1: incremental
/// checkpoints build on one).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PreDumpCandidate {
    pub id: ContainerId,
    /// Preemptible (best-effort), running and not suspended.
    pub eligible: bool,
    /// When its current incarnation started.
    pub started: Time,
    /// When its last image (pre-dump or dump) was taken, if any.
    pub last_image: Option<Time>,
    /// Not before this time (a failed pre-dump backs off).
    pub not_before: Option<Time>,
}

/// The task to pre-dump now, if any: the first eligible one that has run
/// for `every` and whose last image is `every` old (one at a time, as a
/// node takes one dump at a time).
pub fn pre_dump_due(
    now: Time,
    every: Duration,
    candidates: impl IntoIterator<Item = PreDumpCandidate>,
) -> Option<ContainerId> {
    candidates.into_iter().find_map(|c| {
        let since = c.last_image.unwrap_or(c.started);
        let due = c.eligible
            && c.not_before.is_none_or(|t| now >= t)
            && now.since(c.started) >= every
            && now.since(since) >= every;
        due.then_some(c.id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(id: u64, started: u64, last: Option<u64>) -> PreDumpCandidate {
        PreDumpCandidate {
            id: ContainerId(id),
            eligible: true,
            started: Time::from_secs(started),
            last_image: last.map(Time::from_secs),
            not_before: None,
        }
    }

    #[test]
    fn a_checkpoint_that_cannot_be_taken_keeps_the_work_where_there_is_swap() {
        assert_eq!(checkpoint_fallback(1 << 30), Preemption::FreezeAndSwapOut);
        assert_eq!(checkpoint_fallback(0), Preemption::Kill);
    }

    #[test]
    fn a_task_is_pre_dumped_once_it_ran_a_period_and_its_image_is_a_period_old() {
        let every = Duration::from_secs(10);
        let now = Time::from_secs(30);
        assert_eq!(pre_dump_due(now, every, [candidate(1, 25, None)]), None, "too young");
        assert_eq!(pre_dump_due(now, every, [candidate(1, 0, Some(25))]), None, "fresh image");
        let due = [candidate(1, 25, None), candidate(2, 0, Some(15)), candidate(3, 0, None)];
        assert_eq!(pre_dump_due(now, every, due), Some(ContainerId(2)), "the first due");
        let mut backing_off = candidate(4, 0, None);
        backing_off.not_before = Some(Time::from_secs(31));
        assert_eq!(pre_dump_due(now, every, [backing_off]), None);
        let mut production = candidate(5, 0, None);
        production.eligible = false;
        assert_eq!(pre_dump_due(now, every, [production]), None);
    }
}
