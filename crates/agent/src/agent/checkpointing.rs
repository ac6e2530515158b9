//! Checkpoint preemption in the agent (004): a task's tree dumped by CRIU
//! into the image store and its container removed; restored into a fresh
//! container when the launcher says it fits again (first come, first
//! served, 002 §3.1); restarted from scratch, saying why, when the image
//! cannot be restored. Running best-effort tasks are pre-dumped now and
//! then, so that their checkpoint writes only what they dirtied since.
//!
//! Only tasks of `overbook run` are checkpointed: the agent knows their
//! command (to restart them if a restore fails) and their tree's root.
//! Other containers are preempted by the fallback instead, as on a node
//! where CRIU does not work: freeze and swap out where there is swap (the
//! work stays), else kill.
//!
//! A dump runs off the loop, one at a time per node (see `dumping`).

use super::dumping::{DumpResult, PendingDump};
use super::{Agent, Tick};
use crate::checkpoint::{Claim, Dumper, ImageKind, Manifest};
use crate::events::details::{PreemptReport, Resumed};
use crate::events::{detail_json, EventKind};
use crate::store::StoredState;
use crate::tasks::{check_name, Managed, RunError, RunRequest, TaskImage};
use overbook_core::launch::TaskRequest;
use overbook_core::{ContainerId, ImageInfo, Preemption, ResumeSite, Time};
use overbook_linux::{process, ContainerCgroups, ContainerControl, Outcome, Pid};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long the members of a dumped tree may take to be gone.
const REAP_WITHIN: Duration = Duration::from_secs(5);

impl<C: ContainerCgroups + ContainerControl> Agent<C> {
    /// Whether container `id` can be checkpointed here, and if not why.
    pub(super) fn can_checkpoint(&self, id: ContainerId) -> Result<(), String> {
        let store = self.images.as_ref().ok_or("the preemptor does not checkpoint")?;
        if !store.usable() {
            return Err(format!(
                "CRIU cannot checkpoint here: {}",
                store.support().why_not().unwrap_or("no criu")
            ));
        }
        let m = self.tasks.by_id.get(&id).ok_or("not a task of `overbook run`")?;
        m.pid().ok_or("its command is not running")?;
        Ok(())
    }

    /// What a checkpoint becomes where it cannot be taken.
    pub(super) fn checkpoint_fallback(&self) -> Preemption {
        overbook_core::preempt::checkpoint_fallback(self.sample.node.swap_total)
    }

    /// Whether task `id` has a pre-dump an incremental dump can build on.
    pub(super) fn has_pre_dump(&self, id: ContainerId) -> bool {
        self.tasks
            .by_id
            .get(&id)
            .and_then(|m| m.image.as_ref())
            .is_some_and(|i| i.kind == ImageKind::PreDump)
    }

    /// Everything before task `id`'s dump (incremental on its pre-dump when
    /// asked and it has one): its manifest written and its state recorded
    /// as `dumping`, so that an agent that dies mid-dump is followed by
    /// one that knows where to look. The dump itself is [`Dumper::dump`],
    /// off the loop (see `dumping`).
    pub(super) fn begin_checkpoint(
        &mut self,
        now: Time,
        id: ContainerId,
        incremental: bool,
    ) -> Result<(PendingDump, Dumper), String> {
        self.can_checkpoint(id)?;
        let (store, m) = match (&self.images, self.tasks.by_id.get(&id)) {
            (Some(s), Some(m)) => (s, m),
            _ => return Err("vanished".into()),
        };
        let dumper = store.dumper().map_err(|e| e.to_string())?;
        let root = m.pid().and_then(Pid::new).ok_or("its command is not running")?;
        let (name, path) = (m.request.name.clone(), m.path.clone());
        let pre = m.image.as_ref().filter(|i| i.kind == ImageKind::PreDump).map(|i| i.dir.clone());
        let prev = pre.filter(|_| incremental);
        let usage = self.view.by_id(id).map_or(0, |k| k.counters.usage);
        let members = match self.view.cgroups().members(&path) {
            Ok(Outcome::Done(p)) => p.pids,
            _ => Vec::new(),
        };
        let dir = store.dump_dir(&name, prev.as_deref());
        let manifest = Manifest {
            request: m.request.clone(),
            restarts: m.restarts,
            progress_s: (m.progress_before + m.started_at.map_or(Duration::ZERO, |s| now.since(s)))
                .as_secs_f64(),
            usage,
            dump: dir.clone(),
            node: store.node().to_string(),
        };
        // The manifest says whose it is (for a shared store's sweeps) and
        // what it is (for another node's `adopt`).
        store.write_manifest(&name, &manifest).map_err(|e| format!("task.json: {e}"))?;
        if let Some(m) = self.tasks.by_id.get_mut(&id) {
            m.image = Some(TaskImage {
                dir: dir.clone(),
                kind: ImageKind::Dump,
                size: 0,
                taken_at: now,
                usage,
            });
        }
        self.persist(now, id, StoredState::Dumping, &format!("dumping into {}", dir.display()));
        Ok((PendingDump { root, dir, prev, members }, dumper))
    }

    /// Everything after task `id`'s dump: its tree reaped, its container
    /// removed and the task queued to be restored. `Err` if it could not be
    /// dumped: then it still runs.
    pub(super) fn finish_checkpoint(
        &mut self,
        now: Time,
        id: ContainerId,
        pending: PendingDump,
        result: DumpResult,
    ) -> Result<Outcome<PreemptReport>, String> {
        let PendingDump { root, dir, members, .. } = pending;
        let DumpResult { report, incremental_failed } = result;
        let (name, path, class, job) = match self.tasks.by_id.get(&id) {
            Some(m) => (m.request.name.clone(), m.path.clone(), m.request.class, m.job),
            None => return Err("vanished".into()),
        };
        let report = match report {
            Ok(Outcome::Done(r)) => r,
            other => {
                if let Some(m) = self.tasks.by_id.get_mut(&id) {
                    m.image = None;
                }
                self.discard_images(now, &name);
                self.persist(now, id, StoredState::Running, "not dumped");
                // A tree that ended by itself meanwhile is not killed (and
                // so not run again): its exit is reaped as a finish.
                return match other {
                    Err(e) => Err(e.to_string()),
                    _ => Ok(Outcome::Vanished),
                };
            }
        };
        let usage = self.tasks.by_id.get(&id).and_then(|m| m.image.as_ref()).map_or(0, |i| i.usage);
        // CRIU killed the tree: its root is reaped here, its other members
        // (reparented to this agent, a subreaper) too, so that their pids
        // are free for the restore.
        let Some(m) = self.tasks.by_id.get_mut(&id) else { return Err("vanished".into()) };
        // A started root is std's child, reaped by it; a restored one is
        // reaped by pid with the other members.
        let parent_reaps = match m.child.take() {
            Some(mut child) => {
                let _ = child.wait();
                Some(root)
            }
            None => None,
        };
        m.restored = None;
        // An adopted tree is dumped like any: from now on it waits to be
        // restored, as this agent's own.
        m.adopted = false;
        let unreaped = reap_members(&members, parent_reaps);
        let ran = m.started_at.take().map_or(Duration::ZERO, |s| now.since(s));
        m.progress_before += ran;
        let progress = m.progress_before;
        m.image = Some(TaskImage {
            dir: dir.clone(),
            kind: ImageKind::Dump,
            size: report.sizes.total,
            taken_at: now,
            usage,
        });
        let _ = self.view.cgroups().remove(&path);
        self.persist(
            now,
            id,
            StoredState::Checkpointed,
            &format!("checkpointed into {}", dir.display()),
        );
        let task = TaskRequest { id, job, class, request: usage, submitted: now };
        self.policy.suspended(now, task, usage);
        self.view.carry(id, progress, None);
        Ok(Outcome::Done(PreemptReport {
            images: Some(dir.display().to_string()),
            incremental: Some(report.prev.is_some()),
            incremental_failed,
            pages: Some(report.sizes.pages),
            bytes: Some(report.sizes.total),
            dump_s: Some(report.elapsed.as_secs_f64()),
            progress_s: Some(progress.as_secs_f64()),
            unreaped: Some(u64::try_from(unreaped).unwrap_or(u64::MAX)),
            ..PreemptReport::default()
        }))
    }

    /// Restores checkpointed task `id` into a fresh container; if that
    /// fails, starts it again from scratch and says why.
    pub(super) fn restore_checkpointed(
        &mut self,
        now: Time,
        id: ContainerId,
        site: ResumeSite,
        tick: &mut Tick,
    ) {
        let Some(m) = self.tasks.by_id.get(&id) else { return };
        let (name, path) = (m.request.name.clone(), m.path.clone());
        let Some(image) = m.image.clone() else { return };
        if let Some(Ok(Claim::Theirs(by))) = self.images.as_ref().map(|s| s.claim(&name)) {
            // Adopted by another node from the shared store: it runs there.
            self.tasks.by_id.remove(&id);
            self.policy.departed(id);
            self.view.unreserve(&path);
            self.view.uncarry(id);
            self.record(now, EventKind::MovedAway, Some(&path), json!({ "to": by }));
            self.unpersist(now, &name, "moved", &format!("restored by {by}"));
            return;
        }
        // Recorded before CRIU can resume the tree: an agent that dies from
        // here until `Running` is recorded leaves `Restoring`, and the
        // next one restores it again only if this restore never finished.
        self.persist(
            now,
            id,
            StoredState::Restoring,
            &format!("restoring from {}", image.dir.display()),
        );
        let restored = match &self.images {
            None => Err("no image store".to_string()),
            Some(store) => match self.view.cgroups().create(&path, None) {
                Ok(_) | Err(overbook_linux::CgroupError::Exists { .. }) => store
                    .restore(&image.dir, &self.view.cgroups().join_files(&path))
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            },
        };
        match restored {
            Ok(r) => {
                let Some(m) = self.tasks.by_id.get_mut(&id) else { return };
                m.restored = Some(r.pid.get());
                m.started_at = Some(now);
                m.image = None;
                m.peak = 0;
                let progress = m.progress_before;
                self.discard_images(now, &name);
                self.view.carry(id, progress, None);
                self.resumes += 1;
                tick.resumed.push(path.clone());
                self.persist(now, id, StoredState::Running, &format!("restored, pid {}", r.pid));
                self.record(
                    now,
                    EventKind::Resumed,
                    Some(&path),
                    detail_json(&Resumed {
                        site: site_name(site).to_string(),
                        how: "restore".into(),
                        pid: Some(r.pid.get()),
                        restore_s: Some(r.elapsed.as_secs_f64()),
                        bytes: Some(image.size),
                        progress_s: Some(progress.as_secs_f64()),
                    }),
                );
            }
            Err(why) => {
                // What CRIU began to restore is killed where it was put;
                // the task starts again from nothing.
                if let Ok(Outcome::Done(_)) = self.view.cgroups().kill(&path) {
                    let _ = self.view.cgroups().remove(&path);
                }
                self.discard_images(now, &name);
                let Some(m) = self.tasks.by_id.get_mut(&id) else { return };
                m.image = None;
                m.restarts += 1;
                let restarts = m.restarts;
                self.record(
                    now,
                    EventKind::RestoreFailed,
                    Some(&path),
                    json!({ "error": why, "then": "restarted from scratch", "restarts": restarts }),
                );
                if let Err(e) = self.start(now, id) {
                    self.record(
                        now,
                        EventKind::StartFailed,
                        Some(&path),
                        json!({ "error": e.to_string() }),
                    );
                }
            }
        }
    }

    /// A checkpointed task waits here to be restored: taken back from the
    /// store by a restarted agent, or adopted from another node's dump.
    pub(super) fn queue_restore(
        &mut self,
        now: Time,
        request: RunRequest,
        restarts: u32,
        dir: PathBuf,
        progress: Duration,
        usage: u64,
    ) -> ContainerId {
        let name = request.name.clone();
        let path = match self.view.root().child(&name) {
            Ok(p) => p,
            Err(_) => return ContainerId(0),
        };
        let job = self.tasks.job_id(request.job.as_deref().unwrap_or(&name));
        let class = request.class;
        let id = self.view.reserve(&path, class, request.weight);
        let size = overbook_linux::criu::image_sizes(&dir).map_or(0, |s| s.total);
        let mut m = Managed::new(request, job, path.clone(), restarts);
        m.progress_before = progress;
        m.image =
            Some(TaskImage { dir: dir.clone(), kind: ImageKind::Dump, size, taken_at: now, usage });
        self.tasks.by_id.insert(id, m);
        let task = TaskRequest { id, job, class, request: usage, submitted: now };
        self.policy.suspended(now, task, usage);
        self.view.carry(id, progress, None);
        self.persist(
            now,
            id,
            StoredState::Checkpointed,
            &format!("to restore from {}", dir.display()),
        );
        self.record(
            now,
            EventKind::Restored,
            Some(&path),
            json!({ "state": "checkpointed", "image": dir.display().to_string(), "restarts": restarts }),
        );
        id
    }

    /// `overbook adopt`: a task another node checkpointed into the shared
    /// store is claimed and restored here when it fits (004 Algorithm 2's
    /// remote resume, at the word of whoever knows both nodes' queues).
    pub fn adopt(&mut self, now: Time, name: &str) -> Result<serde_json::Value, RunError> {
        check_name(name)?;
        let fail = |problem: String| RunError::Start { name: name.to_string(), problem };
        let store =
            self.images.as_ref().ok_or_else(|| fail("this agent does not checkpoint".into()))?;
        if !store.usable() {
            return Err(fail(format!(
                "CRIU cannot restore here: {}",
                store.support().why_not().unwrap_or("?")
            )));
        }
        let path = self.view.root().child(name).map_err(|e| fail(e.to_string()))?;
        if self.view.knows(&path) || self.tasks.by_id.values().any(|m| m.path == path) {
            return Err(RunError::Exists(name.to_string()));
        }
        let manifest = store.read_manifest(name).map_err(|e| fail(format!("its manifest: {e}")))?;
        if !crate::checkpoint::dump_complete(&manifest.dump) {
            return Err(fail(format!("{} is not a complete dump", manifest.dump.display())));
        }
        match store.claim(name).map_err(|e| fail(format!("claim: {e}")))? {
            Claim::Ours => {}
            Claim::Theirs(by) => return Err(fail(format!("already claimed by {by}"))),
        }
        let from = manifest.node.clone();
        let progress = Duration::try_from_secs_f64(manifest.progress_s).unwrap_or_default();
        self.queue_restore(
            now,
            manifest.request,
            manifest.restarts,
            manifest.dump.clone(),
            progress,
            manifest.usage,
        );
        Ok(json!({ "adopted": name, "from": from, "image": manifest.dump.display().to_string() }))
    }

    /// Pre-dumps one running best-effort task whose last image is older
    /// than the interval (or that has none, and ran that long), so its
    /// checkpoint can be incremental. One per tick: a pre-dump takes the
    /// store's bandwidth and briefly stops the task.
    pub(super) fn pre_dump_one(&mut self, now: Time) {
        let Some(every) = self.pre_dump_interval else { return };
        let candidates = self.tasks.by_id.iter().filter_map(|(id, m)| {
            Some(overbook_core::preempt::PreDumpCandidate {
                id: *id,
                eligible: m.request.class.is_preemptible()
                    && m.running()
                    && !self.suspended.contains_key(id)
                    && !self.dumps.involves(*id),
                started: m.started_at?,
                last_image: m.image.as_ref().map(|i| i.taken_at),
                not_before: self.pre_dump_backoff.get(id).copied(),
            })
        });
        let due = overbook_core::preempt::pre_dump_due(now, every, candidates);
        let Some(id) = due else { return };
        let (Some(store), Some(m)) = (&self.images, self.tasks.by_id.get(&id)) else { return };
        let Some(root) = m.pid().and_then(Pid::new) else { return };
        let (name, path) = (m.request.name.clone(), m.path.clone());
        let old = m.image.as_ref().map(|i| i.dir.clone());
        let usage = self.view.by_id(id).map_or(0, |k| k.counters.usage);
        let started = Instant::now();
        // Each pre-dump is whole, not on the last one: the chain a restore
        // reads stays two long, and an old pre-dump is removed at once.
        match store.pre_dump(&name, root, old.as_deref()).map(|o| o.done()) {
            Ok(Some(report)) => {
                let image = TaskImage {
                    dir: report.images_dir.clone(),
                    kind: ImageKind::PreDump,
                    size: report.sizes.total,
                    taken_at: now,
                    usage,
                };
                let info = ImageInfo { size: image.size, taken_at: now, shared: store.shared() };
                let progress = m.progress_before;
                if let Some(old) = &old {
                    let _ = std::fs::remove_dir_all(old);
                }
                if let Some(m) = self.tasks.by_id.get_mut(&id) {
                    m.image = Some(image);
                }
                self.view.carry(id, progress, Some(info));
                self.record(
                    now,
                    EventKind::PreDumped,
                    Some(&path),
                    json!({
                        "images": report.images_dir.display().to_string(),
                        "pages": report.sizes.pages,
                        "bytes": report.sizes.total,
                        "took_s": started.elapsed().as_secs_f64(),
                    }),
                );
            }
            Ok(None) => {}
            Err(e) => {
                // Not retried before the interval: a task CRIU cannot
                // pre-dump is checkpointed in full (or falls back) later.
                if let Some(m) = self.tasks.by_id.get_mut(&id) {
                    m.image = None;
                }
                self.pre_dump_backoff.insert(id, now + every);
                self.record(
                    now,
                    EventKind::PreDumpFailed,
                    Some(&path),
                    json!({ "error": e.to_string() }),
                );
            }
        }
    }

    /// Removes task `name`'s images (it is restored, restarted or over).
    pub(super) fn discard_images(&mut self, now: Time, name: &str) {
        let Some(store) = &self.images else { return };
        if let Err(e) = store.discard(name) {
            let dir = store.task_dir(name).display().to_string();
            self.record(
                now,
                EventKind::ImageNotRemoved,
                None,
                json!({ "images": dir, "error": e.to_string() }),
            );
        }
    }
}

fn site_name(site: ResumeSite) -> &'static str {
    match site {
        ResumeSite::Local => "local",
        ResumeSite::Remote => "remote",
        ResumeSite::Restart => "restart",
    }
}

/// The exit of a restored tree's root, once it has ended: its status when
/// this agent (a subreaper) could reap it, else that it is gone.
pub(super) fn restored_exit(pid: u32) -> Option<String> {
    let pid = Pid::new(pid)?;
    match process::reap_if_exited(pid) {
        Ok(Some(exit)) => Some(exit.to_string()),
        Ok(None) => None,
        // Not this agent's child: only its absence can be seen.
        Err(_) => (!process::exists(pid))
            .then(|| "exit status unknown (not reparented to the agent)".to_string()),
    }
}

/// Reaps the members of a dumped tree (but `reaped_elsewhere`), waiting a
/// little for the kill CRIU sent them; how many could not be reaped (not
/// this agent's children, or still dying).
fn reap_members(members: &[Pid], reaped_elsewhere: Option<Pid>) -> usize {
    let deadline = Instant::now() + REAP_WITHIN;
    let mut left: Vec<Pid> =
        members.iter().copied().filter(|p| Some(*p) != reaped_elsewhere).collect();
    while !left.is_empty() && Instant::now() < deadline {
        // Reaped, or not ours to reap: either way nothing more to wait for.
        left.retain(|pid| matches!(process::reap_if_exited(*pid), Ok(None)));
        if !left.is_empty() {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    left.len()
}
