//! Reclaim: who loses memory when a node runs short, and what it costs them.
//!
//! The thrashing model weighs a node's resident memory against its capacity.
//! Memory is *hot* while its task works (it touches all of it, as the
//! calibration's workers do) and *cold* while the task is in an idle spell.
//! Reclaim takes memory to swap:
//!
//! * cold memory stays out (`Task::out`): the node's resident memory falls,
//!   and the task faults it back, at the swap bandwidth, when it works
//!   again;
//! * hot memory comes straight back: its task stands still while it faults
//!   it in (`Phase::Refaulting`), and the node gains nothing.
//!
//! The kernel alone (`kernel_reclaim`), when resident memory outgrows the
//! node, scans every container's own LRU lists alike (001 §III), so it takes
//! from each in proportion to what it holds; what it took from working
//! containers they fault back, which makes it take again, until the cold
//! memory has given the whole excess. A reclaimer's `Action::Reclaim` takes
//! from the one container it names (`reclaim`), before the kernel has to.
//!
//! A task's `lost_share` is the most of its memory it was short of at once:
//! cold memory out, or hot memory still to fault back.
//!
//! Only with an idle member does the kernel have cold memory to take; without
//! one, memory beyond capacity is thrashing, as it always was.

use super::task::Phase;
use super::Engine;
use overbook_core::{Bytes, Class};
use std::time::Duration;

/// Bytes per page, for the refault counters the policy reads.
const PAGE: f64 = 4096.0;

impl Engine<'_> {
    /// `Action::Reclaim`: take `bytes` from one container.
    pub(super) fn reclaim(&mut self, slot: u32, node: u32, bytes: Bytes) {
        let Some(task) = self.task(slot) else { return };
        if task.spec.class == Class::Critical {
            return;
        }
        match task.phase {
            Phase::Idle { node: at } if at == node => {
                self.advance(node);
                self.take_cold(slot, node, bytes);
                self.recompute(node);
                // Room for what waits: the step that asked has polled already.
                if self.nodes[node as usize].waiting() {
                    self.wake(node, self.now);
                }
            }
            Phase::Running { node: at } | Phase::Refaulting { node: at } if at == node => {
                let bytes = bytes.min(task.mem);
                self.stall(slot, node, bytes);
            }
            _ => {}
        }
    }

    /// The kernel's own reclaim when resident memory exceeds the node's: the
    /// excess comes from every container in proportion to what it holds,
    /// repeated as working containers fault theirs back, which in total
    /// (a geometric series) takes the excess from the cold memory and makes
    /// each working container fault back excess × its memory / cold memory.
    pub(super) fn kernel_reclaim(&mut self, node: u32) {
        let n = &self.nodes[node as usize];
        if n.idle == 0 || n.resident() <= n.capacity {
            return;
        }
        let excess = n.resident() - n.capacity;
        let swap_free = n.swap_total.saturating_sub(n.swap_used);
        let mut cold = 0u128;
        let mut members = Vec::with_capacity(n.members.len());
        for m in &n.members {
            let Some(task) = self.task(m.slot) else { continue };
            // Critical memory is never reclaimed; protected production's
            // only once nothing else is left, which the squeeze covers.
            if task.spec.class == Class::Critical || m.lane == super::clock::Lane::Protected {
                continue;
            }
            let (idle, held) = match task.phase {
                Phase::Idle { .. } => (true, task.mem.saturating_sub(task.out)),
                Phase::Running { .. } | Phase::Refaulting { .. } => (false, task.mem),
                _ => continue,
            };
            if idle {
                cold += u128::from(held);
            }
            members.push((m.slot, idle, held));
        }
        let covered = u128::from(excess.min(swap_free)).min(cold);
        if covered == 0 {
            return;
        }
        self.advance(node);
        // Exact shares of the cold memory, the rest of the division to the
        // first idle member with room, so that no stray byte stays over.
        let mut left = covered;
        for &(slot, idle, held) in &members {
            let part = covered * u128::from(held) / cold;
            if idle {
                left -= u128::from(self.take_cold(
                    slot,
                    node,
                    overbook_core::convert::u128_to_u64(part),
                ));
            } else {
                self.stall(slot, node, overbook_core::convert::u128_to_u64(part));
            }
        }
        for &(slot, idle, _) in &members {
            if left == 0 {
                break;
            }
            if idle {
                left -= u128::from(self.take_cold(
                    slot,
                    node,
                    overbook_core::convert::u128_to_u64(left),
                ));
            }
        }
        self.recompute(node);
    }

    /// Push up to `bytes` of an idle task's resident memory to swap; returns
    /// what it took.
    fn take_cold(&mut self, slot: u32, node: u32, bytes: Bytes) -> Bytes {
        let n = &mut self.nodes[node as usize];
        let swap_free = n.swap_total.saturating_sub(n.swap_used);
        let Some(task) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else {
            return 0;
        };
        let take = bytes.min(task.mem.saturating_sub(task.out)).min(swap_free);
        task.out += take;
        n.out += take;
        n.swap_used += take;
        task.outcome.reclaimed += take;
        let share = task.out as f64 / task.mem.max(1) as f64;
        task.outcome.lost_share = task.outcome.lost_share.max(share);
        take
    }

    /// A working task lost `bytes` it needs: it stands still while it faults
    /// them back, after any refaulting it is already doing. What it is short
    /// of at once is that backlog: memory taken faster than swap gives it
    /// back piles up (001 Fig. 3(b): A loses 256 MB while C boots).
    fn stall(&mut self, slot: u32, node: u32, bytes: Bytes) {
        if bytes == 0 {
            return;
        }
        self.advance(node);
        self.sync(slot);
        let now = self.now;
        let bw = self.cfg.swap_bandwidth;
        let pause = Duration::from_secs_f64(bytes as f64 / bw);
        let Some(task) = self.task_mut(slot) else { return };
        task.outcome.reclaimed += bytes;
        task.outcome.refault_time += pause;
        task.refaults += bytes as f64 / PAGE;
        task.refault_until = task.refault_until.max(now) + pause;
        let backlog = task.refault_until.since(now).as_secs_f64() * bw;
        let share = (backlog / task.mem.max(1) as f64).min(1.0);
        task.outcome.lost_share = task.outcome.lost_share.max(share);
        let until = task.refault_until;
        let was_running = task.phase == (Phase::Running { node });
        task.phase = Phase::Refaulting { node };
        let epoch = task.bump();
        self.queue.push(until, super::queue::Event::Resumed { slot, epoch });
        if was_running {
            self.nodes[node as usize].set_running(slot, false);
            self.points_moved(node);
        }
    }

    /// A task reached an idle spell: it stops, and its memory turns cold.
    pub(super) fn begin_idle(&mut self, slot: u32, node: u32, length: Duration) {
        self.advance(node);
        self.sync(slot);
        let until = self.now + length;
        let Some(task) = self.task_mut(slot) else { return };
        task.phase = Phase::Idle { node };
        let epoch = task.bump();
        self.queue.push(until, super::queue::Event::Resumed { slot, epoch });
        let n = &mut self.nodes[node as usize];
        n.idle += 1;
        n.set_running(slot, false);
        self.points_moved(node);
    }

    /// An idle spell ended: the task faults back what was taken from it,
    /// standing still meanwhile, and it is charged at once (which may make
    /// the kernel reclaim from the others).
    pub(super) fn end_idle(&mut self, slot: u32, node: u32) {
        self.advance(node);
        let Some(task) = self.task_mut(slot) else { return };
        let out = std::mem::take(&mut task.out);
        let n = &mut self.nodes[node as usize];
        n.idle = n.idle.saturating_sub(1);
        n.out = n.out.saturating_sub(out);
        n.swap_used = n.swap_used.saturating_sub(out);
        if out == 0 {
            self.start_running(slot, node);
            return;
        }
        // It did no work while idle: its clocks start from now.
        let n = &self.nodes[node as usize];
        let Some(task) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        task.phase = Phase::Running { node };
        n.rebase(slot, task);
        self.stall(slot, node, out);
        // Taken once already: `stall` counts what it faults back, not a new loss.
        if let Some(task) = self.task_mut(slot) {
            task.outcome.reclaimed -= out;
        }
        self.kernel_reclaim(node);
        self.recompute(node);
        if self.worth_a_step(node, false) {
            self.step(node);
        }
    }

    /// Running again after a spell or a refault: progress from here.
    pub(super) fn start_running(&mut self, slot: u32, node: u32) {
        let n = &mut self.nodes[node as usize];
        if let Some(task) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) {
            task.phase = Phase::Running { node };
            n.rebase(slot, task);
        }
        n.set_running(slot, true);
        self.plan_point(slot, node);
    }
}
