//! The event queue: a binary heap ordered by time, then by insertion order, so
//! that events at the same instant run in the order they were scheduled and
//! every run with the same seed is the same run.

use overbook_core::Time;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Something that happens to a node or a task at a point in virtual time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Event {
    /// Step the node's policy (a sample while it thrashes, or a time the policy asked for).
    Wake { node: u32 },
    /// A running task reaches its next memory change point or the end of its work.
    /// `epoch` must still match the task's, or the event is stale.
    TaskPoint { slot: u32, epoch: u32 },
    /// A preemption's memory is released (kill delay over, swap-out or dump done).
    Released { slot: u32, epoch: u32 },
    /// A resumed task is back in memory (thaw swapped in, or image restored).
    Resumed { slot: u32, epoch: u32 },
    /// A rejected task's job submits it again.
    Retry { slot: u32, epoch: u32 },
}

#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Reverse<(Time, u64, Event)>>,
    seq: u64,
}

impl EventQueue {
    pub fn push(&mut self, at: Time, ev: Event) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, ev)));
    }

    pub fn peek_time(&self) -> Option<Time> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    pub fn pop(&mut self) -> Option<(Time, Event)> {
        self.heap.pop().map(|Reverse((t, _, ev))| (t, ev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_instant_events_keep_their_order() {
        let mut q = EventQueue::default();
        q.push(Time(5), Event::Wake { node: 2 });
        q.push(Time(1), Event::Wake { node: 9 });
        q.push(Time(5), Event::Wake { node: 1 });
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![
                (Time(1), Event::Wake { node: 9 }),
                (Time(5), Event::Wake { node: 2 }),
                (Time(5), Event::Wake { node: 1 }),
            ]
        );
    }
}
