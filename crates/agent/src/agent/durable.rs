//! Tasks that outlive the agent: each `overbook run` task's state goes to
//! the [`TaskStore`] as it changes, and a starting agent takes back what an
//! earlier one left (after a crash or `kill -9` too):
//!
//! * queued tasks, and tasks a preemption killed, are queued again, first
//!   come first served, keeping their restart counts;
//! * a running task whose container still has processes is watched until
//!   it empties (the earlier agent was its parent, so its exit status is
//!   unknown), then recorded as finished;
//! * a running task whose container is gone or empty ended while no agent
//!   watched: recorded as such, not run again (it may have finished).
//!
//! A store that fails is reported as an event and the agent goes on: a
//! node's safety does not wait for a disk.

use super::Agent;
use crate::store::{StoredState, StoredTask, TaskStore};
use overbook_core::{ContainerId, Time};
use overbook_linux::{ContainerCgroups, ContainerControl, ContainerPath};
use serde_json::json;

/// What the agent keeps for durability.
#[derive(Debug, Default)]
pub(crate) struct Durable {
    pub store: Option<TaskStore>,
    /// Read at start, taken back at the first full sample.
    pub restoring: Vec<StoredTask>,
    /// Running tasks of an earlier agent (name, container, the pid it
    /// started), watched until they end.
    pub orphans: Vec<(String, ContainerPath, Option<u32>)>,
}

impl<C: ContainerCgroups + ContainerControl> Agent<C> {
    /// Records a managed task's new state.
    pub(super) fn persist(&mut self, now: Time, id: ContainerId, state: StoredState, detail: &str) {
        let Some(m) = self.tasks.by_id.get(&id) else { return };
        let task = StoredTask {
            request: m.request.clone(),
            state,
            restarts: m.restarts,
            pid: m.child.as_ref().map(std::process::Child::id),
        };
        let Some(store) = &mut self.durable.store else { return };
        if let Err(e) = store.put(&task, detail) {
            let name = task.request.name;
            self.record(now, "state-error", None, json!({ "task": name, "error": e.to_string() }));
        }
    }

    /// Records that a task is over.
    pub(super) fn unpersist(&mut self, now: Time, name: &str, how: &str, detail: &str) {
        let Some(store) = &mut self.durable.store else { return };
        if let Err(e) = store.remove(name, how, detail) {
            self.record(now, "state-error", None, json!({ "task": name, "error": e.to_string() }));
        }
    }

    /// At a full sample: takes back what an earlier agent left, then
    /// watches its running tasks.
    pub(super) fn restore_and_watch(&mut self, now: Time) {
        for stored in std::mem::take(&mut self.durable.restoring) {
            self.restore(now, stored);
        }
        // (What could not be taken back yet is in `restoring` again.)
        let mut ended = Vec::new();
        self.durable.orphans.retain(|(name, path, pid)| {
            let alive = self.view.containers().any(|k| &k.path == path && k.members > 0)
                || pid.is_some_and(process_exists);
            if !alive {
                ended.push((name.clone(), path.clone()));
            }
            alive
        });
        for (name, path) in ended {
            let _ = self.view.cgroups().remove(&path);
            let detail = "exit status unknown (started by an earlier agent)";
            self.record(now, "finished", Some(&path), json!({ "status": detail }));
            self.unpersist(now, &name, "finished", detail);
        }
    }

    fn restore(&mut self, now: Time, stored: StoredTask) {
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
        match (stored.state, members) {
            _ if alive => {
                // Running (or killed, but the kill did not finish), or not
                // in its container yet: watched by container and pid.
                self.record(
                    now,
                    "adopted-task",
                    Some(&path),
                    json!({ "restarts": stored.restarts }),
                );
                self.durable.orphans.push((name, path, stored.pid));
            }
            (StoredState::Running, _) => {
                let _ = self.view.cgroups().remove(&path);
                let detail = "ended while no agent was running: not run again";
                self.record(now, "ended-unobserved", Some(&path), json!({ "detail": detail }));
                self.unpersist(now, &name, "ended-unobserved", detail);
            }
            (StoredState::Queued | StoredState::Killed, Some(_)) => {
                // An empty container a kill left: removed now, and the task
                // taken back once a sample has seen it gone (the container
                // made at start must be a new one, with the task's id).
                let _ = self.view.cgroups().remove(&path);
                self.durable.restoring.push(stored);
            }
            (StoredState::Queued | StoredState::Killed, None) => {
                let restarts = stored.restarts + u32::from(stored.state == StoredState::Killed);
                match self.admit(now, stored.request, restarts) {
                    Ok(reply) => self.record(
                        now,
                        "restored",
                        Some(&path),
                        json!({ "state": reply.state, "restarts": restarts }),
                    ),
                    Err(e) => {
                        self.record(
                            now,
                            "restore-failed",
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

/// Whether a process with this pid exists (a pid reused since is taken for
/// the task: it only delays the task's end being recorded).
fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}
