//! Fault injection (issue 13): seeded cycles of "start `overbook agent`, ask
//! it for something (run a best-effort, production or critical task, kill
//! or freeze a best-effort one; where CRIU works, checkpoint one too), then `kill -9` (or SIGTERM) it a random
//! moment later", on this host's real cgroups, each cycle's agent on the
//! same state database and node as the last. After every cycle, and at the
//! end once a last agent has drained the node:
//!
//! * no production or critical container was ever preempted, frozen or
//!   killed: none is frozen now, the decision logs of every agent show no
//!   preemption of one, and each such task started exactly once;
//! * every admitted task ran to its end exactly once: a task whose `run`
//!   was answered, or that started at all, wrote its `done` line once;
//!   one whose `run` died with the agent before an answer ran at most once;
//! * nothing is lost or left frozen: nothing waits, the database is empty.
//!
//! A task's command is `sh -c` writing `start` and, after a short sleep,
//! `done` into a file of its own: the file counts its runs whatever the
//! agents did or failed to record. The figures (cycles, operations, kill
//! moments) are printed for the README's reliability section.
//!
//! `OVERBOOK_FAULT_CYCLES` (default 40) and `OVERBOOK_FAULT_SEED` (default
//! 1) set the run; a failure prints the seed and cycle to replay.

mod common;

use overbook_agent::store::TaskStore;
use overbook_linux::parse::FreezerState;
use overbook_linux::{
    host_cgroups, ContainerCgroups, ContainerControl, ContainerPath, HostSupport,
};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const OVERBOOK: &str = env!("CARGO_BIN_EXE_overbook");

/// splitmix64: the seeded choices of a run (which operation, which task,
/// when the agent dies), the same on every machine.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    BestEffort,
    Production,
    Critical,
}

impl Kind {
    fn class(self) -> &'static str {
        match self {
            Kind::BestEffort => "best-effort",
            Kind::Production => "production",
            Kind::Critical => "critical",
        }
    }
}

/// One task asked of some agent.
#[derive(Debug)]
struct Task {
    kind: Kind,
    /// Whether its `run` was answered (admitted for sure).
    answered: bool,
}

/// The node, its agent, and what was asked of it.
struct Scene {
    dir: tempfile::TempDir,
    root: String,
    agent: Option<Child>,
    tasks: BTreeMap<String, Task>,
    /// Whether CRIU works here (the VM): then preemptions also checkpoint.
    criu: bool,
}

impl Scene {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write_config(&self) {
        let checkpoint = if self.criu {
            format!(
                "[policy.preemptor]\nkind = \"checkpoint\"\n[checkpoint]\nimages_dir = \"{}\"\n\
                 write_mb_s = 100\nread_mb_s = 100\n",
                self.path("images").display()
            )
        } else {
            String::new()
        };
        // Every task is named `be-*`: only its stored class keeps production
        // and critical ones safe across restarts. No detector acts on this
        // roomy node; preemptions come from the test alone.
        let config = format!(
            "[node]\nroot = \"{root}\"\ncapacity = \"512MiB\"\n\
             [agent]\nstate_db = \"{db}\"\nevent_log = \"{events}\"\ntask_log_dir = \"{tasks}\"\n\
             sample_period = 0.05\n\
             [[classes]]\npattern = \"be-*\"\nclass = \"best-effort\"\n\
             [policy.detector]\nkind = \"static\"\n\
             [policy.launcher]\nrestart_backoff = 0.2\nmax_restarts = 100\nmin_sync_period = 0.1\n\
             {checkpoint}",
            root = self.root,
            db = self.path("state.db").display(),
            events = self.path("events.jsonl").display(),
            tasks = self.path("tasks").display(),
        );
        std::fs::write(self.path("agent.toml"), config).expect("write config");
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
        let mut said = Vec::new();
        for line in lines.by_ref().map_while(Result::ok) {
            let ready = line.contains("watching");
            said.push(line);
            if ready {
                break;
            }
        }
        assert!(said.last().is_some_and(|l| l.contains("watching")), "agent said {said:?}");
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        self.agent = Some(child);
    }

    /// Stops the agent: SIGKILL, or SIGTERM (then it must exit by itself).
    fn stop_agent(&mut self, kill: bool) {
        let Some(mut agent) = self.agent.take() else { return };
        if kill {
            let _ = agent.kill();
        } else {
            let pid = rustix::process::Pid::from_child(&agent);
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let status = agent.wait().expect("the agent exits");
        assert!(kill || status.success(), "SIGTERM: the agent exited {status}");
    }

    /// `overbook SUBCOMMAND --socket S ARGS` started, not waited for.
    fn client(&self, subcommand: &str, args: &[String]) -> Child {
        Command::new(OVERBOOK)
            .arg(subcommand)
            .arg("--socket")
            .arg(self.path("agent.sock"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run overbook")
    }

    fn run_args(&self, name: &str, kind: Kind, sleep_ms: u64) -> Vec<String> {
        let runs = self.path("runs").join(name);
        let script = format!(
            "echo start $$ >> {f}; sleep {s}; echo done $$ >> {f}",
            f = runs.display(),
            s = sleep_ms as f64 / 1000.0
        );
        ["--class", kind.class(), "--name", name, "--mem-peak", "16MiB", "--", "sh", "-c"]
            .iter()
            .map(|s| s.to_string())
            .chain(std::iter::once(script))
            .collect()
    }

    /// (starts, dones) the task's own file shows.
    fn runs(&self, name: &str) -> (usize, usize) {
        let text = std::fs::read_to_string(self.path("runs").join(name)).unwrap_or_default();
        let count = |w: &str| text.lines().filter(|l| l.split(' ').next() == Some(w)).count();
        (count("start"), count("done"))
    }

    fn events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.path("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .collect()
    }

    fn container_name(e: &serde_json::Value) -> Option<&str> {
        e["container"].as_str()?.rsplit('/').next()
    }

    /// The protected tasks' guarantees, checked on the kernel and the logs.
    fn check_protected(&self, when: &str) {
        let cg = host_cgroups(&HostSupport::probe()).expect("host cgroups");
        for (name, task) in self.tasks.iter().filter(|(_, t)| t.kind != Kind::BestEffort) {
            let path = ContainerPath::new(&format!("{}/{name}", self.root)).expect("valid");
            if let Ok(outcome) = cg.freezer_state(&path) {
                let state = outcome.done();
                assert!(
                    state.is_none_or(|s| s == FreezerState::Thawed),
                    "{when}: {:?} task {name} is {state:?}",
                    task.kind
                );
            }
            let (starts, _) = self.runs(name);
            assert!(starts <= 1, "{when}: {:?} task {name} started {starts} times", task.kind);
        }
        for e in self.events() {
            let kind = e["kind"].as_str().unwrap_or("");
            if !matches!(kind, "preempted" | "kill-completed" | "preempt-failed") {
                continue;
            }
            let Some(name) = Self::container_name(&e) else { continue };
            let protected = self.tasks.get(name).is_some_and(|t| t.kind != Kind::BestEffort);
            assert!(!protected, "{when}: a protected task was preempted: {e}");
        }
    }

    /// Prints what the agents recorded of tasks `names`, and what their
    /// own files say: to find where an invariant broke.
    fn explain(&self, names: &[&str]) {
        for e in self.events() {
            match Self::container_name(&e) {
                Some(name) if names.contains(&name) => eprintln!("{e}"),
                None if e["kind"] == "started" => eprintln!("-- an agent started"),
                _ => {}
            }
        }
        // The database's transitions are written before each step is
        // taken (the event log's last lines may die with a SIGKILL).
        let store = TaskStore::open(&self.path("state.db"));
        for name in names {
            let runs = std::fs::read_to_string(self.path("runs").join(name)).unwrap_or_default();
            eprintln!("{name}'s own record:\n{runs}");
            if let Ok(store) = &store {
                eprintln!("{name}'s transitions: {:?}", store.history(name));
            }
        }
    }

    /// Tasks of the kinds `of` that run now (by their own files).
    fn running(&self, of: impl Fn(Kind) -> bool) -> Vec<String> {
        self.tasks
            .iter()
            .filter(|(name, t)| {
                of(t.kind) && {
                    let (starts, dones) = self.runs(name);
                    starts > dones
                }
            })
            .map(|(name, _)| name.clone())
            .collect()
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        self.stop_agent(true);
        let Ok(cg) = host_cgroups(&HostSupport::probe()) else { return };
        let Ok(root) = ContainerPath::new(&self.root) else { return };
        let deadline = Instant::now() + Duration::from_secs(10);
        if let Ok(found) = cg.discover(&root) {
            for c in found.done().unwrap_or_default() {
                while cg.remove(&c).is_err() && Instant::now() < deadline {
                    let _ = cg.thaw(&c, Duration::from_secs(1));
                    let _ = cg.kill(&c);
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        while cg.remove(&root).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Whether `done` holds within `within` (looked at every 50 ms).
fn poll(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

fn wait_until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn kill_9_at_random_moments_never_touches_production_and_runs_every_task_once() {
    if !common::may_run_on_a_real_node("fault injection") {
        return;
    }
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let cycles = env("OVERBOOK_FAULT_CYCLES", 40);
    let seed = env("OVERBOOK_FAULT_SEED", 1);
    // The VM's root is read-only: its scratch is /var/tmp.
    let dir = match std::env::var_os("OVERBOOK_VM") {
        Some(_) => tempfile::tempdir_in("/var/tmp"),
        None => tempfile::tempdir(),
    }
    .expect("temp dir");
    let root = format!("overbook-fault-{}", std::process::id());
    // Checkpoints join in where CRIU works (the VM), unless
    // `OVERBOOK_FAULT_CHECKPOINT=0`.
    let criu = std::env::var("OVERBOOK_FAULT_CHECKPOINT").as_deref() != Ok("0")
        && overbook_linux::criu::Criu::probe().usable();
    let slowness = if std::env::var_os("OVERBOOK_VM").is_some() { 4 } else { 1 };
    let mut scene = Scene { dir, root, agent: None, tasks: BTreeMap::new(), criu };
    std::fs::create_dir_all(scene.path("runs")).expect("runs dir");
    scene.write_config();
    let mut dice = Dice(seed);
    let mut tally: BTreeMap<&str, u32> = BTreeMap::new();
    let (mut sigkills, mut sigterms) = (0, 0);
    for cycle in 0..cycles {
        let when = format!("seed {seed}, cycle {cycle}");
        scene.start_agent();
        let op = dice.below(12);
        let running = scene.running(|k| k == Kind::BestEffort);
        let protected = scene.running(|k| k != Kind::BestEffort);
        let (what, client) = match op {
            5..=7 if !running.is_empty() => {
                let victim =
                    &running[usize::try_from(dice.below(running.len() as u64)).expect("an index")];
                let how = match op {
                    6 if scene.criu => "checkpoint",
                    7 => "freeze",
                    _ => "kill",
                };
                let args = vec![victim.clone(), "--how".into(), how.into()];
                (how, Some(("preempt", scene.client("preempt", &args), cycle)))
            }
            // Asked of a protected task, a preemption must be refused.
            8 if !protected.is_empty() => {
                let victim = &protected
                    [usize::try_from(dice.below(protected.len() as u64)).expect("an index")];
                let how = if dice.below(2) == 0 { "kill" } else { "freeze" };
                let args = vec![victim.clone(), "--how".into(), how.into()];
                ("protected-preempt", Some(("preempt", scene.client("preempt", &args), cycle)))
            }
            9 => ("nothing", None),
            _ => {
                let kind = match op {
                    3 => Kind::Production,
                    4 => Kind::Critical,
                    _ => Kind::BestEffort,
                };
                let name = format!("be-{cycle}");
                // Long enough to outlive the next agent's start, so there is
                // something running to preempt (the VM starts one slowly).
                let sleep = (1000 + dice.below(3000)) * slowness;
                let args = scene.run_args(&name, kind, sleep);
                scene.tasks.insert(name, Task { kind, answered: false });
                (kind.class(), Some(("run", scene.client("run", &args), cycle)))
            }
        };
        *tally.entry(what).or_default() += 1;
        // The moment the agent dies: at once, mid-request, or after it
        // has had time to start, finish or resume something.
        let moment = match dice.below(4) {
            0 => 0,
            1 | 2 => dice.below(400),
            _ => 400 + dice.below(1500),
        };
        // The VM's agent starts and answers as much slower as its tasks
        // run: the same moments of its work, not of the wall clock.
        std::thread::sleep(Duration::from_millis(moment * slowness));
        let kill = dice.below(4) != 0;
        scene.stop_agent(kill);
        if kill {
            sigkills += 1;
        } else {
            sigterms += 1;
        }
        if let Some((sub, mut child, cycle)) = client {
            let status = child.wait().expect("client exits");
            assert!(
                what != "protected-preempt" || !status.success(),
                "{when}: a preemption of a protected task was not refused"
            );
            if sub == "run" && status.success() {
                if let Some(t) = scene.tasks.get_mut(&format!("be-{cycle}")) {
                    t.answered = true;
                }
            }
        }
        scene.check_protected(&when);
    }

    // A last agent drains the node: everything admitted runs to its end.
    scene.start_agent();
    let admitted: Vec<String> = scene
        .tasks
        .iter()
        .filter(|(name, t)| t.answered || scene.runs(name).0 > 0)
        .map(|(name, _)| name.clone())
        .collect();
    // Time enough for the longest task (16 s in the VM) after its last
    // restart's backoff, a few times over.
    let drained = poll(Duration::from_secs(120 * slowness), || {
        admitted.iter().all(|name| scene.runs(name).1 >= 1)
    });
    if !drained {
        let undone: Vec<&str> =
            admitted.iter().filter(|n| scene.runs(n).1 == 0).map(String::as_str).collect();
        scene.explain(&undone);
        panic!("seed {seed}: admitted tasks never done: {undone:?}");
    }
    // Over once the agent has seen every end: the database is empty, and
    // nothing waits or runs.
    let db = scene.path("state.db");
    wait_until(Duration::from_secs(30), "every task's end recorded", || {
        TaskStore::open(&db)
            .and_then(|s| s.tasks())
            .is_ok_and(|t| t.good.is_empty() && t.set_aside.is_empty())
    });
    // The status is the agent's last full sample: on a calm node it may
    // show a container for a moment after its task's end was recorded.
    let status = || -> serde_json::Value {
        let o = Command::new(OVERBOOK)
            .args(["status", "--json", "--socket"])
            .arg(scene.path("agent.sock"))
            .output()
            .expect("status");
        serde_json::from_slice(&o.stdout).expect("status JSON")
    };
    let busy_in = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        let busy = |c: &&serde_json::Value| c["state"] == "running" || c["state"] == "frozen";
        v["containers"].as_array().expect("containers").iter().filter(busy).cloned().collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut v = status();
    while (v["queued"] != serde_json::json!([]) || !busy_in(&v).is_empty())
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(200));
        v = status();
    }
    assert_eq!(v["queued"], serde_json::json!([]), "{v}");
    let busy = busy_in(&v);
    if !busy.is_empty() {
        let names: Vec<&str> = busy.iter().filter_map(|c| c["name"].as_str()).collect();
        scene.explain(&names);
    }
    assert!(busy.is_empty(), "{busy:?}");
    scene.stop_agent(false);
    scene.check_protected("at the end");
    let mut twice = Vec::new();
    for (name, task) in &scene.tasks {
        let (starts, dones) = scene.runs(name);
        if admitted.contains(name) {
            if dones != 1 {
                twice.push(format!("{name} ({:?}): {starts} starts, {dones} ends", task.kind));
            }
        } else {
            assert!(dones <= 1 && starts <= 1, "{name}: unanswered, yet ran {starts} times");
        }
        if task.kind != Kind::BestEffort {
            assert!(starts <= 1, "protected {name} started {starts} times");
        }
    }
    if !twice.is_empty() {
        let names: Vec<&str> = twice.iter().filter_map(|t| t.split(' ').next()).collect();
        scene.explain(&names);
    }
    assert!(twice.is_empty(), "seed {seed}: not exactly once: {twice:?}");
    let restarted = admitted.iter().filter(|name| scene.runs(name).0 > 1).count();
    println!(
        "fault injection: seed {seed}, {cycles} cycles ({sigkills} SIGKILL, {sigterms} SIGTERM), \
         operations {tally:?}; {} tasks admitted ({restarted} started again after a kill), {} \
         runs unanswered and never run: every invariant held",
        admitted.len(),
        scene.tasks.len() - admitted.len()
    );
}
