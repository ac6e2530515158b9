//! The decision log: every decision the agent takes, with its evidence, as
//! one JSON object per line (a file, and the last few in memory for the API).
//!
//! Why JSON lines: a log that `jq`, a test or a dashboard can read without
//! knowing overbook, appended with one write per event so a crash loses at
//! most the event being written.

use serde::Serialize;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// One decision or observation worth recording.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    /// Its number in this agent's life, from 1 (set by the log).
    pub seq: u64,
    /// Seconds since the agent started.
    pub at: f64,
    /// What happened: `started`, `adopted`, `gone`, `preempted`, `preempt-failed`, `resumed`.
    pub kind: String,
    /// The container's path under the hierarchy, if the event is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Everything else: class, evidence, timings.
    pub detail: serde_json::Value,
}

/// Where events go.
#[derive(Debug)]
pub struct EventLog {
    file: Option<(PathBuf, File)>,
    recent: VecDeque<Event>,
    keep: usize,
    seq: u64,
}

impl EventLog {
    /// A log kept in memory only (the last `keep` events).
    pub fn in_memory(keep: usize) -> EventLog {
        EventLog { file: None, recent: VecDeque::new(), keep, seq: 0 }
    }

    /// A log appended to `path` as well.
    pub fn to_file(path: &Path, keep: usize) -> std::io::Result<EventLog> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(EventLog {
            file: Some((path.to_path_buf(), file)),
            recent: VecDeque::new(),
            keep,
            seq: 0,
        })
    }

    /// Record an event. A failed write to the file is reported, but the
    /// event is kept in memory and the agent goes on: losing a log line must
    /// never stop a preemption.
    pub fn record(&mut self, mut event: Event) -> Result<(), String> {
        self.seq += 1;
        event.seq = self.seq;
        let mut result = Ok(());
        if let Some((path, file)) = &mut self.file {
            let mut line = serde_json::to_string(&event).map_err(|e| e.to_string())?;
            line.push('\n');
            if let Err(e) = file.write_all(line.as_bytes()) {
                result = Err(format!("{}: {e}", path.display()));
            }
        }
        if self.recent.len() == self.keep {
            self.recent.pop_front();
        }
        self.recent.push_back(event);
        result
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
            kind: "gone".into(),
            container: None,
            detail: serde_json::json!({}),
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
        let text = std::fs::read_to_string(&path).expect("read back");
        let lines: Vec<serde_json::Value> =
            text.lines().map(|l| serde_json::from_str(l).expect("json")).collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[2]["kind"], "gone");
        let at: Vec<f64> = log.recent().map(|e| e.at).collect();
        assert_eq!(at, vec![1.0, 2.0]);
    }
}
