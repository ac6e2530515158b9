//! A Kubernetes node's pods as the API server says them, taken into the
//! agent's view at each tick, and what the agent tells the API server
//! back: the node's offer of opportunistic memory, and the Event, eviction
//! and condition of each pod it preempted. The API server is reached from
//! a thread of its own ([`crate::kubernetes::ApiLink`]): the loop only
//! sends and reads channels. Until a pod is heard of, its class is what the
//! rules say (production unless a rule matches): an API server that is
//! away never makes a pod preemptible.

use super::Agent;
use crate::config::{KubernetesConfig, OfferStep};
use crate::events::EventKind;
use crate::kubernetes::offer::{offer_bytes, Publisher};
use crate::kubernetes::writes::{PodRef, PodWrite, PodWriteKind, Write, WriteResult};
use crate::kubernetes::{classify, ApiLink, PodEvent};
use overbook_core::{Class, Time};
use overbook_linux::{ContainerCgroups, ContainerControl, ContainerPath};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The link, and what has been said of each pod.
#[derive(Debug)]
pub(super) struct Pods {
    link: ApiLink,
    priority_classes: BTreeMap<String, Class>,
    /// Each pod's class and reason as last told, by uid.
    told: BTreeMap<String, (Class, String)>,
    /// Each pod's names and `overbook.io/batch-memory` request (bytes), by
    /// uid: only pods the API server told of get writes.
    seen: BTreeMap<String, (PodRef, u64)>,
    /// The last trouble told, so a server that stays away is said once.
    trouble: Option<String>,
    /// The offer's step and period (`None`: no offer published).
    offer: Option<(OfferStep, Duration)>,
    /// Made at the first sample, when the node's capacity is known.
    publisher: Option<Publisher>,
    evict: bool,
    /// The next pod write's id.
    next_write: u64,
    /// Pod writes sent and not yet done, by id.
    pending: BTreeSet<u64>,
    /// When the node's memory was last looked at for the offer between
    /// full samples.
    moved_checked: Option<Time>,
}

/// How often the node's memory is looked at for the offer between full
/// samples: two reads (the node cgroup's counters, meminfo) at every 100 ms
/// tick would cost more than the rest of a calm node's loop, and half a
/// second keeps the offer within the 2 s it must follow a change in.
const MOVED_CHECK: Duration = Duration::from_millis(500);

impl Pods {
    pub fn start(k: &KubernetesConfig) -> Result<Pods, String> {
        Ok(Pods {
            link: ApiLink::start(&k.node_name, k.kubeconfig.clone())?,
            priority_classes: k.priority_classes.clone(),
            told: BTreeMap::new(),
            seen: BTreeMap::new(),
            trouble: None,
            offer: k.offer.then_some((k.offer_step, k.offer_period)),
            publisher: None,
            moved_checked: None,
            evict: k.evict,
            next_write: 1,
            pending: BTreeSet::new(),
        })
    }

    /// The offer's step in bytes on a node of `capacity`, when published.
    fn step(&self, capacity: u64) -> Option<u64> {
        self.offer.map(|(step, _)| step.bytes(capacity))
    }
}

impl<C: ContainerCgroups + ContainerControl> Agent<C> {
    /// What the API server said of this node's pods since the last tick,
    /// and what became of the writes asked of it.
    pub(super) fn read_pods(&mut self, now: Time) {
        let Some(pods) = &self.pods else { return };
        let events = pods.link.drain();
        let reports = pods.link.reports();
        for event in events {
            self.take_pod_event(now, event);
        }
        for report in reports {
            let done = !matches!(report.result, WriteResult::Retried { .. });
            if let (Some(id), true) = (report.id, done) {
                if let Some(pods) = &mut self.pods {
                    pods.pending.remove(&id);
                }
                if let Some(store) = &mut self.durable.store {
                    if let Err(e) = store.remove_cluster_write(id) {
                        let detail = json!({ "error": e.to_string(), "then": "the write may be made again by the next agent" });
                        self.record(now, EventKind::StateError, None, detail);
                    }
                }
            }
            let (kind, detail) = match &report.result {
                WriteResult::Written { after_ms } => (
                    EventKind::ApiWritten,
                    json!({ "what": report.what, "pod": report.pod, "after_ms": after_ms }),
                ),
                WriteResult::Retried { error, .. } | WriteResult::GivenUp { error, .. } => (
                    EventKind::ApiWriteFailed,
                    json!({
                        "what": report.what,
                        "pod": report.pod,
                        "error": error,
                        "then": report.result.then(),
                    }),
                ),
            };
            self.record(now, kind, None, detail);
        }
    }

    fn take_pod_event(&mut self, now: Time, event: PodEvent) {
        match event {
            PodEvent::Seen(facts) => {
                let Some(pods) = &mut self.pods else { return };
                let pod = PodRef {
                    uid: facts.uid.clone(),
                    namespace: facts.namespace.clone(),
                    name: facts.name.clone(),
                };
                pods.seen.insert(facts.uid.clone(), (pod, facts.batch_memory));
                let class = classify(&facts, &pods.priority_classes);
                let said = (class.class, class.why.clone());
                if pods.told.get(&facts.uid) == Some(&said) {
                    return;
                }
                pods.told.insert(facts.uid.clone(), said);
                pods.trouble = None;
                let changed = self.view.set_pod_class(&facts.uid, class.class);
                let detail = json!({
                    "pod": format!("{}/{}", facts.namespace, facts.name),
                    "uid": facts.uid,
                    "class": class.class.as_str(),
                    "why": class.why,
                    "problem": class.problem,
                    "was": changed.as_ref().map(|(_, before)| before.as_str()),
                });
                let path = changed.map(|(p, _)| p);
                self.record(now, EventKind::PodClassified, path.as_ref(), detail);
            }
            PodEvent::Gone { uid } => {
                self.view.forget_pod(&uid);
                if let Some(pods) = &mut self.pods {
                    pods.told.remove(&uid);
                    pods.seen.remove(&uid);
                }
            }
            PodEvent::Synced => {
                let Some(pods) = &mut self.pods else { return };
                pods.trouble = None;
                let n = pods.told.len();
                self.record(now, EventKind::PodsSynced, None, json!({ "pods": n }));
            }
            PodEvent::Trouble(e) => {
                let Some(pods) = &mut self.pods else { return };
                if pods.trouble.as_deref() == Some(e.as_str()) {
                    return;
                }
                pods.trouble = Some(e.clone());
                let then = "retried with backoff; pods keep the classes last known \
                            (production until told)";
                self.record(
                    now,
                    EventKind::ApiServerTrouble,
                    None,
                    json!({ "error": e, "then": then }),
                );
            }
        }
    }

    /// The node's offer at `now`, from the last sample, told to the API
    /// server when the publisher's hysteresis says so.
    pub(super) fn publish_offer(&mut self, now: Time) {
        let capacity = self.sample.node.capacity;
        let Some(pods) = &mut self.pods else { return };
        let Some((step, period)) = pods.offer else { return };
        // No sample yet: nothing known to offer.
        if capacity == 0 {
            return;
        }
        let publisher =
            pods.publisher.get_or_insert_with(|| Publisher::new(step.bytes(capacity), period));
        let headroom = overbook_core::convert::to_u64(
            capacity as f64 * self.policy.launcher().config().headroom,
        );
        let seen = &pods.seen;
        let view = &self.view;
        let best_effort =
            view.containers().filter(|k| k.class == Class::BestEffort).filter_map(|k| {
                let uid = view.pod_uid(&k.path)?;
                seen.get(uid).map(|(_, request)| (k.counters.usage, *request))
            });
        let held = self.policy.launches_held(now);
        let bytes = offer_bytes(self.sample.node.available, headroom, best_effort, held);
        let Some(told) = publisher.offer(now, bytes) else { return };
        pods.link.send(Write::Offer { mib: told.mib });
        let detail = json!({ "mib": told.mib, "was_mib": told.was_mib, "why": told.why });
        self.record(now, EventKind::Offered, None, detail);
    }

    /// Whether the node's available memory moved by half the offer's step
    /// since the last full sample (two small reads): the offer is then
    /// looked at now, not at the end of the calm period.
    pub(super) fn offer_usage_moved(&mut self, now: Time) -> bool {
        let Some(pods) = &mut self.pods else { return false };
        if pods.moved_checked.is_some_and(|t| now.since(t) < MOVED_CHECK) {
            return false;
        }
        pods.moved_checked = Some(now);
        let node = &self.sample.node;
        let Some(step) = pods.step(node.capacity).filter(|_| node.capacity > 0) else {
            return false;
        };
        let Ok(root) = self.view.root_counters() else { return true };
        match self.view.node_stats(root.as_ref()) {
            Ok(now) => now.available.abs_diff(node.available) >= (step / 2).max(1),
            Err(_) => true,
        }
    }

    /// After the agent's own preemption or resume of a pod is recorded
    /// (`kind` and its `detail`), the pod's writes, in order: its Event,
    /// then its eviction (a kill) or its condition (a freeze, a checkpoint,
    /// a resume). Only pods the API server told of: for any other, an
    /// `api-write-failed` says that nothing could be written.
    pub(super) fn tell_api(
        &mut self,
        now: Time,
        kind: EventKind,
        path: &ContainerPath,
        detail: &serde_json::Value,
    ) {
        let Some(pods) = &self.pods else { return };
        // A container that is no pod has no object on the server.
        let Some(uid) = self.view.pod_uid(path) else { return };
        let Some((pod, _)) = pods.seen.get(uid) else {
            // A pod deleted on the server, or never listed (its cgroup
            // made before the watch caught up): no object to write to.
            let detail = json!({
                "what": "event",
                "pod": null,
                "uid": uid,
                "error": format!("the API server has no pod of uid {uid} on this node"),
                "then": "given up: nothing to write to",
            });
            let container = path.clone();
            self.record(now, EventKind::ApiWriteFailed, Some(&container), detail);
            return;
        };
        let pod = pod.clone();
        let usage_mib = detail["usage"].as_u64().map(|u| u >> 20);
        let evidence = match (
            detail["evidence"]["detector"].as_str(),
            detail["evidence"]["reason"].as_str(),
        ) {
            (Some(d), Some(r)) => format!("{d}: {r}"),
            _ => "no evidence recorded".into(),
        };
        let held = usage_mib.map_or(String::new(), |m| format!(" holding {m} MiB"));
        let how = detail["how"].as_str().unwrap_or("");
        let mut kinds = Vec::new();
        match (kind, how) {
            (EventKind::Preempted, "kill") => {
                let message = format!("overbook-agent killed the pod{held} to protect the node's production work ({evidence})");
                kinds.push(PodWriteKind::Event { reason: "Killed".into(), warning: true, message });
                if pods.evict {
                    kinds.push(PodWriteKind::Eviction);
                }
            }
            (EventKind::Preempted, "freeze" | "freeze-and-swap-out") => {
                let message = format!("overbook-agent froze the pod ({how}){held} to protect the node's production work ({evidence}); it resumes when memory allows");
                kinds.push(PodWriteKind::Event {
                    reason: "Frozen".into(),
                    warning: true,
                    message: message.clone(),
                });
                kinds.push(PodWriteKind::Condition {
                    frozen: true,
                    reason: "Frozen".into(),
                    message,
                });
            }
            (EventKind::Preempted, "checkpoint" | "incremental-checkpoint") => {
                let message = format!("overbook-agent checkpointed the pod ({how}){held} to protect the node's production work ({evidence}); it is restored when memory allows");
                kinds.push(PodWriteKind::Event {
                    reason: "Checkpointed".into(),
                    warning: true,
                    message: message.clone(),
                });
                kinds.push(PodWriteKind::Condition {
                    frozen: true,
                    reason: "Checkpointed".into(),
                    message,
                });
            }
            (EventKind::Resumed, _) => {
                let message = format!(
                    "overbook-agent resumed the pod ({})",
                    if how.is_empty() { "thaw" } else { how }
                );
                kinds.push(PodWriteKind::Event {
                    reason: "Resumed".into(),
                    warning: false,
                    message: message.clone(),
                });
                kinds.push(PodWriteKind::Condition {
                    frozen: false,
                    reason: "Resumed".into(),
                    message,
                });
            }
            _ => return,
        }
        let asked_unix = crate::store::wall_now();
        for kind in kinds {
            let Some(pods) = &mut self.pods else { return };
            let write = PodWrite { id: pods.next_write, pod: pod.clone(), kind, asked_unix };
            pods.next_write += 1;
            self.send_pod_write(now, write);
        }
    }

    /// Keeps a pod's write until it is done (an agent that stops first
    /// leaves it to the next), and sends it.
    fn send_pod_write(&mut self, now: Time, write: PodWrite) {
        if let Some(store) = &mut self.durable.store {
            if let Err(e) = store.put_cluster_write(&write) {
                let detail = json!({ "error": e.to_string(), "then": "written, but lost if the agent stops first" });
                self.record(now, EventKind::StateError, None, detail);
            }
        }
        let Some(pods) = &mut self.pods else { return };
        pods.pending.insert(write.id);
        pods.link.send(Write::Pod(write));
    }

    /// At start: the writes an earlier agent left undone, sent again.
    pub(super) fn carry_cluster_writes(&mut self, now: Time) {
        if self.pods.is_none() {
            return;
        }
        let Some(store) = &self.durable.store else { return };
        let carried = match store.cluster_writes() {
            Ok(c) => c,
            Err(e) => {
                let detail = json!({ "error": e.to_string(), "then": "writes an earlier agent left are not made" });
                self.record(now, EventKind::StateError, None, detail);
                return;
            }
        };
        let path = store.path().to_path_buf();
        for row in carried.set_aside {
            let notice = crate::store::StoreNotice::SetAside { path: path.clone(), row };
            self.record(now, notice.kind(), None, notice.detail());
        }
        let n = carried.good.len();
        for write in carried.good {
            let Some(pods) = &mut self.pods else { return };
            pods.next_write = pods.next_write.max(write.id.saturating_add(1));
            pods.pending.insert(write.id);
            pods.link.send(Write::Pod(write));
        }
        if n > 0 {
            self.record(now, EventKind::ApiWritesCarried, None, json!({ "writes": n }));
        }
    }
}
