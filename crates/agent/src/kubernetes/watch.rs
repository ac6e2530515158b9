//! The pods bound to this node, watched on the API server from a thread
//! of their own (the agent's loop never waits on the network): kube-rs's
//! watcher lists them, then watches from the list's resourceVersion,
//! relisting when the server says the version is gone (410) and backing
//! off while the server is away. What it sees reaches the loop through a
//! channel ([`PodWatch::drain`]).

use super::classify::{PodFacts, BATCH_MEMORY, CLASS_ANNOTATION};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;

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

/// The watch's thread and what it sends.
#[derive(Debug)]
pub struct PodWatch {
    events: mpsc::Receiver<PodEvent>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl PodWatch {
    /// Starts watching the pods bound to `node`, with the credentials of
    /// `kubeconfig` (else the pod's own service account, else
    /// `$KUBECONFIG` or `~/.kube/config`). `Err` says what is missing or
    /// wrong in the credentials; the server being away is not an error
    /// (the watch retries, and says so in [`PodEvent::Trouble`]).
    pub fn start(node: &str, kubeconfig: Option<PathBuf>) -> Result<PodWatch, String> {
        let (events_tx, events) = mpsc::channel();
        let (ready_tx, ready) = mpsc::channel::<Result<(), String>>();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let node = node.to_string();
        let thread = std::thread::Builder::new()
            .name("overbook-kube-watch".into())
            .spawn(move || {
                let runtime =
                    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = ready_tx.send(Err(format!("cannot start its runtime: {e}")));
                            return;
                        }
                    };
                runtime.block_on(async move {
                    let client = match client(kubeconfig).await {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    tokio::select! {
                        () = watch(client, &node, events_tx) => {}
                        _ = stopped => {}
                    }
                });
            })
            .map_err(|e| format!("cannot start its thread: {e}"))?;
        match ready.recv() {
            Ok(Ok(())) => Ok(PodWatch { events, stop: Some(stop), thread: Some(thread) }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err("its thread ended before it started".into())
            }
        }
    }

    /// What the watch saw since the last call, oldest first.
    pub fn drain(&self) -> Vec<PodEvent> {
        self.events.try_iter().collect()
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn client(kubeconfig: Option<PathBuf>) -> Result<Client, String> {
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

async fn watch(client: Client, node: &str, out: mpsc::Sender<PodEvent>) {
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
fn facts(pod: &Pod) -> PodFacts {
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
    PodFacts {
        uid: meta.uid.clone().unwrap_or_default(),
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        class_annotation: meta.annotations.as_ref().and_then(|a| a.get(CLASS_ANNOTATION).cloned()),
        priority_class: spec.and_then(|s| s.priority_class_name.clone()),
        requests_batch_memory,
    }
}
