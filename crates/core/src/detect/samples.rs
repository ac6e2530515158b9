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
    /// The observation that last mentioned the container.
    seen: u64,
    state: S,
}

/// Per-container previous sample plus a detector's own state `S`, which is
/// reset to `S::default()` whenever the history is.
///
/// A flat list rather than a hash map: a node holds tens of containers, an
/// observation lists them in much the same order every time, and a step
/// then walks one short array instead of probing a table per container.
#[derive(Debug)]
pub(super) struct Samples<S> {
    entries: Vec<(ContainerId, Entry<S>)>,
    /// Where the previous lookup ended: the next container is likely next.
    hint: usize,
    epoch: u64,
}

impl<S: Default> Samples<S> {
    pub fn new() -> Samples<S> {
        Samples { entries: Vec::new(), hint: 0, epoch: 0 }
    }

    /// Start an observation; every container it holds must be `advance`d
    /// before `end`.
    pub fn begin(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        self.hint = 0;
    }

    /// Drop the containers the observation did not mention.
    pub fn end(&mut self) {
        let epoch = self.epoch;
        self.entries.retain(|(_, e)| e.seen == epoch);
    }

    /// The index of `id`'s entry, looking from the hint on first.
    fn find(&self, id: ContainerId) -> Option<usize> {
        let hint = self.hint.min(self.entries.len());
        let (before, after) = self.entries.split_at(hint);
        after
            .iter()
            .position(|(i, _)| *i == id)
            .map(|k| hint + k)
            .or_else(|| before.iter().position(|(i, _)| *i == id))
    }

    /// Record `c` as sampled at `now` and return what changed since its
    /// previous sample, with the detector's state for it.
    pub fn advance(&mut self, now: Time, c: &ContainerStats) -> (Sample, &mut S) {
        let fresh = || Entry {
            at: now,
            started: c.started,
            faults: c.faults,
            usage: c.usage,
            seen: 0,
            state: S::default(),
        };
        let epoch = self.epoch;
        let k = match self.find(c.id) {
            Some(k) => k,
            None => {
                self.entries.push((c.id, Entry { seen: epoch, ..fresh() }));
                self.hint = self.entries.len();
                let last = self.entries.len() - 1;
                return (Sample::First, &mut self.entries[last].1.state);
            }
        };
        self.hint = k + 1;
        let entry = &mut self.entries[k].1;
        entry.seen = epoch;
        if restarted(entry, c) {
            *entry = Entry { seen: epoch, ..fresh() };
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

    pub fn forget(&mut self, id: ContainerId) {
        if let Some(k) = self.find(id) {
            self.entries.remove(k);
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
