//! The memory snapshot (000 §4.2, Charon's `SnapMem`).
//!
//! The kernel charges a task's memory only as the task touches it, so just
//! after a launch `MemAvailable` still shows memory the task is about to take;
//! launching on it again over-launches and the killer then pays for it (000's
//! example: 10 GB free, ten 4 GB tasks, eight killed). The snapshot is
//! available memory as of the last sync, charged at once with the estimate of
//! everything launched or resumed since, so a second launch sees the first
//! one's future usage. At the next sync `MemAvailable` has caught up with
//! what the launched tasks really use, and the snapshot starts from it again.

use crate::model::Bytes;
use crate::time::Time;
use std::time::Duration;

#[derive(Debug, Default)]
pub(super) struct Snapshot {
    mem: Bytes,
    /// `None` until the first sync: nothing is known yet.
    synced_at: Option<Time>,
    /// A sync is due at the first look at or after this, whatever the
    /// period (memory was freed then). Not before it: a look at an earlier
    /// moment (an agent's step on its previous sample) would still count
    /// the freed memory as used, and spend the sync on it.
    due_from: Option<Time>,
}

impl Snapshot {
    /// Take `available` as the new snapshot if a sync is due at `now`.
    /// `fresh`: `available` was read at `now`, so it may serve a sync made
    /// due by freed memory; a figure read earlier (an agent's last sample,
    /// at a submission) may not, it could predate the freeing.
    pub fn sync_if_due(&mut self, now: Time, period: Duration, available: Bytes, fresh: bool) {
        let freed = fresh && self.due_from.is_some_and(|from| now >= from);
        let due = match self.synced_at {
            None => true,
            Some(at) => now >= at + period || freed,
        };
        if due {
            self.mem = available;
            self.synced_at = Some(now);
            if freed {
                self.due_from = None;
            }
        }
    }

    /// Make a sync due at the first look from `at` on.
    pub fn due_from(&mut self, at: Time) {
        self.due_from = Some(self.due_from.map_or(at, |d| d.min(at)));
    }

    /// Memory freed earlier is no longer to be counted on (the node is short).
    pub fn no_longer_due(&mut self) {
        self.due_from = None;
    }

    /// When the next sync is due; `None` before the first one (due at once).
    pub fn next_sync(&self, period: Duration) -> Option<Time> {
        let periodic = self.synced_at.map(|at| at + period)?;
        Some(self.due_from.map_or(periodic, |from| from.min(periodic)))
    }

    /// Memory still unclaimed in the snapshot.
    pub fn mem(&self) -> Bytes {
        self.mem
    }

    /// What is left after this poll's launches.
    pub fn set(&mut self, mem: Bytes) {
        self.mem = mem;
    }

    /// Charge a launch at once, before the kernel sees it.
    pub fn charge(&mut self, bytes: Bytes) {
        self.mem = self.mem.saturating_sub(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_last_until_the_next_sync() {
        let p = Duration::from_secs(5);
        let mut s = Snapshot::default();
        assert_eq!(s.next_sync(p), None);
        s.sync_if_due(Time::from_secs(1), p, 10, true);
        s.charge(4);
        s.charge(4);
        s.charge(4);
        assert_eq!(s.mem(), 0, "charges saturate at zero");
        // Before the period ends the kernel's figure is not trusted.
        s.sync_if_due(Time::from_secs(5), p, 10, true);
        assert_eq!(s.mem(), 0);
        assert_eq!(s.next_sync(p), Some(Time::from_secs(6)));
        s.sync_if_due(Time::from_secs(6), p, 7, true);
        assert_eq!(s.mem(), 7);
        assert_eq!(s.next_sync(p), Some(Time::from_secs(11)));
    }

    #[test]
    fn memory_freed_makes_a_sync_due_from_then_not_before() {
        let p = Duration::from_secs(5);
        let mut s = Snapshot::default();
        s.sync_if_due(Time::from_secs(1), p, 10, true);
        s.charge(8);
        s.due_from(Time::from_secs(3));
        assert_eq!(s.next_sync(p), Some(Time::from_secs(3)));
        // A look at an earlier moment still counts the freed memory as used.
        s.sync_if_due(Time::from_secs(2), p, 5, true);
        assert_eq!(s.mem(), 2);
        // So does a figure read before now.
        s.sync_if_due(Time::from_secs(3), p, 5, false);
        assert_eq!(s.mem(), 2);
        s.sync_if_due(Time::from_secs(3), p, 9, true);
        assert_eq!(s.mem(), 9);
        assert_eq!(s.next_sync(p), Some(Time::from_secs(8)), "the period runs from the sync");
    }

    #[test]
    fn a_periodic_sync_before_the_freeing_keeps_it_due() {
        let p = Duration::from_secs(5);
        let mut s = Snapshot::default();
        s.sync_if_due(Time::from_secs(0), p, 10, true);
        s.due_from(Time::from_secs(7));
        s.sync_if_due(Time::from_secs(6), p, 4, true);
        assert_eq!((s.mem(), s.next_sync(p)), (4, Some(Time::from_secs(7))));
        s.no_longer_due();
        assert_eq!(s.next_sync(p), Some(Time::from_secs(11)));
    }
}
