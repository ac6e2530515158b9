//! A simulated node: its memory, the tasks that hold memory on it, and its policy.

use overbook_core::policy::NodePolicy;
use overbook_core::{Bytes, NodeStats, Time};

#[derive(Debug)]
pub struct Node {
    pub capacity: Bytes,
    pub swap_total: Bytes,
    pub swap_used: Bytes,
    pub policy: NodePolicy,
    /// Slots of the tasks holding memory here (running, dying, freezing,
    /// dumping, resuming).
    pub members: Vec<u32>,
    /// Memory the members hold.
    pub demand: Bytes,
    /// Requests of the tasks queued here, so placement sees work on its way.
    pub queued_request: Bytes,
    pub queued: u32,
    /// How fast its tasks progress now (1.0 unless it thrashes).
    pub speed: f64,
    pub thrashing: bool,
    /// Up to when progress and counters have been accounted.
    pub last: Time,
    /// When its checkpoint queue is free (one dump at a time per node, 004).
    pub dump_free_at: Time,
    /// The earliest wake already scheduled (`Time::MAX` for none).
    pub next_wake: Time,
    /// How long its suspended tasks waited to resume here (EWMA, seconds), the
    /// local queue time of 004 Algorithm 2.
    pub resume_wait: f64,
    /// Its key in the placement index.
    pub key: (u64, u32, u32),
}

impl Node {
    pub fn new(index: u32, capacity: Bytes, swap_total: Bytes, policy: NodePolicy) -> Node {
        Node {
            capacity,
            swap_total,
            swap_used: 0,
            policy,
            members: Vec::new(),
            demand: 0,
            queued_request: 0,
            queued: 0,
            speed: 1.0,
            thrashing: false,
            last: Time::ZERO,
            dump_free_at: Time::ZERO,
            next_wake: Time::MAX,
            resume_wait: 0.0,
            key: (0, 0, index),
        }
    }

    pub fn stats(&self) -> NodeStats {
        NodeStats {
            capacity: self.capacity,
            available: self.capacity.saturating_sub(self.demand),
            swap_total: self.swap_total,
            swap_free: self.swap_total.saturating_sub(self.swap_used),
            stall: None,
        }
    }

    /// The placement key: load in parts per million of capacity (memory held
    /// plus queued requests), then queue length, then index (000 §4.1).
    pub fn placement_key(&self, index: u32) -> (u64, u32, u32) {
        let load = self.demand.saturating_add(self.queued_request) as u128;
        let ppm = (load * 1_000_000 / (self.capacity.max(1) as u128)).min(u64::MAX as u128) as u64;
        (ppm, self.queued, index)
    }

    pub fn remove_member(&mut self, slot: u32) {
        if let Some(i) = self.members.iter().position(|&s| s == slot) {
            self.members.swap_remove(i);
        }
    }
}
