//! The event queue, ordered by time, then by the order events were scheduled
//! in, so that events at the same instant run in the order they were
//! scheduled and every run with the same seed is the same run.
//!
//! Events are never scheduled before the last one taken, so the queue is a
//! radix heap (Ahuja, Mehlhorn, Orlin and Tarjan 1990) on the 128-bit key
//! (time, order), in bytes rather than bits: bucket (level, digit) holds
//! the keys that first differ from the last key taken in the byte at that
//! level, and have that byte there. Taking the least key empties bucket 0,
//! or splits the first non-empty bucket into lower ones. A binary radix
//! heap moved an event about ten times on its way down (one level per
//! halving of the queue); sixteen ways a level, a quarter as often, and 256
//! ways, a third less again (1.7% fewer instructions in all at 1,000
//! nodes; a two-level map of non-empty buckets keeps the search for the
//! first one as short as with sixteen ways). Every bucket is a flat
//! vector. The order is part of the key because many events can share an
//! instant (nodes' looks at the same sample tick): bucket 0 then holds
//! one, not all of them.

use overbook_core::Time;

/// Something that happens to a node or a task at a point in virtual time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Event {
    /// Step the node's policy (a sample while it thrashes, or a time the policy asked for).
    Wake { node: u32 },
    /// A running task on the node reaches its next memory change point or the
    /// end of its work. `epoch` must still match the node's, or the event is
    /// stale. `slot` is the task whose point it is (while the epoch matches).
    Point { node: u32, epoch: u32, slot: u32 },
    /// A preemption's memory is released (kill delay over, swap-out or dump done).
    Released { slot: u32, epoch: u32 },
    /// A resumed task is back in memory (thaw swapped in, or image restored).
    Resumed { slot: u32, epoch: u32 },
    /// A rejected task's job submits it again.
    Retry { slot: u32, epoch: u32 },
}

/// Bits in a digit, and digits in a key.
const DIGIT: u32 = 8;
const RADIX: usize = 1 << DIGIT;
const LEVELS: usize = 128 / DIGIT as usize;
/// The instant's own bucket, then one per (level, digit).
const BUCKETS: usize = 1 + LEVELS * RADIX;
/// Words of the map of non-empty buckets (bucket `b` is bit `b - 1`).
const WORDS: usize = (LEVELS * RADIX).div_ceil(64);
// `EventQueue::words` has a bit for each word.
const _: () = assert!(WORDS <= 64);

/// The most entries an emptied bucket keeps room for.
const KEPT: usize = 256;

/// An event keyed by its time, then its place in the order of scheduling.
#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u128,
    ev: Event,
}

fn key(at: Time, seq: u64) -> u128 {
    (u128::from(at.0) << 64) | u128::from(seq)
}

/// A key's high and low 64 bits.
fn halves(key: u128) -> [u64; 2] {
    use overbook_core::convert::u128_to_u64;
    [u128_to_u64(key >> 64), u128_to_u64(key & u128::from(u64::MAX))]
}

fn time(key: u128) -> Time {
    Time((key >> 64) as u64)
}

#[derive(Debug)]
pub struct EventQueue {
    buckets: Vec<Vec<Entry>>,
    /// Bit `b - 1` set when bucket `b` (1..BUCKETS) holds events.
    full: [u64; WORDS],
    /// Bit `w` set when word `w` of `full` is not 0.
    words: u64,
    /// The last key taken (or peeked at): no key in the queue is below it.
    last: u128,
    len: usize,
    seq: u64,
    /// Where in bucket 0 its first event is, while known: the engine asks
    /// for the next event four times an event (its time, to take it, and
    /// to prefetch the one after, twice), and bucket 0 changes far less
    /// often.
    head: Option<usize>,
}

impl Default for EventQueue {
    fn default() -> EventQueue {
        EventQueue {
            buckets: vec![Vec::new(); BUCKETS],
            full: [0; WORDS],
            words: 0,
            last: 0,
            len: 0,
            seq: 0,
            head: None,
        }
    }
}

impl EventQueue {
    #[inline]
    pub fn push(&mut self, at: Time, ev: Event) {
        let seq = self.stamp();
        self.push_stamped(at, seq, ev);
    }

    /// A place in the order of events scheduled, for an event pushed later
    /// with `push_stamped` (it then runs as if pushed now).
    #[inline]
    pub fn stamp(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Push with a place from `stamp`. An event keyed before the last one
    /// taken (only possible at the same instant) is simply next.
    #[inline]
    pub fn push_stamped(&mut self, at: Time, seq: u64, ev: Event) {
        self.put(Entry { key: key(at, seq), ev });
        self.len += 1;
    }

    #[inline(always)]
    fn put(&mut self, e: Entry) {
        let b = self.bucket(e.key);
        self.buckets[b].push(e);
        if b > 0 {
            let w = (b - 1) / 64;
            self.full[w] |= 1 << ((b - 1) % 64);
            self.words |= 1 << w;
        } else {
            self.head = None;
        }
    }

    #[inline(always)]
    fn bucket(&self, k: u128) -> usize {
        if k <= self.last {
            return 0;
        }
        // In 64-bit halves: the time's when it differs (nearly always),
        // else the order's; one 128-bit shift by a variable costs more.
        let ([high, low], [last_high, last_low]) = (halves(k), halves(self.last));
        let (word, base, differ) = if high != last_high {
            (high, LEVELS / 2, high ^ last_high)
        } else {
            (low, 0, low ^ last_low)
        };
        let level = (63 - differ.leading_zeros()) / DIGIT;
        let digit =
            overbook_core::convert::u64_to_usize((word >> (level * DIGIT)) & (RADIX as u64 - 1));
        1 + (base + level as usize) * RADIX + digit
    }

    /// The first non-empty bucket after bucket 0.
    fn first_full(&self) -> Option<usize> {
        let w = self.words.trailing_zeros() as usize;
        self.full.get(w).map(|bits| w * 64 + bits.trailing_zeros() as usize + 1)
    }

    /// Make bucket 0 hold the least event; false when the queue is empty.
    /// The engine asks four times an event, and bucket 0 is split into
    /// far less often: the check stays inline, the split does not.
    #[inline(always)]
    fn settle(&mut self) -> bool {
        !self.buckets[0].is_empty() || self.split()
    }

    /// `settle` when bucket 0 is empty: split the first non-empty bucket.
    #[inline(never)]
    fn split(&mut self) -> bool {
        if self.len == 0 {
            return false;
        }
        let Some(b) = self.first_full() else {
            return false;
        };
        let w = (b - 1) / 64;
        self.full[w] &= !(1 << ((b - 1) % 64));
        if self.full[w] == 0 {
            self.words &= !(1 << w);
        }
        let mut moving = std::mem::take(&mut self.buckets[b]);
        self.last = moving.iter().map(|e| e.key).min().unwrap_or(self.last);
        for e in moving.drain(..) {
            self.put(e);
        }
        // Keep the emptied vector's allocation for the bucket, unless it
        // is large: a high bucket fills once a while (the day's first
        // hour puts every node's first point in a few), and 512 buckets
        // each keeping the most they ever held came to 40 MiB at 12,500
        // nodes. With 4,096 buckets, keeping up to 1,024 entries each
        // still cost 6 MiB more than 256 at 12,500 nodes.
        if moving.capacity() <= KEPT {
            self.buckets[b] = moving;
        }
        true
    }

    /// The index in bucket 0 of its first event.
    #[inline(always)]
    fn least(&mut self) -> Option<usize> {
        if self.head.is_none() {
            // Bucket 0 nearly always holds the one event split into it:
            // no search, and no call to make one.
            self.head = if self.buckets[0].len() == 1 { Some(0) } else { self.find_head() };
        }
        self.head
    }

    #[inline(never)]
    fn find_head(&self) -> Option<usize> {
        let b = &self.buckets[0];
        // The event itself breaks a tie: a node's stale point event can
        // share its time and place with the live one.
        (0..b.len()).min_by_key(|&i| (b[i].key, b[i].ev))
    }

    #[inline]
    pub fn peek_time(&mut self) -> Option<Time> {
        if !self.settle() {
            return None;
        }
        let i = self.least()?;
        Some(time(self.buckets[0][i].key))
    }

    /// The event `pop` would take now.
    #[inline]
    pub fn peek(&mut self) -> Option<Event> {
        if !self.settle() {
            return None;
        }
        let i = self.least()?;
        Some(self.buckets[0][i].ev)
    }

    #[inline]
    pub fn pop(&mut self) -> Option<(Time, Event)> {
        if !self.settle() {
            return None;
        }
        let i = self.least()?;
        let e = self.buckets[0].swap_remove(i);
        self.head = None;
        self.len -= 1;
        Some((time(e.key), e.ev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

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

    #[test]
    fn a_stamp_keeps_its_place() {
        let mut q = EventQueue::default();
        let early = q.stamp();
        q.push(Time(3), Event::Wake { node: 1 });
        q.push_stamped(Time(3), early, Event::Wake { node: 0 });
        assert_eq!(q.pop(), Some((Time(3), Event::Wake { node: 0 })));
        assert_eq!(q.pop(), Some((Time(3), Event::Wake { node: 1 })));
        assert_eq!(q.pop(), None);
    }

    /// Pushes at or after the last time taken, stamped now or earlier, in
    /// the order a binary heap on (time, order) gives.
    #[test]
    fn agrees_with_a_binary_heap() {
        let mut q = EventQueue::default();
        let mut heap = BinaryHeap::new();
        let mut x = 99u64;
        let mut now = 0u64;
        let mut stamps = Vec::new();
        for round in 0..20_000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if x >> 62 != 0 {
                let shift = (x >> 8) % 40;
                let at = Time(now + ((x >> 20) & ((1u64 << shift) - 1)));
                let seq = if (x >> 5).is_multiple_of(4) && !stamps.is_empty() {
                    stamps[((x >> 30) as usize) % stamps.len()]
                } else {
                    let s = q.stamp();
                    stamps.push(s);
                    s
                };
                let ev = Event::Wake { node: round };
                q.push_stamped(at, seq, ev);
                heap.push(Reverse((at, seq, ev)));
            } else {
                assert_eq!(q.peek_time(), heap.peek().map(|Reverse(e)| e.0));
                let got = q.pop();
                let want = heap.pop().map(|Reverse((t, _, ev))| (t, ev));
                assert_eq!(got, want);
                if let Some((t, _)) = got {
                    now = t.0;
                }
            }
        }
        while let Some(Reverse((t, _, ev))) = heap.pop() {
            assert_eq!(q.pop(), Some((t, ev)));
        }
        assert_eq!(q.pop(), None);
    }
}
