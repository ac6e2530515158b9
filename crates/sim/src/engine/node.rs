//! A simulated node: its memory, the tasks that hold memory on it, and its policy.

use super::clock::{Clocks, Lane, Speeds};
use super::task::Task;
use overbook_core::policy::NodePolicy;
use overbook_core::{Bytes, NodeStats, Time};

/// A task holding memory on a node, with what the node needs to know of it
/// without touching the task: whether it progresses, and when it next
/// reaches a point (a memory change or its end). 32 bytes: a point event
/// reads its node's whole list.
#[derive(Clone, Copy, Debug)]
pub struct Member {
    pub slot: u32,
    /// Running (progressing); otherwise it only holds memory (dying,
    /// freezing, dumping, resuming).
    pub running: bool,
    pub lane: Lane,
    /// The reading of its lane's work clock, nanoseconds, at which it
    /// reaches its next point (`NO_TARGET` for none).
    pub target: u64,
    /// When it gets there at the node's present speed (`Time::MAX`: never),
    /// and its place in the event order (`EventQueue::stamp`) for ties.
    pub at: Time,
    pub seq: u64,
}

/// A member's `target` when it has no point planned.
pub const NO_TARGET: u64 = u64::MAX;

impl Member {
    pub fn new(slot: u32, running: bool, lane: Lane) -> Member {
        Member { slot, running, lane, target: NO_TARGET, at: Time::MAX, seq: 0 }
    }

    /// Forget its planned point.
    pub fn unplan(&mut self) {
        self.target = NO_TARGET;
        self.at = Time::MAX;
    }
}

#[derive(Debug)]
pub struct Node {
    pub capacity: Bytes,
    pub swap_total: Bytes,
    pub swap_used: Bytes,
    /// Changed only through `with_policy`, which keeps `waiting` true to it.
    policy: Box<NodePolicy>,
    /// Where its policy's state was at its last step
    /// (`NodePolicy::state_spans`), to ask the cache for it with the tasks.
    pub policy_spans: [(usize, usize); 2],
    /// Whether tasks wait in its launcher (queued or suspended), as the
    /// policy said after it last changed: asked on every memory change that
    /// frees some, where reading the policy, which lives apart from the
    /// node, would be a cache miss of its own.
    waiting: bool,
    /// The tasks holding memory here (running, dying, freezing, dumping,
    /// resuming), in the order they came.
    pub members: Vec<Member>,
    /// The cores each member uses while it runs, in `members`' order
    /// (apart: only counting the running cores reads them).
    member_cpus: Vec<f64>,
    /// Memory the members hold.
    pub demand: Bytes,
    /// Whether the policy protects production's memory (`protect.production`):
    /// the members it protects go on the protected lane.
    pub protect_production: bool,
    /// Of `demand`, what members on the protected lane hold.
    pub protected: Bytes,
    /// Of `demand`, what reclaim pushed to swap from idle members (it is
    /// also in `swap_used`).
    pub out: Bytes,
    /// Members in an idle spell: only with some does the kernel have cold
    /// memory to reclaim instead of thrashing.
    pub idle: u32,
    /// Cores its running members use.
    pub running_cpus: f64,
    /// Requests of the production and critical tasks placed here: the memory
    /// the production scheduler guarantees them.
    pub guaranteed: Bytes,
    /// Requests of the tasks queued here, so placement sees work on its way.
    pub queued_request: Bytes,
    pub queued: u32,
    /// How fast its tasks progress now, by lane (1.0 unless it thrashes).
    pub speeds: Speeds,
    pub thrashing: bool,
    /// Up to when the clocks have been advanced.
    pub last: Time,
    pub clocks: Clocks,
    /// When its checkpoint queue is free (one dump at a time per node, 004).
    pub dump_free_at: Time,
    /// The earliest wake already scheduled (`Time::MAX` for none).
    pub next_wake: Time,
    /// The members' earliest point as scheduled (`None`), and the count
    /// that tells a scheduled point event is still that one.
    pub point: Option<(Time, u64)>,
    pub point_epoch: u32,
    /// Marked for `Engine::settle_points`.
    pub points_moved: bool,
    /// How long its suspended tasks waited to resume here (EWMA, seconds), the
    /// local queue time of 004 Algorithm 2.
    pub resume_wait: f64,
}

impl Node {
    pub fn new(
        capacity: Bytes,
        swap_total: Bytes,
        policy: NodePolicy,
        protect_production: bool,
    ) -> Node {
        Node {
            capacity,
            swap_total,
            swap_used: 0,
            waiting: waits(&policy),
            policy_spans: policy.state_spans(),
            policy: Box::new(policy),
            members: Vec::new(),
            member_cpus: Vec::new(),
            demand: 0,
            protect_production,
            protected: 0,
            out: 0,
            idle: 0,
            running_cpus: 0.0,
            guaranteed: 0,
            queued_request: 0,
            queued: 0,
            speeds: Speeds::FULL,
            thrashing: false,
            last: Time::ZERO,
            clocks: Clocks::default(),
            dump_free_at: Time::ZERO,
            next_wake: Time::MAX,
            point: None,
            points_moved: false,
            point_epoch: 0,
            resume_wait: 0.0,
        }
    }

    /// Its policy, to read.
    pub fn policy(&self) -> &NodePolicy {
        &self.policy
    }

    /// Call its policy in a way that may change it.
    pub fn with_policy<R>(&mut self, call: impl FnOnce(&mut NodePolicy) -> R) -> R {
        let result = call(&mut self.policy);
        self.waiting = waits(&self.policy);
        result
    }

    /// Whether tasks wait in its launcher, queued or suspended.
    pub fn waiting(&self) -> bool {
        self.waiting
    }

    pub fn stats(&self) -> NodeStats {
        NodeStats {
            reclaims: None,
            capacity: self.capacity,
            available: self.capacity.saturating_sub(self.resident()),
            swap_total: self.swap_total,
            swap_free: self.swap_total.saturating_sub(self.swap_used),
            // Time its tasks ran slowed by thrashing: the simulator's PSI `some total`.
            stall: Some(self.clocks.slowed_stall()),
        }
    }

    /// Memory in RAM: what the thrashing model weighs against capacity.
    pub fn resident(&self) -> Bytes {
        self.demand.saturating_sub(self.out)
    }

    /// The placement key: load in parts per million of capacity (memory held
    /// plus queued requests), then queue length, then index (000 §4.1).
    pub fn placement_key(&self, index: u32) -> (u64, u32, u32) {
        let load = self.demand.saturating_add(self.queued_request);
        (ppm(load, self.capacity), self.queued, index)
    }

    /// The guarantee key: production reservations in parts per million of
    /// capacity, then index.
    pub fn guarantee_key(&self, index: u32) -> (u64, u32, u32) {
        (ppm(self.guaranteed, self.capacity), 0, index)
    }

    /// The lane member `slot` is on (slowed if it is not a member).
    pub fn lane(&self, slot: u32) -> Lane {
        self.members.iter().find(|m| m.slot == slot).map_or(Lane::Slowed, |m| m.lane)
    }

    /// Whether member `slot` is on the protected lane. Without protection
    /// no member is, and the member list is not searched: this is asked on
    /// every memory change, the simulator's hottest path.
    pub fn protected(&self, slot: u32) -> bool {
        self.protect_production && self.lane(slot) == Lane::Protected
    }

    /// The lane member `slot`, running `task`, progresses on.
    pub fn task_lane(&self, slot: u32, task: &Task) -> Lane {
        if self.protect_production {
            self.lane(slot)
        } else {
            Lane::of(task.spec.class)
        }
    }

    /// Bring member `slot`'s task up to the node's clocks (`Clocks::sync`).
    pub fn sync(&self, slot: u32, task: &mut Task) {
        self.clocks.sync(task, self.task_lane(slot, task));
    }

    /// Member `slot`'s task progresses from now on (it starts or resumes
    /// running, or changed lanes after a sync).
    pub fn rebase(&self, slot: u32, task: &mut Task) {
        task.base = self.clocks.reading(self.task_lane(slot, task));
    }

    /// A member (on the protected lane or not) now holds `mem` where it
    /// held `before`.
    pub fn hold(&mut self, protected: bool, before: Bytes, mem: Bytes) {
        self.demand = self.demand.saturating_sub(before).saturating_add(mem);
        if protected {
            self.protected = self.protected.saturating_sub(before).saturating_add(mem);
        }
    }

    /// Member `slot`, holding `mem`, goes on the protected lane (its task
    /// synced by the caller): returns whether it moved.
    pub fn protect(&mut self, slot: u32, mem: Bytes) -> bool {
        let Some(m) = self.member_mut(slot).filter(|m| m.lane == Lane::Slowed) else {
            return false;
        };
        m.lane = Lane::Protected;
        m.unplan();
        self.protected = self.protected.saturating_add(mem);
        true
    }

    /// What each slowing lane (slowed, protected) holds in RAM now, and
    /// the memory it has to hold it in. Without protection, one squeeze
    /// for all (what the kernel does with no `memory.low`). With it, the
    /// kernel reclaims unprotected memory first: what is not production is
    /// squeezed into what production leaves, and production is squeezed
    /// only once it alone outgrows the node.
    pub fn squeeze(&self) -> [(Bytes, Bytes); 2] {
        let resident = self.resident();
        if !self.protect_production {
            return [(resident, self.capacity), (0, self.capacity)];
        }
        let production = self.protected.min(resident);
        let room = self.capacity.saturating_sub(production);
        [(resident - production, room), (production, self.capacity)]
    }

    /// How fast each lane runs for what is in RAM now, on `model`.
    pub fn speeds(&self, model: &dyn super::ThrashModel) -> Speeds {
        let speed = |(held, room): (Bytes, Bytes)| {
            if held > 0 && room == 0 {
                1e-6
            } else {
                model.speed(held, room).clamp(1e-6, 1.0)
            }
        };
        let [slowed, protected] = self.squeeze();
        Speeds { slowed: speed(slowed), protected: speed(protected) }
    }

    pub fn member_mut(&mut self, slot: u32) -> Option<&mut Member> {
        self.members.iter_mut().find(|m| m.slot == slot)
    }

    /// A task that uses `cpus` cores while it runs holds memory here now.
    pub fn add_member(&mut self, member: Member, cpus: f64) {
        self.members.push(member);
        self.member_cpus.push(cpus);
        self.count_cpus();
    }

    pub fn remove_member(&mut self, slot: u32) {
        if let Some(i) = self.members.iter().position(|m| m.slot == slot) {
            self.members.swap_remove(i);
            self.member_cpus.swap_remove(i);
            self.count_cpus();
        }
    }

    /// Mark a member running or not (it stops planning points when not).
    pub fn set_running(&mut self, slot: u32, running: bool) {
        if let Some(m) = self.member_mut(slot) {
            m.running = running;
            m.unplan();
        }
        self.count_cpus();
    }

    /// Recount the cores its running members use (a sum, not a running
    /// total, so no rounding drifts in over a day).
    fn count_cpus(&mut self) {
        self.running_cpus = (self.members.iter().zip(&self.member_cpus))
            .filter(|(m, _)| m.running)
            .map(|(_, &cpus)| cpus)
            .sum();
    }

    /// The member whose point comes first (time, then event order), if any.
    pub fn first_point(&self) -> Option<&Member> {
        self.members.iter().filter(|m| m.running && m.at != Time::MAX).min_by_key(|m| (m.at, m.seq))
    }
}

/// Whether tasks wait in `policy`'s launcher, queued or suspended.
fn waits(policy: &NodePolicy) -> bool {
    let (queued, suspended) = policy.launcher().waiting();
    queued + suspended > 0
}

/// `part` in parts per million of `whole` (at least 1), rounded down.
/// In 64 bits while the product fits (below 18 TB): a 128-bit division is
/// a call of its own, and the placement key is worked out on every change.
fn ppm(part: Bytes, whole: Bytes) -> u64 {
    let whole = whole.max(1);
    match part.checked_mul(1_000_000) {
        Some(scaled) => scaled / whole,
        None => {
            overbook_core::convert::u128_to_u64(u128::from(part) * 1_000_000 / u128::from(whole))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ppm;

    #[test]
    fn a_member_takes_half_a_cache_line() {
        // A point event reads its node's whole member list.
        assert_eq!(size_of::<super::Member>(), 32);
    }

    #[test]
    fn parts_per_million_are_the_same_in_64_and_128_bits() {
        let wide = |part: u64, whole: u64| {
            overbook_core::convert::u128_to_u64(
                u128::from(part) * 1_000_000 / u128::from(whole.max(1)),
            )
        };
        let edge = u64::MAX / 1_000_000;
        for (part, whole) in [
            (0, 0),
            (5, 0),
            (1 << 30, 64 << 30),
            (edge, 3),
            (edge + 1, 3),
            (u64::MAX, 1),
            (u64::MAX, u64::MAX),
            (123_456_789_012, 987_654_321),
        ] {
            assert_eq!(ppm(part, whole), wide(part, whole), "{part} of {whole}");
        }
    }
}
