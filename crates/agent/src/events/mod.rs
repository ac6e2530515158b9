//! The decision log: every decision the agent takes, with its evidence, as
//! one JSON object per line (a file, and the last few in memory for the API).
//!
//! Why JSON lines: a log that `jq`, a test or a dashboard can read without
//! knowing overbook, appended with one write per event so a crash loses at
//! most the events still queued.
//!
//! Why a writer thread: a write to a slow or stuck disk (a full journal, a
//! hung NFS mount) blocked the agent's loop, and with it sampling and
//! preemption. The loop only queues lines; when the queue is full (the disk
//! is that far behind) lines are dropped, counted, and the count is
//! recorded as an event of its own once there is room again.

pub mod details;

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Lines queued for the file at most; past it, lines are dropped.
const QUEUE: usize = 4096;
/// How long a stopping agent waits for its queued lines to be written.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// Declares [`EventKind`]: each variant with its name in the log.
macro_rules! event_kinds {
    ($( $(#[doc = $doc:literal])* $variant:ident = $name:literal, )*) => {
        /// What happened: every kind of event the agent records. In JSON
        /// (the log file, the API) it is the kebab-case name, as
        /// `docs/agent.md` lists them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum EventKind {
            $( $(#[doc = $doc])* #[serde(rename = $name)] $variant, )*
        }

        impl EventKind {
            /// Every kind, in the order declared.
            pub const ALL: &'static [EventKind] = &[$(EventKind::$variant),*];

            /// Its name in the log.
            pub fn as_str(self) -> &'static str {
                match self { $(EventKind::$variant => $name,)* }
            }
        }
    };
}

event_kinds! {
    /// The agent started (root, cgroup version, sampling period, self-protection, PSI trigger, socket); or a task's command started (pid, restarts, log).
    Started = "started",
    /// A container appeared (class, frozen, usage).
    Found = "found",
    /// A container left.
    Gone = "gone",
    /// An empty container's page cache was dropped (usage before).
    Released = "released",
    /// The kernel's OOM killer killed in a container: it got there before the agent.
    KernelOomKill = "kernel-oom-kill",
    /// At start, with a checkpointing preemptor: CRIU's path and version, what dumps work, the images directory, the store's bandwidths, the fallback.
    Checkpoints = "checkpoints",
    /// At start: checkpoints cannot be used here, and why.
    CheckpointsUnavailable = "checkpoints-unavailable",
    /// A container was preempted: how, its usage, the evidence, timings, the kill or checkpoint report.
    Preempted = "preempted",
    /// A checkpoint's dump began, off the agent's loop (usage, images, incremental); its `preempted` event comes at its end.
    Dumping = "dumping",
    /// A victim chosen for a checkpoint while another is dumped: frozen at once, it waits its turn (usage, ahead_s).
    DumpQueued = "dump-queued",
    /// A pod's class as the API server says it (pod, uid, class, why, a problem if a value was not understood, the class it had if it changed).
    PodClassified = "pod-classified",
    /// Every pod bound to this node has been listed from the API server (pods).
    PodsSynced = "pods-synced",
    /// The API server could not be read (error); retried with backoff, said once until it answers.
    ApiServerTrouble = "api-server-trouble",
    /// A new value of the node's opportunistic memory (`overbook.io/batch-memory`) was sent to the API server (mib, was_mib, why).
    Offered = "offered",
    /// A write to the API server was made (what: offer, event, eviction or condition; pod; after_ms since it was asked).
    ApiWritten = "api-written",
    /// A write to the API server failed (what, pod, error, then: retried in, or given up and why); said again only when the error changes.
    ApiWriteFailed = "api-write-failed",
    /// At start: writes to the API server an earlier agent left undone, sent again (writes).
    ApiWritesCarried = "api-writes-carried",
    /// A running task's pre-dump (images, pages, bytes, took_s).
    PreDumped = "pre-dumped",
    /// A frozen container's swap-out ended (asked, reclaimed bytes or why not, swap_out_us); it runs off the agent's loop.
    SwappedOut = "swapped-out",
    /// A pre-dump failed, with CRIU's reason.
    PreDumpFailed = "pre-dump-failed",
    /// A preempted container resumed: thawed, or restored (restore_s, bytes, progress_s).
    Resumed = "resumed",
    /// A restore failed, with CRIU's reason; the task restarts from scratch.
    RestoreFailed = "restore-failed",
    /// A checkpointed task another node adopted from the shared store.
    MovedAway = "moved-away",
    /// A new agent found a dump the earlier one was making, and what it is now.
    DumpInterrupted = "dump-interrupted",
    /// A new agent found a restore the earlier one was making, and what it is now (running, ended, or checkpointed: restored again).
    RestoreInterrupted = "restore-interrupted",
    /// A checkpointed task's image is gone or incomplete: restarted from scratch.
    ImageLost = "image-lost",
    /// An image directory no stored task names was removed.
    StrayImageRemoved = "stray-image-removed",
    /// An image directory could not be removed, and why.
    ImageNotRemoved = "image-not-removed",
    /// A preemption failed, and why.
    PreemptFailed = "preempt-failed",
    /// A preemption's victim was gone first.
    PreemptVanished = "preempt-vanished",
    /// A preemption was not carried out (a protected container, nothing to do), and why.
    PreemptRefused = "preempt-refused",
    /// A resume failed (the container stays queued).
    ResumeFailed = "resume-failed",
    /// A resume's container was gone first.
    ResumeVanished = "resume-vanished",
    /// An `overbook run` task was admitted and waits.
    Queued = "queued",
    /// A task's command exited (status, runtime, peak).
    Finished = "finished",
    /// A task a preemption killed waits to start again (restarts, after_s).
    Requeued = "requeued",
    /// A task killed more than `max_restarts` times is given up.
    GaveUp = "gave-up",
    /// The launcher refused a task.
    Rejected = "rejected",
    /// A task could not start, and why (said once).
    StartFailed = "start-failed",
    /// A task a kill was decided for exited by itself first: finished, not run again.
    KillTooLate = "kill-too-late",
    /// A new agent found an earlier one's task running (with its stored class).
    AdoptedTask = "adopted-task",
    /// A new agent found a start the earlier one died in: running, or queued again.
    StartInterrupted = "start-interrupted",
    /// A new agent carried out a kill the earlier one died in.
    KillCompleted = "kill-completed",
    /// A task ended while no agent ran: not run again.
    EndedUnobserved = "ended-unobserved",
    /// A stored task was taken back at start (state, restarts).
    Restored = "restored",
    /// An action this agent cannot carry out.
    NotSupported = "not-supported",
    /// A write to the state database failed; the agent goes on.
    StateError = "state-error",
    /// At start: a stored row not taken back, kept in the `set_aside` table (table, task, reason).
    StateRowSetAside = "state-row-set-aside",
    /// At start: the state database was not usable (why), moved aside, a fresh one made.
    StateMovedAside = "state-moved-aside",
    /// At start: the state database cannot be used (error); tasks kept in memory only.
    StateUnavailable = "state-unavailable",
    /// A directory under the node's root whose name is no container name: not watched.
    ContainerSkipped = "container-skipped",
    /// A container whose files could not be read: left out of that sample.
    ContainerUnreadable = "container-unreadable",
    /// What the API turned away since it last said (busy, out_of_descriptors, too_slow, too_large, malformed).
    ApiRefused = "api-refused",
    /// Lines the event log's writer could not take (a slow or stuck disk).
    LogLinesDropped = "log-lines-dropped",
    /// A write to the event log file failed.
    LogFailed = "log-failed",
    /// Memory reclaimed from a container, and what the kernel actually took.
    Reclaimed = "reclaimed",
    /// A reclaim was not carried out, and why.
    ReclaimRefused = "reclaim-refused",
    /// A critical container's swap bypass or memory protection was set.
    Protected = "protected",
    /// A critical container's protection could not be set, and why.
    ProtectFailed = "protect-failed",
    /// A container's CPU share was set for its class (what was written).
    CpuShare = "cpu-share",
    /// A container's CPU share could not be set, and why (said once a container).
    CpuShareFailed = "cpu-share-failed",
    /// The best-effort containers' CPU ceiling was set on one (what was
    /// written, the node's ceiling and how many share it).
    CpuMax = "cpu-max",
    /// A container's CPU ceiling could not be set, and why (said once a container).
    CpuMaxFailed = "cpu-max-failed",
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One decision or observation worth recording.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    /// Its number in this agent's life, from 1 (set by the log).
    pub seq: u64,
    /// Seconds since the agent started.
    pub at: f64,
    /// What happened.
    pub kind: EventKind,
    /// The container's path under the hierarchy, if the event is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Everything else: class, evidence, timings.
    pub detail: serde_json::Value,
}

impl Event {
    /// Its detail as the type its kind writes (see [`details`]); an error
    /// names the field that does not fit.
    pub fn detail_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.detail)
    }
}

/// A typed detail as the log's JSON. Cannot fail for the types of
/// [`details`] (no map keys that are not strings, no non-finite float:
/// those become `null`); a failure would be recorded in its place.
pub fn detail_json<T: Serialize>(detail: &T) -> serde_json::Value {
    serde_json::to_value(detail)
        .unwrap_or_else(|e| serde_json::json!({ "unrecordable_detail": e.to_string() }))
}

/// Where events go.
#[derive(Debug)]
pub struct EventLog {
    file: Option<FileWriter>,
    recent: VecDeque<Event>,
    keep: usize,
    seq: u64,
}

/// The file's writer thread, and what it has to say back.
#[derive(Debug)]
struct FileWriter {
    lines: Option<SyncSender<String>>,
    /// A write failure not yet told (the writer keeps the latest).
    failed: Arc<Mutex<Option<String>>>,
    /// Lines dropped because the queue was full, not yet told.
    dropped: u64,
    /// Lines queued and not yet written.
    in_flight: Arc<AtomicUsize>,
    /// Closed by the writer when it has written everything and ended.
    finished: Receiver<()>,
}

impl FileWriter {
    fn start(path: &Path) -> std::io::Result<FileWriter> {
        let mut file = OpenOptions::new().create(true).append(true).open(path)?;
        let (lines, queued) = mpsc::sync_channel::<String>(QUEUE);
        let failed = Arc::new(Mutex::new(None));
        let (done, finished) = mpsc::channel::<()>();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let (path, report, written) =
            (path.to_path_buf(), Arc::clone(&failed), Arc::clone(&in_flight));
        std::thread::Builder::new().name("overbook-event-log".into()).spawn(move || {
            let _done = done;
            for line in queued {
                if let Err(e) = file.write_all(line.as_bytes()) {
                    let problem = format!("{}: {e}", path.display());
                    *report.lock().unwrap_or_else(PoisonError::into_inner) = Some(problem);
                }
                written.fetch_sub(1, Ordering::AcqRel);
            }
        })?;
        Ok(FileWriter { lines: Some(lines), failed, dropped: 0, in_flight, finished })
    }

    /// Whether the dropped lines can be told now: the writer has caught up
    /// half the queue (telling them into a full queue would drop that too).
    fn has_room(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) < QUEUE / 2
    }

    /// Queues a line; false if the queue is full (the line is dropped).
    fn queue(&mut self, line: String) -> bool {
        let Some(lines) = &self.lines else { return false };
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        match lines.try_send(line) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.in_flight.fetch_sub(1, Ordering::AcqRel);
                self.dropped += 1;
                false
            }
        }
    }
}

impl Drop for FileWriter {
    fn drop(&mut self) {
        // The queued lines are written before the agent exits, unless the
        // disk is stuck: then the exit does not wait for ever.
        drop(self.lines.take());
        let _ = self.finished.recv_timeout(FLUSH_WAIT);
    }
}

impl EventLog {
    /// A log kept in memory only (the last `keep` events).
    pub fn in_memory(keep: usize) -> EventLog {
        EventLog { file: None, recent: VecDeque::new(), keep, seq: 0 }
    }

    /// A log appended to `path` as well, by a thread of its own.
    pub fn to_file(path: &Path, keep: usize) -> std::io::Result<EventLog> {
        Ok(EventLog { file: Some(FileWriter::start(path)?), recent: VecDeque::new(), keep, seq: 0 })
    }

    /// Record an event. A failed write to the file is reported (by the
    /// next call after the writer saw it), but the event is kept in memory
    /// and the agent goes on: losing a log line must never stop a
    /// preemption.
    pub fn record(&mut self, event: Event) -> Result<(), String> {
        let dropped = self.file.as_ref().filter(|f| f.has_room()).map_or(0, |f| f.dropped);
        if dropped > 0 {
            let why = "the event log's writer fell behind (a slow or stuck disk)";
            let note = Event {
                seq: 0,
                at: event.at,
                kind: EventKind::LogLinesDropped,
                container: None,
                detail: serde_json::json!({ "lines": dropped, "why": why }),
            };
            if let Some(f) = &mut self.file {
                f.dropped = 0;
            }
            self.push(note);
        }
        self.push(event);
        let failed = self
            .file
            .as_ref()
            .and_then(|f| f.failed.lock().unwrap_or_else(PoisonError::into_inner).take());
        failed.map_or(Ok(()), Err)
    }

    fn push(&mut self, mut event: Event) {
        self.seq += 1;
        event.seq = self.seq;
        if let Some(file) = &mut self.file {
            match serde_json::to_string(&event) {
                Ok(line) => {
                    file.queue(line + "\n");
                }
                Err(_) => file.dropped += 1,
            }
        }
        if self.recent.len() == self.keep {
            self.recent.pop_front();
        }
        self.recent.push_back(event);
    }

    /// The most recent events, oldest first.
    pub fn recent(&self) -> impl Iterator<Item = &Event> {
        self.recent.iter()
    }

    /// The kept events numbered after `seq`.
    pub fn after(&self, seq: u64) -> impl Iterator<Item = &Event> {
        self.recent.iter().filter(move |e| e.seq > seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(i: u32) -> Event {
        Event {
            seq: 0,
            at: f64::from(i),
            kind: EventKind::Gone,
            container: None,
            detail: serde_json::json!({}),
        }
    }

    /// Every kind is in the events table of `docs/agent.md`, and its JSON
    /// form is its name there.
    #[test]
    fn every_kind_is_documented_and_serialized_by_its_name() {
        let docs = include_str!("../../../../docs/agent.md");
        let table = docs.split("\n## Events\n").nth(1).and_then(|t| t.split("\n## ").next());
        let table = table.expect("docs/agent.md has an Events section");
        let missing: Vec<&str> = EventKind::ALL
            .iter()
            .map(|k| k.as_str())
            .filter(|name| !table.contains(&format!("`{name}`")))
            .collect();
        assert!(missing.is_empty(), "not in docs/agent.md's Events table: {missing:?}");
        for kind in EventKind::ALL {
            let json = serde_json::to_string(kind).expect("serializes");
            assert_eq!(json, format!("\"{kind}\""));
            assert_eq!(serde_json::from_str::<EventKind>(&json).expect("reads back"), *kind);
        }
    }

    #[test]
    fn events_are_appended_as_json_lines_and_the_recent_ones_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("events.jsonl");
        let mut log = EventLog::to_file(&path, 2).expect("open");
        for i in 0..3 {
            log.record(event(i)).expect("written");
        }
        let at: Vec<f64> = log.recent().map(|e| e.at).collect();
        assert_eq!(at, vec![1.0, 2.0]);
        drop(log);
        let text = std::fs::read_to_string(&path).expect("read back");
        let lines: Vec<serde_json::Value> =
            text.lines().map(|l| serde_json::from_str(l).expect("json")).collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[2]["kind"], "gone");
    }

    /// Issue 13: a blocking write stopped sampling and preemption. A
    /// writer that cannot keep up (here: a FIFO read by nobody, where
    /// writes block) never holds up `record`; what it could not take is
    /// counted, and told once the writer has caught up.
    #[test]
    fn a_stuck_disk_never_blocks_recording_and_dropped_lines_are_told() {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = dir.path().join("stuck");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600))
            .expect("mkfifo");
        // Opened for reading first (so the log's open does not block), and
        // not read yet: the pipe fills and the writer's next write blocks.
        let reader = OpenOptions::new()
            .read(true)
            .custom_flags(i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).expect("a flag"))
            .open(&fifo)
            .expect("open fifo");
        let mut log = EventLog::to_file(&fifo, 10).expect("open");
        let padded =
            |i| Event { detail: serde_json::json!({ "pad": "x".repeat(1000) }), ..event(i) };
        for i in 0..(u32::try_from(QUEUE).expect("small") + 200) {
            log.record(padded(i)).expect("no failure reported");
        }
        let dropped = log.file.as_ref().map_or(0, |f| f.dropped);
        assert!(dropped >= 100, "a full queue drops lines: {dropped}");
        log.record(event(0)).expect("recorded");
        let last = log.recent().last().map(|e| e.kind);
        assert_eq!(last, Some(EventKind::Gone), "not told while the writer is stuck");

        // The pipe is read: the writer catches up, and the next event comes
        // after the count of what was lost.
        rustix::fs::fcntl_setfl(&reader, rustix::fs::OFlags::empty()).expect("blocking reads");
        let drain = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut { reader }, &mut text);
            text
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !log.file.as_ref().is_some_and(FileWriter::has_room) {
            assert!(std::time::Instant::now() < deadline, "the writer never caught up");
            std::thread::sleep(Duration::from_millis(10));
        }
        log.record(event(1)).expect("recorded");
        let tail: Vec<&Event> = log.recent().skip(8).collect();
        assert_eq!(tail[0].kind, EventKind::LogLinesDropped);
        assert_eq!(tail[0].detail["lines"].as_u64(), Some(dropped + 1));
        assert_eq!(tail[1].kind, EventKind::Gone);
        drop(log);
        let text = drain.join().expect("drained");
        assert!(text.lines().any(|l| l.contains("log-lines-dropped")), "written to the file too");
        // Every event is in the file but the dropped ones.
        let recorded = QUEUE as u64 + 200 + 1 + 2;
        assert_eq!(text.lines().count() as u64, recorded - (dropped + 1));
    }
}
