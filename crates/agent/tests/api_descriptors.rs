//! Issue 13: at systemd's default soft limit of 1024 descriptors, 1100 idle
//! connections stopped the API's accept loop for good, and the agent ran on
//! with no API. Here the agent's API runs under a soft limit of 64
//! descriptors while a client (a separate process, with descriptors of its
//! own) holds 300 connections open: the API must keep accepting (turning
//! away what it cannot hold, and counting it), and answer again once the
//! connections end.
//!
//! A binary of its own: the limit is the whole process's.

use overbook_agent::api::{self, Shared};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

/// Holds connections open on command, and makes requests: "hold N" answers
/// "held N" once N connections are made (each either open, or closed by
/// the server at once: counted as "closed"); "get PATH" answers the status
/// line (or "closed"); "drop" closes what it holds. A command the socket
/// refuses (a full listen queue) answers "refused: <why>".
const CLIENT: &str = r#"
import resource, socket, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
path = sys.argv[1]
held = []
def serve(cmd, arg):
    global held
    if cmd == "hold":
        for _ in range(int(arg)):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            held.append(s)
        print("held", len(held), flush=True)
    elif cmd == "get":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(path)
        s.sendall(("GET %s HTTP/1.0\r\n\r\n" % arg).encode())
        data = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except ConnectionResetError:
            pass
        s.close()
        first = data.split(b"\r\n", 1)[0].decode() if data else "closed"
        print(first, flush=True)
    elif cmd == "drop":
        for s in held:
            s.close()
        held = []
        print("dropped", flush=True)

for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    try:
        serve(cmd, arg)
    except socket.timeout:
        print("hung: no answer in 30 s", flush=True)
    except OSError as e:
        # A full listen queue refuses a connect with a timeout at once
        # (EAGAIN): said, never a dead client.
        print("refused:", e, flush=True)
"#;

#[test]
fn the_api_outlives_descriptor_exhaustion_and_answers_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("agent.sock");
    // The client starts first, so it does not inherit the lowered limit.
    let mut client = Command::new("python3")
        .arg("-c")
        .arg(CLIENT)
        .arg(&socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs (apt install python3)");
    let mut to = client.stdin.take().expect("piped");
    let mut from = BufReader::new(client.stdout.take().expect("piped")).lines();
    let mut ask = |what: &str| -> String {
        writeln!(to, "{what}").expect("the client listens");
        from.next().and_then(Result::ok).expect("the client answers")
    };

    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let lowered = rustix::process::Rlimit { current: Some(64), maximum: limit.maximum };
    rustix::process::setrlimit(rustix::process::Resource::Nofile, lowered).expect("lowers");
    let shared = Arc::new(Shared::default());
    let _server = api::serve(&socket, Arc::clone(&shared)).expect("serves");

    assert_eq!(ask("get /v1/status"), "HTTP/1.0 200 OK");
    // Far more than 64: the server runs out of descriptors on the way.
    assert_eq!(ask("hold 300"), "held 300", "every connect went through: the loop accepts");
    // The server takes them from its queue in its own time.
    let out_of_descriptors = || {
        shared.refusals().iter().find(|(k, _)| *k == "out_of_descriptors").map_or(0, |(_, n)| *n)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while out_of_descriptors() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(out_of_descriptors() > 0, "refusals {:?}", shared.refusals());
    // While exhausted, a request is either answered or closed at once:
    // never left hanging (the client would time out and fail).
    let during = ask("get /v1/status");
    let at_once = during == "closed" || during.starts_with("refused:");
    assert!(during == "HTTP/1.0 200 OK" || at_once, "{during}");
    assert!(socket.exists(), "the socket file stays");
    assert_eq!(ask("drop"), "dropped");
    // The held connections' threads see them end and give their
    // descriptors back; the API answers again.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut after = String::new();
    while after != "HTTP/1.0 200 OK" && std::time::Instant::now() < deadline {
        after = ask("get /v1/status");
    }
    assert_eq!(after, "HTTP/1.0 200 OK", "the API answers again");
    drop(to);
    let _ = client.wait();
}
