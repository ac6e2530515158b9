//! What this crate's real-kernel tests share (`v1_host`, `v2_vm`,
//! `criu_vm`): the loud refusal to pass when they cannot run, a guard for
//! the containers and processes a test makes, and polling with a deadline.
#![allow(dead_code)]

use std::io::Write;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use overbook_linux::{ContainerCgroups, ContainerControl, ContainerPath, Limit, Outcome, Pid};

/// Says loudly, straight to stderr (the harness hides captured output of
/// passing tests, and a skip must never pass unseen), that `suite` cannot
/// run here and why; `None` if `OVERBOOK_ALLOW_SKIP=1`, else panics.
pub fn cannot_run<T>(suite: &str, why: &str, how: &str) -> Option<T> {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "\n!!!!! {suite}: CANNOT RUN HERE: {why}");
    let _ = writeln!(err, "!!!!! {how}");
    if std::env::var("OVERBOOK_ALLOW_SKIP").as_deref() == Ok("1") {
        let _ = writeln!(err, "!!!!! SKIPPED (OVERBOOK_ALLOW_SKIP=1): nothing was tested\n");
        return None;
    }
    panic!("{suite} cannot run: {why} ({how}; or set OVERBOOK_ALLOW_SKIP=1)");
}

/// Containers and processes a test made, torn down in reverse on drop:
/// thawed, killed, emptied and removed; its children killed and reaped.
pub struct Scratch<C: ContainerCgroups + ContainerControl> {
    pub cg: C,
    pub containers: Vec<ContainerPath>,
    pub children: Vec<Child>,
    /// How long a kernel state change may take here.
    pub settle: Duration,
    /// Prefix of the top-level containers' names.
    prefix: &'static str,
}

impl<C: ContainerCgroups + ContainerControl> Scratch<C> {
    pub fn new(cg: C, prefix: &'static str, settle: Duration) -> Self {
        Self { cg, containers: Vec::new(), children: Vec::new(), settle, prefix }
    }

    /// A fresh, uniquely named container at the top of the hierarchy.
    pub fn top(&mut self, test: &str, limit: Option<Limit>) -> ContainerPath {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let name = format!("{}-{test}-{}-{nanos}", self.prefix, std::process::id());
        let path = ContainerPath::root().child(&name).expect("valid name");
        self.create(&path, limit);
        path
    }

    pub fn create(&mut self, path: &ContainerPath, limit: Option<Limit>) {
        assert_eq!(self.cg.create(path, limit).expect("create"), Outcome::Done(()));
        self.containers.push(path.clone());
    }

    /// The processes in a container (and below it).
    pub fn members(&self, container: &ContainerPath) -> Vec<Pid> {
        self.cg.members(container).expect("reads members").done().expect("container exists").pids
    }
}

impl<C: ContainerCgroups + ContainerControl> Drop for Scratch<C> {
    fn drop(&mut self) {
        for c in self.containers.iter().rev() {
            let _ = self.cg.thaw(c, self.settle);
            let _ = self.cg.kill(c);
            let _ = poll(self.settle, || match self.cg.members(c) {
                Ok(Outcome::Done(m)) => m.is_empty(),
                _ => true,
            });
            let _ = poll(self.settle, || self.cg.remove(c).is_ok());
        }
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits until the cgroup whose `cpu.stat` lives in `dir` has been
/// throttled by its CPU ceiling (`nr_throttled` above 0, the same line in
/// v1 and v2); returns whether it was within `within`, and the file.
pub fn throttled_within(dir: &std::path::Path, within: Duration) -> (bool, String) {
    let read = || std::fs::read_to_string(dir.join("cpu.stat")).unwrap_or_default();
    let throttled = || {
        (read().lines())
            .find_map(|l| l.strip_prefix("nr_throttled "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
    };
    (poll(within, throttled), read())
}

/// Waits until `container`'s CPU time (`cpu_used`) has grown by `by`
/// past `before`; returns whether it did within `within`, and the last
/// reading.
pub fn cpu_used_grows<C: ContainerControl>(
    cg: &C,
    container: &ContainerPath,
    before: Duration,
    by: Duration,
    within: Duration,
) -> (bool, Duration) {
    let mut now = before;
    let grew = poll(within, || {
        now = cg.cpu_used(container).expect("reads").done().expect("there");
        now >= before + by
    });
    (grew, now)
}

/// Polls `done` until it holds or `within` passes; returns whether it held.
pub fn poll(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// User + system CPU ticks of a live process.
pub fn cpu_ticks(pid: Pid) -> u64 {
    let stat = overbook_linux::process::stat(pid).expect("process alive");
    stat.utime + stat.stime
}

/// Whether a pid is gone or a zombie (dead, not yet reaped).
pub fn dead(pid: Pid) -> bool {
    overbook_linux::process::stat(pid).map_or(true, |s| s.state == 'Z')
}

/// A test process whose stdin the test writes and whose stdout lines it
/// reads as they come (a reader thread of its own).
pub struct Worker {
    pub pid: Pid,
    pub stdin: ChildStdin,
    pub lines: mpsc::Receiver<String>,
}

impl Worker {
    /// Starts `cmd` with piped stdin and stdout; the child is kept in
    /// `children` (killed and reaped by the scratch's guard).
    pub fn spawn(mut cmd: Command, children: &mut Vec<Child>) -> Worker {
        let mut child =
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn a worker");
        let pid = Pid::new(child.id()).expect("valid pid");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        children.push(child);
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Worker { pid, stdin, lines }
    }
}
