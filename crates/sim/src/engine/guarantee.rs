//! The production scheduler's guarantee: production and critical tasks get
//! memory that is theirs (000 §1: "scheduled by a centralized scheduler with
//! guaranteed resources", the Capacity Scheduler of §5.1).
//!
//! A production task goes to the node with the least memory reserved by
//! production, and only if its request fits beside what production already
//! reserved there; best-effort usage does not count, since it is what
//! preemption takes back. When no node has room, it waits, first come first
//! served, until a production task somewhere completes. Without this rule,
//! production alone could reserve more than a node has and thrash with no
//! best-effort task to blame, which no real production scheduler allows.

use super::task::Phase;
use super::Engine;

impl Engine<'_> {
    /// Place a production or critical task where its reservation fits, or
    /// queue it for the next node that frees some.
    pub(super) fn place_guaranteed(&mut self, slot: u32) {
        let Some(request) = self.task(slot).map(|t| t.spec.request) else {
            return;
        };
        if request > self.cfg.node_memory {
            // No node can ever guarantee it: its job gives up on it.
            self.retire(slot, false);
            return;
        }
        if !self.waiting_for_guarantee.is_empty() || !self.try_guarantee(slot, request) {
            if let Some(task) = self.task_mut(slot) {
                task.phase = Phase::AwaitingGuarantee;
            }
            self.waiting_for_guarantee.push_back(slot);
        }
    }

    fn try_guarantee(&mut self, slot: u32, request: u64) -> bool {
        let Some((_, _, node)) = self.guarantees.first() else {
            return false;
        };
        let n = &mut self.nodes[node as usize];
        if n.guaranteed.saturating_add(request) > n.capacity {
            return false;
        }
        n.guaranteed += request;
        let key = n.guarantee_key(node);
        self.guarantees.set(node, key);
        self.submit_to(slot, node);
        true
    }

    /// A production task left `node`: its reservation is free again.
    pub(super) fn release_guarantee(&mut self, slot: u32, node: u32) {
        let Some(task) = self.task(slot) else {
            return;
        };
        if task.spec.class.is_preemptible() {
            return;
        }
        let request = task.spec.request;
        let n = &mut self.nodes[node as usize];
        n.guaranteed = n.guaranteed.saturating_sub(request);
        let key = n.guarantee_key(node);
        self.guarantees.set(node, key);
    }

    /// Place waiting production tasks, oldest first, while they fit.
    pub(super) fn place_waiting_for_guarantee(&mut self) {
        while let Some(&slot) = self.waiting_for_guarantee.front() {
            let Some(request) = self.task(slot).map(|t| t.spec.request) else {
                self.waiting_for_guarantee.pop_front();
                continue;
            };
            if !self.try_guarantee(slot, request) {
                return;
            }
            self.waiting_for_guarantee.pop_front();
        }
    }
}
