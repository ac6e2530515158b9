//! `overbook agent`, `status`, `events` and `check` through the real binary,
//! on this host's real cgroups. The agent needs root and a memory
//! controller; without them the test says so loudly and FAILS, unless
//! `OVERBOOK_ALLOW_SKIP=1`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn overbook(args: &[&str]) -> Output {
    match Command::new(env!("CARGO_BIN_EXE_overbook")).args(args).output() {
        Ok(o) => o,
        Err(e) => panic!("cannot run overbook {args:?}: {e}"),
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn may_run_agent() -> bool {
    common::may_run_on_a_real_node("cli agent")
}

#[test]
fn a_bad_config_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("agent.toml");
    std::fs::write(&path, "[policy.detector]\nkind = \"constraint-thrashing\"\ntolerance = -2\n")
        .expect("write");
    let o = overbook(&["agent", "--config", path.to_str().expect("utf-8"), "--check-config"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("agent.toml: policy.detector.tolerance"), "{err}");
}

#[test]
fn check_reports_the_memory_controller_and_criu() {
    let o = overbook(&["check"]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(out.contains("memory controller") && out.contains("CRIU"), "{out}");
}

#[test]
fn the_agent_serves_status_events_and_metrics_and_stops_cleanly() {
    if !may_run_agent() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("agent.sock");
    let socket = socket.to_str().expect("utf-8");
    let root = format!("overbook-clitest-{}", std::process::id());
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[node]\nroot = \"{root}\"\n[agent]\nevent_log = \"{}\"\nstate_db = \"{}\"\n",
            dir.path().join("events.jsonl").display(),
            dir.path().join("state.db").display()
        ),
    )
    .expect("write config");
    let mut agent = Command::new(env!("CARGO_BIN_EXE_overbook"))
        .args(["agent", "--config", config.to_str().expect("utf-8"), "--socket", socket])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start agent");
    let mut lines = BufReader::new(agent.stderr.take().expect("piped")).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(first.contains("watching"), "agent said {first:?}");

    let status = overbook(&["status", "--socket", socket]);
    assert!(status.status.success(), "{status:?}");
    assert!(stdout(&status).contains(&format!("node /{root}")), "{}", stdout(&status));
    let json = overbook(&["status", "--socket", socket, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&json)).expect("status JSON");
    assert!(v["capacity"].as_u64().is_some_and(|c| c > 0));
    let events = overbook(&["events", "--socket", socket, "--json"]);
    let first_event: serde_json::Value =
        serde_json::from_str(stdout(&events).lines().next().expect("an event")).expect("JSON");
    assert_eq!(first_event["kind"], "started");
    let metrics =
        overbook_agent::api::get(std::path::Path::new(socket), "/metrics").expect("metrics");
    assert!(metrics.contains("overbook_node_memory_available_bytes"), "{metrics}");
    let missing = overbook_agent::api::get(std::path::Path::new(socket), "/nope").unwrap_err();
    assert!(missing.to_string().contains("no such endpoint: /nope"), "{missing}");

    let pid = rustix::process::Pid::from_raw(agent.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(code) = agent.try_wait().expect("wait") {
            break code;
        }
        assert!(Instant::now() < deadline, "agent did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(code.success(), "{code:?}");
    assert!(!std::path::Path::new(socket).exists(), "socket removed");
    let log = std::fs::read_to_string(dir.path().join("events.jsonl")).expect("event log");
    assert!(log.lines().any(|l| l.contains("\"started\"")), "{log}");
    for hierarchy in ["memory", "freezer"] {
        let _ = std::fs::remove_dir(format!("/sys/fs/cgroup/{hierarchy}/{root}"));
    }
    let _ = std::fs::remove_dir(format!("/sys/fs/cgroup/{root}"));
}
