//! The API's transport: HTTP/1.0 on a unix socket, one request a
//! connection, with every resource a client can take bounded.
//!
//! Why not a general HTTP server: the agent runs as root, with its memory
//! locked, next to production, and its API must outlive whatever a local
//! client does. So: at most `max_connections` at once (one more is told 503
//! and closed); a request head of at most `max_head` bytes and a body of at
//! most `max_body`, both read within `read_deadline` of the connection's
//! accept (a slow or silent client is cut off); a listener that keeps
//! accepting when the process runs out of descriptors (a spare descriptor
//! is given up to accept and close the waiting connection, so the kernel's
//! queue drains instead of the loop spinning or stopping), and that, while
//! it is short of descriptors, cuts off connections that have sent nothing
//! for [`IDLE_WHEN_SHORT`] (so idle holders cannot keep a waiting request
//! out for the whole read deadline). The socket file is never removed
//! here; the agent removes it when it stops.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a connection that has sent nothing is kept while the process
/// is short of descriptors.
pub const IDLE_WHEN_SHORT: Duration = Duration::from_secs(1);

/// How often a waiting read looks whether it must give way.
const READ_SLICE: Duration = Duration::from_millis(200);

/// What one client may take of the agent.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub max_head: usize,
    pub max_body: usize,
    /// From accept to the end of the request's body.
    pub read_deadline: Duration,
    /// For each write of the answer.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 128,
            max_head: 16 << 10,
            max_body: 64 << 10,
            read_deadline: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// A request as the handler sees it.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    pub query: String,
    pub body: Vec<u8>,
}

impl Request {
    /// The value of query parameter `name`, if given.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    }
}

/// An answer: status, content type, body.
#[derive(Debug)]
pub struct Response {
    pub code: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    pub fn text(code: u16, body: impl Into<String>) -> Response {
        Response { code, content_type: "text/plain", body: body.into() }
    }
}

/// What the server turned away, counted since it started.
#[derive(Debug, Default)]
pub struct Refusals {
    /// Connections over `max_connections`, answered 503.
    pub busy: AtomicU64,
    /// Connections accepted and closed unanswered: no descriptor was left.
    pub out_of_descriptors: AtomicU64,
    /// Requests not complete within the read deadline (408).
    pub too_slow: AtomicU64,
    /// Heads or bodies over their limit (431, 413).
    pub too_large: AtomicU64,
    /// Requests that are not HTTP/1 (400).
    pub malformed: AtomicU64,
}

impl Refusals {
    /// The counts, in the order of the fields.
    pub fn counts(&self) -> [(&'static str, u64); 5] {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            ("busy", n(&self.busy)),
            ("out_of_descriptors", n(&self.out_of_descriptors)),
            ("too_slow", n(&self.too_slow)),
            ("too_large", n(&self.too_large)),
            ("malformed", n(&self.malformed)),
        ]
    }
}

/// Serves `listener` on a thread of its own, each connection on a thread
/// (small stack) running `handler`, until the process exits.
pub fn serve<H>(
    listener: UnixListener,
    limits: Limits,
    refusals: Arc<Refusals>,
    handler: H,
) -> std::thread::JoinHandle<()>
where
    H: Fn(Request) -> Response + Send + Sync + 'static,
{
    let handler = Arc::new(handler);
    let open = Arc::new(AtomicUsize::new(0));
    let short = Arc::new(AtomicBool::new(false));
    std::thread::spawn(move || {
        let mut spare = std::fs::File::open("/dev/null").ok();
        loop {
            if spare.is_none() {
                spare = std::fs::File::open("/dev/null").ok();
            }
            let stream = match listener.accept() {
                Ok((stream, _)) => {
                    if spare.is_some() {
                        short.store(false, Ordering::Relaxed);
                    }
                    stream
                }
                Err(e) if out_of_descriptors(&e) => {
                    // Connections that sent nothing give their descriptors
                    // back soon (see `read_some`).
                    short.store(true, Ordering::Relaxed);
                    // Give the spare up for a moment: the waiting client is
                    // accepted and closed, so it learns at once and the
                    // queue does not keep the loop busy.
                    drop(spare.take());
                    if let Ok((stream, _)) = listener.accept() {
                        drop(stream);
                        refusals.out_of_descriptors.fetch_add(1, Ordering::Relaxed);
                    }
                    spare = std::fs::File::open("/dev/null").ok();
                    if spare.is_none() {
                        // Not even one descriptor: wait for connections to end.
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    continue;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                    ) =>
                {
                    continue
                }
                Err(_) => {
                    // ENOMEM, ENOBUFS and the like pass; the API must not end.
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            if open.fetch_add(1, Ordering::AcqRel) >= limits.max_connections {
                open.fetch_sub(1, Ordering::AcqRel);
                refusals.busy.fetch_add(1, Ordering::Relaxed);
                refuse_at_once(stream, &Response::text(503, "too many connections to the agent\n"));
                continue;
            }
            let slot = Slot(Arc::clone(&open));
            let (handler, counts) = (Arc::clone(&handler), Arc::clone(&refusals));
            let short = Arc::clone(&short);
            let spawned = std::thread::Builder::new()
                .name("overbook-api".into())
                .stack_size(256 << 10)
                .spawn(move || {
                    let _slot = slot;
                    converse(stream, &limits, &counts, &short, &*handler);
                });
            if spawned.is_err() {
                // The stream and slot went with the closure and are released.
                refusals.busy.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
}

/// One connection's place under `max_connections`, given back on drop.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn out_of_descriptors(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    e.raw_os_error()
        .is_some_and(|n| n == Errno::MFILE.raw_os_error() || n == Errno::NFILE.raw_os_error())
}

/// Answers without reading: the answer fits the socket's buffer, and a
/// client that does not read it must not hold the accept loop.
fn refuse_at_once(stream: UnixStream, response: &Response) {
    if stream.set_nonblocking(true).is_ok() {
        let _ = (&stream).write_all(&encode(response));
    }
}

fn converse<H: Fn(Request) -> Response>(
    mut stream: UnixStream,
    limits: &Limits,
    refusals: &Refusals,
    short: &AtomicBool,
    handler: &H,
) {
    let response = match read_request(&mut stream, limits, short) {
        Ok(request) => handler(request),
        Err(Refused::Gone) => return,
        Err(Refused::Answer(counter, response)) => {
            counter(refusals).fetch_add(1, Ordering::Relaxed);
            response
        }
    };
    let _ = stream.set_write_timeout(Some(limits.write_timeout));
    let _ = stream.write_all(&encode(&response));
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Why a request is not handed to the handler.
enum Refused {
    /// The client left (or broke the connection) before a whole request.
    Gone,
    /// Told why, and counted.
    Answer(fn(&Refusals) -> &AtomicU64, Response),
}

fn too_slow() -> Refused {
    Refused::Answer(|r| &r.too_slow, Response::text(408, "request not complete in time\n"))
}

fn shed() -> Refused {
    Refused::Answer(
        |r| &r.out_of_descriptors,
        Response::text(503, "the agent is short of descriptors; ask again\n"),
    )
}

fn malformed(why: &str) -> Refused {
    Refused::Answer(|r| &r.malformed, Response::text(400, format!("{why}\n")))
}

/// How a request is being read: by when it must be whole, and when the
/// connection was accepted (for cutting off idle ones while short).
struct Reading<'a> {
    deadline: Instant,
    accepted: Instant,
    short: &'a AtomicBool,
}

/// Reads what has arrived (at most 4 KiB) onto `buf`, waiting no later
/// than the deadline; a connection that has sent nothing at all is cut off
/// after [`IDLE_WHEN_SHORT`] while the listener is short of descriptors.
fn read_some(
    stream: &mut UnixStream,
    buf: &mut Vec<u8>,
    reading: &Reading<'_>,
) -> Result<usize, Refused> {
    let mut chunk = [0u8; 4096];
    loop {
        let left = reading.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(too_slow());
        }
        stream.set_read_timeout(Some(left.min(READ_SLICE))).map_err(|_| Refused::Gone)?;
        match stream.read(&mut chunk) {
            Ok(0) => return Err(Refused::Gone),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(n);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                let idle = buf.is_empty() && reading.accepted.elapsed() >= IDLE_WHEN_SHORT;
                if idle && reading.short.load(Ordering::Relaxed) {
                    return Err(shed());
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Err(Refused::Gone),
        }
    }
}

fn read_request(
    stream: &mut UnixStream,
    limits: &Limits,
    short: &AtomicBool,
) -> Result<Request, Refused> {
    let accepted = Instant::now();
    let reading = Reading { deadline: accepted + limits.read_deadline, accepted, short };
    let mut buf = Vec::with_capacity(1024);
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if buf.len() > limits.max_head {
            let answer =
                Response::text(431, format!("request head over {} bytes\n", limits.max_head));
            return Err(Refused::Answer(|r| &r.too_large, answer));
        }
        read_some(stream, &mut buf, &reading)?;
    };
    if head_end > limits.max_head {
        let answer = Response::text(431, format!("request head over {} bytes\n", limits.max_head));
        return Err(Refused::Answer(|r| &r.too_large, answer));
    }
    let mut body = buf.split_off(head_end + 4);
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| malformed("request head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed("request line is not `METHOD TARGET HTTP/1.x`"));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(malformed("request line is not `METHOD TARGET HTTP/1.x`"));
    }
    let mut length = 0usize;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(malformed("a header line has no `:`"));
        };
        if name.eq_ignore_ascii_case("content-length") {
            length =
                value.trim().parse().map_err(|_| malformed("Content-Length is not a number"))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(malformed("only bodies with a Content-Length are taken"));
        }
    }
    if length > limits.max_body {
        let answer = Response::text(413, format!("request body over {} bytes\n", limits.max_body));
        return Err(Refused::Answer(|r| &r.too_large, answer));
    }
    while body.len() < length {
        read_some(stream, &mut body, &reading)?;
    }
    if body.len() > length {
        return Err(malformed("more body than its Content-Length"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Ok(Request { method: method.into(), path: path.into(), query: query.into(), body })
}

fn encode(response: &Response) -> Vec<u8> {
    let reason = match response.code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    };
    let mut out = format!(
        "HTTP/1.0 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        response.code,
        response.content_type,
        response.body.len()
    )
    .into_bytes();
    out.extend_from_slice(response.body.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    /// A server on a fresh socket, answering every request with its path
    /// after `hold` (to keep connections busy).
    fn server(
        limits: Limits,
        hold: Duration,
    ) -> (tempfile::TempDir, std::path::PathBuf, Arc<Refusals>) {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("api.sock");
        let listener = UnixListener::bind(&socket).expect("binds");
        let refusals = Arc::new(Refusals::default());
        serve(listener, limits, Arc::clone(&refusals), move |r| {
            std::thread::sleep(hold);
            Response::text(200, r.path)
        });
        (dir, socket, refusals)
    }

    /// Sends `raw`, then reads the answer's status code (0: closed unanswered).
    fn exchange(socket: &std::path::Path, raw: &[u8]) -> (u16, String) {
        let mut stream = UnixStream::connect(socket).expect("connects");
        let _ = stream.write_all(raw);
        read_answer(&mut stream)
    }

    fn read_answer(stream: &mut UnixStream) -> (u16, String) {
        let mut text = String::new();
        let _ = std::io::BufReader::new(stream).read_to_string(&mut text);
        let code = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
        (code, body)
    }

    const GET: &[u8] = b"GET /v1/status HTTP/1.0\r\nHost: x\r\n\r\n";

    #[test]
    fn a_whole_request_is_answered_with_its_length_and_type() {
        let (_dir, socket, _) = server(Limits::default(), Duration::ZERO);
        let mut stream = UnixStream::connect(&socket).expect("connects");
        stream
            .write_all(b"POST /v1/run?x=1 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
            .expect("sends");
        let mut lines = std::io::BufReader::new(stream).lines().map_while(Result::ok);
        assert_eq!(lines.next().as_deref(), Some("HTTP/1.0 200 OK"));
        let rest: Vec<String> = lines.collect();
        assert!(rest.contains(&"Content-Length: 7".to_string()), "{rest:?}");
        assert!(rest.contains(&"Content-Type: text/plain".to_string()), "{rest:?}");
        assert_eq!(rest.last().map(String::as_str), Some("/v1/run"));
    }

    /// Issue 13: a request line without CRLF was buffered without limit.
    #[test]
    fn an_endless_head_is_refused_past_its_limit_and_the_memory_is_not_kept() {
        let limits = Limits { max_head: 1024, ..Limits::default() };
        let (_dir, socket, refusals) = server(limits, Duration::ZERO);
        let mut stream = UnixStream::connect(&socket).expect("connects");
        let writer = stream.try_clone().expect("clones");
        // A megabyte of one request line; the server stops reading early.
        let sent = std::thread::spawn(move || {
            let mut writer = writer;
            let line = vec![b'a'; 1 << 20];
            writer.write_all(&line).is_ok()
        });
        let (code, body) = read_answer(&mut stream);
        assert_eq!(code, 431, "{body}");
        assert!(!sent.join().expect("writer"), "the server closed before taking it all");
        assert_eq!(refusals.too_large.load(Ordering::Relaxed), 1);
        // And a body over its limit is refused on its Content-Length.
        let big = b"POST /v1/run HTTP/1.0\r\nContent-Length: 10000000\r\n\r\n";
        assert_eq!(exchange(&socket, big).0, 413);
        assert_eq!(exchange(&socket, GET), (200, "/v1/status".into()), "the server goes on");
    }

    /// Issue 13: slow clients held the server's resources for ever.
    #[test]
    fn a_slow_client_is_cut_off_at_the_deadline_and_holds_no_one_else_up() {
        let limits = Limits { read_deadline: Duration::from_millis(500), ..Limits::default() };
        let (_dir, socket, refusals) = server(limits, Duration::ZERO);
        let mut slow = UnixStream::connect(&socket).expect("connects");
        slow.write_all(b"GET /v1/sta").expect("sends a part");
        // Another client is answered while the slow one dawdles.
        assert_eq!(exchange(&socket, GET).0, 200);
        // Bytes trickling in do not move the deadline.
        for _ in 0..3 {
            if slow.write_all(b"t").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let (code, _) = read_answer(&mut slow);
        assert_eq!(code, 408);
        assert_eq!(refusals.too_slow.load(Ordering::Relaxed), 1);
        // One that connects and says nothing is cut off the same way.
        let mut silent = UnixStream::connect(&socket).expect("connects");
        assert_eq!(read_answer(&mut silent).0, 408);
    }

    #[test]
    fn connections_past_the_cap_are_told_busy_and_the_server_recovers() {
        let limits = Limits { max_connections: 4, ..Limits::default() };
        let (_dir, socket, refusals) = server(limits, Duration::ZERO);
        // Four idle connections take every place.
        let idle: Vec<UnixStream> =
            (0..4).map(|_| UnixStream::connect(&socket).expect("connects")).collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut code = 0;
        // The server takes them in its own time: the fifth is told busy
        // once all four are accepted.
        while code != 503 && Instant::now() < deadline {
            code = exchange(&socket, b"").0;
        }
        assert_eq!(code, 503);
        assert!(refusals.busy.load(Ordering::Relaxed) >= 1);
        drop(idle);
        let mut answered = 0;
        while answered != 200 && Instant::now() < deadline {
            answered = exchange(&socket, GET).0;
        }
        assert_eq!(answered, 200, "places come back as connections end");
    }

    #[test]
    fn malformed_requests_are_told_why() {
        let (_dir, socket, refusals) = server(Limits::default(), Duration::ZERO);
        for raw in [
            &b"HELLO\r\n\r\n"[..],
            b"GET /x SMTP/1.0\r\n\r\n",
            b"GET x HTTP/1.0\r\n\r\n",
            b"GET /x HTTP/1.0\r\nno colon\r\n\r\n",
            b"POST /x HTTP/1.0\r\nContent-Length: -1\r\n\r\n",
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"\xff\xfe /x HTTP/1.0\r\n\r\n",
        ] {
            let (code, body) = exchange(&socket, raw);
            assert_eq!(code, 400, "{raw:?}: {body}");
            assert!(!body.is_empty());
        }
        assert_eq!(refusals.malformed.load(Ordering::Relaxed), 7);
    }
}
