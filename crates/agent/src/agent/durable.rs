//! Tasks that outlive the agent: each `overbook run` task's state goes to
//! the [`TaskStore`] as it changes, and a starting agent takes back what an
//! earlier one left (after a crash or `kill -9` too):
//!
//! * every task keeps the class it was started with (its container is
//!   given that class before it is first seen, whatever the name rules say);
//! * queued tasks, and tasks a preemption killed, are queued again, first
//!   come first served, keeping their restart counts;
//! * a running task whose container still has processes is managed again
//!   (a preemption that kills it requeues it, as any task of this agent);
//!   it is over when its root is gone and its container empty (the earlier
//!   agent was its parent, so its exit status is unknown);
//! * a task the earlier agent was starting (`starting`) ran if its start
//!   mark is there (the child makes it in its container just before its
//!   exec, see [`crate::starts`]): it is managed as running if its command
//!   is in its container, and recorded as ended otherwise (a short command
//!   may have run to its end). Without a mark it never ran and is queued
//!   again. Why that is exact: the earlier agent's children held its node
//!   lock from fork to exec, and this agent holds that lock, so no such
//!   child is still on its way to its mark;
//! * a running task whose container is gone or empty ended while no agent
//!   watched: recorded as such, not run again (it may have finished);
//! * a checkpointed task waits to be restored, as before; one whose image
//!   is gone or incomplete is queued to start again from scratch;
//! * a task the earlier agent was dumping when it died is checkpointed if
//!   CRIU finished the dump (it goes on without the agent), watched as
//!   running if the dump failed and left it running, and queued again
//!   otherwise; while a CRIU still dumps it, the agent waits;
//! * image directories no stored task names are removed.
//!
//! A store that fails is reported as an event and the agent goes on: a
//! node's safety does not wait for a disk.

use super::Agent;
use crate::checkpoint::{dump_complete, ImageKind};
use crate::events::EventKind;
use crate::starts::StartMarks;
use crate::store::{StoredState, StoredTask, TaskStore};
use crate::tasks::Managed;
use overbook_core::{ContainerId, Time};
use overbook_linux::{process, ContainerCgroups, ContainerControl, ContainerPath, Outcome, Pid};
use serde_json::json;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What the agent keeps for durability.
#[derive(Debug, Default)]
pub(crate) struct Durable {
    pub store: Option<TaskStore>,
    /// Where a start leaves its proof that the command ran (beside the
    /// store; none without one).
    pub marks: Option<StartMarks>,
    /// Read at start, taken back at the first full sample.
    pub restoring: Vec<StoredTask>,
    /// Whether images no task names were looked for (once, at start).
    pub strays_swept: bool,
    /// Peaks kept per job (the launcher's `profile_history`).
    pub profile_history: usize,
}

impl<C: ContainerCgroups + ContainerControl> Agent<C> {
    /// Records a managed task's new state.
    /// Whether the store has it (`false` too without a store).
    pub(super) fn persist(
        &mut self,
        now: Time,
        id: ContainerId,
        state: StoredState,
        detail: &str,
    ) -> bool {
        let Some(m) = self.tasks.by_id.get(&id) else { return false };
        let task = StoredTask {
            request: m.request.clone(),
            state,
            restarts: m.restarts,
            pid: m.pid(),
            image: m.image.as_ref().filter(|i| i.kind == ImageKind::Dump).map(|i| i.dir.clone()),
            progress: m.progress_before,
            usage: m.image.as_ref().map_or(0, |i| i.usage),
        };
        let Some(store) = &mut self.durable.store else { return false };
        let Err(e) = store.put(&task, detail) else { return true };
        let name = task.request.name;
        self.record(
            now,
            EventKind::StateError,
            None,
            json!({ "task": name, "error": e.to_string() }),
        );
        false
    }

    /// Records a finished task's peak and run time for its job's profile.
    pub(super) fn keep_profile(
        &mut self,
        now: Time,
        job: &str,
        peak: u64,
        runtime: std::time::Duration,
    ) {
        let keep = self.durable.profile_history;
        let Some(store) = &mut self.durable.store else { return };
        if let Err(e) = store.add_profile(job, peak, runtime, keep) {
            self.record(
                now,
                EventKind::StateError,
                None,
                json!({ "job": job, "error": e.to_string() }),
            );
        }
    }

    /// Records that a task is over.
    pub(super) fn unpersist(&mut self, now: Time, name: &str, how: &str, detail: &str) {
        let Some(store) = &mut self.durable.store else { return };
        if let Err(e) = store.remove(name, how, detail) {
            self.record(
                now,
                EventKind::StateError,
                None,
                json!({ "task": name, "error": e.to_string() }),
            );
        }
    }

    /// At a full sample: takes back what an earlier agent left, then
    /// watches its running tasks.
    pub(super) fn restore_and_watch(&mut self, now: Time) {
        if !self.durable.strays_swept {
            self.durable.strays_swept = true;
            self.sweep_stray_images(now);
            if let Some(marks) = &self.durable.marks {
                let starting: Vec<&str> = (self.durable.restoring.iter())
                    .filter(|t| t.state == StoredState::Starting)
                    .map(|t| t.request.name.as_str())
                    .collect();
                marks.sweep(&starting);
            }
        }
        for stored in std::mem::take(&mut self.durable.restoring) {
            self.restore(now, stored);
        }
        // (What could not be taken back yet is in `restoring` again.)
    }

    /// A task of an earlier agent that runs now is this agent's again.
    fn adopt_running(&mut self, now: Time, stored: StoredTask, path: ContainerPath) {
        let name = stored.request.name.clone();
        // Its container was given the task's id and class at start; a
        // container not seen yet (a command still on its way in) gets them now.
        let id = match self.view.id_of(&path) {
            Some(id) => id,
            None => self.view.reserve(&path, stored.request.class, stored.request.weight),
        };
        let job = self.tasks.job_id(stored.request.job.as_deref().unwrap_or(&name));
        let mut m = Managed::new(stored.request, job, path.clone(), stored.restarts);
        m.adopted = true;
        // A kill the earlier agent decided (it is recorded before it is
        // done) is carried out: the task starts again once its tree is gone,
        // as after any kill, and never runs on to finish twice.
        m.killed = stored.state == StoredState::Killed;
        if m.killed {
            let detail = match self.view.cgroups().kill(&path) {
                Ok(Outcome::Done(r)) => json!({ "signalled": r.signalled }),
                Ok(Outcome::Vanished) => json!({ "signalled": 0 }),
                Err(e) => json!({ "error": e.to_string() }),
            };
            self.record(now, EventKind::KillCompleted, Some(&path), detail);
        }
        m.restored = stored.pid.filter(|&p| process_exists(p));
        m.started_at = Some(now);
        m.progress_before = stored.progress;
        let (class, killed) = (m.request.class, m.killed);
        self.tasks.by_id.insert(id, m);
        self.view.carry(id, stored.progress, None);
        self.record(
            now,
            EventKind::AdoptedTask,
            Some(&path),
            json!({ "restarts": stored.restarts, "class": class.as_str(), "was": stored.state.as_str() }),
        );
        let state = if killed { StoredState::Killed } else { StoredState::Running };
        self.persist(now, id, state, "adopted by a new agent");
    }

    /// A task an earlier agent checkpointed waits to be restored here.
    fn take_back_checkpointed(&mut self, now: Time, stored: StoredTask) {
        let Some(dir) = stored.image.clone() else { return };
        self.queue_restore(
            now,
            stored.request,
            stored.restarts,
            dir,
            stored.progress,
            stored.usage,
        );
    }

    /// Removes the image directories no stored task names.
    fn sweep_stray_images(&mut self, now: Time) {
        let Some(store) = &self.images else { return };
        let keep: Vec<&str> =
            self.durable.restoring.iter().map(|t| t.request.name.as_str()).collect();
        let strays = store.strays(&keep);
        for dir in strays {
            let detail = match std::fs::remove_dir_all(&dir) {
                Ok(()) => json!({ "images": dir.display().to_string() }),
                Err(e) => json!({ "images": dir.display().to_string(), "error": e.to_string() }),
            };
            self.record(now, EventKind::StrayImageRemoved, None, detail);
        }
    }

    fn restore(&mut self, now: Time, mut stored: StoredTask) {
        let name = stored.request.name.clone();
        let Ok(path) = self.view.root().child(&name) else {
            self.unpersist(now, &name, "dropped", "its name is not a valid container name");
            return;
        };
        let members = self.view.containers().find(|k| k.path == path).map(|k| k.members);
        // A command started a moment before the earlier agent died may not
        // have joined its container yet: its pid says it is there.
        let started =
            stored.state == StoredState::Running && stored.pid.is_some_and(process_exists);
        let alive = members.is_some_and(|n| n > 0) || started;
        if stored.state == StoredState::Starting
            && self.durable.marks.as_ref().is_some_and(|marks| marks.made(&name))
        {
            // Its command reached its exec: it ran, and if it is not in its
            // container it ended while no agent watched. Never run again.
            let now_is = if alive { "running" } else { "ended: it ran while no agent watched" };
            self.record(now, EventKind::StartInterrupted, Some(&path), json!({ "now": now_is }));
            stored.state = StoredState::Running;
            if let Some(marks) = &self.durable.marks {
                let _ = marks.clear(&name);
            }
        }
        if stored.state == StoredState::Dumping {
            let image = stored.image.clone().unwrap_or_default();
            if criu_working_on(&image) {
                // The earlier agent's CRIU goes on: its outcome decides.
                self.durable.restoring.push(stored);
                return;
            }
            if dump_complete(&image) {
                stored.state = StoredState::Checkpointed;
                // CRIU killed the tree when the image was complete.
                if members.is_some() && !alive {
                    let _ = self.view.cgroups().remove(&path);
                }
            } else if alive {
                // The dump failed and left it running.
                stored.state = StoredState::Running;
                self.discard_images(now, &name);
            } else {
                stored.state = StoredState::Killed;
                self.discard_images(now, &name);
            }
            self.record(
                now,
                EventKind::DumpInterrupted,
                Some(&path),
                json!({ "image": image.display().to_string(), "now": stored.state.as_str() }),
            );
        }
        if stored.state == StoredState::Restoring {
            let image = stored.image.clone().unwrap_or_default();
            if criu_working_on(&image) {
                // The earlier agent's CRIU goes on: its outcome decides.
                self.durable.restoring.push(stored);
                return;
            }
            stored.state = if alive {
                // Restored, and running: managed as any running task.
                StoredState::Running
            } else if crate::checkpoint::restore_complete(&image) {
                // Restored, then ended while no agent ran: it may have
                // finished, so it is never restored a second time.
                StoredState::Running
            } else {
                // Never resumed: the image is as the dump left it.
                StoredState::Checkpointed
            };
            self.record(
                now,
                EventKind::RestoreInterrupted,
                Some(&path),
                json!({ "image": image.display().to_string(), "now": if alive { "running" } else if stored.state == StoredState::Running { "ended" } else { "checkpointed" } }),
            );
            if stored.state == StoredState::Running {
                self.discard_images(now, &name);
            }
        }
        if stored.state == StoredState::Checkpointed {
            let image = stored.image.clone().unwrap_or_default();
            if alive {
                // Restored by someone, or never dumped: watched as running.
                self.discard_images(now, &name);
            } else if dump_complete(&image) {
                if members.is_some() {
                    let _ = self.view.cgroups().remove(&path);
                    self.durable.restoring.push(stored);
                    return;
                }
                self.take_back_checkpointed(now, stored);
                return;
            } else {
                self.record(
                    now,
                    EventKind::ImageLost,
                    Some(&path),
                    json!({ "image": image.display().to_string(), "then": "restarted from scratch" }),
                );
                self.discard_images(now, &name);
                stored.state = StoredState::Killed;
            }
        }
        // Not yet said of one whose empty container is removed first: it
        // comes back here once a sample has seen the container gone.
        let comes_back = !alive && members.is_some();
        if stored.state == StoredState::Starting && !comes_back {
            let then = if alive { "running" } else { "queued again: it never ran" };
            self.record(now, EventKind::StartInterrupted, Some(&path), json!({ "now": then }));
        }
        match (stored.state, members) {
            _ if alive => {
                // Running (or killed, but the kill did not finish), or not
                // in its container yet: managed again, by container and pid.
                self.adopt_running(now, stored, path);
            }
            (
                StoredState::Running
                | StoredState::Dumping
                | StoredState::Checkpointed
                | StoredState::Restoring,
                _,
            ) => {
                let _ = self.view.cgroups().remove(&path);
                self.view.unreserve(&path);
                let detail = "ended while no agent was running: not run again";
                self.record(
                    now,
                    EventKind::EndedUnobserved,
                    Some(&path),
                    json!({ "detail": detail }),
                );
                self.unpersist(now, &name, "ended-unobserved", detail);
            }
            (StoredState::Queued | StoredState::Starting | StoredState::Killed, Some(_)) => {
                // An empty container a kill left: removed now, and the task
                // taken back once a sample has seen it gone (the container
                // made at start must be a new one, with the task's id).
                let _ = self.view.cgroups().remove(&path);
                self.durable.restoring.push(stored);
            }
            (StoredState::Queued | StoredState::Starting | StoredState::Killed, None) => {
                let restarts = stored.restarts + u32::from(stored.state == StoredState::Killed);
                match self.admit(now, stored.request, restarts, true) {
                    Ok(reply) => self.record(
                        now,
                        EventKind::Restored,
                        Some(&path),
                        json!({ "state": reply.state, "restarts": restarts }),
                    ),
                    Err(e) => {
                        self.view.unreserve(&path);
                        self.record(
                            now,
                            EventKind::RestoreFailed,
                            Some(&path),
                            json!({ "error": e.to_string() }),
                        );
                        self.unpersist(now, &name, "restore-failed", &e.to_string());
                    }
                }
            }
        }
    }
}

/// Whether a CRIU process is at work on images directory `dir` (one the
/// earlier agent started, which outlives it). `false` when `/proc` cannot
/// be listed: the images are then taken as they are.
fn criu_working_on(dir: &Path) -> bool {
    let dir = dir.as_os_str().as_bytes();
    process::any_running(|argv| {
        argv.split_first()
            .is_some_and(|(program, args)| program.ends_with(b"criu") && args.contains(&dir))
    })
    .unwrap_or(false)
}

/// Whether a process with this pid exists (a pid reused since is taken for
/// the task: it only delays the task's end being recorded).
pub(super) fn process_exists(pid: u32) -> bool {
    Pid::new(pid).is_some_and(process::exists)
}
