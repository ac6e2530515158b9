//! The supervisor of `overbook run` tasks: admission, start (recorded
//! before the process can run), the reaping of what exited (finished, or
//! killed by a preemption and queued again after its backoff, or given up
//! past its budget).

use super::{checkpointing, durable, Agent};
use crate::events::details::Finished;
use crate::events::{detail_json, EventKind};
use crate::spawn::command_in;
use crate::store::StoredState;
use crate::tasks::{check_name, Managed, RunError, RunReply, RunRequest};
use overbook_core::action::RejectReason;
use overbook_core::launch::{Admission, AfterKill, TaskRequest};
use overbook_core::{ContainerId, Time};
use overbook_linux::{CgroupError, ContainerCgroups, ContainerControl, Outcome};
use serde_json::json;
use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

impl<C: ContainerCgroups + ContainerControl> Agent<C> {
    /// `overbook run`: a command in a new container, admitted by the launcher.
    pub fn submit(&mut self, now: Time, request: RunRequest) -> Result<RunReply, RunError> {
        check_name(&request.name)?;
        if self.view.pods() {
            return Err(RunError::Start {
                name: request.name.clone(),
                problem: "this node's containers are a kubelet's pods (node.pods): the kubelet \
                          starts them, `overbook run` does not"
                    .into(),
            });
        }
        let Some(program) = request.command.first().filter(|p| !p.is_empty()) else {
            return Err(RunError::NoCommand);
        };
        // Refused now, not queued to fail at its start minutes later.
        crate::spawn::find_program(program, request.cwd.as_deref())
            .map_err(|problem| RunError::Program { program: program.clone(), problem })?;
        let path = self
            .view
            .root()
            .child(&request.name)
            .map_err(|e| RunError::Name { name: request.name.clone(), problem: e.to_string() })?;
        if self.view.knows(&path) || self.tasks.by_id.values().any(|m| m.path == path) {
            return Err(RunError::Exists(request.name));
        }
        if let Some(w) = request.weight.filter(|w| !(1..=10_000).contains(w)) {
            return Err(RunError::Weight(w));
        }
        self.admit(now, request, 0, false)
    }

    /// A checked request (new, or taken back from the store) to the launcher.
    /// A task taken back was admitted once (`again`): a full line does not
    /// refuse it.
    pub(super) fn admit(
        &mut self,
        now: Time,
        request: RunRequest,
        restarts: u32,
        again: bool,
    ) -> Result<RunReply, RunError> {
        let path = self
            .view
            .root()
            .child(&request.name)
            .map_err(|e| RunError::Name { name: request.name.clone(), problem: e.to_string() })?;
        let job = self.tasks.job_id(request.job.as_deref().unwrap_or(&request.name));
        let id = self.view.reserve(&path, request.class, request.weight);
        let task = TaskRequest {
            id,
            job,
            class: request.class,
            request: request.mem_peak.unwrap_or(0),
            submitted: now,
        };
        let managed = Managed::new(request, job, path.clone(), restarts);
        let log = self.log_path(&managed.request.name);
        self.tasks.by_id.insert(id, managed);
        let reply = |state: &str| RunReply {
            container: path.to_string(),
            state: state.to_string(),
            log: log.display().to_string(),
        };
        let admission = if again {
            self.policy.requeue(now, task)
        } else {
            self.policy.submit(now, task, &self.sample.node)
        };
        match admission {
            Admission::Launch => {
                self.start(now, id)?;
                Ok(reply("started"))
            }
            Admission::Queued => {
                let job_name = self.tasks.by_id.get(&id).map(|m| m.job_name());
                self.record(now, EventKind::Queued, Some(&path), json!({ "job": job_name }));
                self.persist(now, id, StoredState::Queued, "queued");
                Ok(reply("queued"))
            }
            Admission::Rejected(reason) => {
                self.tasks.by_id.remove(&id);
                self.view.unreserve(&path);
                Err(RunError::Rejected { reason, why: self.refusal(reason, task.request) })
            }
        }
    }

    /// Why the launcher refused a task asking for `asked` bytes, in the
    /// user's terms.
    pub(super) fn refusal(&self, reason: RejectReason, asked: u64) -> String {
        use overbook_core::model::show_size;
        match reason {
            RejectReason::TooLarge => format!(
                "it asks for {} (--mem-peak) and the node has {}: it can never fit",
                show_size(asked),
                show_size(self.sample.node.capacity)
            ),
            RejectReason::QueueFull => "the best-effort queue is full \
                 (policy.launcher.queue_limit tasks wait): try again later"
                .to_string(),
        }
    }

    pub(super) fn log_path(&self, name: &str) -> PathBuf {
        self.task_log_dir.join(format!("{name}.log"))
    }

    /// Makes a managed task's container and starts its command in it.
    pub(super) fn start(&mut self, now: Time, id: ContainerId) -> Result<(), RunError> {
        let Some(m) = self.tasks.by_id.get(&id) else { return Ok(()) };
        if m.running() {
            return Ok(());
        }
        let (path, name, class) = (m.path.clone(), m.request.name.clone(), m.request.class);
        let fail = |problem: String| RunError::Start { name: name.clone(), problem };
        match self.view.cgroups().create(&path, None) {
            Ok(_) | Err(CgroupError::Exists { .. }) => {}
            Err(e) => return Err(self.give_up(now, id, fail(e.to_string()))),
        }
        self.cpu_before_start(now, id, &path, class);
        let log_path = self.log_path(&name);
        let log = std::fs::create_dir_all(&self.task_log_dir)
            .and_then(|()| OpenOptions::new().create(true).append(true).open(&log_path))
            .and_then(|f| Ok((f.try_clone()?, f)));
        let (out, err) = match log {
            Ok(pair) => pair,
            Err(e) => {
                return Err(self.give_up(now, id, fail(format!("{}: {e}", log_path.display()))))
            }
        };
        let m = &self.tasks.by_id[&id];
        // Checked at submit and when read back from the state database; a
        // request from elsewhere (a shared store's manifest) is not.
        let Some((program, args)) = m.request.command.split_first() else {
            return Err(self.give_up(now, id, fail("the command is empty".into())));
        };
        let cmd = command_in(self.view.cgroups(), &path, program, args);
        let mut cmd = match cmd {
            Ok(cmd) => cmd,
            Err(e) => return Err(self.give_up(now, id, fail(e.to_string()))),
        };
        cmd.current_dir(m.request.cwd.as_deref().unwrap_or(std::path::Path::new("/")))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // Recorded before the process can run: an agent that dies from here
        // until `Running` is recorded leaves `Starting`, and the next one
        // (which holds the node's lock, so no child of this one is still
        // between fork and exec) finds the start mark the child made just
        // before its exec if the command ran, even if it ran to its end,
        // and starts it again only if it did not (see `starts`).
        if let Some(marks) = &self.durable.marks {
            let marked = marks.prepare(&name).map_err(|e| e.to_string()).and_then(|mark| {
                overbook_linux::spawn::mark_before_exec(&mut cmd, &mark).map_err(|e| e.to_string())
            });
            if let Err(e) = marked {
                return Err(self.give_up(now, id, fail(format!("start mark: {e}"))));
            }
        }
        self.persist(now, id, StoredState::Starting, "starting");
        match cmd.spawn() {
            Ok(child) => {
                let pid = child.id();
                let m = self.tasks.by_id.get_mut(&id).ok_or_else(|| fail("vanished".into()))?;
                m.child = Some(child);
                m.started_at = Some(now);
                m.killed = false;
                m.peak = 0;
                // From scratch: work before this start is gone, and so is
                // any image of it.
                m.progress_before = Duration::ZERO;
                m.image = None;
                let (restarts, name) = (m.restarts, m.request.name.clone());
                self.discard_images(now, &name);
                self.view.carry(id, Duration::ZERO, None);
                self.record(now, EventKind::Started, Some(&path), json!({ "pid": pid, "restarts": restarts, "log": log_path.display().to_string() }));
                let stored =
                    self.persist(now, id, StoredState::Running, &format!("started, pid {pid}"));
                // `running` says it now. Kept while the store still says
                // `starting`; else cleared at the next start, or swept by
                // the next agent.
                if let Some(marks) = self.durable.marks.as_ref().filter(|_| stored) {
                    let _ = marks.clear(&name);
                }
                Ok(())
            }
            Err(e) => Err(self.give_up(now, id, fail(e.to_string()))),
        }
    }

    /// A task that cannot start is dropped, and says why.
    pub(super) fn give_up(&mut self, now: Time, id: ContainerId, e: RunError) -> RunError {
        if let Some(m) = self.tasks.by_id.remove(&id) {
            self.policy.departed(id);
            self.view.unreserve(&m.path);
            let _ = self.view.cgroups().remove(&m.path);
            self.record(
                now,
                EventKind::StartFailed,
                Some(&m.path),
                json!({ "error": e.to_string() }),
            );
            self.unpersist(now, &m.request.name, "start-failed", &e.to_string());
            self.discard_images(now, &m.request.name);
        }
        e
    }

    /// Managed tasks whose command exited: finished (profile recorded,
    /// container removed) or, when a preemption killed them, queued again
    /// after their backoff, or given up past their restart budget.
    pub(super) fn reap(&mut self, now: Time) {
        let (view, dumps) = (&self.view, &self.dumps);
        let exited: Vec<(ContainerId, String, bool)> = self
            .tasks
            .by_id
            .iter_mut()
            .filter_map(|(id, m)| {
                if dumps.involves(*id) {
                    // CRIU's to stop and end: the dump's end reaps it.
                    return None;
                }
                if m.adopted {
                    // Not this agent's child: over when its root is gone and
                    // nothing is left in its container.
                    let root_gone = m.restored.is_none_or(|pid| !durable::process_exists(pid));
                    let empty = view.by_id(*id).is_none_or(|k| k.members == 0);
                    if !(root_gone && empty) {
                        return None;
                    }
                    m.adopted = false;
                    m.restored = None;
                    let status = "exit status unknown (started by an earlier agent)";
                    return Some((*id, status.to_string(), true));
                }
                if let Some(pid) = m.restored {
                    let status = checkpointing::restored_exit(pid)?;
                    m.restored = None;
                    return Some((*id, status, false));
                }
                let status = m.child.as_mut()?.try_wait().ok()??;
                m.child = None;
                Some((*id, status.to_string(), false))
            })
            .collect();
        for (id, status, adopted) in exited {
            let Some(m) = self.tasks.by_id.get_mut(&id) else { continue };
            let path = m.path.clone();
            let runtime = m.progress_before + m.started_at.map_or(Duration::ZERO, |s| now.since(s));
            // The kernel's own high-water mark: samples may have missed it.
            if let Ok(Outcome::Done(Some(peak))) = self.view.cgroups().peak(&path) {
                m.peak = m.peak.max(peak);
            }
            // The kernel's OOM killer ended it (SIGKILL, and its container
            // counts an OOM kill): its work is not done, so it runs again as
            // after a preemption's kill, within the same restart budget.
            // (`bench preemption` once found a task finished with no answer.)
            let by_kernel = !m.killed
                && !adopted
                && status.starts_with("signal: 9")
                && matches!(
                    self.view.cgroups().counters(&path),
                    Ok(Outcome::Done(c)) if c.oom_kills.is_some_and(|k| k > 0)
                );
            if by_kernel {
                m.killed = true;
                self.policy.departed(id);
                self.policy.note_kill(now);
            }
            let _ = self.view.cgroups().remove(&path);
            // A task that exited by itself (a status, not a signal) finished,
            // even if a kill was decided meanwhile: it raced the kill to its
            // end, and running it again would run it twice. An earlier
            // agent's task has no status to tell: the kill found it running
            // (its members were signalled), so it was killed, and runs again.
            // (The fault-injection suite lost one: its unknown status was
            // read as an exit status.)
            let too_late = m.killed && !adopted && status.starts_with("exit status");
            if too_late {
                m.killed = false;
            }
            if m.killed {
                m.killed = false;
                m.restarts += 1;
                let restarts = m.restarts;
                match self.policy.launcher().config().after_kill(restarts) {
                    AfterKill::Requeue { after } => {
                        m.not_before = Some(now + after);
                        self.record(
                            now,
                            EventKind::Requeued,
                            Some(&path),
                            json!({ "status": status, "restarts": restarts, "after_s": after.as_secs_f64(), "by_kernel": by_kernel }),
                        );
                        let who =
                            if by_kernel { "killed by the kernel's OOM killer" } else { "killed" };
                        let detail =
                            format!("{who}; starts again after {:.1} s", after.as_secs_f64());
                        self.persist(now, id, StoredState::Queued, &detail);
                    }
                    AfterKill::GiveUp => {
                        let max = self.policy.launcher().config().max_restarts;
                        let detail = format!("killed {restarts} times, past max_restarts = {max}");
                        if let Some(m) = self.tasks.by_id.remove(&id) {
                            self.view.unreserve(&m.path);
                            self.view.uncarry(id);
                            self.discard_images(now, &m.request.name);
                            self.unpersist(now, &m.request.name, "gave-up", &detail);
                        }
                        self.record(
                            now,
                            EventKind::GaveUp,
                            Some(&path),
                            json!({ "status": status, "restarts": restarts, "max_restarts": max, "by_kernel": by_kernel }),
                        );
                    }
                }
            } else {
                if too_late {
                    let detail = json!({ "status": status });
                    self.record(now, EventKind::KillTooLate, Some(&path), detail);
                }
                let Some(m) = self.tasks.by_id.get_mut(&id) else { continue };
                let (job, peak, name) = (m.job, m.peak, m.request.name.clone());
                let job_name = m.request.job.clone().unwrap_or_else(|| name.clone());
                self.tasks.by_id.remove(&id);
                // An adopted task's run time and peak are not all known here.
                if !adopted {
                    self.keep_profile(now, &job_name, peak, runtime);
                }
                self.discard_images(now, &name);
                self.view.uncarry(id);
                self.unpersist(now, &name, "finished", &status);
                self.view.unreserve(&path);
                if adopted {
                    self.policy.finished_unprofiled(now, id);
                } else {
                    self.policy.finished(now, id, job, peak, runtime);
                }
                self.record(
                    now,
                    EventKind::Finished,
                    Some(&path),
                    detail_json(&Finished { status, runtime_s: runtime.as_secs_f64(), peak }),
                );
            }
        }
    }

    /// Killed tasks whose restart backoff is over queue again (first come,
    /// first served, like any requeued task: a full line never refuses them).
    pub(super) fn requeue_after_backoff(&mut self, now: Time) {
        let due: Vec<ContainerId> = self
            .tasks
            .by_id
            .iter()
            .filter(|(_, m)| !m.running() && m.not_before.is_some_and(|t| now >= t))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let Some(m) = self.tasks.by_id.get_mut(&id) else { continue };
            m.not_before = None;
            let task = TaskRequest {
                id,
                job: m.job,
                class: m.request.class,
                request: m.request.mem_peak.unwrap_or(0),
                submitted: now,
            };
            match self.policy.requeue(now, task) {
                Admission::Launch => {
                    let _ = self.start(now, id);
                }
                // Waits in the launcher's line (its state says queued).
                Admission::Queued => {}
                Admission::Rejected(reason) => {
                    // The launcher never refuses a requeue; were it to, the
                    // task is dropped with its reason, never silently.
                    if let Some(m) = self.tasks.by_id.remove(&id) {
                        self.view.unreserve(&m.path);
                        let why = self.refusal(reason, m.request.mem_peak.unwrap_or(0));
                        self.unpersist(now, &m.request.name, "rejected", &why);
                        self.record(
                            now,
                            EventKind::Rejected,
                            Some(&m.path),
                            json!({ "reason": why }),
                        );
                    }
                }
            }
        }
    }
}
