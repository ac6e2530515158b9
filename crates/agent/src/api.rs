//! The local API: HTTP over a unix socket, root-only (mode 0600), for
//! `overbook status`, `overbook events` and Prometheus.
//!
//! * `GET /v1/status`: the node and every container, as JSON;
//! * `GET /v1/events?after=N&wait=S`: the kept events numbered after `N`,
//!   waiting up to `S` seconds (at most 30) for one to arrive, as JSON lines;
//! * `GET /metrics`: Prometheus text;
//! * `POST /v1/run` with a [`RunRequest`] as JSON: a command in a new
//!   container, admitted by the launcher; answers a [`RunReply`];
//! * `POST /v1/preempt` with a [`PreemptRequest`] as JSON: an operator's
//!   preemption of one best-effort container (never a protected one);
//!   answers what was done, as the events it made;
//! * `POST /v1/adopt` with `{"name": ...}`: restore here a task another
//!   node checkpointed into the shared image store.
//!
//! Why a unix socket: the API can stop and start containers' work, so only
//! who may open the socket file may use it, and nothing listens on the
//! network. Why blocking threads: a handful of local clients; the agent's
//! loop never waits on them (it only publishes into [`Shared`]).

use crate::agent::NodeStatus;
use crate::events::Event;
use crate::http;
use crate::metrics;
use crate::tasks::{PreemptRequest, RunRequest};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Longest wait a client may ask for on `/v1/events`.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// What the agent publishes for the API after every tick.
#[derive(Debug, Default)]
pub struct Shared {
    state: Mutex<Published>,
    arrived: Condvar,
    submissions: Mutex<Vec<(Submission, Arc<Claim>)>>,
    refusals: Arc<http::Refusals>,
    /// Clients waiting in `/v1/events` now.
    waiting: std::sync::atomic::AtomicUsize,
}

/// What a client asks of the agent's loop.
#[derive(Clone, Debug, PartialEq)]
pub enum Order {
    Run(RunRequest),
    Preempt(PreemptRequest),
    Adopt(AdoptRequest),
}

/// `overbook adopt`: which task of the shared image store to restore here.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdoptRequest {
    pub name: String,
}

/// An order waiting for the agent's loop, and where its answer (JSON, or
/// why it was refused) goes.
pub type Submission = (Order, mpsc::Sender<Result<String, String>>);

/// Where an order stands between the client and the loop: decided once,
/// by whichever comes first, so an order the client was told failed (503)
/// is never carried out later.
#[derive(Debug)]
struct Claim(std::sync::atomic::AtomicU8);

const PENDING: u8 = 0;
const TAKEN: u8 = 1;
const ABANDONED: u8 = 2;

impl Claim {
    fn settle(&self, to: u8) -> bool {
        use std::sync::atomic::Ordering::AcqRel;
        self.0.compare_exchange(PENDING, to, AcqRel, std::sync::atomic::Ordering::Acquire).is_ok()
    }
}

/// How long a client waits for the loop to take its run request.
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client waits for a preemption: a checkpoint's dump, waited
/// for unless the request says not to, takes as long as CRIU needs
/// (bounded by its timeout).
const PREEMPT_TIMEOUT: Duration = Duration::from_secs(3600);

#[derive(Debug, Default)]
struct Published {
    status: NodeStatus,
    events: VecDeque<Event>,
    stopping: bool,
}

impl Shared {
    /// Publishes the latest status and the new events (the last 1000 kept).
    pub fn publish(&self, status: NodeStatus, new_events: impl Iterator<Item = Event>) {
        let mut p = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        p.status = status;
        for e in new_events {
            if p.events.len() == 1000 {
                p.events.pop_front();
            }
            p.events.push_back(e);
        }
        drop(p);
        self.arrived.notify_all();
    }

    /// The orders that arrived since the last call, for the loop: each now
    /// taken, and carried out; those their client gave up on are dropped.
    pub fn take_submissions(&self) -> Vec<Submission> {
        let waiting =
            std::mem::take(&mut *self.submissions.lock().unwrap_or_else(PoisonError::into_inner));
        waiting.into_iter().filter(|(_, claim)| claim.settle(TAKEN)).map(|(s, _)| s).collect()
    }

    fn submit(&self, order: Order) -> (u16, String) {
        let wait = match order {
            Order::Run(_) | Order::Adopt(_) => SUBMIT_TIMEOUT,
            Order::Preempt(_) => PREEMPT_TIMEOUT,
        };
        let (tx, rx) = mpsc::channel();
        let claim = Arc::new(Claim(std::sync::atomic::AtomicU8::new(PENDING)));
        let queued = ((order, tx), Arc::clone(&claim));
        self.submissions.lock().unwrap_or_else(PoisonError::into_inner).push(queued);
        let answer = match rx.recv_timeout(wait) {
            Err(_) if claim.settle(ABANDONED) => {
                return (503, "the agent's loop did not take the request: not done\n".into())
            }
            // Taken just now: it is being carried out, and its answer comes.
            Err(_) => rx.recv_timeout(PREEMPT_TIMEOUT),
            answer => answer,
        };
        match answer {
            Ok(Ok(reply)) => (200, reply),
            Ok(Err(problem)) => (409, format!("{problem}\n")),
            Err(_) => (503, "the agent's loop took the request but did not answer\n".into()),
        }
    }

    /// What the API turned away so far (busy, out of descriptors, too
    /// slow, too large, malformed), for the agent's events.
    pub fn refusals(&self) -> [(&'static str, u64); 5] {
        self.refusals.counts()
    }

    /// Wakes every waiting client for the agent's exit.
    pub fn stop(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).stopping = true;
        self.arrived.notify_all();
    }

    fn status_json(&self) -> String {
        let p = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        serde_json::to_string(&p.status).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    fn metrics_text(&self) -> String {
        let p = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        metrics::encode(&p.status)
    }

    fn events_after(&self, after: u64, wait: Duration) -> String {
        let deadline = Instant::now() + wait;
        let mut p = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let newer: Vec<&Event> = p.events.iter().filter(|e| e.seq > after).collect();
            let left = deadline.saturating_duration_since(Instant::now());
            if !newer.is_empty() || left.is_zero() || p.stopping {
                return newer
                    .iter()
                    .filter_map(|e| serde_json::to_string(e).ok())
                    .map(|l| l + "\n")
                    .collect();
            }
            self.waiting.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            p = self.arrived.wait_timeout(p, left).unwrap_or_else(PoisonError::into_inner).0;
            self.waiting.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Why the API could not start.
#[derive(Debug, thiserror::Error)]
#[error("API socket {path}: {problem}")]
pub struct ApiError {
    pub path: String,
    pub problem: String,
}

/// Serves the API on `socket` until the process exits; a stale socket file
/// from an earlier run is replaced (the caller holds the node's lock, so no
/// other agent serves it).
///
/// The socket is never reachable with looser rights than 0600, whatever
/// the process umask: it is bound inside a fresh directory only root can
/// enter (0700), made 0600 there, and only then renamed to its path. A
/// bind followed by a chmod would leave a moment where, under `umask 000`,
/// anyone could connect and run commands as root.
pub fn serve(socket: &Path, shared: Arc<Shared>) -> Result<std::thread::JoinHandle<()>, ApiError> {
    let err = |problem: String| ApiError { path: socket.display().to_string(), problem };
    let dir = socket.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| err(format!("cannot create its directory: {e}")))?;
    let private = tempfile::Builder::new()
        .prefix(".overbook-socket-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(dir)
        .map_err(|e| err(format!("cannot make a private directory beside it: {e}")))?;
    let staged = private.path().join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&staged)
        .map_err(|e| err(format!("cannot bind: {e}")))?;
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| err(format!("cannot make it root-only: {e}")))?;
    std::fs::rename(&staged, socket).map_err(|e| err(format!("cannot put it in place: {e}")))?;
    let refusals = Arc::clone(&shared.refusals);
    Ok(http::serve(listener, http::Limits::default(), refusals, move |request| {
        respond(request, &shared)
    }))
}

fn respond(request: http::Request, shared: &Shared) -> http::Response {
    let (code, content_type, body) = match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/v1/status") => (200, "application/json", shared.status_json()),
        ("GET", "/metrics") => (
            200,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            shared.metrics_text(),
        ),
        ("GET", "/v1/events") => {
            let after = request.param("after").map(str::parse::<u64>);
            let wait = request.param("wait").map(str::parse::<f64>);
            match (after.transpose(), wait.transpose()) {
                (Ok(after), Ok(wait)) if wait.is_none_or(|w| w.is_finite() && w >= 0.0) => {
                    // Clamped before it becomes a Duration: 1e308 s would not fit one.
                    let wait = wait.unwrap_or(0.0).min(MAX_WAIT.as_secs_f64());
                    let wait = Duration::from_secs_f64(wait);
                    (200, "application/jsonl", shared.events_after(after.unwrap_or(0), wait))
                }
                _ => (400, "text/plain", "after must be a whole number, wait seconds\n".into()),
            }
        }
        ("POST", "/v1/run") => match serde_json::from_slice::<RunRequest>(&request.body) {
            Err(e) => (400, "text/plain", format!("bad run request: {e}\n")),
            Ok(run) => answered(shared.submit(Order::Run(run))),
        },
        ("POST", "/v1/preempt") => match serde_json::from_slice::<PreemptRequest>(&request.body) {
            Err(e) => (400, "text/plain", format!("bad preempt request: {e}\n")),
            Ok(order) => answered(shared.submit(Order::Preempt(order))),
        },
        ("POST", "/v1/adopt") => match serde_json::from_slice::<AdoptRequest>(&request.body) {
            Err(e) => (400, "text/plain", format!("bad adopt request: {e}\n")),
            Ok(order) => answered(shared.submit(Order::Adopt(order))),
        },
        (_, p) => (404, "text/plain", format!("no such endpoint: {p}\n")),
    };
    http::Response { code, content_type, body }
}

fn answered((code, body): (u16, String)) -> (u16, &'static str, String) {
    (code, if code == 200 { "application/json" } else { "text/plain" }, body)
}

/// A client's failure to talk to the agent.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the agent at {path}: {error} (is `overbook agent` running, and are you root?)")]
    Connect { path: String, error: std::io::Error },
    #[error("agent at {path}: {problem}")]
    Protocol { path: String, problem: String },
}

/// `GET path` on the agent's socket: the body of a 200 answer.
pub fn get(socket: &Path, path: &str) -> Result<String, ClientError> {
    request(socket, "GET", path, "")
}

/// `POST path` with a JSON body: the body of a 200 answer.
pub fn post(socket: &Path, path: &str, body: &str) -> Result<String, ClientError> {
    request(socket, "POST", path, body)
}

fn request(socket: &Path, method: &str, path: &str, body: &str) -> Result<String, ClientError> {
    let where_ = socket.display().to_string();
    let connect = |error| ClientError::Connect { path: where_.clone(), error };
    let protocol = |problem: String| ClientError::Protocol { path: where_.clone(), problem };
    let mut stream = UnixStream::connect(socket).map_err(connect)?;
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: overbook\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()))
        .map_err(|e| protocol(e.to_string()))?;
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).map_err(|e| protocol(e.to_string()))?;
    if status.is_empty() {
        return Err(protocol(
            "the agent closed the connection before answering (did it stop or restart?)".into(),
        ));
    }
    let code = status.split_whitespace().nth(1).unwrap_or("");
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).map_err(|e| protocol(e.to_string()))?;
        if n == 0 || line == "\r\n" {
            break;
        }
    }
    let mut body = String::new();
    reader.read_to_string(&mut body).map_err(|e| protocol(e.to_string()))?;
    if code != "200" {
        // A refusal's body says why; the status line adds nothing for a person.
        let why = if code.starts_with('4') {
            body.trim().to_string()
        } else {
            format!("{} {}", status.trim(), body.trim())
        };
        return Err(protocol(why));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// One event, for the clients waiting on `/v1/events`.
    fn gone_event() -> Event {
        Event {
            seq: 1,
            at: 0.0,
            kind: crate::events::EventKind::Gone,
            container: None,
            detail: serde_json::json!({}),
        }
    }

    /// Issue 13: a run answered 503 (the loop was stalled) still ran later.
    #[test]
    fn an_order_the_client_gave_up_on_is_never_handed_to_the_loop() {
        let shared = Shared::default();
        let order = Order::Adopt(AdoptRequest { name: "a".into() });
        // Nobody takes it within the (test's shortened) wait.
        let (tx, rx) = mpsc::channel();
        let claim = Arc::new(Claim(std::sync::atomic::AtomicU8::new(PENDING)));
        shared.submissions.lock().expect("lock").push(((order.clone(), tx), Arc::clone(&claim)));
        assert!(claim.settle(ABANDONED), "the client gives up first");
        assert!(shared.take_submissions().is_empty(), "so the loop never sees it");
        drop(rx);
        // One the loop takes first cannot be abandoned any more.
        let (tx, _rx) = mpsc::channel();
        let claim = Arc::new(Claim(std::sync::atomic::AtomicU8::new(PENDING)));
        shared.submissions.lock().expect("lock").push(((order, tx), Arc::clone(&claim)));
        assert_eq!(shared.take_submissions().len(), 1);
        assert!(!claim.settle(ABANDONED), "taken: its answer is waited for");
    }

    /// Many clients waiting for events hold no one else up, and all are
    /// woken by the event they wait for.
    #[test]
    fn a_hundred_waiters_for_events_leave_the_api_answering_and_all_hear_the_event() {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("agent.sock");
        let shared = Arc::new(Shared::default());
        serve(&socket, Arc::clone(&shared)).expect("serves");
        let waiters: Vec<_> = (0..100)
            .map(|_| {
                let socket = socket.clone();
                std::thread::spawn(move || get(&socket, "/v1/events?after=0&wait=30"))
            })
            .collect();
        // All hundred are waiting (each holds a connection) ...
        let deadline = Instant::now() + Duration::from_secs(20);
        let waiting = || shared.waiting.load(std::sync::atomic::Ordering::Relaxed);
        while waiting() < 100 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(waiting(), 100);
        // ... and the API still answers others.
        assert!(get(&socket, "/v1/status").expect("answers").contains("\"containers\""));
        let event = gone_event();
        shared.publish(NodeStatus::default(), std::iter::once(event));
        for w in waiters {
            let got = w.join().expect("waiter").expect("answered");
            assert!(got.contains("\"gone\""), "{got}");
        }
    }

    /// Issue 13: under `umask 000` a bind-then-chmod socket was briefly
    /// open to every user. The socket appears at its path already 0600,
    /// and nothing else is left beside it.
    #[test]
    fn the_socket_is_root_only_from_the_moment_it_appears_whatever_the_umask() {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("agent.sock");
        let old = rustix::process::umask(rustix::fs::Mode::empty());
        let shared = Arc::new(Shared::default());
        let served = serve(&socket, Arc::clone(&shared));
        rustix::process::umask(old);
        served.expect("serves");
        let mode = std::fs::metadata(&socket).expect("there").mode() & 0o777;
        assert_eq!(mode, 0o600, "{mode:o}");
        let beside: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        assert_eq!(beside, vec![std::ffi::OsString::from("agent.sock")]);
        let status = get(&socket, "/v1/status").expect("answers");
        assert!(status.contains("\"containers\""), "{status}");
        let event = gone_event();
        shared.publish(NodeStatus::default(), std::iter::once(event));
        // Once a panic in the API's thread (the wait overflowed a Duration).
        let huge = get(&socket, "/v1/events?wait=1e308").expect("clamped, answered");
        assert!(huge.contains("\"gone\""), "{huge}");
        let bad = get(&socket, "/v1/events?wait=-1").unwrap_err().to_string();
        assert!(bad.contains("wait"), "{bad}");
    }
}
