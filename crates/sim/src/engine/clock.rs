//! A node's clocks: running totals of what one task running there accumulates
//! (work at the node's speed, time slowed by thrashing, faults per GiB held).
//!
//! Advancing a node is then O(1) whatever it runs. A task keeps its lane's
//! reading at its last sync (`Reading`) and is brought up to date (`Clocks::sync`) only
//! when something reads its progress or counters, or before anything that
//! changes how it accumulates (its memory, whether it runs).
//!
//! The work clocks add `dt × speed` per interval exactly as the task used to,
//! so a task's progress is the same number of nanoseconds as if it had been
//! advanced interval by interval. They count whole nanoseconds in a `u64`
//! (584 years) rather than `Duration`s: every task copies a reading at each
//! sync, and a step syncs every task on its node.

use super::task::Task;
use overbook_core::Class;
use std::time::Duration;

const GIB: f64 = (1u64 << 30) as f64;

/// Which work clock a task progresses on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// At the node's speed.
    Slowed = 0,
    /// Always at full speed: critical containers bypass swap (000 §3.2).
    Full = 1,
    /// Production under memory protection (v2 `memory.low`, the policy's
    /// `protect.production`): the kernel reclaims unprotected memory first,
    /// so it slows only once production alone outgrows the node.
    Protected = 2,
}

/// The speeds of a node's slowing lanes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Speeds {
    pub slowed: f64,
    pub protected: f64,
}

impl Speeds {
    pub const FULL: Speeds = Speeds { slowed: 1.0, protected: 1.0 };
}

impl Lane {
    /// Where a task of `class` starts: production goes on the protected
    /// lane only once the policy protects it (`Action::ProtectProduction`).
    pub fn of(class: Class) -> Lane {
        if class == Class::Critical {
            Lane::Full
        } else {
            Lane::Slowed
        }
    }

    /// How fast a task on this lane runs at the node's `speeds`.
    pub fn speed(self, speeds: Speeds) -> f64 {
        match self {
            Lane::Slowed => speeds.slowed,
            Lane::Full => 1.0,
            Lane::Protected => speeds.protected,
        }
    }

    /// Its place in the stall clocks (`Clocks::thrash`), for the lanes that slow.
    fn stall(self) -> Option<usize> {
        match self {
            Lane::Slowed => Some(0),
            Lane::Full => None,
            Lane::Protected => Some(1),
        }
    }
}

/// Totals since the node started.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Clocks {
    /// Work done by a task on each lane, nanoseconds.
    work: [u64; 3],
    /// Time a task on a slowing lane (slowed, protected) ran slowed by
    /// thrashing, nanoseconds.
    thrash: [u64; 2],
    /// Major faults and refaults per GiB a task on a slowing lane held.
    pub majors: [f64; 2],
    pub refaults: [f64; 2],
}

impl Clocks {
    /// Account `dt` at `speeds`; `rates` are the thrash model's fault rates
    /// per GiB for each slowing lane while the node thrashes. The protected
    /// lane is kept only where the node protects production.
    pub fn advance(
        &mut self,
        dt: Duration,
        speeds: Speeds,
        thrashing: bool,
        rates: [(f64, f64); 2],
        protected: bool,
    ) {
        // A lane at full speed adds what the full lane adds: the same
        // product, worked out once (most nodes, most of the time).
        let full = nanos(through_f64(dt));
        let work = |speed: f64| if speed == 1.0 { full } else { nanos(dt.mul_f64(speed)) };
        self.work[Lane::Slowed as usize] += work(speeds.slowed);
        self.work[Lane::Full as usize] += full;
        if protected {
            self.work[Lane::Protected as usize] += work(speeds.protected);
        }
        let secs = dt.as_secs_f64();
        for (i, speed) in [speeds.slowed, speeds.protected].into_iter().enumerate() {
            if thrashing && speed < 1.0 {
                self.thrash[i] += nanos(dt);
                self.majors[i] += rates[i].0 * secs;
                self.refaults[i] += rates[i].1 * secs;
            }
        }
    }

    /// The work clock of `lane`, nanoseconds.
    pub fn work_nanos(&self, lane: Lane) -> u64 {
        self.work[lane as usize]
    }

    /// Time a task on the slowed lane ran slowed by thrashing.
    pub fn slowed_stall(&self) -> Duration {
        Duration::from_nanos(self.thrash[0])
    }

    /// What a task on `lane` keeps of the clocks now, to be brought up to
    /// date from later (`Clocks::sync`).
    #[inline]
    pub fn reading(&self, lane: Lane) -> Reading {
        let work = self.work[lane as usize];
        match lane.stall() {
            Some(i) => Reading {
                work,
                thrash: self.thrash[i],
                majors: self.majors[i],
                refaults: self.refaults[i],
            },
            None => Reading { work, ..Reading::default() },
        }
    }

    /// Bring a task running on this node on `lane` up to date: add what it
    /// accumulated since its last sync, and take the current reading as its
    /// new base.
    #[inline]
    pub fn sync(&self, task: &mut Task, lane: Lane) {
        let base = task.base;
        task.progress += Duration::from_nanos(self.work[lane as usize].saturating_sub(base.work));
        if let Some(i) = lane.stall() {
            task.thrashed(self.thrash[i].saturating_sub(base.thrash));
            let gib = task.mem as f64 / GIB;
            task.major_faults += gib * (self.majors[i] - base.majors);
            task.refaults += gib * (self.refaults[i] - base.refaults);
        }
        task.base = self.reading(lane);
    }
}

/// The clocks of one lane as a task last read them: what it needs of
/// them, 32 bytes where all lanes are 72 (a step syncs every task on its node).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    work: u64,
    thrash: u64,
    majors: f64,
    refaults: f64,
}

/// A span of the clocks' time in whole nanoseconds (584 years: no run comes near).
pub(super) fn nanos(d: Duration) -> u64 {
    overbook_core::convert::u128_to_u64(d.as_nanos())
}

/// Below this many nanoseconds (13 days) a duration comes back from
/// `as_secs_f64` and `from_secs_f64` as it went in. The float is off by at
/// most one unit in its last place (a division and an addition, each
/// rounded to nearest), 2^-52 of it: under a quarter of a nanosecond here.
/// And `from_secs_f64` rounds to the nearest nanosecond (Rust 1.63 on).
const EXACT_IN_F64: u128 = 1 << 50;

/// `d` after a trip through seconds as a float and back (`d.mul_f64(1.0)`,
/// as the clocks have always worked), without making the trip where it
/// gives `d` back: here and in a point's time at full speed, the trips
/// were 2.4% of the simulator's instructions at 1,000 nodes.
#[inline]
pub(super) fn through_f64(d: Duration) -> Duration {
    if d.as_nanos() < EXACT_IN_F64 {
        d
    } else {
        d.mul_f64(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_duration_through_f64_is_the_float_trip(ns in 0u64..(1 << 52)) {
            let d = Duration::from_nanos(ns);
            prop_assert_eq!(through_f64(d), Duration::from_secs_f64(d.as_secs_f64()));
            prop_assert_eq!(through_f64(d), d.mul_f64(1.0));
        }
    }

    #[test]
    fn the_float_trip_is_exact_up_to_the_bound() {
        // The bound's neighbourhood, where the float has the fewest bits
        // below the nanosecond, and microsecond steps (the engine's time).
        let edge = 1u64 << 50;
        for ns in (edge - 100_000..edge).chain((0..1_000_000).map(|i| i * 1_000_003)) {
            let d = Duration::from_nanos(ns);
            assert_eq!(d.mul_f64(1.0), d, "{ns} ns");
        }
    }
}
