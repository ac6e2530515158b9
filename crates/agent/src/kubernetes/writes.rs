//! What the agent writes to the API server (issue 17 items 3, 4 and 6),
//! how each try is judged, and when the next one is: the node's offer,
//! and a preempted pod's Event, eviction and condition. Pure: the API link
//! ([`super::link`]) makes the calls.

use super::classify::BATCH_MEMORY;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::time::Duration;

/// The file granting the verbs the agent needs.
pub const RBAC_FILE: &str = "deploy/kubernetes/10-rbac.yaml";
/// Who the agent's writes are from, in Events.
pub const COMPONENT: &str = "overbook-agent";
/// The condition a frozen (or checkpointed) pod carries.
pub const FROZEN_CONDITION: &str = "overbook.io/Frozen";
/// The longest wait between two tries of a write.
pub const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// The first wait after a failed try.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(500);
/// How long a pod's write is tried before it is given up (from when it
/// was asked, across agent restarts): after that, what it says is stale.
pub const POD_WRITE_LIFETIME: Duration = Duration::from_secs(600);
/// How long one try may take: a slow server is a failed try, retried.
pub const TRY_TIMEOUT: Duration = Duration::from_secs(10);

/// A pod, as the API server names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

impl PodRef {
    /// `namespace/name`, as events name it.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// What is written about a pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "kebab-case")]
pub enum PodWriteKind {
    /// A core/v1 Event on the pod: `reason` Killed, Frozen, Checkpointed
    /// (Warning) or Resumed (Normal).
    Event { reason: String, warning: bool, message: String },
    /// An eviction through the Eviction API (after a kill).
    Eviction,
    /// The pod's `overbook.io/Frozen` condition.
    Condition { frozen: bool, reason: String, message: String },
}

impl PodWriteKind {
    /// Its name in `api-written` and `api-write-failed` events.
    pub fn what(&self) -> &'static str {
        match self {
            PodWriteKind::Event { .. } => "event",
            PodWriteKind::Eviction => "eviction",
            PodWriteKind::Condition { .. } => "condition",
        }
    }

    /// The verb and resource it needs (RBAC).
    fn verb(&self) -> &'static str {
        match self {
            PodWriteKind::Event { .. } => "create events",
            PodWriteKind::Eviction => "create pods/eviction",
            PodWriteKind::Condition { .. } => "patch pods/status",
        }
    }
}

/// One write about a pod, kept (in the state database) until done.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PodWrite {
    /// Its number: the order a pod's writes are made in, and its row.
    pub id: u64,
    pub pod: PodRef,
    pub kind: PodWriteKind,
    /// When it was asked, Unix seconds (wall time: it outlives the agent).
    pub asked_unix: f64,
}

/// A write the agent's loop asks of the API link.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// The node's offer, whole MiB; the latest asked wins.
    Offer {
        mib: u64,
    },
    Pod(PodWrite),
}

/// What became of a try, told back to the loop.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteReport {
    /// The pod write's id (`None`: the offer).
    pub id: Option<u64>,
    /// "offer", "event", "eviction" or "condition".
    pub what: &'static str,
    /// `namespace/name`.
    pub pod: Option<String>,
    pub result: WriteResult,
}

#[derive(Clone, Debug, PartialEq)]
pub enum WriteResult {
    /// Written, this long after it was asked.
    Written { after_ms: u64 },
    /// Failed; tried again after `retry_in`.
    Retried { error: String, retry_in: Duration },
    /// Failed; not tried again (a refusal no retry changes, or too old).
    GivenUp { error: String, why: String },
}

impl WriteResult {
    /// `then` of an `api-write-failed` event.
    pub fn then(&self) -> Option<String> {
        match self {
            WriteResult::Written { .. } => None,
            WriteResult::Retried { retry_in, .. } => {
                Some(format!("retried in {:.1}s", retry_in.as_secs_f64()))
            }
            WriteResult::GivenUp { why, .. } => Some(format!("given up: {why}")),
        }
    }
}

/// The wait before try `tries + 1`, after `tries` failed: doubling from
/// half a second up to [`BACKOFF_CAP`].
pub fn retry_delay(tries: u32) -> Duration {
    let doublings = tries.saturating_sub(1).min(16);
    (BACKOFF_FIRST * (1u32 << doublings)).min(BACKOFF_CAP)
}

/// How the API server answered a try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Done,
    /// An HTTP status from the server, with its message.
    Refused {
        code: u16,
        message: String,
    },
    /// No answer (connection, timeout, TLS): the server is away or slow.
    NoAnswer(String),
}

/// What a failed try comes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judged {
    Done,
    /// Worth another try: the error.
    Retry(String),
    /// No retry changes it (403, 404, 422): the error, said at once.
    Final(String),
}

/// Judges an answer to `what` (`None`: the offer) on `node`.
pub fn judge(answer: Answer, what: Option<&PodWriteKind>) -> Judged {
    let (code, message) = match answer {
        Answer::Done => return Judged::Done,
        Answer::NoAnswer(e) => return Judged::Retry(format!("no answer from the API server: {e}")),
        Answer::Refused { code, message } => (code, message),
    };
    let verb = what.map_or("patch nodes/status", PodWriteKind::verb);
    match code {
        // An Event is created under a name of its own: one that exists is
        // this one, made by a try whose answer was lost.
        409 if matches!(what, Some(PodWriteKind::Event { .. })) => Judged::Done,
        // The eviction's precondition: the pod of that name is another now.
        409 if matches!(what, Some(PodWriteKind::Eviction)) => {
            Judged::Final(format!("the pod is another now (its uid changed): {message}"))
        }
        403 => Judged::Final(format!(
            "forbidden: the agent's account may not {verb} (granted by the ClusterRole in \
             {RBAC_FILE}): {message}"
        )),
        404 => Judged::Final(match what {
            None => format!("no such Node (is kubernetes.node_name right?): {message}"),
            Some(_) => format!("the pod is gone: {message}"),
        }),
        422 => Judged::Final(format!("the API server refuses it as invalid: {message}")),
        401 => Judged::Retry(format!(
            "unauthorized: the credentials were refused (kubernetes.kubeconfig, or the \
             pod's service account token): {message}"
        )),
        // 429: an eviction a PodDisruptionBudget does not allow yet.
        _ => Judged::Retry(format!("{code}: {message}")),
    }
}

/// The merge patch of the Node's status that publishes `mib`.
pub fn offer_patch(mib: u64) -> serde_json::Value {
    let q = format!("{mib}Mi");
    json!({ "status": {
        "capacity": { BATCH_MEMORY: q },
        "allocatable": { BATCH_MEMORY: q },
    }})
}

/// A stable name for the Event of `w`: a try that made it but whose
/// answer was lost meets its own Event (409) instead of making a second.
pub fn event_name(w: &PodWrite) -> String {
    // FNV-1a over what makes the write unique.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let text = format!("{}/{}/{}", w.pod.uid, w.id, w.asked_unix.to_bits());
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    // Names are DNS subdomains of at most 253 characters.
    let mut base: String = w.pod.name.chars().take(253 - 17).collect();
    base.push_str(&format!(".{h:016x}"));
    base
}

/// RFC 3339 time of `unix` seconds, as the API server takes it.
pub fn rfc3339(unix: f64) -> String {
    let secs = i64::try_from(overbook_core::convert::to_u64(unix.floor())).unwrap_or(0);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// The core/v1 Event of `w` (an `Event` kind), as JSON.
pub fn event_body(w: &PodWrite, node: &str, now_unix: f64) -> serde_json::Value {
    let (reason, warning, message) = match &w.kind {
        PodWriteKind::Event { reason, warning, message } => (reason, *warning, message),
        _ => return serde_json::Value::Null,
    };
    let at = rfc3339(now_unix);
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": { "name": event_name(w), "namespace": w.pod.namespace },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": w.pod.namespace,
            "name": w.pod.name,
            "uid": w.pod.uid,
        },
        "reason": reason,
        "message": message,
        "type": if warning { "Warning" } else { "Normal" },
        "source": { "component": COMPONENT, "host": node },
        "reportingComponent": COMPONENT,
        "reportingInstance": node,
        "firstTimestamp": at,
        "lastTimestamp": at,
        "count": 1,
    })
}

/// The strategic merge patch of the pod's status that sets its
/// `overbook.io/Frozen` condition (merged by type: the kubelet's
/// conditions stay).
pub fn condition_patch(w: &PodWrite, now_unix: f64) -> serde_json::Value {
    let (frozen, reason, message) = match &w.kind {
        PodWriteKind::Condition { frozen, reason, message } => (*frozen, reason, message),
        _ => return serde_json::Value::Null,
    };
    json!({ "status": { "conditions": [{
        "type": FROZEN_CONDITION,
        "status": if frozen { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "lastTransitionTime": rfc3339(now_unix),
    }]}})
}

/// Whether a pod write asked at `asked_unix` is too old at `now_unix`.
pub fn too_old(asked_unix: f64, now_unix: f64) -> bool {
    now_unix - asked_unix >= POD_WRITE_LIFETIME.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(kind: PodWriteKind) -> PodWrite {
        PodWrite {
            id: 7,
            pod: PodRef { uid: "u1".into(), namespace: "ns".into(), name: "be-1".into() },
            kind,
            asked_unix: 1_700_000_000.5,
        }
    }

    #[test]
    fn retries_back_off_doubling_to_thirty_seconds() {
        let d: Vec<f64> = (1..=9).map(|t| retry_delay(t).as_secs_f64()).collect();
        assert_eq!(d, [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]);
        assert_eq!(retry_delay(u32::MAX), BACKOFF_CAP);
        assert!(!too_old(0.0, 599.0) && too_old(0.0, 600.0));
    }

    #[test]
    fn refusals_no_retry_changes_are_final_and_a_403_names_the_verb_and_the_file() {
        let refused = |code| Answer::Refused { code, message: "m".into() };
        let eviction = PodWriteKind::Eviction;
        match judge(refused(403), Some(&eviction)) {
            Judged::Final(e) => {
                assert!(e.contains("create pods/eviction") && e.contains(RBAC_FILE), "{e}")
            }
            other => panic!("{other:?}"),
        }
        match judge(refused(403), None) {
            Judged::Final(e) => assert!(e.contains("patch nodes/status"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(judge(refused(404), Some(&eviction)), Judged::Final(_)));
        assert!(matches!(judge(refused(422), None), Judged::Final(_)));
        assert!(matches!(judge(refused(429), Some(&eviction)), Judged::Retry(_)));
        assert!(matches!(judge(refused(500), None), Judged::Retry(_)));
        assert!(matches!(judge(Answer::NoAnswer("refused".into()), None), Judged::Retry(_)));
        let event =
            PodWriteKind::Event { reason: "Killed".into(), warning: true, message: "".into() };
        assert_eq!(judge(refused(409), Some(&event)), Judged::Done, "made by a lost try");
        assert!(matches!(judge(refused(409), Some(&eviction)), Judged::Final(_)));
        assert!(matches!(judge(refused(409), None), Judged::Retry(_)));
    }

    #[test]
    fn the_bodies_are_what_the_api_server_takes() {
        assert_eq!(
            offer_patch(1536),
            json!({"status": {"capacity": {BATCH_MEMORY: "1536Mi"},
                              "allocatable": {BATCH_MEMORY: "1536Mi"}}})
        );
        let w = write(PodWriteKind::Event {
            reason: "Killed".into(),
            warning: true,
            message: "why".into(),
        });
        let e = event_body(&w, "n1", 1_700_000_000.0);
        assert_eq!(e["type"], "Warning");
        assert_eq!(e["involvedObject"]["uid"], "u1");
        assert_eq!(e["source"]["component"], COMPONENT);
        assert_eq!(e["firstTimestamp"], "2023-11-14T22:13:20Z");
        assert_eq!(e["metadata"]["name"], event_name(&w));
        let event: k8s_openapi::api::core::v1::Event =
            serde_json::from_value(e).expect("a core/v1 Event");
        assert_eq!(event.reason.as_deref(), Some("Killed"));
        assert_ne!(event_name(&w), event_name(&PodWrite { id: 8, ..w.clone() }));
        let c = write(PodWriteKind::Condition {
            frozen: false,
            reason: "Resumed".into(),
            message: "thawed".into(),
        });
        let p = condition_patch(&c, 0.0);
        assert_eq!(p["status"]["conditions"][0]["status"], "False");
        assert_eq!(p["status"]["conditions"][0]["type"], FROZEN_CONDITION);
        assert_eq!(rfc3339(951_782_400.0), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn a_pod_write_reads_back_as_stored() {
        let w = write(PodWriteKind::Condition {
            frozen: true,
            reason: "Frozen".into(),
            message: "m".into(),
        });
        let text = serde_json::to_string(&w).expect("json");
        assert!(text.contains("\"what\":\"condition\""), "{text}");
        assert_eq!(serde_json::from_str::<PodWrite>(&text).expect("back"), w);
    }
}
