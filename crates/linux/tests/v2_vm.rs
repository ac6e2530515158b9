//! Real-kernel tests of [`V2Cgroups`] on cgroup v2, run inside the VM that
//! `scripts/vm` boots (Debian's kernel under emulation, zram swap, cgroup v2
//! at `/sys/fs/cgroup`; see docs/testbed.md). Run them with
//!
//! ```text
//! scripts/vm test
//! ```
//!
//! which builds this binary on the host and runs it in the guest with
//! `--include-ignored --test-threads=1`.
//!
//! How skipping works, honestly: the host has no cgroup v2 memory
//! controller, so every test here is `#[ignore]`d and a plain `cargo test`
//! lists them as *ignored* (never as passed). Run anyway (`--ignored`)
//! outside the guest, a test says why loudly and FAILS, unless
//! `OVERBOOK_ALLOW_SKIP=1`. Inside the guest (`OVERBOOK_VM=1`, set by
//! `scripts/vm`) a missing v2 memory controller always fails.
//!
//! Containers are made under the guest's root cgroup, real processes (small
//! Python workers, from the host's filesystem the guest shares) run in them,
//! and every state change is observed from the kernel's own files, polled
//! with a deadline. Everything made is removed by a guard's `Drop`, on
//! failure too.

mod common;

use common::{cpu_ticks, dead, poll, Worker};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use overbook_linux::parse::{CgroupEvents, FreezerState, MemoryStat};
use overbook_linux::{
    CgroupError, CgroupVersion, ContainerCgroups, ContainerControl, ContainerPath, CpuMax,
    CpuShare, FreezerSupport, HostSupport, KillMethod, Limit, MemoryCounters, Outcome, Pid,
    Protection, SwapPolicy, V2Cgroups,
};

const MIB: u64 = 1 << 20;
/// The guest is emulated and several times slower than the host: generous.
const SETTLE: Duration = Duration::from_secs(20);
const MOUNT: &str = "/sys/fs/cgroup";
const PYTHON: &str = "/usr/bin/python3";

/// The guest's cgroup v2 hierarchy, or `None` (after saying why) when the
/// test may be skipped; panics when it may not.
fn guest() -> Option<V2Cgroups> {
    let in_vm = std::env::var("OVERBOOK_VM").as_deref() == Ok("1");
    let controllers = std::fs::read_to_string(Path::new(MOUNT).join("cgroup.controllers"));
    let why = if !rustix::process::geteuid().is_root() {
        "not running as root".to_owned()
    } else {
        match &controllers {
            Err(e) => format!("no cgroup v2 at {MOUNT}: {e}"),
            Ok(c) if !c.split_whitespace().any(|c| c == "memory") => {
                format!("the cgroup v2 root has no memory controller (controllers: {})", c.trim())
            }
            Ok(_) if !in_vm => "OVERBOOK_VM=1 is not set: not in scripts/vm's guest".to_owned(),
            Ok(_) => return Some(V2Cgroups::new(PathBuf::from(MOUNT))),
        }
    };
    if in_vm {
        panic!("v2_vm: in the VM, yet cgroup v2 is unusable: {why}");
    }
    common::cannot_run("v2_vm", &why, "these tests run in the cgroup v2 VM: `scripts/vm test`")
}

/// Containers and processes a test made, torn down on drop.
type Scratch = common::Scratch<V2Cgroups>;

fn scratch(cg: V2Cgroups) -> Scratch {
    common::Scratch::new(cg, "overbook-vm", SETTLE)
}

impl Scratch {
    /// A file of a container, trimmed.
    fn read(&self, container: &ContainerPath, file: &str) -> String {
        let path = self.cg.dir(container).join(file);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .trim()
            .to_owned()
    }

    fn events(&self, container: &ContainerPath) -> CgroupEvents {
        CgroupEvents::parse(&self.read(container, CgroupEvents::FILE)).expect("cgroup.events")
    }

    fn stat(&self, container: &ContainerPath) -> MemoryStat {
        MemoryStat::parse(&self.read(container, MemoryStat::FILE)).expect("memory.stat")
    }

    fn counters(&self, container: &ContainerPath) -> MemoryCounters {
        self.cg.counters(container).expect("reads counters").done().expect("container exists")
    }
}

/// What a worker does once it holds its memory.
#[derive(Clone, Copy)]
enum Work {
    /// Sleeps.
    Hold,
    /// Spins, so its CPU time measures its progress.
    Spin,
    /// Writes random pages of its memory, for ever: thrashes when squeezed.
    Touch,
}

/// A worker process tree: waits for "go" on stdin (so it can be moved into
/// its cgroup first), forks `kids` copies of itself, then each writes every
/// byte of `mib` MiB, says "ready PID", and does its work.
const WORKER: &str = r#"
import os, random, sys, time
work, size, kids = sys.argv[1], int(sys.argv[2]) << 20, int(sys.argv[3])
sys.stdin.readline()
for _ in range(kids):
    if os.fork() == 0:
        break
mem = bytearray(b"\x01") * size
print("ready", os.getpid(), flush=True)
if work == "spin":
    while True:
        pass
elif work == "touch":
    pages, pick = size >> 12, random.randrange
    while True:
        mem[pick(pages) << 12] ^= 1
else:
    while True:
        time.sleep(1000)
"#;

/// What the python workers of these tests do.
trait PythonWorker {
    fn python(scratch: &mut Scratch, work: Work, mib: u64, kids: usize) -> Worker;
    fn start(&mut self, kids: usize) -> Vec<Pid>;
}

impl PythonWorker for Worker {
    fn python(scratch: &mut Scratch, work: Work, mib: u64, kids: usize) -> Self {
        assert!(Path::new(PYTHON).exists(), "{PYTHON} is needed for the workers");
        let work = match work {
            Work::Hold => "hold",
            Work::Spin => "spin",
            Work::Touch => "touch",
        };
        let mut cmd = Command::new(PYTHON);
        cmd.args(["-c", WORKER, work, &mib.to_string(), &kids.to_string()]);
        Worker::spawn(cmd, &mut scratch.children)
    }

    /// Lets it go and waits until each of its `1 + kids` processes holds its
    /// memory; returns their pids.
    fn start(&mut self, kids: usize) -> Vec<Pid> {
        writeln!(self.stdin, "go").expect("start worker");
        (0..=kids)
            .map(|_| {
                let line = self.lines.recv_timeout(Duration::from_secs(120)).expect("worker ready");
                let pid = line.strip_prefix("ready ").expect("a ready line");
                Pid::new(pid.parse().expect("a pid")).expect("valid pid")
            })
            .collect()
    }
}

#[test]
#[ignore = "needs the cgroup v2 VM: scripts/vm test"]
fn vm_probe_reports_cgroup_v2_psi_kill_and_freezer() {
    if guest().is_none() {
        return;
    }
    // Before any test cgroup exists, the guest's processes are all in the
    // root, which has no cgroup.kill nor cgroup.freeze to look at.
    let only_root = std::fs::read_dir(MOUNT)
        .expect("reads the root")
        .filter_map(Result::ok)
        .all(|e| !e.file_type().is_ok_and(|t| t.is_dir()));
    let h = HostSupport::probe();
    eprintln!("only the root cgroup: {only_root}; {h:#?}");
    if only_root {
        assert!(h.notes.iter().any(|n| n.contains("kernel version")), "{:?}", h.notes);
    }
    let memory = h.memory.as_ref().expect("memory controller found");
    assert_eq!(memory.version, CgroupVersion::V2);
    assert_eq!(memory.mount, PathBuf::from(MOUNT));
    assert_eq!(h.freezer, FreezerSupport::V2);
    assert!(h.cgroup_kill, "Linux 5.14+ has cgroup.kill");
    assert!(h.psi_per_cgroup, "per-cgroup PSI");
    assert!(h.psi_system);
    assert!(h.pidfd);
    assert!(h.process_mrelease, "Linux 5.15+ has process_mrelease");
    assert!(h.swap_total.is_some_and(|s| s >= 256 * MIB), "zram swap: {:?}", h.swap_total);

    // With a non-root cgroup to look in, the answer comes from its files.
    let cg = guest().expect("in the guest");
    let mut scratch = scratch(cg);
    let _sample = scratch.top("probe", None);
    let again = HostSupport::probe();
    eprintln!("with a child cgroup: {again:#?}");
    assert_eq!(again.freezer, FreezerSupport::V2);
    assert!(again.cgroup_kill && again.psi_per_cgroup);
}

#[test]
#[ignore = "needs the cgroup v2 VM: scripts/vm test"]
fn vm_create_with_limit_discover_and_remove() {
    let Some(cg) = guest() else { return };
    let mut scratch = scratch(cg.clone());
    assert_eq!(cg.version(), CgroupVersion::V2);
    let node = scratch.top("create", Some(Limit::Bytes(256 * MIB)));
    assert_eq!(scratch.read(&node, "memory.max"), (256 * MIB).to_string());
    assert_eq!(cg.limit(&node).expect("reads"), Outcome::Done(Limit::Bytes(256 * MIB)));
    let root = ContainerPath::root();
    assert!(scratch
        .read(&root, "cgroup.subtree_control")
        .split_whitespace()
        .any(|c| c == "memory"));

    let (a, b) = (node.child("a").expect("valid"), node.child("b").expect("valid"));
    scratch.create(&b, None);
    scratch.create(&a, Some(Limit::Bytes(64 * MIB)));
    // Creating children delegated the memory controller to them.
    assert_eq!(scratch.read(&node, "cgroup.subtree_control"), "memory");
    assert_eq!(cg.limit(&a).expect("reads"), Outcome::Done(Limit::Bytes(64 * MIB)));
    assert_eq!(cg.limit(&b).expect("reads"), Outcome::Done(Limit::Unlimited));
    assert_eq!(scratch.read(&b, "memory.max"), "max");
    assert_eq!(cg.discover(&node).expect("lists"), Outcome::Done(vec![a.clone(), b.clone()]));
    let tops = cg.discover(&root).expect("lists").done().expect("root exists");
    assert!(tops.contains(&node), "{tops:?}");
    assert_eq!(cg.join_files(&a), vec![cg.dir(&a).join("cgroup.procs")]);

    // Refusals and vanished parents.
    assert!(matches!(cg.create(&a, None), Err(CgroupError::Exists { .. })));
    let orphan = node.child("no-parent").and_then(|p| p.child("child")).expect("valid");
    assert_eq!(cg.create(&orphan, None).expect("no error"), Outcome::Vanished);
    let unused = Pid::new(Pid::MAX).expect("valid");
    assert!(matches!(cg.add_process(&a, unused), Err(CgroupError::NoSuchProcess { .. })));

    // Removed: gone is gone, and says so without an error.
    for c in [&a, &b] {
        assert_eq!(cg.remove(c).expect("removes"), Outcome::Done(()));
        assert!(!cg.dir(c).exists());
        assert_eq!(cg.remove(c).expect("no error"), Outcome::Vanished);
        assert_eq!(cg.counters(c).expect("no error"), Outcome::Vanished);
        assert_eq!(cg.members(c).expect("no error"), Outcome::Vanished);
        assert_eq!(cg.limit(c).expect("no error"), Outcome::Vanished);
        assert_eq!(cg.freeze(c, SETTLE).expect("no error"), Outcome::Vanished);
        assert_eq!(cg.kill(c).expect("no error"), Outcome::Vanished);
        assert_eq!(cg.discover(c).expect("no error"), Outcome::Vanished);
        assert_eq!(cg.protect(c, &Protection::default()).expect("no error"), Outcome::Vanished);
    }
    assert_eq!(cg.discover(&node).expect("lists"), Outcome::Done(vec![]));
}

#[test]
#[ignore = "needs the cgroup v2 VM: scripts/vm test"]
fn vm_counters_and_members_of_a_real_container() {
    let Some(cg) = guest() else { return };
    let mut scratch = scratch(cg.clone());
    let node = scratch.top("counters", Some(Limit::Bytes(512 * MIB)));
    let job = node.child("job").expect("valid");
    scratch.create(&job, None);

    // add_process: the worker (not yet allocating) moves in.
    let mut worker = Worker::python(&mut scratch, Work::Hold, 48, 0);
    assert_eq!(cg.add_process(&job, worker.pid).expect("moves"), Outcome::Done(()));
    assert_eq!(scratch.members(&job), vec![worker.pid]);
    let own = std::fs::read_to_string(format!("/proc/{}/cgroup", worker.pid)).expect("reads");
    assert_eq!(own.trim(), format!("0::/{}", job.as_str()));
    assert!(scratch.events(&job).populated && scratch.events(&node).populated);
    let before = scratch.counters(&job);
    worker.start(0);

    let c = scratch.counters(&job);
    eprintln!("job counters: {c:#?}");
    assert!(c.usage >= 48 * MIB && c.usage <= 512 * MIB, "usage {}", c.usage);
    let stat = scratch.stat(&job);
    assert!(stat.anon >= 48 * MIB, "anon {}", stat.anon);
    // Read a moment apart while the worker runs: the later read may count
    // a fault more (seen: 760 then 761), never fewer.
    assert!(c.major_faults <= stat.pgmajfault, "{} then {}", c.major_faults, stat.pgmajfault);
    assert!(stat.pgmajfault - c.major_faults <= 64, "the same counter");
    assert!(c.major_faults >= before.major_faults);
    assert!(c.refault_anon.is_some() && c.refault_file.is_some(), "Linux 5.9+ counters");
    assert_eq!(c.refault_anon, stat.workingset_refault_anon);
    assert_eq!(c.refault_file, stat.workingset_refault_file);
    assert!(c.swap.is_some(), "swap accounting (memory.swap.current)");
    let pressure = c.pressure.expect("memory.pressure parsed");
    assert!(pressure.full.is_some(), "a non-root cgroup has a full line");
    assert!(pressure.some.avg10 >= 0.0 && pressure.some.avg10 <= 100.0);

    // Hierarchical: the node sees the job's memory.
    let n = scratch.counters(&node);
    assert!(n.usage >= c.usage && n.major_faults >= c.major_faults, "node {n:?}");
    // v2's cgroup.procs lists only a cgroup's own processes; members reach
    // the whole subtree, so the node counts the job's worker as its own.
    assert_eq!(scratch.members(&node), vec![worker.pid], "members cover the subtree");
}

#[test]
#[ignore = "needs the cgroup v2 VM: scripts/vm test"]
fn vm_join_files_put_a_command_inside_before_it_execs() {
    let Some(cg) = guest() else { return };
    let mut scratch = scratch(cg.clone());
    let job = scratch.top("join", Some(Limit::Bytes(64 * MIB)));
    let files = cg.join_files(&job);
    assert_eq!(files.len(), 1);
    // What the exec'd command itself sees: it was born inside.
    let out = Command::new("sh")
        .args(["-c", "echo $$ > \"$1\" && exec cat /proc/self/cgroup", "sh"])
        .arg(&files[0])
        .output()
        .expect("runs sh");
    assert!(out.status.success(), "{out:?}");
    let own = String::from_utf8_lossy(&out.stdout);
    assert_eq!(own.trim(), format!("0::/{}", job.as_str()));
    assert!(poll(SETTLE, || scratch.members(&job).is_empty()), "cat has exited");
}

#[test]
#[ignore = "needs the cgroup v2 VM: scripts/vm test"]
fn vm_freeze_and_thaw_a_busy_process() {
    let Some(cg) = guest() else { return };
    let mut scratch = scratch(cg.clone());
    let job = scratch.top("freeze", Some(Limit::Bytes(256 * MIB)));
    let mut worker = Worker::python(&mut scratch, Work::Spin, 8, 0);
    assert_eq!(cg.add_process(&job, worker.pid).expect("moves"), Outcome::Done(()));
    worker.start(0);

    // Running: CPU time advances. Time how long 10 ticks take.
    assert_eq!(cg.freezer_state(&job).expect("reads"), Outcome::Done(FreezerState::Thawed));
    assert_eq!(scratch.events(&job).frozen, Some(false));
    let t0 = cpu_ticks(worker.pid);
    let start = Instant::now();
    assert!(poll(SETTLE, || cpu_ticks(worker.pid) >= t0 + 10), "runs");
    let ten_ticks = start.elapsed();

    // Frozen: cgroup.freeze is 1, cgroup.events says frozen 1, and over three
    // times that span not a single tick.
    let asked = Instant::now();
    assert_eq!(cg.freeze(&job, SETTLE).expect("freezes"), Outcome::Done(()));
    eprintln!("froze in {:?}", asked.elapsed());
    assert_eq!(scratch.read(&job, "cgroup.freeze"), "1");
    assert_eq!(scratch.events(&job).frozen, Some(true));
    assert_eq!(cg.freezer_state(&job).expect("reads"), Outcome::Done(FreezerState::Frozen));
    let frozen_at = cpu_ticks(worker.pid);
    let window = (ten_ticks * 3).max(Duration::from_millis(500));
    let moved = poll(window, || cpu_ticks(worker.pid) != frozen_at);
    assert!(!moved, "a frozen process made progress within {window:?}");
    // Freezing again is a no-op that succeeds.
    assert_eq!(cg.freeze(&job, SETTLE).expect("freezes"), Outcome::Done(()));

    // Thawed: frozen 0, and it runs again.
    assert_eq!(cg.thaw(&job, SETTLE).expect("thaws"), Outcome::Done(()));
    assert_eq!(scratch.read(&job, "cgroup.freeze"), "0");
    assert_eq!(scratch.events(&job).frozen, Some(false));
    assert_eq!(cg.freezer_state(&job).expect("reads"), Outcome::Done(FreezerState::Thawed));
    assert!(poll(SETTLE, || cpu_ticks(worker.pid) > frozen_at), "runs again");
}

#[test]
#[ignore = "needs the cgroup v2 VM: scripts/vm test"]
fn vm_kill_every_member_with_cgroup_kill_and_release_memory() {
    let Some(cg) = guest() else { return };
    let mut scratch = scratch(cg.clone());
    let node = scratch.top("kill", Some(Limit::Bytes(512 * MIB)));
    let job = node.child("job").expect("valid");
    scratch.create(&job, None);

    // Four processes of 24 MiB each; the container is then frozen, which
    // kill must also handle.
    let kids = 3;
    let mut worker = Worker::python(&mut scratch, Work::Hold, 24, kids);
    assert_eq!(cg.add_process(&job, worker.pid).expect("moves"), Outcome::Done(()));
    let pids = worker.start(kids);
    let mut members = scratch.members(&job);
    members.sort_unstable();
    let mut expected = pids.clone();
    expected.sort_unstable();
    assert_eq!(members, expected);
    let before = scratch.stat(&job);
    let usage_before = scratch.counters(&job).usage;
    eprintln!("before kill: usage {} MiB, anon {} MiB", usage_before / MIB, before.anon / MIB);
    assert!(before.anon >= 4 * 24 * MIB, "anon {}", before.anon);
    assert_eq!(cg.freeze(&job, SETTLE).expect("freezes"), Outcome::Done(()));

    let asked = Instant::now();
    let report = cg.kill(&job).expect("kills").done().expect("exists");
    eprintln!("kill: {report:?} in {:?}", asked.elapsed());
    assert_eq!(report.method, KillMethod::CgroupKill);
    assert_eq!(report.signalled, kids + 1);
    assert_eq!(report.reaped + report.not_reaped, kids + 1);

    // Every member is gone, the cgroup is empty and its memory released.
    assert!(poll(SETTLE, || pids.iter().all(|&p| dead(p))), "a member survived");
    assert!(poll(SETTLE, || scratch.members(&job).is_empty()), "members left after kill");
    assert!(poll(SETTLE, || !scratch.events(&job).populated), "still populated");
    assert!(!scratch.events(&node).populated);
    let status = scratch.children[0].wait().expect("reaps the worker");
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let mut anon_after = u64::MAX;
    assert!(
        poll(SETTLE, || {
            anon_after = scratch.stat(&job).anon;
            anon_after < 2 * MIB
        }),
        "anon memory left after kill: {anon_after}"
    );
    let usage_after = scratch.counters(&job).usage;
    eprintln!("after kill: usage {} MiB, anon {} KiB", usage_after / MIB, anon_after >> 10);
    assert!(usage_after + 4 * 24 * MIB <= usage_before, "{usage_after} vs {usage_before}");
    // Killed while frozen, left thawed: whatever joins next runs.
    assert_eq!(scratch.read(&job, "cgroup.freeze"), "0");
    assert_eq!(cg.freezer_state(&job).expect("reads"), Outcome::Done(FreezerState::Thawed));

    // Nothing left to kill is not an error; an empty container can go.
    let again = cg.kill(&job).expect("kills").done().expect("exists");
    assert_eq!(again.signalled, 0);
    assert_eq!(cg.release_empty(&job).expect("releases"), Outcome::Done(()));
    assert_eq!(cg.remove(&job).expect("removes"), Outcome::Done(()));
}

#[test]
#[ignore = "needs the cgroup v2 VM: scripts/vm test"]
fn vm_a_container_s_nested_cgroups_are_members_killed_and_removed_with_it() {
    // A pod's containers sit in child cgroups of the pod: the pod's
    // members, kill and removal must reach them.
    let Some(cg) = guest() else { return };
    let mut scratch = scratch(cg.clone());
    let node = scratch.top("nested", Some(Limit::Bytes(512 * MIB)));
    let pod = node.child("pod").expect("valid");
    scratch.create(&pod, None);
    let inner = pod.child("inner").expect("valid");
    scratch.create(&inner, None);
    let deeper = inner.child("deeper").expect("valid");
    scratch.create(&deeper, None);

    let kids = 1;
    let mut worker = Worker::python(&mut scratch, Work::Hold, 16, kids);
    assert_eq!(cg.add_process(&deeper, worker.pid).expect("moves"), Outcome::Done(()));
    let mut pids = worker.start(kids);
    pids.sort_unstable();
    let mut members = scratch.members(&pod);
    members.sort_unstable();
    assert_eq!(members, pids, "the pod's members include its nested cgroups'");
    assert!(scratch.read(&pod, "cgroup.procs").is_empty(), "the pod itself holds none");

    let report = cg.kill(&pod).expect("kills").done().expect("exists");
    assert_eq!(report.signalled, kids + 1, "{report:?}");
    assert!(poll(SETTLE, || pids.iter().all(|&p| dead(p))), "a nested member survived");
    assert!(poll(SETTLE, || scratch.members(&pod).is_empty()), "members left after kill");
    let status = scratch.children[0].wait().expect("reaps the worker");
    assert_eq!(status.signal(), Some(libc::SIGKILL));

    // Removing the pod removes the cgroups below it, deepest first.
    assert!(poll(SETTLE, || !scratch.events(&pod).populated), "still populated");
    assert_eq!(cg.remove(&pod).expect("removes"), Outcome::Done(()));
    assert!(!cg.dir(&deeper).exists() && !cg.dir(&pod).exists(), "the subtree is gone");
}

#[test]
#[ignore = "needs the cgroup v2 VM: scripts/vm test"]
fn vm_protect_writes_every_knob() {
    let Some(cg) = guest() else { return };
    let mut scratch = scratch(cg.clone());
    let node = scratch.top("protect", Some(Limit::Bytes(512 * MIB)));
    let job = node.child("job").expect("valid");
    scratch.create(&job, None);

    let p = Protection {
        min: Some(Limit::Bytes(16 * MIB)),
        low: Some(Limit::Bytes(32 * MIB)),
        high: Some(Limit::Bytes(96 * MIB)),
        max: Some(Limit::Bytes(128 * MIB)),
        swap: Some(SwapPolicy::Never),
    };
    assert_eq!(cg.protect(&job, &p).expect("protects"), Outcome::Done(()));
    assert_eq!(scratch.read(&job, "memory.min"), (16 * MIB).to_string());
    assert_eq!(scratch.read(&job, "memory.low"), (32 * MIB).to_string());
    assert_eq!(scratch.read(&job, "memory.high"), (96 * MIB).to_string());
    assert_eq!(scratch.read(&job, "memory.max"), (128 * MIB).to_string());
    assert_eq!(scratch.read(&job, "memory.swap.max"), "0");
    assert_eq!(cg.limit(&job).expect("reads"), Outcome::Done(Limit::Bytes(128 * MIB)));

    // Only what is given changes; limits lift to "max".
    let lift = Protection {
        high: Some(Limit::Unlimited),
        max: Some(Limit::Unlimited),
        swap: Some(SwapPolicy::Limit(Limit::Bytes(64 * MIB))),
        ..Protection::default()
    };
    assert_eq!(cg.protect(&job, &lift).expect("lifts"), Outcome::Done(()));
    assert_eq!(scratch.read(&job, "memory.high"), "max");
    assert_eq!(scratch.read(&job, "memory.max"), "max");
    assert_eq!(scratch.read(&job, "memory.swap.max"), (64 * MIB).to_string());
    assert_eq!(scratch.read(&job, "memory.min"), (16 * MIB).to_string());
    assert_eq!(scratch.read(&job, "memory.low"), (32 * MIB).to_string());
    assert_eq!(cg.limit(&job).expect("reads"), Outcome::Done(Limit::Unlimited));

    // v1's knob is refused before anything is written.
    let v1_only = Protection {
        min: Some(Limit::Bytes(0)),
        swap: Some(SwapPolicy::Swappiness(10)),
        ..Protection::default()
    };
    assert!(matches!(cg.protect(&job, &v1_only), Err(CgroupError::Unsupported { .. })));
    assert_eq!(scratch.read(&job, "memory.min"), (16 * MIB).to_string());
    // The root has none of these files: refused, nothing written.
    let root = ContainerPath::root();
    let at_root = Protection { max: Some(Limit::Bytes(1 << 40)), ..Protection::default() };
    assert!(matches!(cg.protect(&root, &at_root), Err(CgroupError::NoSuchFile { .. })));
}

#[test]
#[ignore = "needs the cgroup v2 VM: scripts/vm test"]
fn vm_a_squeezed_container_thrashes_for_real() {
    let Some(cg) = guest() else { return };
    let mut scratch = scratch(cg.clone());
    // 96 MiB touched at random in 64 MiB: the rest lives in zram swap and
    // keeps coming back.
    let job = scratch.top("thrash", Some(Limit::Bytes(64 * MIB)));
    let mut worker = Worker::python(&mut scratch, Work::Touch, 96, 0);
    assert_eq!(cg.add_process(&job, worker.pid).expect("moves"), Outcome::Done(()));
    worker.start(0);

    let c0 = scratch.counters(&job);
    let (anon0, stall0) = (c0.refault_anon.expect("5.9+"), c0.pressure.expect("PSI").some.total);
    let start = Instant::now();
    let mut c = c0;
    let thrashing = poll(Duration::from_secs(90), || {
        c = scratch.counters(&job);
        let pressure = c.pressure.expect("PSI");
        c.major_faults >= c0.major_faults + 2000
            && c.refault_anon.expect("5.9+") >= anon0 + 2000
            && pressure.some.total >= stall0 + Duration::from_millis(200)
            && pressure.some.avg10 > 0.0
    });
    let elapsed = start.elapsed();
    eprintln!("after {elapsed:?}: {c0:#?}\n→ {c:#?}");
    assert!(thrashing, "no thrashing seen in {elapsed:?}: {c:#?}");
    let faults = (c.major_faults - c0.major_faults) as f64 / elapsed.as_secs_f64();
    eprintln!("{faults:.0} major faults/s");
    assert!(c.usage <= 64 * MIB, "memory.max holds: {}", c.usage);
    assert!(c.swap.is_some_and(|s| s >= 16 * MIB), "swapped out: {:?}", c.swap);
    let events = scratch.read(&job, "memory.events");
    eprintln!("memory.events: {events}");
    let event =
        |name: &str| events.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok());
    assert!(event("max ").is_some_and(|n| n > 0), "hit memory.max: {events}");
    assert_eq!(event("oom_kill "), Some(0), "thrashing, not OOM-killed: {events}");
}

#[test]
#[ignore = "needs the cgroup v2 VM: scripts/vm test"]
fn vm_a_container_s_cpu_share_is_idle_or_a_weight() {
    let Some(cg) = guest() else { return };
    let mut scratch = scratch(cg.clone());
    let node = scratch.top("cpu-share", Some(Limit::Bytes(256 * MIB)));
    let be = node.child("be-cpu").expect("valid");
    scratch.create(&be, None);
    let mut worker = Worker::python(&mut scratch, Work::Spin, 8, 0);
    assert_eq!(cg.add_process(&be, worker.pid).expect("moves"), Outcome::Done(()));
    worker.start(0);
    let dir = cg.dir(&be);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("read").trim().to_string();
    let idle = cg.set_cpu_share(&be, CpuShare::Idle).expect("set").done().expect("there");
    assert_eq!(idle, "cpu.idle = 1", "Linux 5.15+ has cpu.idle");
    assert_eq!(read("cpu.idle"), "1");
    let weight = cg.set_cpu_share(&be, CpuShare::Weight(50)).expect("set").done().expect("there");
    assert_eq!(weight, "cpu.weight = 50");
    assert_eq!((read("cpu.idle"), read("cpu.weight")), ("0".into(), "50".into()));
}

/// A best-effort container's CPU ceiling (`cpu.max`) holds a spinning
/// member back: the kernel counts periods it throttled.
#[test]
#[ignore = "needs the cgroup v2 VM: scripts/vm test"]
fn vm_a_container_s_cpu_ceiling_throttles_its_members() {
    let Some(cg) = guest() else { return };
    let mut scratch = scratch(cg.clone());
    let node = scratch.top("cpu-max", Some(Limit::Bytes(256 * MIB)));
    let be = node.child("be-spin").expect("valid");
    scratch.create(&be, None);
    let mut worker = Worker::python(&mut scratch, Work::Spin, 8, 0);
    assert_eq!(cg.add_process(&be, worker.pid).expect("moves"), Outcome::Done(()));
    let dir = cg.dir(&be);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("read").trim().to_string();
    let set = cg.set_cpu_max(&be, CpuMax::cores(0.1)).expect("set").done().expect("there");
    assert_eq!(set, "cpu.max = 10000 100000");
    assert_eq!(read("cpu.max"), "10000 100000");
    worker.start(0);
    let (throttled, stat) = common::throttled_within(&dir, SETTLE);
    assert!(throttled, "a spinner at 0.1 CPU is throttled: {stat}");
    let unset = cg.set_cpu_max(&be, CpuMax::Unlimited).expect("set").done().expect("there");
    assert_eq!(unset, "cpu.max = max 100000");
    assert_eq!(read("cpu.max"), "max 100000");
}

/// A container's CPU time is its `cpu.stat`'s `usage_usec`, there whether
/// or not the cpu controller is delegated to it; it grows while a member
/// spins.
#[test]
#[ignore = "needs the cgroup v2 VM: scripts/vm test"]
fn vm_a_container_s_cpu_time_is_counted_in_its_cpu_stat() {
    let Some(cg) = guest() else { return };
    let mut scratch = scratch(cg.clone());
    let node = scratch.top("cpu-used", Some(Limit::Bytes(256 * MIB)));
    let be = node.child("be-count").expect("valid");
    scratch.create(&be, None);
    let mut worker = Worker::python(&mut scratch, Work::Spin, 8, 0);
    assert_eq!(cg.add_process(&be, worker.pid).expect("moves"), Outcome::Done(()));
    let before = cg.cpu_used(&be).expect("reads").done().expect("there");
    worker.start(0);
    let by = Duration::from_millis(100);
    let (grew, now) = common::cpu_used_grows(&cg, &be, before, by, SETTLE);
    assert!(grew, "a spinning member's CPU time is counted: {before:?} then {now:?}");
    let gone = node.child("never-made").expect("valid");
    assert_eq!(cg.cpu_used(&gone).expect("no error"), Outcome::Vanished);
}
