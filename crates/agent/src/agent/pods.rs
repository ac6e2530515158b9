//! A Kubernetes node's pods' classes, as the API server says them, taken
//! into the agent's view at each tick (the watch runs on its own thread:
//! see [`crate::kubernetes::watch`]). Until a pod is heard of, its class
//! is what the rules say (production unless a rule matches): an API server
//! that is away never makes a pod preemptible.

use super::Agent;
use crate::config::KubernetesConfig;
use crate::events::EventKind;
use crate::kubernetes::{classify, PodEvent, PodWatch};
use overbook_core::Class;
use overbook_linux::{ContainerCgroups, ContainerControl};
use serde_json::json;
use std::collections::BTreeMap;

/// The watch, and what has been said of each pod.
#[derive(Debug)]
pub(super) struct Pods {
    watch: PodWatch,
    priority_classes: BTreeMap<String, Class>,
    /// Each pod's class and reason as last told, by uid.
    told: BTreeMap<String, (Class, String)>,
    /// The last trouble told, so a server that stays away is said once.
    trouble: Option<String>,
}

impl Pods {
    pub fn start(k: &KubernetesConfig) -> Result<Pods, String> {
        Ok(Pods {
            watch: PodWatch::start(&k.node_name, k.kubeconfig.clone())?,
            priority_classes: k.priority_classes.clone(),
            told: BTreeMap::new(),
            trouble: None,
        })
    }
}

impl<C: ContainerCgroups + ContainerControl> Agent<C> {
    /// What the API server said of this node's pods since the last tick.
    pub(super) fn read_pods(&mut self, now: overbook_core::Time) {
        let Some(pods) = &self.pods else { return };
        let events = pods.watch.drain();
        for event in events {
            match event {
                PodEvent::Seen(facts) => {
                    let Some(pods) = &mut self.pods else { return };
                    let class = classify(&facts, &pods.priority_classes);
                    let said = (class.class, class.why.clone());
                    if pods.told.get(&facts.uid) == Some(&said) {
                        continue;
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
                        continue;
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
    }
}
