//! What the real-node tests share: a small node cgroup with containers and
//! workers, torn down on drop, and the agent driven tick by tick.
#![allow(dead_code)]

use overbook_agent::spawn::command_in;
use overbook_agent::{Agent, AgentConfig, EventLog};
use overbook_core::Time;
use overbook_linux::{
    host_cgroups, ContainerCgroups, ContainerControl, ContainerPath, HostSupport, Limit,
    NodeCgroups, Outcome,
};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

pub const MIB: u64 = 1 << 20;
pub const WORKLOAD: &str = env!("CARGO_BIN_EXE_overbook-workload");
/// The agent's sampling period in these tests.
pub const PERIOD: Duration = Duration::from_millis(100);

pub fn host() -> Option<Box<dyn NodeCgroups>> {
    let probe = HostSupport::probe();
    let why = if !rustix::process::geteuid().is_root() {
        "not running as root".to_string()
    } else {
        match host_cgroups(&probe) {
            Ok(cg) => return Some(cg),
            Err(e) => e.to_string(),
        }
    };
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "\n!!!!! real_node: CANNOT RUN ON THIS MACHINE: {why}");
    if std::env::var("OVERBOOK_ALLOW_SKIP").as_deref() == Ok("1") {
        let _ = writeln!(err, "!!!!! SKIPPED (OVERBOOK_ALLOW_SKIP=1): nothing was tested\n");
        return None;
    }
    panic!("real_node cannot run: {why} (set OVERBOOK_ALLOW_SKIP=1 to skip)");
}

/// A process in a container, with its output lines arriving on a channel.
pub struct Worker {
    pub child: Child,
    pub lines: Receiver<String>,
}

impl Worker {
    /// Waits for the worker's `ready` line.
    pub fn ready(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l == "ready" => return,
                Ok(_) => {}
                Err(e) => panic!("worker not ready within {within:?}: {e}"),
            }
        }
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The last `rate` the worker reported, draining what it said.
    pub fn last_rate(&self) -> Option<f64> {
        self.lines.try_iter().filter_map(|l| l.strip_prefix("rate ")?.parse().ok()).last()
    }
}

/// One real squeeze at a time: thrashing is timing, and two nodes
/// thrashing at once on two cores would measure each other.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A node cgroup with containers and workers, torn down on drop.
pub struct Node {
    pub _serial: std::sync::MutexGuard<'static, ()>,
    pub cg: Box<dyn NodeCgroups>,
    pub root: ContainerPath,
    pub containers: Vec<ContainerPath>,
    pub workers: Vec<Worker>,
    pub dir: tempfile::TempDir,
}

impl Node {
    pub fn new(test: &str, limit: u64) -> Option<Node> {
        let serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let cg = host()?;
        // At the top of the hierarchy: on v1 the memory and freezer
        // hierarchies place this process differently, and a node mirrored
        // into both must not leave empty ancestors behind.
        let name = format!("overbook-test-{test}-{}", std::process::id());
        let root = ContainerPath::new(&name).expect("valid path");
        assert_eq!(
            cg.create(&root, Some(Limit::Bytes(limit))).expect("create node"),
            Outcome::Done(())
        );
        // On the host, a disk (production's file thrashes as page cache);
        // in the VM (`scripts/vm`, read-only root) the guest's tmpfs, whose
        // pages thrash through its zram swap instead.
        let scratch = if std::env::var_os("OVERBOOK_VM").is_some() {
            std::path::PathBuf::from("/var/tmp")
        } else {
            std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        };
        let dir = tempfile::tempdir_in(scratch).expect("scratch directory");
        Some(Node { _serial: serial, cg, root, containers: Vec::new(), workers: Vec::new(), dir })
    }

    pub fn container(&mut self, name: &str) -> ContainerPath {
        let path = self.root.child(name).expect("valid name");
        assert_eq!(self.cg.create(&path, None).expect("create"), Outcome::Done(()));
        self.containers.push(path.clone());
        path
    }

    /// Starts the workload binary with `args` in a new container `name`.
    pub fn start(&mut self, name: &str, args: &[&str]) -> usize {
        let path = self.container(name);
        let mut child = command_in(&*self.cg, &path, WORKLOAD, args)
            .expect("the container's cgroup files")
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn workload");
        let out = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        self.workers.push(Worker { child, lines });
        self.workers.len() - 1
    }

    pub fn production_reader(&mut self, size_mib: u64) -> usize {
        let file = self.dir.path().join("working-set");
        let file = file.to_str().expect("utf-8 path").to_string();
        let w = self.start("prod-reader", &["file", &file, &format!("{size_mib}M")]);
        self.workers[w].ready(Duration::from_secs(60));
        w
    }

    pub fn hog(&mut self, name: &str, size_mib: u64, hold: Option<f64>) -> usize {
        let size = format!("{size_mib}M");
        let hold = hold.map(|h| h.to_string());
        let mut args = vec!["anon", size.as_str()];
        args.extend(hold.as_deref());
        let w = self.start(name, &args);
        self.workers[w].ready(Duration::from_secs(60));
        w
    }

    pub fn config(&self, extra: &str) -> AgentConfig {
        let text = format!(
            "[node]\nroot = \"{}\"\n[agent]\nstate_db = \"\"\nsample_period = 0.1\n\
             task_log_dir = \"{}\"\n\
             [[classes]]\npattern = \"be-*\"\nclass = \"best-effort\"\n\
             [[classes]]\npattern = \"crit-*\"\nclass = \"critical\"\n{extra}",
            self.root.as_str(),
            self.dir.path().join("tasks").display()
        );
        AgentConfig::parse(&text, "test").expect("valid config")
    }

    /// An agent with cgroups of its own, as the daemon has.
    pub fn agent(&self, extra: &str) -> Agent<Box<dyn NodeCgroups>> {
        let cg = host_cgroups(&HostSupport::probe()).expect("host cgroups");
        Agent::new(&self.config(extra), cg, EventLog::in_memory(1000)).expect("agent starts")
    }

    pub fn refaults(&self, name: &str) -> u64 {
        let path = self.root.child(name).expect("valid");
        let c = self.cg.counters(&path).expect("read").done().expect("there");
        // File pages on the host; tmpfs pages (swapped, so anon) in the VM.
        c.refault_file.unwrap_or(0) + c.refault_anon.unwrap_or(0) + c.major_faults
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // What the test made, and what an agent made in the node for it.
        if let Ok(Outcome::Done(all)) = self.cg.discover(&self.root) {
            for c in all {
                if !self.containers.contains(&c) {
                    self.containers.push(c);
                }
            }
        }
        for c in &self.containers {
            let _ = self.cg.kill(c);
        }
        for w in &mut self.workers {
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
        // Killed members of an agent's tasks exit on their own time (their
        // parent, the test process, never waits for them): a cgroup is
        // removable once its last member has left.
        let deadline = Instant::now() + Duration::from_secs(10);
        for c in self.containers.iter().rev().chain(std::iter::once(&self.root)) {
            while self.cg.remove(c).is_err() && Instant::now() < deadline {
                let _ = self.cg.kill(c);
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Ticks the agent every period for `span`, with `now` as agent time,
/// stopping early when `stop` says so. Returns the agent time reached.
pub fn run_for<C: ContainerCgroups + ContainerControl>(
    agent: &mut Agent<C>,
    start: Instant,
    span: Duration,
    mut stop: impl FnMut(&Agent<C>) -> bool,
) -> Duration {
    let until = Instant::now() + span;
    loop {
        let now = Time::from_duration(start.elapsed());
        agent.tick(now).expect("tick");
        if stop(agent) || Instant::now() >= until {
            return start.elapsed();
        }
        // The agent's own sampling period: the pace it runs at, not a wait
        // for something to happen.
        std::thread::sleep(PERIOD);
    }
}

pub fn kinds<C>(agent: &Agent<C>, kind: &str) -> Vec<serde_json::Value> {
    agent
        .events()
        .recent()
        .filter(|e| e.kind.as_str() == kind)
        .map(|e| serde_json::json!({ "container": e.container, "detail": e.detail }))
        .collect()
}

pub const KILL: &str = "[policy.detector]\nkind = \"constraint-thrashing\"\ntolerance = 2.0\n\
                    [policy.preemptor]\nkind = \"kill\"\n";
