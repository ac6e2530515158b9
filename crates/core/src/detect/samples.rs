//! The previous sample of each container, so that detectors can turn
//! cumulative counters into rates.
//!
//! A counter that goes backwards, or a new incarnation (`started` changed),
//! means the container restarted: its history starts over rather than
//! producing a huge or negative delta. Containers absent from an observation
//! have left the node and are dropped, so a long-lived agent does not
//! accumulate the state of every container it ever saw.

use crate::model::{Bytes, ContainerId, ContainerStats, FaultCounters};
use crate::time::Time;

/// What one new sample of a container tells.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Sample {
    /// No earlier sample (new, restarted, or forgotten): nothing to compare.
    First,
    /// No time passed since the previous sample: no rate can be computed, and
    /// the previous sample stays the baseline.
    Same,
    /// Time passed: the interval since the previous sample.
    Step(Step),
}

/// The interval between a container's previous sample and this one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Step {
    /// When the previous sample was taken: the interval starts here.
    pub since: Time,
    /// Length of the interval, seconds; always > 0.
    pub secs: f64,
    pub before: FaultCounters,
    pub after: FaultCounters,
    pub usage_before: Bytes,
}

impl Step {
    pub fn major_delta(&self) -> u64 {
        self.after.major_faults.saturating_sub(self.before.major_faults)
    }

    pub fn refault_delta(&self) -> u64 {
        self.after.refaults().saturating_sub(self.before.refaults())
    }

    /// Events per second over the interval.
    pub fn rate(&self, delta: u64) -> f64 {
        delta as f64 / self.secs
    }
}

#[derive(Debug)]
struct Entry<S> {
    at: Time,
    started: Time,
    faults: FaultCounters,
    usage: Bytes,
    state: S,
}

/// Per-container previous sample plus a detector's own state `S`, which is
/// reset to `S::default()` whenever the history is.
///
/// A flat list rather than a hash map: a node holds tens of containers, an
/// observation lists them in much the same order every time, and a step
/// then walks one short array instead of probing a table per container.
/// The containers an observation mentions are moved to the front in its
/// order, so the next observation finds each one where it looks first.
#[derive(Debug)]
pub(super) struct Samples<S> {
    entries: Vec<(ContainerId, Entry<S>)>,
    /// How many containers the observation under way has mentioned: the
    /// first `seen` entries are theirs.
    seen: usize,
}

impl<S: Default> Samples<S> {
    pub fn new() -> Samples<S> {
        Samples { entries: Vec::new(), seen: 0 }
    }

    /// Start an observation; every container it holds must be `advance`d
    /// before `end`.
    pub fn begin(&mut self) {
        self.seen = 0;
    }

    /// Drop the containers the observation did not mention.
    pub fn end(&mut self) {
        self.entries.truncate(self.seen);
    }

    /// The index of `id`'s entry, moved up to the mentioned ones; `None`
    /// for a container without one.
    #[inline]
    fn mention(&mut self, id: ContainerId) -> Option<usize> {
        let seen = self.seen.min(self.entries.len());
        if let Some(k) = self.entries[seen..].iter().position(|(i, _)| *i == id) {
            if k > 0 {
                self.entries.swap(seen, seen + k);
            }
            self.seen = seen + 1;
            return Some(seen);
        }
        // Mentioned twice in one observation.
        self.entries[..seen].iter().position(|(i, _)| *i == id)
    }

    /// Record `c` as sampled at `now` and return what changed since its
    /// previous sample, with the detector's state for it.
    #[inline]
    pub fn advance(&mut self, now: Time, c: &ContainerStats) -> (Sample, &mut S) {
        let fresh = || Entry {
            at: now,
            started: c.started,
            faults: c.faults,
            usage: c.usage,
            state: S::default(),
        };
        let k = match self.mention(c.id) {
            Some(k) => k,
            None => {
                let seen = self.seen.min(self.entries.len());
                self.entries.push((c.id, fresh()));
                let last = self.entries.len() - 1;
                if last > seen {
                    self.entries.swap(seen, last);
                }
                self.seen = seen + 1;
                return (Sample::First, &mut self.entries[seen].1.state);
            }
        };
        let entry = &mut self.entries[k].1;
        if restarted(entry, c) {
            *entry = fresh();
            return (Sample::First, &mut entry.state);
        }
        // Times never go backwards by contract; if they do, the sample is
        // treated as simultaneous rather than trusted.
        if now <= entry.at {
            return (Sample::Same, &mut entry.state);
        }
        let step = Step {
            since: entry.at,
            secs: (now - entry.at).as_secs_f64(),
            before: entry.faults,
            after: c.faults,
            usage_before: entry.usage,
        };
        entry.at = now;
        entry.faults = c.faults;
        entry.usage = c.usage;
        (Sample::Step(step), &mut entry.state)
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Where the entries are (`Detector::state_span`).
    pub fn span(&self) -> (usize, usize) {
        (self.entries.as_ptr() as usize, std::mem::size_of_val(self.entries.as_slice()))
    }

    pub fn forget(&mut self, id: ContainerId) {
        if let Some(k) = self.entries.iter().position(|(i, _)| *i == id) {
            self.entries.remove(k);
            if k < self.seen {
                self.seen -= 1;
            }
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

fn restarted<S>(e: &Entry<S>, c: &ContainerStats) -> bool {
    c.started != e.started
        || c.faults.major_faults < e.faults.major_faults
        || c.faults.refault_anon < e.faults.refault_anon
        || c.faults.refault_file < e.faults.refault_file
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Class, JobId};

    fn container(id: u64, major: u64) -> ContainerStats {
        let mut c = ContainerStats::new(ContainerId(id), JobId(id), Class::BestEffort, Time::ZERO);
        c.faults.major_faults = major;
        c
    }

    /// One observation: each container's sample, as (major faults before,
    /// after), or `None` for a first or simultaneous one.
    fn observe(s: &mut Samples<u32>, secs: u64, cs: &[(u64, u64)]) -> Vec<Option<(u64, u64)>> {
        s.begin();
        let out = cs
            .iter()
            .map(|&(id, major)| match s.advance(Time::from_secs(secs), &container(id, major)).0 {
                Sample::Step(step) => Some((step.before.major_faults, step.after.major_faults)),
                Sample::First | Sample::Same => None,
            })
            .collect();
        s.end();
        out
    }

    #[test]
    fn each_container_keeps_its_own_history_whatever_the_order_it_is_listed_in() {
        let mut s = Samples::<u32>::new();
        assert_eq!(observe(&mut s, 1, &[(1, 10), (2, 20), (3, 30)]), [None, None, None]);
        // Reversed, one new, one gone.
        let got = observe(&mut s, 2, &[(4, 40), (3, 31), (1, 11)]);
        assert_eq!(got, [None, Some((30, 31)), Some((10, 11))]);
        assert_eq!(s.len(), 3, "container 2 was not mentioned: dropped");
        // Listed twice in one look: the second is simultaneous.
        let got = observe(&mut s, 3, &[(1, 12), (4, 41), (1, 13), (3, 32)]);
        assert_eq!(got, [Some((11, 12)), Some((40, 41)), None, Some((31, 32))]);
        // Forgotten between looks: it starts over; the others keep theirs.
        s.forget(ContainerId(4));
        let got = observe(&mut s, 4, &[(3, 33), (4, 42), (1, 14)]);
        assert_eq!(got, [Some((32, 33)), None, Some((12, 14))]);
        assert_eq!(observe(&mut s, 5, &[(4, 43)]), [Some((42, 43))]);
        assert_eq!(s.len(), 1);
    }
}
