//! A node's clocks: running totals of what one task running there accumulates
//! (work at the node's speed, time slowed by thrashing, faults per GiB held).
//!
//! Advancing a node is then O(1) whatever it runs. A task keeps the clocks'
//! reading at its last sync and is brought up to date (`Clocks::sync`) only
//! when something reads its progress or counters, or before anything that
//! changes how it accumulates (its memory, whether it runs).
//!
//! The work clocks add `dt × speed` per interval exactly as the task used to,
//! so a task's progress is the same number of nanoseconds as if it had been
//! advanced interval by interval.

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
}

impl Lane {
    pub fn of(class: Class) -> Lane {
        if class == Class::Critical {
            Lane::Full
        } else {
            Lane::Slowed
        }
    }

    /// How fast a task on this lane runs on a node running at `node_speed`.
    pub fn speed(self, node_speed: f64) -> f64 {
        match self {
            Lane::Slowed => node_speed,
            Lane::Full => 1.0,
        }
    }
}

/// Totals since the node started.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Clocks {
    /// Work done by a task on each lane.
    pub work: [Duration; 2],
    /// Time a slowed task ran while the node thrashed.
    pub thrash: Duration,
    /// Major faults and refaults per GiB a slowed task held.
    pub majors: f64,
    pub refaults: f64,
}

impl Clocks {
    /// Account `dt` at `speed`; `rates` are the thrash model's fault rates per
    /// GiB while the node thrashes.
    pub fn advance(&mut self, dt: Duration, speed: f64, thrashing: bool, rates: (f64, f64)) {
        self.work[Lane::Slowed as usize] += dt.mul_f64(speed);
        self.work[Lane::Full as usize] += dt.mul_f64(1.0);
        if thrashing && speed < 1.0 {
            let secs = dt.as_secs_f64();
            self.thrash += dt;
            self.majors += rates.0 * secs;
            self.refaults += rates.1 * secs;
        }
    }

    /// Work a task on `lane` has done since the clocks read `base`.
    pub fn work_since(&self, base: &Clocks, lane: Lane) -> Duration {
        self.work[lane as usize].saturating_sub(base.work[lane as usize])
    }

    /// Bring a task running on this node up to date: add what it accumulated
    /// since its last sync, and take the current reading as its new base.
    pub fn sync(&self, task: &mut Task) {
        let lane = Lane::of(task.spec.class);
        task.progress += self.work_since(&task.base, lane);
        if lane == Lane::Slowed {
            task.outcome.thrashing_time += self.thrash.saturating_sub(task.base.thrash);
            let gib = task.mem as f64 / GIB;
            task.major_faults += gib * (self.majors - task.base.majors);
            task.refaults += gib * (self.refaults - task.base.refaults);
        }
        task.base = *self;
    }
}
