//! Swap-outs off the agent's loop. A frozen container's memory goes out
//! to swap as fast as the disk takes it, which for a few hundred MiB is
//! most of a second; were the agent to wait for it, it would stop watching
//! the node just when production may need a second victim at once (it
//! did: a 1.2 s swap-out left a production container thrashing 1.3 s
//! before its own evidence was acted on). So the freeze, which stops the
//! victim's growth at once, is done in the loop, and the swap-out on a
//! thread of its own; the agent records its end when it sees it, and
//! waits for it only before thawing that container (its limit is squeezed
//! until the swap-out ends, on cgroup v1).

use super::Agent;
use crate::events::EventKind;
use overbook_core::{ContainerId, Time};
use overbook_linux::{
    CgroupError, ContainerCgroups, ContainerControl, ContainerPath, Outcome, ReclaimFn,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the kernel took, and how long the swap-out took on its thread.
type Swapped = (Result<Outcome<u64>, CgroupError>, Duration);

/// The swap-outs under way, one per frozen container at most.
#[derive(Debug, Default)]
pub(super) struct SwapOuts {
    running: BTreeMap<ContainerId, Running>,
}

#[derive(Debug)]
struct Running {
    path: ContainerPath,
    asked: u64,
    handle: JoinHandle<Swapped>,
}

/// A swap-out that ended, for the event log.
#[derive(Debug)]
pub(super) struct SwapOutDone {
    pub path: ContainerPath,
    pub asked: u64,
    pub took: Duration,
    pub result: Result<Outcome<u64>, String>,
}

impl SwapOuts {
    /// Starts pushing `bytes` of the (frozen) container's memory out.
    pub fn start(&mut self, id: ContainerId, path: ContainerPath, bytes: u64, reclaim: ReclaimFn) {
        let on_thread = path.clone();
        let handle = std::thread::spawn(move || {
            let started = Instant::now();
            (reclaim(&on_thread, bytes), started.elapsed())
        });
        let running = Running { path, asked: bytes, handle };
        if let Some(earlier) = self.running.insert(id, running) {
            // Not expected (a frozen container is not preempted again);
            // its thread still ends, and is waited for here.
            let _ = earlier.handle.join();
        }
    }

    /// The swap-outs that have ended since the last call.
    pub fn ended(&mut self) -> Vec<SwapOutDone> {
        let done: Vec<ContainerId> = self
            .running
            .iter()
            .filter(|(_, r)| r.handle.is_finished())
            .map(|(&id, _)| id)
            .collect();
        done.into_iter().filter_map(|id| self.wait(id)).collect()
    }

    /// Waits for the container's swap-out, if one is under way.
    pub fn wait(&mut self, id: ContainerId) -> Option<SwapOutDone> {
        let r = self.running.remove(&id)?;
        let (result, took) = match r.handle.join() {
            Ok((swapped, took)) => (swapped.map_err(|e| e.to_string()), took),
            Err(_) => (Err("the swap-out's thread panicked".to_string()), Duration::ZERO),
        };
        Some(SwapOutDone { path: r.path, asked: r.asked, took, result })
    }
}

impl Drop for SwapOuts {
    /// An agent that stops leaves no container squeezed: on v1 a swap-out
    /// puts the limit back when it ends.
    fn drop(&mut self) {
        for (_, r) in std::mem::take(&mut self.running) {
            let _ = r.handle.join();
        }
    }
}

impl<C: ContainerCgroups + ContainerControl> Agent<C> {
    /// Records the swap-outs that ended.
    pub(super) fn collect_swap_outs(&mut self, now: Time) {
        for done in self.swap_outs.ended() {
            self.record_swap_out(now, done);
        }
    }

    pub(super) fn record_swap_out(&mut self, now: Time, done: SwapOutDone) {
        let took_us = overbook_core::convert::u128_to_u64(done.took.as_micros());
        let detail = match done.result {
            Ok(Outcome::Done(got)) => {
                // The pace the next freeze is weighed by, whether or not
                // this swap-out moved it (too small to time, or not learning).
                let learned = self.policy.swapped_out(got, done.took);
                let pace = self.policy.swap_pace() / 1e6;
                json!({
                    "asked": done.asked,
                    "reclaimed": got,
                    "swap_out_us": took_us,
                    "swap_mb_s": pace,
                    "pace_learned": learned,
                })
            }
            Ok(Outcome::Vanished) => {
                json!({ "asked": done.asked, "vanished": true, "swap_out_us": took_us })
            }
            // Frozen but still resident: the kernel takes it first, later.
            Err(e) => json!({ "asked": done.asked, "error": e, "swap_out_us": took_us }),
        };
        self.record(now, EventKind::SwappedOut, Some(&done.path), detail);
    }
}
