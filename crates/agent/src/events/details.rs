//! Typed details of the events others read: what a preemption did, how a
//! container resumed, how a task ended, what a reclaim took.
//!
//! Why types: the benches, the demo and the CLI read these fields to count
//! kills, work lost, dump and restore times; matched by string, a renamed
//! field was a silent zero. The agent writes them through these types and
//! readers take them back with [`Event::detail_as`](super::Event::detail_as),
//! so both sides name a field once. The JSON is as `docs/agent.md` shows
//! it (a field that does not apply is left out, not `null`).

use serde::{Deserialize, Serialize};

/// `preempted`: a container preempted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Preempted {
    /// What was done: `kill`, `freeze`, `freeze-and-swap-out`,
    /// `checkpoint` or `incremental-checkpoint`.
    pub how: String,
    /// The container's memory when it was chosen, bytes.
    pub usage: u64,
    pub evidence: Evidence,
    pub timings: Timings,
    /// What the mechanism reported.
    pub report: PreemptReport,
    /// Why another mechanism than the one decided was used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// Work a kill threw away (the task's run time), seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_s: Option<f64>,
}

/// Why a preemption was decided.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The detector that fired (`thrashing`, `pressure`, `operator`, ...).
    pub detector: String,
    pub reason: String,
    /// Containers seen thrashing, by name.
    pub thrashing: Vec<String>,
    /// How long the trouble lasted before the decision, seconds.
    pub lasted_s: f64,
    /// The ranked candidates, best victim first.
    pub candidates: Vec<Candidate>,
}

/// A ranked candidate victim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub container: String,
    pub score: f64,
}

/// How long a preemption took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timings {
    /// From the policy's decision to the mechanism's first step, µs.
    pub decision_to_issue_us: u64,
    /// The mechanism itself, µs.
    pub action_us: u64,
}

/// A preemption mechanism's report; each fills its own fields (a freeze
/// none).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PreemptReport {
    /// Kill: `CgroupKill` or `Pidfd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Kill: processes signalled, and whose memory was or was not reaped at
    /// once (`process_mrelease`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signalled: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reaped: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_reaped: Option<u64>,
    /// Freeze and swap-out: that the swap-out is under way (its end, what
    /// the kernel took and how long it took, is its `swapped-out` event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaimed: Option<serde_json::Value>,
    /// Checkpoint: the image directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<String>,
    /// Checkpoint: on top of a pre-dump.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental: Option<bool>,
    /// Checkpoint: why an incremental dump fell back to a full one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental_failed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dump_s: Option<f64>,
    /// Checkpoint: the work the image keeps, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_s: Option<f64>,
    /// Checkpoint: members not reaped after the dump.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreaped: Option<u64>,
}

/// `resumed`: a preempted container runs again.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Resumed {
    /// `local`, or the node it was restored on.
    pub site: String,
    /// `thaw` or `restore`.
    pub how: String,
    /// Restore: the restored tree's root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_s: Option<f64>,
    /// Restore: the image's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Restore: the work kept, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_s: Option<f64>,
}

/// `finished`: a task's command exited.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Finished {
    /// As the standard library says it: `exit status: 0`, `signal: 9
    /// (SIGKILL)`, or that an earlier agent started it (status unknown).
    pub status: String,
    /// Its run time, over all its starts and restores, seconds.
    pub runtime_s: f64,
    /// Its peak memory, bytes.
    pub peak: u64,
}

impl Finished {
    /// Whether it exited by itself with status 0.
    pub fn succeeded(&self) -> bool {
        self.status == "exit status: 0"
    }
}

/// `reclaimed`: memory the kernel was asked to take from a container.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reclaimed {
    /// Bytes asked.
    pub asked: u64,
    /// Bytes the kernel took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaimed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_before: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_us: Option<u64>,
    /// Why the kernel took nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn details_read_back_what_they_wrote_leaving_out_what_does_not_apply() {
        let kill = Preempted {
            how: "kill".into(),
            usage: 42,
            report: PreemptReport {
                method: Some("CgroupKill".into()),
                signalled: Some(2),
                reaped: Some(2),
                not_reaped: Some(0),
                ..PreemptReport::default()
            },
            lost_s: Some(1.5),
            ..Preempted::default()
        };
        let v = serde_json::to_value(&kill).expect("to JSON");
        assert_eq!(
            v["report"],
            json!({ "method": "CgroupKill", "signalled": 2, "reaped": 2, "not_reaped": 0 })
        );
        assert!(v.get("fallback").is_none(), "{v}");
        assert_eq!(serde_json::from_value::<Preempted>(v).expect("back"), kill);
        let freeze = serde_json::to_value(PreemptReport::default()).expect("to JSON");
        assert_eq!(freeze, json!({}));
        let thaw = Resumed { site: "local".into(), how: "thaw".into(), ..Resumed::default() };
        assert_eq!(
            serde_json::to_value(&thaw).expect("to JSON"),
            json!({ "site": "local", "how": "thaw" })
        );
        let done = Finished { status: "exit status: 0".into(), runtime_s: 1.0, peak: 7 };
        assert!(done.succeeded());
    }
}
