//! Fault injection: `kill -9` of `overbook agent` while CRIU dumps one of
//! its tasks, then a new agent on the same state database. Nothing may be
//! lost: the task finishes with the answer of an uninterrupted run, no
//! container stays frozen, no image is left, the database ends empty.
//!
//! Needs CRIU, so it runs in the VM (`scripts/vm`, `--include-ignored`);
//! a plain `cargo test` on the host lists it as ignored.

use overbook_agent::store::{StoredState, TaskStore};
use overbook_lab::chain::Chain;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const OVERBOOK: &str = env!("CARGO_BIN_EXE_overbook");
const STEPS: u32 = 60;

/// The agent process, killed (and its node cgroup removed) on drop.
struct Scene {
    dir: tempfile::TempDir,
    root: String,
    agent: Option<Child>,
}

impl Scene {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn start_agent(&mut self) {
        let mut child = Command::new(OVERBOOK)
            .args(["agent", "--config"])
            .arg(self.path("agent.toml"))
            .arg("--socket")
            .arg(self.path("agent.sock"))
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the agent");
        let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        assert!(first.contains("watching"), "agent said {first:?}");
        // Its later words go on draining, so it never blocks on stderr.
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        self.agent = Some(child);
    }

    /// `overbook SUBCOMMAND --socket ... ARGS`.
    fn overbook(&self, subcommand: &str, args: &[&str]) -> std::process::Output {
        Command::new(OVERBOOK)
            .arg(subcommand)
            .arg("--socket")
            .arg(self.path("agent.sock"))
            .args(args)
            .output()
            .expect("run overbook")
    }

    fn events(&self, kind: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.path("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["kind"] == kind)
            .collect()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("tasks/be-k9.log")).unwrap_or_default()
    }

    fn progress(&self) -> Vec<u32> {
        self.log().lines().filter_map(|l| l.strip_prefix("progress ")?.parse().ok()).collect()
    }

    fn cgroup_dir(&self) -> PathBuf {
        PathBuf::from("/sys/fs/cgroup").join(&self.root)
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        if let Some(mut a) = self.agent.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
        let dir = self.cgroup_dir();
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.filter_map(Result::ok).filter(|e| e.path().is_dir()) {
                let _ = std::fs::write(e.path().join("cgroup.kill"), "1");
                let deadline = Instant::now() + Duration::from_secs(10);
                while std::fs::remove_dir(e.path()).is_err() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        let _ = std::fs::remove_dir(&dir);
    }
}

/// Polls `done` every 50 ms until it holds or `within` passes.
fn wait_until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs CRIU: runs in the VM (scripts/vm)"]
fn kill_9_of_the_agent_mid_dump_loses_no_task_and_leaves_nothing_behind() {
    let criu = overbook_linux::criu::Criu::probe();
    assert!(criu.usable(), "CRIU must work where this test runs: {:?}", criu.why_not());
    // Its checks read cgroup v2 files (the VM's hierarchy).
    assert!(Path::new("/sys/fs/cgroup/cgroup.controllers").exists(), "needs cgroup v2");
    let scratch = if std::env::var_os("OVERBOOK_VM").is_some() {
        PathBuf::from("/var/tmp")
    } else {
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
    };
    let mut s = Scene {
        dir: tempfile::tempdir_in(scratch).expect("scratch"),
        root: format!("overbook-k9-{}", std::process::id()),
        agent: None,
    };
    let config = format!(
        "[node]\nroot = \"{}\"\n[agent]\nevent_log = \"{}\"\nstate_db = \"{}\"\n\
         task_log_dir = \"{}\"\n\
         [[classes]]\npattern = \"be-*\"\nclass = \"best-effort\"\n\
         [policy.preemptor]\nkind = \"checkpoint\"\n\
         [checkpoint]\nimages_dir = \"{}\"\npre_dump_interval = 0\ntimeout = 300\n",
        s.root,
        s.path("events.jsonl").display(),
        s.path("state.db").display(),
        s.path("tasks").display(),
        s.path("images").display(),
    );
    std::fs::write(s.path("agent.toml"), config).expect("config");
    s.start_agent();
    let run = s.overbook(
        "run",
        &[
            "--class",
            "best-effort",
            "--name",
            "be-k9",
            "--mem-peak",
            "96M",
            "--",
            OVERBOOK,
            "workload",
            "chain",
            "64M",
            &STEPS.to_string(),
            "--pace",
            "0.1",
        ],
    );
    assert!(run.status.success(), "{run:?}");
    wait_until(Duration::from_secs(120), "five steps", || s.progress().len() >= 5);

    // The operator's checkpoint blocks until the dump is done; the agent
    // is killed while it runs.
    let preempt = Command::new(OVERBOOK)
        .args(["preempt", "be-k9", "--how", "checkpoint", "--socket"])
        .arg(s.path("agent.sock"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("overbook preempt");
    let db = s.path("state.db");
    wait_until(Duration::from_secs(60), "the dump under way", || {
        TaskStore::open(&db).and_then(|t| t.get("be-k9")).ok().flatten()
            == Some(StoredState::Dumping)
    });
    let mut agent = s.agent.take().expect("agent");
    agent.kill().expect("kill -9");
    agent.wait().expect("reaped");
    let mut preempt = preempt;
    let _ = preempt.wait();
    let killed_at = s.progress().len();

    s.start_agent();
    wait_until(Duration::from_secs(300), "the task finished", || {
        s.events("finished")
            .iter()
            .any(|e| e["container"].as_str().is_some_and(|c| c.ends_with("/be-k9")))
    });
    let interrupted = s.events("dump-interrupted");
    assert_eq!(interrupted.len(), 1, "{interrupted:?}");
    let restored = !s.events("resumed").is_empty();
    let restarted = !s.events("restore-failed").is_empty();
    // Killed before CRIU stopped the task (or with CRIU): the dump failed,
    // the task ran on, and the new agent took it over where it was.
    let kept_running =
        interrupted[0]["detail"]["now"] == "running" && !s.events("adopted-task").is_empty();
    eprintln!(
        "kill -9 at step {killed_at}: dump-interrupted -> {}; restored: {restored}, \
         restarted: {restarted}, kept running: {kept_running}",
        interrupted[0]["detail"]["now"]
    );
    let expected =
        Chain { size: 64 << 20, steps: STEPS, dirty: 1.0, pace: Duration::ZERO, gate: None }
            .answer()
            .expect("computes");
    let answer = s.log().lines().find_map(|l| l.strip_prefix("answer ")).map(str::to_string);
    assert_eq!(answer, Some(format!("{expected:#018x}")), "the answer of an uninterrupted run");
    if restored || kept_running {
        assert_eq!(s.progress(), (1..=STEPS).collect::<Vec<_>>(), "every step once");
    }
    assert!(
        restored || restarted || kept_running,
        "it was restored, restarted saying why, or taken over running"
    );

    let store = TaskStore::open(&db).expect("opens");
    assert!(store.tasks().expect("read").good.is_empty(), "{:?}", store.tasks());
    let images: Vec<_> = std::fs::read_dir(s.path("images"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(images.is_empty(), "no image left: {images:?}");
    for e in std::fs::read_dir(s.cgroup_dir()).expect("node cgroup").filter_map(Result::ok) {
        let freeze = std::fs::read_to_string(e.path().join("cgroup.freeze")).unwrap_or_default();
        assert_ne!(freeze.trim(), "1", "{} left frozen", e.path().display());
    }
}
