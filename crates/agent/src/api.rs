//! The local API: HTTP over a unix socket, root-only (mode 0600), for
//! `overbook status`, `overbook events` and Prometheus.
//!
//! * `GET /v1/status`: the node and every container, as JSON;
//! * `GET /v1/events?after=N&wait=S`: the kept events numbered after `N`,
//!   waiting up to `S` seconds (at most 30) for one to arrive, as JSON lines;
//! * `GET /metrics`: Prometheus text.
//!
//! Why a unix socket: the API can stop and start containers' work, so only
//! who may open the socket file may use it, and nothing listens on the
//! network. Why blocking threads: a handful of local clients; the agent's
//! loop never waits on them (it only publishes into [`Shared`]).

use crate::agent::NodeStatus;
use crate::events::Event;
use crate::metrics;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Longest wait a client may ask for on `/v1/events`.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// What the agent publishes for the API after every tick.
#[derive(Debug, Default)]
pub struct Shared {
    state: Mutex<Published>,
    arrived: Condvar,
}

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
            p = self.arrived.wait_timeout(p, left).unwrap_or_else(PoisonError::into_inner).0;
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
/// from an earlier run is replaced.
pub fn serve(socket: &Path, shared: Arc<Shared>) -> Result<std::thread::JoinHandle<()>, ApiError> {
    let err = |problem: String| ApiError { path: socket.display().to_string(), problem };
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| err(format!("cannot create its directory: {e}")))?;
    }
    if UnixStream::connect(socket).is_ok() {
        return Err(err("another agent is serving it".into()));
    }
    let _ = std::fs::remove_file(socket);
    let server = tiny_http::Server::http_unix(socket).map_err(|e| err(e.to_string()))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| err(format!("cannot make it root-only: {e}")))?;
    let server = Arc::new(server);
    Ok(std::thread::spawn(move || {
        for request in server.incoming_requests() {
            let shared = Arc::clone(&shared);
            // A client waiting for events must not hold up the others.
            std::thread::spawn(move || respond(request, &shared));
        }
    }))
}

fn respond(request: tiny_http::Request, shared: &Shared) {
    let url = request.url().to_string();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    };
    let (code, kind, body) = match (request.method(), path) {
        (tiny_http::Method::Get, "/v1/status") => (200, "application/json", shared.status_json()),
        (tiny_http::Method::Get, "/metrics") => (
            200,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            shared.metrics_text(),
        ),
        (tiny_http::Method::Get, "/v1/events") => {
            let after = param("after").map(str::parse::<u64>);
            let wait = param("wait").map(str::parse::<f64>);
            match (after.transpose(), wait.transpose()) {
                (Ok(after), Ok(wait)) if wait.is_none_or(|w| w.is_finite() && w >= 0.0) => {
                    let wait = Duration::from_secs_f64(wait.unwrap_or(0.0)).min(MAX_WAIT);
                    (200, "application/jsonl", shared.events_after(after.unwrap_or(0), wait))
                }
                _ => (400, "text/plain", "after must be a whole number, wait seconds\n".into()),
            }
        }
        (_, p) => (404, "text/plain", format!("no such endpoint: {p}\n")),
    };
    let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], kind.as_bytes());
    let mut response = tiny_http::Response::from_string(body).with_status_code(code);
    if let Ok(h) = header {
        response = response.with_header(h);
    }
    let _ = request.respond(response);
}

/// A client's failure to talk to the agent.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the agent at {path}: {source} (is `overbook agent` running, and are you root?)")]
    Connect { path: String, source: std::io::Error },
    #[error("agent at {path}: {problem}")]
    Protocol { path: String, problem: String },
}

/// `GET path` on the agent's socket: the body of a 200 answer.
pub fn get(socket: &Path, path: &str) -> Result<String, ClientError> {
    let where_ = socket.display().to_string();
    let connect = |source| ClientError::Connect { path: where_.clone(), source };
    let protocol = |problem: String| ClientError::Protocol { path: where_.clone(), problem };
    let mut stream = UnixStream::connect(socket).map_err(connect)?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: overbook\r\n\r\n")
        .map_err(|e| protocol(e.to_string()))?;
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).map_err(|e| protocol(e.to_string()))?;
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
        return Err(protocol(format!("{} {}", status.trim(), body.trim())));
    }
    Ok(body)
}
