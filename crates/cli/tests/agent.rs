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

/// The node cgroup an agent of a test makes, removed when the test ends,
/// a failed one included (the agent mirrors its node in every v1
/// hierarchy it uses).
struct NodeRoot(String);

impl Drop for NodeRoot {
    fn drop(&mut self) {
        for hierarchy in ["memory", "freezer", "cpu", "cpuacct"] {
            let _ = std::fs::remove_dir(format!("/sys/fs/cgroup/{hierarchy}/{}", self.0));
        }
        let _ = std::fs::remove_dir(format!("/sys/fs/cgroup/{}", self.0));
    }
}

/// An agent a test started, stopped when the test ends if the test did
/// not stop it (a failed assertion would otherwise leave it running until
/// the test binary exits, and its node cgroup behind it). Declared after
/// its [`NodeRoot`], so it is dropped first.
struct AgentProcess(std::process::Child);

impl AgentProcess {
    /// `overbook agent` on `config` and `socket`, its stderr piped.
    fn start(config: &std::path::Path, socket: &str) -> AgentProcess {
        AgentProcess(
            Command::new(env!("CARGO_BIN_EXE_overbook"))
                .args(["agent", "--config", config.to_str().expect("utf-8"), "--socket", socket])
                .stderr(Stdio::piped())
                .spawn()
                .expect("start agent"),
        )
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        // A child already waited for is not signalled again.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn may_run_agent() -> bool {
    common::may_run_on_a_real_node("cli agent")
}

#[test]
fn a_good_config_is_shown_as_it_takes_effect_in_its_own_terms() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("agent.toml");
    std::fs::write(&path, "[node]\nroot = \"nodes/a\"\n").expect("write");
    let o = overbook(&["agent", "--config", path.to_str().expect("utf-8"), "--check-config"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.starts_with(&format!("# {} is valid", path.display())), "{out}");
    // What it prints is a config the agent reads back as the same one.
    let shown = dir.path().join("shown.toml");
    std::fs::write(&shown, out.as_bytes()).expect("write");
    let again = overbook(&["agent", "--config", shown.to_str().expect("utf-8"), "--check-config"]);
    let again_out = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success(), "{again_out}{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(
        out.lines().skip(1).collect::<Vec<_>>(),
        again_out.lines().skip(1).collect::<Vec<_>>()
    );
    assert!(out.contains("root = \"nodes/a\""), "{out}");
    assert!(!out.contains("AgentConfig {"), "no debug dump: {out}");
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
fn config_problems_name_the_file_the_place_and_the_key_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("agent.toml");
    let check = |path: &std::path::Path| {
        let o = overbook(&["agent", "--config", path.to_str().expect("utf-8"), "--check-config"]);
        assert!(!o.status.success(), "accepted {}", path.display());
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    let err = check(&path);
    assert!(err.contains("agent.toml: cannot read it: "), "{err}");
    assert_eq!(err.matches("os error 2").count(), 1, "{err}");
    std::fs::write(&path, "[agent]\nsample_period = 0.1.0\n").expect("write");
    let err = check(&path);
    assert!(err.contains("agent.toml:2:") && err.contains(": agent.sample_period: "), "{err}");
    // What the agent would refuse at start, --check-config refuses too.
    std::fs::write(&path, "[node]\nroot = \"over\\nbook\"\n").expect("write");
    let err = check(&path);
    assert!(err.contains("agent.toml: node.root: "), "{err}");
}

/// A state database that is not one: the agent starts all the same, says
/// so on stderr and in its log, and keeps the file for the operator.
#[test]
fn the_agent_starts_on_a_state_database_that_is_not_one() {
    if !may_run_agent() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("agent.sock");
    let socket = socket.to_str().expect("utf-8");
    let root = format!("overbook-clitest-db-{}", std::process::id());
    let node = NodeRoot(root.clone());
    let db = dir.path().join("state.db");
    std::fs::write(&db, vec![7u8; 4096]).expect("garbage");
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[node]\nroot = \"{root}\"\n[agent]\nevent_log = \"{}\"\nstate_db = \"{}\"\n",
            dir.path().join("events.jsonl").display(),
            db.display()
        ),
    )
    .expect("write config");
    let mut agent = AgentProcess::start(&config, socket);
    // Read until it watches; the pipe stays open until it has stopped (a
    // closed stderr would fail its next line).
    let mut lines = BufReader::new(agent.0.stderr.take().expect("piped")).lines();
    let said: Vec<String> =
        lines.by_ref().map_while(Result::ok).take_while(|l| !l.contains("watching")).collect();
    let pid =
        rustix::process::Pid::from_raw(i32::try_from(agent.0.id()).expect("a pid fits an i32"))
            .expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let code = agent.0.wait().expect("wait");
    drop(node);
    assert!(code.success(), "{code:?}: {said:?} {rest:?}");
    let warning = said.iter().find(|l| l.contains("warning: state database")).expect("a warning");
    assert!(
        warning.contains(&db.display().to_string()) && warning.contains(".corrupt-"),
        "{warning}"
    );
    let kept: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("state.db.corrupt-"))
        .collect();
    assert_eq!(kept.len(), 1, "the file kept aside");
    let log = std::fs::read_to_string(dir.path().join("events.jsonl")).expect("event log");
    assert!(log.lines().any(|l| l.contains("\"state-moved-aside\"")), "{log}");
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
    let _node = NodeRoot(root.clone());
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
    let mut agent = AgentProcess::start(&config, socket);
    let mut lines = BufReader::new(agent.0.stderr.take().expect("piped")).lines();
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

    let pid =
        rustix::process::Pid::from_raw(i32::try_from(agent.0.id()).expect("a pid fits an i32"))
            .expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(code) = agent.0.try_wait().expect("wait") {
            break code;
        }
        assert!(Instant::now() < deadline, "agent did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(code.success(), "{code:?}");
    assert!(!std::path::Path::new(socket).exists(), "socket removed");
    let log = std::fs::read_to_string(dir.path().join("events.jsonl")).expect("event log");
    assert!(log.lines().any(|l| l.contains("\"started\"")), "{log}");
}

#[test]
fn node_name_comes_from_the_command_line_for_a_daemonset() {
    let dir = tempfile::tempdir().expect("temp dir");
    let kube = "[node]\nroot = \"kubepods\"\npods = \"systemd\"\n[kubernetes]\n";
    let check = |config: &str, name: &str| {
        let path = dir.path().join("agent.toml");
        std::fs::write(&path, config).expect("write");
        overbook(&[
            "agent",
            "--config",
            path.to_str().expect("utf-8"),
            "--node-name",
            name,
            "--check-config",
        ])
    };
    // One ConfigMap for every node: no node_name in it, the flag gives it.
    let o = check(kube, "node-b");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout(&o).contains("node_name = \"node-b\""), "{}", stdout(&o));
    // Over the config's own.
    let o = check(&format!("{kube}node_name = \"node-a\"\n"), "node-c");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout(&o).contains("node_name = \"node-c\""), "{}", stdout(&o));
    assert!(!stdout(&o).contains("node-a"), "{}", stdout(&o));
    // Other faults of the config are still its own.
    let o = check(&format!("{kube}kubeconfig = \"relative\"\n"), "node-b");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("kubernetes.kubeconfig"));
    // No [kubernetes]: an error naming the flag.
    for args in [
        vec!["agent", "--node-name", "node-b", "--check-config"],
        vec!["agent", "--config", "/nonexistent", "--node-name", ""],
    ] {
        let o = overbook(&args);
        assert!(!o.status.success(), "{args:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("--node-name"), "{args:?}");
    }
    let o = check("[node]\nroot = \"nodes/a\"\n", "node-b");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--node-name node-b") && err.contains("[kubernetes]"), "{err}");
}
