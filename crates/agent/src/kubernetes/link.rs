//! The agent's one link to the API server: a thread of its own, with a
//! current-thread runtime, that watches the node's pods ([`super::watch`])
//! and makes the writes the loop asks for ([`super::writes`]): the offer,
//! and preempted pods' Events, evictions and conditions. Why a thread: the
//! agent's loop protects the node and never waits on the network; it sends
//! writes over a channel and reads what became of them at its next tick.
//!
//! Each pod's writes are made in the order asked, one at a time (an Event
//! before the eviction it explains); different pods' and the offer's go
//! side by side. A failed try is retried with backoff ([`retry_delay`],
//! at most 30 s apart); a pod's write is given up 10 minutes after it was
//! asked, or at once when no retry can change the answer (403, 404, 422);
//! the offer is never given up, and the latest value asked is the one
//! written.

use super::watch::{client, watch, PodEvent};
use super::writes::{
    condition_patch, event_body, judge, offer_patch, retry_delay, too_old, Answer, Judged,
    PodWrite, PodWriteKind, Write, WriteReport, WriteResult, BACKOFF_CAP, TRY_TIMEOUT,
};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event as KubeEvent, Node, Pod};
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, PostParams, Preconditions};
use kube::Client;
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc as tokio_mpsc;
use tokio::time::Instant;

/// The link's thread and its channels.
#[derive(Debug)]
pub struct ApiLink {
    events: mpsc::Receiver<PodEvent>,
    reports: mpsc::Receiver<WriteReport>,
    writes: tokio_mpsc::UnboundedSender<Write>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ApiLink {
    /// Starts watching the pods bound to `node` and taking writes, with
    /// the credentials of `kubeconfig` (else the pod's own service
    /// account, else `$KUBECONFIG` or `~/.kube/config`). `Err` says what
    /// is missing or wrong in the credentials; the server being away is not
    /// an error (the watch and the writes retry, and say so).
    pub fn start(node: &str, kubeconfig: Option<PathBuf>) -> Result<ApiLink, String> {
        let (events_tx, events) = mpsc::channel();
        let (reports_tx, reports) = mpsc::channel();
        let (writes, writes_rx) = tokio_mpsc::unbounded_channel();
        let (ready_tx, ready) = mpsc::channel::<Result<(), String>>();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let node = node.to_string();
        let thread = std::thread::Builder::new()
            .name("overbook-kube-link".into())
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
                    let writer = Writer::new(client.clone(), node.clone(), reports_tx);
                    tokio::select! {
                        () = async {
                            // Both run until the loop goes away; a watch
                            // that ended leaves the writes going.
                            tokio::join!(watch(client, &node, events_tx), writer.run(writes_rx));
                        } => {}
                        _ = stopped => {}
                    }
                });
            })
            .map_err(|e| format!("cannot start its thread: {e}"))?;
        match ready.recv() {
            Ok(Ok(())) => {
                Ok(ApiLink { events, reports, writes, stop: Some(stop), thread: Some(thread) })
            }
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

    /// What became of writes since the last call, oldest first.
    pub fn reports(&self) -> Vec<WriteReport> {
        self.reports.try_iter().collect()
    }

    /// Asks for a write (never waits). `false`: the link's thread has
    /// ended, and nothing more is written.
    pub fn send(&self, write: Write) -> bool {
        self.writes.send(write).is_ok()
    }
}

impl Drop for ApiLink {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Unix seconds now.
fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Which write a try was for: the offer (with its value) or a pod's head
/// write (by uid).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Key {
    Offer(u64),
    Pod(String),
}

type Try = Pin<Box<dyn Future<Output = (Key, Answer)>>>;

/// The offer not yet written.
struct OfferWanted {
    mib: u64,
    asked: Instant,
    tries: u32,
    next: Instant,
    /// The last error said (a failure is said again only when it changes).
    said: Option<String>,
}

/// A pod's write waiting (or being tried).
struct PodPending {
    write: PodWrite,
    tries: u32,
    next: Instant,
    said: Option<String>,
}

struct Writer {
    client: Client,
    node: String,
    reports: mpsc::Sender<WriteReport>,
    offer: Option<OfferWanted>,
    offer_busy: bool,
    /// Each pod's writes in order, by uid; the head is the one tried.
    pods: BTreeMap<String, VecDeque<PodPending>>,
    busy: std::collections::BTreeSet<String>,
    tries: FuturesUnordered<Try>,
}

impl Writer {
    fn new(client: Client, node: String, reports: mpsc::Sender<WriteReport>) -> Writer {
        Writer {
            client,
            node,
            reports,
            offer: None,
            offer_busy: false,
            pods: BTreeMap::new(),
            busy: Default::default(),
            tries: FuturesUnordered::new(),
        }
    }

    async fn run(mut self, mut asked: tokio_mpsc::UnboundedReceiver<Write>) {
        loop {
            let now = Instant::now();
            self.start_due(now);
            let next = self.next_due();
            let wait = next.unwrap_or(now + Duration::from_secs(3600));
            tokio::select! {
                write = asked.recv() => match write {
                    Some(w) => self.take(w),
                    // The agent is going: what is left is in its database.
                    None => return,
                },
                Some((key, answer)) = self.tries.next(), if !self.tries.is_empty() => {
                    self.answered(key, answer);
                }
                () = tokio::time::sleep_until(wait), if next.is_some() => {}
            }
        }
    }

    fn take(&mut self, write: Write) {
        let now = Instant::now();
        match write {
            Write::Offer { mib } => match &mut self.offer {
                // The latest value wins; a retry keeps its backoff.
                Some(o) => {
                    if o.mib != mib {
                        o.mib = mib;
                        o.asked = now;
                    }
                }
                None => {
                    self.offer =
                        Some(OfferWanted { mib, asked: now, tries: 0, next: now, said: None });
                }
            },
            Write::Pod(w) => {
                let queue = self.pods.entry(w.pod.uid.clone()).or_default();
                // A write carried from an earlier agent may be sent twice.
                if queue.iter().all(|p| p.write.id != w.id) {
                    queue.push_back(PodPending { write: w, tries: 0, next: now, said: None });
                }
            }
        }
    }

    /// The earliest time a write not under way is due.
    fn next_due(&self) -> Option<Instant> {
        let offer = self.offer.as_ref().filter(|_| !self.offer_busy).map(|o| o.next);
        let pods = self
            .pods
            .iter()
            .filter(|(uid, _)| !self.busy.contains(*uid))
            .filter_map(|(_, q)| q.front().map(|p| p.next));
        offer.into_iter().chain(pods).min()
    }

    fn start_due(&mut self, now: Instant) {
        if let Some(o) = &self.offer {
            if !self.offer_busy && o.next <= now {
                self.offer_busy = true;
                let t = self.try_offer(o.mib);
                self.tries.push(t);
            }
        }
        let due: Vec<String> = (self.pods.iter())
            .filter(|(uid, q)| {
                !self.busy.contains(*uid) && q.front().is_some_and(|p| p.next <= now)
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in due {
            // Writes too old to matter are given up before a try.
            let mut stale = Vec::new();
            if let Some(queue) = self.pods.get_mut(&uid) {
                while queue.front().is_some_and(|p| too_old(p.write.asked_unix, unix_now())) {
                    stale.extend(queue.pop_front());
                }
            }
            for p in stale {
                let error = p.said.unwrap_or_else(|| "not written in time".into());
                let why = "older than 10 minutes".to_string();
                self.report(Some(&p.write), WriteResult::GivenUp { error, why });
            }
            match self.pods.get(&uid).and_then(|q| q.front()).map(|p| p.write.clone()) {
                None => {
                    self.pods.remove(&uid);
                }
                Some(write) => {
                    let t = self.try_pod(write);
                    self.busy.insert(uid);
                    self.tries.push(t);
                }
            }
        }
    }

    fn answered(&mut self, key: Key, answer: Answer) {
        let now = Instant::now();
        match key {
            Key::Offer(mib) => {
                self.offer_busy = false;
                let Some(o) = &mut self.offer else { return };
                match judge(answer, None) {
                    Judged::Done => {
                        let after_ms = millis(now.saturating_duration_since(o.asked));
                        if o.mib == mib {
                            self.offer = None;
                        } else {
                            // A newer value came meanwhile: written next.
                            o.tries = 0;
                            o.next = now;
                            o.said = None;
                        }
                        self.send(WriteReport {
                            id: None,
                            what: "offer",
                            pod: None,
                            result: WriteResult::Written { after_ms },
                        });
                    }
                    Judged::Retry(error) | Judged::Final(error) => {
                        // Never given up: a refusal waits the longest.
                        o.tries = o.tries.saturating_add(1);
                        let retry_in = if error.starts_with("forbidden")
                            || error.starts_with("no such Node")
                        {
                            BACKOFF_CAP
                        } else {
                            retry_delay(o.tries)
                        };
                        o.next = now + retry_in;
                        if o.said.as_deref() != Some(error.as_str()) {
                            o.said = Some(error.clone());
                            self.send(WriteReport {
                                id: None,
                                what: "offer",
                                pod: None,
                                result: WriteResult::Retried { error, retry_in },
                            });
                        }
                    }
                }
            }
            Key::Pod(uid) => {
                self.busy.remove(&uid);
                let Some(queue) = self.pods.get_mut(&uid) else { return };
                let Some(head) = queue.front_mut() else { return };
                let judged = judge(answer, Some(&head.write.kind));
                let write = head.write.clone();
                let result = match judged {
                    Judged::Done => {
                        let after = (unix_now() - write.asked_unix).max(0.0);
                        Some(WriteResult::Written {
                            after_ms: overbook_core::convert::to_u64(after * 1000.0),
                        })
                    }
                    Judged::Final(error) => Some(WriteResult::GivenUp {
                        error,
                        why: "no retry changes this answer".into(),
                    }),
                    Judged::Retry(error) if too_old(write.asked_unix, unix_now()) => {
                        Some(WriteResult::GivenUp { error, why: "older than 10 minutes".into() })
                    }
                    Judged::Retry(error) => {
                        head.tries = head.tries.saturating_add(1);
                        let retry_in = retry_delay(head.tries);
                        head.next = now + retry_in;
                        if head.said.as_deref() != Some(error.as_str()) {
                            head.said = Some(error.clone());
                            self.report(Some(&write), WriteResult::Retried { error, retry_in });
                        }
                        None
                    }
                };
                if let Some(result) = result {
                    if let Some(queue) = self.pods.get_mut(&uid) {
                        queue.pop_front();
                        if queue.is_empty() {
                            self.pods.remove(&uid);
                        }
                    }
                    self.report(Some(&write), result);
                }
            }
        }
    }

    fn report(&self, write: Option<&PodWrite>, result: WriteResult) {
        self.send(WriteReport {
            id: write.map(|w| w.id),
            what: write.map_or("offer", |w| w.kind.what()),
            pod: write.map(|w| w.pod.key()),
            result,
        });
    }

    fn send(&self, report: WriteReport) {
        // The loop gone means the agent is stopping: nothing to tell.
        let _ = self.reports.send(report);
    }

    fn try_offer(&self, mib: u64) -> Try {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = self.node.clone();
        Box::pin(async move {
            let patch = Patch::Merge(offer_patch(mib));
            let r = tokio::time::timeout(
                TRY_TIMEOUT,
                nodes.patch_status(&node, &PatchParams::default(), &patch),
            )
            .await;
            (Key::Offer(mib), answer(r.map(|r| r.map(drop))))
        })
    }

    fn try_pod(&self, write: PodWrite) -> Try {
        let client = self.client.clone();
        let node = self.node.clone();
        Box::pin(async move {
            let key = Key::Pod(write.pod.uid.clone());
            let ns = write.pod.namespace.clone();
            let name = write.pod.name.clone();
            let r = match &write.kind {
                PodWriteKind::Event { .. } => {
                    let events: Api<KubeEvent> = Api::namespaced(client, &ns);
                    let body: KubeEvent =
                        match serde_json::from_value(event_body(&write, &node, unix_now())) {
                            Ok(e) => e,
                            Err(e) => {
                                let message = format!("its Event could not be made: {e}");
                                return (key, Answer::Refused { code: 422, message });
                            }
                        };
                    let params = PostParams::default();
                    let made = events.create(&params, &body);
                    tokio::time::timeout(TRY_TIMEOUT, made).await.map(|r| r.map(drop))
                }
                PodWriteKind::Eviction => {
                    let pods: Api<Pod> = Api::namespaced(client, &ns);
                    // This pod only: a pod made again under its name (a
                    // StatefulSet's) is another, not to be evicted.
                    let params = EvictParams {
                        delete_options: Some(DeleteParams {
                            preconditions: Some(Preconditions {
                                uid: Some(write.pod.uid.clone()),
                                resource_version: None,
                            }),
                            ..DeleteParams::default()
                        }),
                        post_options: PostParams::default(),
                    };
                    let evicted = pods.evict(&name, &params);
                    tokio::time::timeout(TRY_TIMEOUT, evicted).await.map(|r| r.map(drop))
                }
                PodWriteKind::Condition { .. } => {
                    let pods: Api<Pod> = Api::namespaced(client, &ns);
                    let patch = Patch::Strategic(condition_patch(&write, unix_now()));
                    let params = PatchParams::default();
                    let patched = pods.patch_status(&name, &params, &patch);
                    tokio::time::timeout(TRY_TIMEOUT, patched).await.map(|r| r.map(drop))
                }
            };
            (key, answer(r))
        })
    }
}

fn millis(d: Duration) -> u64 {
    overbook_core::convert::u128_to_u64(d.as_millis())
}

/// A try's outcome as the API server's answer.
fn answer(r: Result<Result<(), kube::Error>, tokio::time::error::Elapsed>) -> Answer {
    match r {
        Err(_) => Answer::NoAnswer(format!("no answer within {}s", TRY_TIMEOUT.as_secs())),
        Ok(Ok(())) => Answer::Done,
        Ok(Err(kube::Error::Api(status))) => {
            Answer::Refused { code: status.code, message: status.message.clone() }
        }
        Ok(Err(e)) => Answer::NoAnswer(e.to_string()),
    }
}
