//! What the real-node tests share: a small node cgroup with containers and
//! workers, torn down on drop, and the agent driven tick by tick.
#![allow(dead_code)]

pub mod control_plane;
pub mod kube;

use overbook_agent::{Agent, AgentConfig, EventLog};
use overbook_core::Time;
use overbook_lab::bench::{BenchNode, WorkloadProgram};
use overbook_linux::{
    host_cgroups, ContainerCgroups, ContainerControl, ContainerPath, HostSupport, NodeCgroups,
};
use std::io::Write;
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

/// A workload process in a container (the bench's own).
pub use overbook_lab::bench::Worker;

/// One real squeeze at a time: thrashing is timing, and two nodes
/// thrashing at once on two cores would measure each other.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A node cgroup with containers and workers, torn down on drop.
pub struct Node {
    /// The node cgroup and what is made in it (the bench's own node).
    pub bench: BenchNode,
    pub workers: Vec<Worker>,
    pub dir: tempfile::TempDir,
    /// Last: released once everything else is torn down.
    pub _serial: std::sync::MutexGuard<'static, ()>,
}

impl std::ops::Deref for Node {
    type Target = BenchNode;
    fn deref(&self) -> &BenchNode {
        &self.bench
    }
}

impl std::ops::DerefMut for Node {
    fn deref_mut(&mut self) -> &mut BenchNode {
        &mut self.bench
    }
}

impl Node {
    pub fn new(test: &str, limit: u64) -> Option<Node> {
        let serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        host()?;
        // At the top of the hierarchy: on v1 the memory and freezer
        // hierarchies place this process differently, and a node mirrored
        // into both must not leave empty ancestors behind.
        let name = format!("overbook-test-{test}-{}", std::process::id());
        let bench = BenchNode::new(&name, Some(limit)).expect("the node cgroup");
        // On the host, a disk (production's file thrashes as page cache);
        // in the VM (`scripts/vm`, read-only root) the guest's tmpfs, whose
        // pages thrash through its zram swap instead.
        let scratch = if std::env::var_os("OVERBOOK_VM").is_some() {
            std::path::PathBuf::from("/var/tmp")
        } else {
            std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        };
        let dir = tempfile::tempdir_in(scratch).expect("scratch directory");
        Some(Node { bench, workers: Vec::new(), dir, _serial: serial })
    }

    pub fn container(&mut self, name: &str) -> ContainerPath {
        self.bench.container(name).expect("a container")
    }

    /// Starts the workload binary with `args` in a new container `name`.
    pub fn start(&mut self, name: &str, args: &[&str]) -> usize {
        let program = WorkloadProgram { program: WORKLOAD.into(), prefix: Vec::new() };
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let worker = self.bench.worker(&program, name, &args).expect("spawn workload");
        self.workers.push(worker);
        self.workers.len() - 1
    }

    pub fn production_reader(&mut self, size_mib: u64) -> usize {
        let file = self.dir.path().join("working-set");
        let file = file.to_str().expect("utf-8 path").to_string();
        let w = self.start("prod-reader", &["file", &file, &format!("{size_mib}M")]);
        self.workers[w].ready(Duration::from_secs(60)).expect("the reader is ready");
        w
    }

    pub fn hog(&mut self, name: &str, size_mib: u64, hold: Option<f64>) -> usize {
        let size = format!("{size_mib}M");
        let hold = hold.map(|h| h.to_string());
        let mut args = vec!["anon", size.as_str()];
        args.extend(hold.as_deref());
        let w = self.start(name, &args);
        self.workers[w].ready(Duration::from_secs(60)).expect("the hog is ready");
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

    /// The node's own refaults and major faults: every container's,
    /// those of containers gone since included (the counters are the
    /// hierarchy's).
    pub fn node_refaults(&self) -> u64 {
        self.faults_back(&self.root)
    }

    pub fn refaults(&self, name: &str) -> u64 {
        self.faults_back(&self.root.child(name).expect("valid"))
    }

    /// Pages faulted back into `path`: file pages on the host; tmpfs pages
    /// (swapped, so anon) and anonymous ones in the VM.
    fn faults_back(&self, path: &ContainerPath) -> u64 {
        let c = self.cg.counters(path).expect("read").done().expect("there");
        c.refault_file.unwrap_or(0) + c.refault_anon.unwrap_or(0) + c.major_faults
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // The node's containers are killed (and removed) by the bench's own
        // teardown; the workers are this test's children, reaped here.
        for w in &mut self.workers {
            let _ = w.child.kill();
            let _ = w.child.wait();
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

/// Starts the workload binary holding `size` of anonymous memory in an
/// existing `container` (made by hand, as a kubelet or a pod's runtime
/// would), and waits until it says `ready`.
pub fn hold_in(node: &Node, container: &ContainerPath, size: &str) -> std::process::Child {
    kube::run_in(node, container, &["anon", size])
}

/// Waits for a workload started with its stdout piped to say `ready`. Its
/// output is read to its end by a thread: a reader dropped after `ready`
/// would end it with a broken pipe at its next line.
pub fn wait_ready(child: &mut std::process::Child) {
    let out = child.stdout.take().expect("stdout piped");
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(out)).map_while(Result::ok) {
            // Drained to its end even once nobody listens.
            let _ = tx.send(line);
        }
    });
    let said = lines.recv_timeout(Duration::from_secs(60)).expect("the workload says ready");
    assert_eq!(said.trim(), "ready");
}
