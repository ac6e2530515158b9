//! The pods bound to this node, watched on the API server from the API
//! link's thread (the agent's loop never waits on the network): kube-rs's
//! watcher lists them, then watches from the list's resourceVersion,
//! relisting when the server says the version is gone (410) and backing
//! off while the server is away. What it sees reaches the loop through a
//! channel ([`super::ApiLink::drain`]).

use super::classify::{PodFacts, BATCH_MEMORY, CLASS_ANNOTATION};
use super::offer::parse_quantity;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use std::path::PathBuf;
use std::sync::mpsc;

/// What the watch saw.
#[derive(Clone, Debug, PartialEq)]
pub enum PodEvent {
    /// A pod bound to this node, new or changed.
    Seen(PodFacts),
    /// A pod that left this node (deleted).
    Gone { uid: String },
    /// Every pod of a (re)list has been seen.
    Synced,
    /// The API server could not be read (it is retried with backoff).
    Trouble(String),
}

pub(super) async fn client(kubeconfig: Option<PathBuf>) -> Result<Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(&path)
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            format!(
                "no credentials for the API server (not in a pod, no $KUBECONFIG, no \
                 ~/.kube/config; or set kubernetes.kubeconfig): {e}"
            )
        })?,
    };
    Client::try_from(config).map_err(|e| format!("a client for the API server: {e}"))
}

pub(super) async fn watch(client: Client, node: &str, out: mpsc::Sender<PodEvent>) {
    let pods: Api<Pod> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut stream = watcher(pods, config).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        let said = match event {
            Ok(Event::Apply(pod) | Event::InitApply(pod)) => PodEvent::Seen(facts(&pod)),
            Ok(Event::Delete(pod)) => PodEvent::Gone { uid: pod.metadata.uid.unwrap_or_default() },
            Ok(Event::Init) => continue,
            Ok(Event::InitDone) => PodEvent::Synced,
            Err(e) => PodEvent::Trouble(e.to_string()),
        };
        if out.send(said).is_err() {
            return;
        }
    }
}

/// What the classes depend on, read off a pod.
pub(crate) fn facts(pod: &Pod) -> PodFacts {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let requests_batch_memory = spec.is_some_and(|s| {
        s.containers.iter().chain(s.init_containers.iter().flatten()).any(|c| {
            c.resources.as_ref().is_some_and(|r| {
                let has = |m: &Option<std::collections::BTreeMap<String, _>>| {
                    m.as_ref().is_some_and(|m| m.contains_key(BATCH_MEMORY))
                };
                has(&r.requests) || has(&r.limits)
            })
        })
    });
    let (batch_memory, batch_memory_problem) = match spec {
        Some(s) => batch_request(s),
        None => (0, None),
    };
    PodFacts {
        uid: meta.uid.clone().unwrap_or_default(),
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        class_annotation: meta.annotations.as_ref().and_then(|a| a.get(CLASS_ANNOTATION).cloned()),
        priority_class: spec.and_then(|s| s.priority_class_name.clone()),
        requests_batch_memory,
        batch_memory,
        batch_memory_problem,
    }
}

/// The pod's request of `overbook.io/batch-memory` in bytes, as the
/// scheduler counts it: its containers' summed, or an init container's
/// where larger (they run one at a time, before the others). A container
/// with a limit and no request requests its limit (the API server's
/// default for extended resources). A value that is no quantity counts as
/// 0, and is said.
fn batch_request(spec: &k8s_openapi::api::core::v1::PodSpec) -> (u64, Option<String>) {
    let mut problem = None;
    let mut of = |c: &k8s_openapi::api::core::v1::Container| -> u64 {
        let Some(r) = &c.resources else { return 0 };
        let q = r.requests.as_ref().and_then(|m| m.get(BATCH_MEMORY));
        let q = q.or_else(|| r.limits.as_ref().and_then(|m| m.get(BATCH_MEMORY)));
        match q.map(|q| parse_quantity(&q.0)) {
            None => 0,
            Some(Ok(bytes)) => bytes,
            Some(Err(e)) => {
                problem.get_or_insert(format!("of container {}: {e}", c.name));
                0
            }
        }
    };
    let sum = spec.containers.iter().map(&mut of).fold(0u64, u64::saturating_add);
    let init = spec.init_containers.iter().flatten().map(&mut of).max().unwrap_or(0);
    (sum.max(init), problem)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(resources: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "p", "namespace": "ns", "uid": "u1" },
            "spec": {
                "containers": [
                    { "name": "a", "resources": resources },
                    { "name": "b", "resources": { "limits": { BATCH_MEMORY: "64Mi" } } },
                ],
                "initContainers": [
                    { "name": "i", "resources": { "requests": { BATCH_MEMORY: "1Gi" } } },
                ],
            },
        }))
        .expect("a pod")
    }

    #[test]
    fn a_pod_s_batch_memory_is_its_containers_requests_or_an_init_container_s() {
        let f = facts(&pod(serde_json::json!({ "requests": { BATCH_MEMORY: "512Mi" } })));
        assert!(f.requests_batch_memory);
        assert_eq!(f.batch_memory, 1 << 30, "the init container's is larger");
        let f = facts(&pod(serde_json::json!({ "requests": { BATCH_MEMORY: "2Gi" } })));
        assert_eq!(f.batch_memory, (2 << 30) + (64 << 20));
        assert_eq!(f.batch_memory_problem, None);
        let f = facts(&pod(serde_json::json!({ "requests": { BATCH_MEMORY: "lots" } })));
        let problem = f.batch_memory_problem.expect("said");
        assert!(problem.contains("container a") && problem.contains("\"lots\""), "{problem}");
    }
}
