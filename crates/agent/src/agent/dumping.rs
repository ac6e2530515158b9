//! Checkpoints off the agent's loop. A dump writes the victim's memory to
//! the store, which for a few hundred MiB takes seconds; were the agent to
//! wait for it, it would stop watching the node while production may need
//! a second victim at once. So a dump runs on a thread of its own, while
//! the loop goes on sampling, deciding and acting; its end is taken up by
//! the loop ([`Agent::collect_dumps`]), which does what the dump's success
//! or failure asks (the task queued to be restored, or the fallback).
//!
//! Still one dump at a time per node, as 004 has it (dumps share the
//! store's bandwidth): a victim chosen for a checkpoint while another is
//! dumped is frozen at once, so it neither grows nor competes for CPU, and
//! waits its turn in a first-come queue. The policy is told how long the
//! queue will take ([`Dumps::backlog`]), so a checkpoint's cost counts
//! the dumps ahead of it, as in the simulator.
//!
//! An operator's checkpoint (`overbook preempt --how checkpoint`) is the
//! same dump, waited for: its reply says how it went.

use super::{Agent, Tick, SETTLE};
use crate::checkpoint::Dumper;
use crate::events::details::PreemptReport;
use crate::events::EventKind;
use crate::store::StoredState;
use overbook_core::{Class, ContainerId, Evidence, Preemption, Time};
use overbook_linux::criu::CriuError;
use overbook_linux::criu::DumpReport;
use overbook_linux::{ContainerCgroups, ContainerControl, ContainerPath, Outcome, Pid};
use serde_json::json;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A victim the policy (or an operator) chose to preempt, with what its
/// `preempted` event will say (a checkpoint's carries it through its dump).
#[derive(Clone, Debug)]
pub(super) struct PreemptOrder {
    pub id: ContainerId,
    pub path: ContainerPath,
    pub class: Class,
    pub usage: u64,
    pub incremental: bool,
    /// What was decided (the event's `how` is what was done).
    pub how: Preemption,
    pub evidence: Evidence,
    pub decided: Instant,
    /// When its dump began (queued victims wait before it).
    pub issued: Instant,
}

/// What a dump needs once it ends, gathered before it began.
#[derive(Debug)]
pub(super) struct PendingDump {
    pub root: Pid,
    pub dir: PathBuf,
    pub prev: Option<PathBuf>,
    /// The tree's members at the start, reaped once CRIU has killed them.
    pub members: Vec<Pid>,
}

/// CRIU's answer, and why an incremental dump became a full one.
pub(super) struct DumpResult {
    pub report: Result<Outcome<DumpReport>, CriuError>,
    pub incremental_failed: Option<String>,
}

/// A dump that ended, for the loop to take up.
pub(super) struct DumpDone {
    pub order: PreemptOrder,
    pub pending: PendingDump,
    pub result: DumpResult,
}

struct Running {
    order: PreemptOrder,
    pending: PendingDump,
    /// When it should end at the store's write bandwidth.
    expected: Instant,
    handle: JoinHandle<DumpResult>,
}

/// The node's dump under way and the victims waiting for it, frozen.
#[derive(Default)]
pub(super) struct Dumps {
    running: Option<Running>,
    queue: VecDeque<PreemptOrder>,
}

impl std::fmt::Debug for Dumps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dumps")
            .field("running", &self.running.as_ref().map(|r| r.order.id))
            .field("queue", &self.queue.iter().map(|o| o.id).collect::<Vec<_>>())
            .finish()
    }
}

impl Dumps {
    pub fn busy(&self) -> bool {
        self.running.is_some()
    }

    /// Whether container `id` is being dumped or waits for its dump.
    pub fn involves(&self, id: ContainerId) -> bool {
        self.running.as_ref().is_some_and(|r| r.order.id == id)
            || self.queue.iter().any(|o| o.id == id)
    }

    /// How long until a dump asked now could begin: what is left of the
    /// one under way and the queued victims' whole dumps, at `write`
    /// bytes per second.
    pub fn backlog(&self, write: f64) -> Duration {
        let now = Instant::now();
        let left =
            self.running.as_ref().map_or(Duration::ZERO, |r| r.expected - now.min(r.expected));
        let queued: u64 = self.queue.iter().map(|o| o.usage).sum();
        left + seconds(queued as f64 / write)
    }

    /// Starts dumping on a thread of its own, incremental on `prev` (a
    /// full dump if CRIU refuses the pre-dump: the work is kept all the same).
    pub fn start(&mut self, order: PreemptOrder, pending: PendingDump, dumper: Dumper, write: f64) {
        let (root, dir, prev) = (pending.root, pending.dir.clone(), pending.prev.clone());
        let handle = std::thread::spawn(move || {
            let mut report = dumper.dump(root, &dir, prev.as_deref());
            let mut incremental_failed = None;
            if let (Err(e), Some(_)) = (&report, &prev) {
                incremental_failed = Some(e.to_string());
                report = dumper.dump(root, &dir, None);
            }
            DumpResult { report, incremental_failed }
        });
        let expected = order.issued + seconds(order.usage as f64 / write);
        if let Some(earlier) = self.running.replace(Running { order, pending, expected, handle }) {
            // Not expected (a dump starts only when none runs); its thread
            // still ends, and is waited for here.
            let _ = earlier.handle.join();
        }
    }

    /// The dump under way, if it has ended.
    pub fn ended(&mut self) -> Option<DumpDone> {
        if self.running.as_ref().is_some_and(|r| r.handle.is_finished()) {
            self.wait()
        } else {
            None
        }
    }

    /// Waits for the dump under way, if any.
    pub fn wait(&mut self) -> Option<DumpDone> {
        let r = self.running.take()?;
        let result = r.handle.join().unwrap_or_else(|_| DumpResult {
            report: Err(CriuError::Io {
                op: "dump",
                path: r.pending.dir.clone(),
                source: std::io::Error::other("the dump's thread panicked"),
            }),
            incremental_failed: None,
        });
        Some(DumpDone { order: r.order, pending: r.pending, result })
    }

    pub fn enqueue(&mut self, order: PreemptOrder) {
        self.queue.push_back(order);
    }

    pub fn next_queued(&mut self) -> Option<PreemptOrder> {
        self.queue.pop_front()
    }
}

impl Drop for Dumps {
    /// An agent that stops lets CRIU finish: the task's record says
    /// `dumping` with its images directory, and the next agent takes it
    /// up from what CRIU left (a complete dump is restored, else the task
    /// runs on or starts again). Queued victims stay frozen; the next
    /// agent finds them so and resumes them.
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            let _ = r.handle.join();
        }
    }
}

fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
}

impl<C: ContainerCgroups + ContainerControl> Agent<C> {
    /// Checkpoints `order`'s victim: its dump begun now, or (another dump
    /// under way, and nobody waiting) the victim frozen to wait its turn.
    /// With `wait` (an operator), the dump is done before this returns.
    /// `Err` if it cannot be dumped: then it still runs, and the caller
    /// falls back.
    pub(super) fn checkpoint_or_queue(
        &mut self,
        now: Time,
        mut order: PreemptOrder,
        wait: bool,
        tick: &mut Tick,
    ) -> Result<(), String> {
        if wait {
            if let Some(done) = self.dumps.wait() {
                self.end_dump(now, done, tick);
            }
        } else if self.dumps.busy() {
            return match self.view.cgroups().freeze(&order.path, SETTLE) {
                Ok(Outcome::Done(())) => {
                    self.view.set_frozen(order.id, true);
                    let ahead = self.dumps.backlog(self.write_bandwidth()).as_secs_f64();
                    let detail = json!({ "usage": order.usage, "ahead_s": ahead });
                    self.record(now, EventKind::DumpQueued, Some(&order.path), detail);
                    self.dumps.enqueue(order);
                    Ok(())
                }
                Ok(Outcome::Vanished) => {
                    let detail = json!({ "how": order.how.as_str() });
                    self.record(now, EventKind::PreemptVanished, Some(&order.path), detail);
                    Ok(())
                }
                Err(e) => {
                    Err(format!("it could not be frozen to wait for the dump under way: {e}"))
                }
            };
        }
        order.issued = Instant::now();
        let (pending, dumper) = self.begin_checkpoint(now, order.id, order.incremental)?;
        // Not a candidate again, nor pre-dumped, while CRIU has it.
        self.view.set_frozen(order.id, true);
        let detail = json!({
            "usage": order.usage,
            "images": pending.dir.display().to_string(),
            "incremental": pending.prev.is_some(),
        });
        self.record(now, EventKind::Dumping, Some(&order.path), detail);
        self.dumps.start(order, pending, dumper, self.write_bandwidth());
        if wait {
            if let Some(done) = self.dumps.wait() {
                self.end_dump(now, done, tick);
            }
        }
        Ok(())
    }

    /// Takes up the dump that ended, if any, and begins the next queued one.
    pub(super) fn collect_dumps(&mut self, now: Time, tick: &mut Tick) {
        if let Some(done) = self.dumps.ended() {
            self.end_dump(now, done, tick);
        }
        while !self.dumps.busy() {
            let Some(order) = self.dumps.next_queued() else { break };
            // CRIU seizes a running tree: thawed, it runs for the moment
            // CRIU takes to stop it again.
            match self.view.cgroups().thaw(&order.path, SETTLE) {
                Ok(Outcome::Done(())) => self.view.set_frozen(order.id, false),
                Ok(Outcome::Vanished) => {
                    let detail = json!({ "how": order.how.as_str() });
                    self.record(now, EventKind::PreemptVanished, Some(&order.path), detail);
                    continue;
                }
                Err(e) => {
                    // It stays frozen, a suspended container like any.
                    let why = format!("it could not be thawed for its dump: {e}");
                    self.conclude_as_freeze(now, &order, why, tick);
                    continue;
                }
            }
            if let Err(why) = self.checkpoint_or_queue(now, order.clone(), false, tick) {
                self.fall_back(now, &order, format!("checkpoint failed: {why}"), tick);
            }
        }
    }

    /// The dump's end: the task queued to be restored, or (it failed) the
    /// fallback; then its `preempted` event.
    fn end_dump(&mut self, now: Time, done: DumpDone, tick: &mut Tick) {
        let DumpDone { order, pending, result } = done;
        self.view.set_frozen(order.id, false);
        let seized = matches!(result.report, Err(CriuError::Timeout { .. }));
        match self.finish_checkpoint(now, order.id, pending, result) {
            Ok(outcome) => {
                let done = Preemption::Checkpoint { incremental: order.incremental };
                self.conclude(now, &order, done, None, Ok(outcome), tick);
            }
            Err(why) if seized => self.kill_seized(now, &order, why, tick),
            Err(why) => self.fall_back(now, &order, format!("checkpoint failed: {why}"), tick),
        }
    }

    /// CRIU was killed at its timeout while it held the tree: it did not
    /// let the tree go as it does when it fails, so the tree may run on
    /// with CRIU's parasite code in it (one died of SIGTRAP, and its log
    /// ended mid-way). It cannot be trusted to finish right: it is killed
    /// and starts again from the beginning, whether the kill or CRIU's
    /// leftovers end it.
    fn kill_seized(&mut self, now: Time, order: &PreemptOrder, why: String, tick: &mut Tick) {
        let fallback = Some(format!(
            "checkpoint failed: {why}; CRIU was killed while it held the tree, which cannot be \
             trusted to run on: kill instead"
        ));
        const WHY: &str = "CRIU was killed while it held it";
        self.persist(now, order.id, StoredState::Killed, WHY);
        let result = self.suspend_or_kill(order.id, Preemption::Kill, &order.path, order.usage);
        let result = result.map_err(|e| e.to_string());
        let killed = matches!(result, Ok(Outcome::Done(_)));
        self.conclude(now, order, Preemption::Kill, fallback, result, tick);
        if let Some(m) = self.tasks.by_id.get_mut(&order.id) {
            m.killed = true;
            if !killed {
                // `conclude` took a kill not done for a task running on:
                // this one may not run on, whatever ends it.
                self.persist(now, order.id, StoredState::Killed, WHY);
            }
        }
    }

    /// The node's fallback where a checkpoint could not be taken (the tree
    /// still runs): its memory must come back all the same.
    pub(super) fn fall_back(
        &mut self,
        now: Time,
        order: &PreemptOrder,
        why: String,
        tick: &mut Tick,
    ) {
        let done = self.checkpoint_fallback();
        let fallback = Some(format!("{why}; {} instead", done.as_str()));
        self.intend_kill(now, order.id, done);
        let result = self.suspend_or_kill(order.id, done, &order.path, order.usage);
        let result = result.map_err(|e| e.to_string());
        self.conclude(now, order, done, fallback, result, tick);
    }

    /// A queued victim that cannot be thawed stays frozen, suspended.
    fn conclude_as_freeze(
        &mut self,
        now: Time,
        order: &PreemptOrder,
        why: String,
        tick: &mut Tick,
    ) {
        let fallback = Some(format!("{why}; freeze instead"));
        let report = Ok(Outcome::Done(PreemptReport::default()));
        self.conclude(now, order, Preemption::Freeze, fallback, report, tick);
    }

    fn write_bandwidth(&self) -> f64 {
        self.images.as_ref().map_or(1.0, |s| s.bandwidth().write.max(1.0))
    }

    /// How long a checkpoint asked now would wait for the dumps ahead.
    pub(super) fn dump_backlog(&self) -> Duration {
        self.dumps.backlog(self.write_bandwidth())
    }
}
