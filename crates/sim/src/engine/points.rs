//! Time and speed: advancing a node's clocks, and the points at which its
//! running tasks' memory changes or their work ends.
//!
//! A node has at most one point event in the queue: its members' first
//! point. When the node's speed changes, the members' points are re-timed in
//! the node's own member list and only that one event moves. A point keeps
//! the place in the event order it was timed at (as its own event used to),
//! so points run in the same order as if each had its own event.
//!
//! Whatever moves a node's points marks the node (`points_moved`); the
//! node's event is put right before the next event is taken (`settle_points`).

use super::clock::{nanos, through_f64, Clocks, Lane, Speeds};
use super::node::{Member, NO_TARGET};
use super::queue::Event;
use super::task::Phase;
use super::Engine;
use overbook_core::Time;
use std::time::Duration;

impl Engine<'_> {
    /// Account time on `node` up to now: O(1), its tasks catch up on sync.
    pub(super) fn advance(&mut self, node: u32) {
        let now = self.now;
        let n = &mut self.nodes[node as usize];
        let dt = now.since(n.last);
        if dt.is_zero() {
            return;
        }
        n.last = now;
        if super::tracing() {
            eprintln!(
                "adv {} node={} last={:?} speed={} thr={} demand={}",
                now.0, node, dt, n.speeds.slowed, n.thrashing, n.demand
            );
        }
        let secs = dt.as_secs_f64();
        let rates = if n.thrashing {
            self.counters.thrashing_node_seconds += secs;
            n.squeeze().map(|(held, room)| self.model.fault_rates(held, room))
        } else {
            [(0.0, 0.0); 2]
        };
        n.clocks.advance(dt, n.speeds, n.thrashing, rates, n.protect_production);
        self.counters.busy_core_seconds += n.running_cpus * secs;
    }

    /// Bring a running task's progress and counters up to its node's clocks.
    pub(super) fn sync(&mut self, slot: u32) {
        let Some(task) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        if let Phase::Running { node } = task.phase {
            self.nodes[node as usize].sync(slot, task);
        }
    }

    /// Recompute a node's demand-driven speed after its memory changed; when the
    /// speed moves, every running task's next point moves with it. Returns
    /// whether it did.
    pub(super) fn recompute(&mut self, node: u32) -> bool {
        let n = &mut self.nodes[node as usize];
        let speeds = n.speeds(self.model);
        let was_thrashing = n.thrashing;
        n.thrashing = n.resident() > n.capacity;
        let moved = |a: f64, b: f64| (a - b).abs() > 1e-12;
        let changed =
            moved(speeds.slowed, n.speeds.slowed) || moved(speeds.protected, n.speeds.protected);
        n.speeds = speeds;
        if changed {
            let now = self.now;
            let clocks = n.clocks;
            for m in n.members.iter_mut().filter(|m| m.running && m.target != NO_TARGET) {
                m.seq = self.queue.stamp();
                m.at = time_to(now, m, &clocks, speeds);
            }
        }
        if self.nodes[node as usize].thrashing && !was_thrashing {
            self.wake(node, self.now);
        }
        self.reindex(node);
        self.points_moved(node);
        changed
    }

    /// Set a running task's next point (a memory change or its end) from its
    /// progress; `time_point` then times it.
    pub(super) fn target_point(&mut self, slot: u32, node: u32) {
        self.sync(slot);
        self.target_synced_point(slot, node);
    }

    /// [`Engine::target_point`] for a task synced at this instant: its
    /// node's clocks move only as time does, so a second sync would add
    /// nothing (a point event used to sync its task three times).
    pub(super) fn target_synced_point(&mut self, slot: u32, node: u32) {
        let n = &mut self.nodes[node as usize];
        let Some(task) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        if task.phase != (Phase::Running { node }) {
            return;
        }
        let point = task.next_point();
        let Some(m) = n.members.iter_mut().find(|m| m.slot == slot) else {
            return;
        };
        m.unplan();
        if let Some(point) = point {
            task.target = point;
            // Saturating at 584 years of work, `NO_TARGET`: never, as it would be.
            let ahead = nanos(point.saturating_sub(task.progress));
            m.target = n.clocks.work_nanos(m.lane).saturating_add(ahead);
        }
        self.points_moved(node);
    }

    /// Time a task's point at the node's present speed.
    pub(super) fn time_point(&mut self, slot: u32, node: u32) {
        let now = self.now;
        let n = &mut self.nodes[node as usize];
        let Some(m) = n.members.iter_mut().find(|m| m.slot == slot) else {
            return;
        };
        if !m.running || m.target == NO_TARGET {
            return;
        }
        m.seq = self.queue.stamp();
        m.at = time_to(now, m, &n.clocks, n.speeds);
        self.points_moved(node);
    }

    /// Plan a running task's next point and time it.
    pub(super) fn plan_point(&mut self, slot: u32, node: u32) {
        self.target_point(slot, node);
        self.time_point(slot, node);
    }

    /// Something moved `node`'s points: put its event right before the next one is taken.
    pub(super) fn points_moved(&mut self, node: u32) {
        let n = &mut self.nodes[node as usize];
        if !n.points_moved {
            n.points_moved = true;
            self.moved.push(node);
        }
    }

    /// Put every marked node's point event right.
    pub(super) fn settle_points(&mut self) {
        while let Some(node) = self.moved.pop() {
            self.nodes[node as usize].points_moved = false;
            self.update_point(node);
        }
    }

    /// Keep the node's one point event at its members' first point.
    fn update_point(&mut self, node: u32) {
        let n = &mut self.nodes[node as usize];
        let first = n.first_point().map(|m| (m.at, m.seq, m.slot));
        if first.map(|(at, seq, _)| (at, seq)) != n.point {
            n.point = first.map(|(at, seq, _)| (at, seq));
            n.point_epoch = n.point_epoch.wrapping_add(1);
            if let Some((at, seq, slot)) = first {
                let epoch = n.point_epoch;
                self.queue.push_stamped(at, seq, Event::Point { node, epoch, slot });
            }
        }
    }

    /// The node's first point is now: that member (`first`, the event's)
    /// reaches it.
    pub(super) fn on_point(&mut self, node: u32, epoch: u32, first: u32) {
        let n = &mut self.nodes[node as usize];
        if n.point_epoch != epoch {
            return;
        }
        n.point = None;
        // The epoch still matching, the first point is the one the event
        // was scheduled for: any member's point that moved since was
        // settled before this event was taken, and a new first point would
        // have bumped the epoch. (Points are stamped uniquely, so the same
        // time and stamp is the same member.)
        let now = self.now;
        let due = n.members.iter().position(|m| m.slot == first && m.running && m.at <= now);
        debug_assert_eq!(
            due.map(|_| first),
            n.first_point().filter(|m| m.at <= now).map(|m| m.slot),
            "node {node}'s first point is not its event's"
        );
        if let Some(i) = due {
            let lane = n.members[i].lane;
            n.members[i].unplan();
            self.advance(node);
            self.reach_point(first, node, lane);
        }
        self.points_moved(node);
    }

    /// Member `slot`, on `lane`, reaches its point.
    fn reach_point(&mut self, slot: u32, node: u32, lane: Lane) {
        let n = &self.nodes[node as usize];
        let Some(task) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        if task.phase != (Phase::Running { node }) {
            return;
        }
        // The member's lane, which `Node::sync` would work out from the
        // task's class, on a line of the task this path does not read.
        debug_assert_eq!(lane, n.task_lane(slot, task));
        n.clocks.sync(task, lane);
        // The point was timed for exactly this work offset at a speed that
        // has not changed since (or it would have been re-timed): snap to it
        // so rounding never leaves a task a nanosecond short forever.
        task.progress = task.progress.max(task.target);
        if super::tracing() {
            eprintln!(
                "point {} node={} key={:?} prog={:?}",
                self.now.0, node, task.spec.key, task.progress
            );
        }
        if task.remaining().is_some_and(|r| r.is_zero()) {
            self.complete(slot, node);
            return;
        }
        let pause = task.spec.pause_at(task.progress);
        self.memory_changed(slot, node);
        let running = self.task(slot).is_some_and(|t| t.phase == Phase::Running { node });
        if let Some(p) = pause.filter(|_| running) {
            self.begin_idle(slot, node, p.length);
        }
    }

    pub(super) fn wake(&mut self, node: u32, at: Time) {
        let n = &mut self.nodes[node as usize];
        if at < n.next_wake {
            n.next_wake = at;
            self.queue.push(at, Event::Wake { node });
        }
    }
}

/// When member `m` reaches its target at the node's `speeds`, from `now`.
fn time_to(now: Time, m: &Member, clocks: &Clocks, speeds: Speeds) -> Time {
    if m.target == NO_TARGET {
        return Time::MAX;
    }
    let work = Duration::from_nanos(m.target.saturating_sub(clocks.work_nanos(m.lane)));
    let speed = m.lane.speed(speeds);
    if speed == 1.0 {
        // The same trip through a float, `work / 1.0` being `work`, and
        // far below the cap.
        return now + through_f64(work);
    }
    now + Duration::from_secs_f64((work.as_secs_f64() / speed).min(1e12))
}
