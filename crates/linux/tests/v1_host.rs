//! Real-kernel tests on this host's cgroup v1 (memory and freezer
//! hierarchies): containers are made under this process's own memory cgroup,
//! real processes run in them, and every state change is observed from the
//! kernel's own files. Needs root and a v1 memory controller; without them
//! each test says why loudly and FAILS, unless `OVERBOOK_ALLOW_SKIP=1`.
//!
//! Everything made is removed by a guard's `Drop`, on failure too.

mod common;

use common::{cpu_ticks, dead, poll, Worker};
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use overbook_linux::parse::FreezerState;
use overbook_linux::{
    CgroupError, CgroupVersion, ContainerCgroups, ContainerControl, ContainerPath, CpuMax,
    CpuShare, FreezerSupport, HostSupport, KillMethod, Limit, Outcome, Pid, Protection, SwapPolicy,
    V1Cgroups,
};

const MIB: u64 = 1 << 20;
const SETTLE: Duration = Duration::from_secs(5);

/// The host's v1 cgroups, or `None` (after saying why) when the test may be
/// skipped; panics when it may not.
fn host() -> Option<V1Cgroups> {
    let why = if !rustix::process::geteuid().is_root() {
        Some("not running as root".to_owned())
    } else {
        match V1Cgroups::for_current_process() {
            Err(e) => Some(format!("no cgroup v1 memory controller: {e}")),
            Ok(cg) if cg.freezer_dir(&ContainerPath::root()).is_none() => {
                Some("no cgroup v1 freezer hierarchy".to_owned())
            }
            Ok(cg) => return Some(cg),
        }
    };
    let why = why.unwrap_or_default();
    common::cannot_run(
        "v1_host",
        &why,
        "these tests need root and cgroup v1 memory + freezer hierarchies",
    )
}

/// Containers and processes a test made, torn down on drop.
type Scratch = common::Scratch<V1Cgroups>;

fn scratch(cg: V1Cgroups) -> Scratch {
    common::Scratch::new(cg, "overbook-test", SETTLE)
}

/// A worker: waits for "go" on stdin (so it can be moved into its cgroup
/// first), then forks a `sleep`, fills a 64 MiB shell string, says "ready",
/// and spins, so its CPU time measures its progress.
fn spawn_worker(scratch: &mut Scratch) -> Worker {
    let script = "read go; sleep 100000 & \
                  x=$(head -c 67108864 /dev/zero | tr '\\000' a); \
                  echo ready; while :; do :; done";
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]);
    Worker::spawn(cmd, &mut scratch.children)
}

#[test]
fn probe_reports_this_hosts_v1_layout() {
    if host().is_none() {
        return;
    }
    let h = HostSupport::probe();
    eprintln!("{h:#?}");
    let memory = h.memory.as_ref().expect("memory controller found");
    assert_eq!(memory.version, CgroupVersion::V1);
    assert_eq!(memory.mount, PathBuf::from("/sys/fs/cgroup/memory"));
    assert!(matches!(h.freezer, FreezerSupport::V1 { .. }));
    assert!(!h.cgroup_kill, "v1 has no cgroup.kill");
    assert!(!h.psi_per_cgroup, "v1 has no per-cgroup PSI");
    assert!(h.psi_system);
    assert!(h.pidfd);
    assert!(h.process_mrelease, "Linux 5.15+ has process_mrelease");
    assert!(h.swap_total.is_some());
}

#[test]
fn a_real_container_is_read_frozen_thawed_killed_and_removed() {
    let Some(cg) = host() else { return };
    let mut scratch = scratch(cg.clone());
    let node = scratch.top("lifecycle", Some(Limit::Bytes(512 * MIB)));
    let job = node.child("job").expect("valid");
    scratch.create(&job, None);
    assert_eq!(cg.discover(&node).expect("lists"), Outcome::Done(vec![job.clone()]));

    // Start the worker inside the container.
    let mut worker = spawn_worker(&mut scratch);
    assert_eq!(cg.add_process(&job, worker.pid).expect("moves"), Outcome::Done(()));
    writeln!(worker.stdin, "go").expect("start worker");
    let ready = worker.lines.recv_timeout(Duration::from_secs(30)).expect("worker ready");
    assert_eq!(ready, "ready");

    // Its members: the shell and its sleep (the pipeline has exited).
    let mut members = Vec::new();
    assert!(
        poll(SETTLE, || {
            members = cg.members(&job).expect("reads").done().expect("exists").pids;
            members.len() == 2
        }),
        "members: {members:?}"
    );
    assert!(members.contains(&worker.pid));
    let sleeper = members.iter().copied().find(|&p| p != worker.pid).expect("sleep pid");

    // Counters: the 64 MiB string is charged here and, hierarchically, to the node.
    let c = cg.counters(&job).expect("reads").done().expect("exists");
    eprintln!("job counters: {c:?}");
    assert!(c.usage >= 64 * MIB && c.usage <= 512 * MIB, "usage {}", c.usage);
    assert!(c.refault_anon.is_some() && c.refault_file.is_some(), "Linux 5.9+ on this host");
    assert!(c.swap.is_some(), "swap accounting is on here");
    let n = cg.counters(&node).expect("reads").done().expect("exists");
    assert!(n.usage >= c.usage && n.major_faults >= c.major_faults);

    // Running: CPU time advances. Time how long 10 ticks take.
    assert_eq!(cg.freezer_state(&job).expect("reads"), Outcome::Done(FreezerState::Thawed));
    let t0 = cpu_ticks(worker.pid);
    let start = Instant::now();
    assert!(poll(Duration::from_secs(10), || cpu_ticks(worker.pid) >= t0 + 10), "runs");
    let ten_ticks = start.elapsed();

    // Frozen: over three times that span, not a single tick.
    let asked = Instant::now();
    assert_eq!(cg.freeze(&job, SETTLE).expect("freezes"), Outcome::Done(()));
    eprintln!("froze in {:?}", asked.elapsed());
    assert_eq!(cg.freezer_state(&job).expect("reads"), Outcome::Done(FreezerState::Frozen));
    let frozen_at = cpu_ticks(worker.pid);
    let window = (ten_ticks * 3).max(Duration::from_millis(300));
    let moved = poll(window, || cpu_ticks(worker.pid) != frozen_at);
    assert!(!moved, "a frozen process made progress within {window:?}");

    // Thawed: it runs again.
    assert_eq!(cg.thaw(&job, SETTLE).expect("thaws"), Outcome::Done(()));
    assert_eq!(cg.freezer_state(&job).expect("reads"), Outcome::Done(FreezerState::Thawed));
    assert!(poll(Duration::from_secs(10), || cpu_ticks(worker.pid) > frozen_at), "runs again");

    // Killed: every member, by pidfd, memory reaped, container left thawed.
    let report = cg.kill(&job).expect("kills").done().expect("exists");
    eprintln!("kill: {report:?}");
    assert_eq!(report.method, KillMethod::Pidfd);
    assert_eq!(report.signalled, 2);
    assert_eq!(report.reaped + report.not_reaped, 2);
    assert!(report.reaped >= 1, "process_mrelease reaped nobody: {report:?}");
    assert!(
        poll(SETTLE, || cg
            .members(&job)
            .ok()
            .and_then(Outcome::done)
            .is_some_and(|m| m.is_empty())),
        "members left after kill"
    );
    assert!(poll(SETTLE, || dead(sleeper)), "sleep {sleeper} survived");
    let status = scratch.children[0].wait().expect("reaps the shell");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert_eq!(cg.freezer_state(&job).expect("reads"), Outcome::Done(FreezerState::Thawed));

    // Removed: gone is gone, and says so without an error.
    assert_eq!(cg.remove(&job).expect("removes"), Outcome::Done(()));
    assert!(!cg.memory_dir(&job).exists());
    assert!(cg.freezer_dir(&job).is_some_and(|d| !d.exists()));
    assert_eq!(cg.remove(&job).expect("no error"), Outcome::Vanished);
    assert_eq!(cg.counters(&job).expect("no error"), Outcome::Vanished);
    assert_eq!(cg.members(&job).expect("no error"), Outcome::Vanished);
    assert_eq!(cg.freeze(&job, SETTLE).expect("no error"), Outcome::Vanished);
    assert_eq!(cg.kill(&job).expect("no error"), Outcome::Vanished);
    assert_eq!(cg.add_process(&job, worker.pid).expect("no error"), Outcome::Vanished);
}

#[test]
fn create_protect_and_refusals_on_the_real_kernel() {
    let Some(cg) = host() else { return };
    let mut scratch = scratch(cg.clone());
    let node = scratch.top("protect", Some(Limit::Bytes(256 * MIB)));
    let dir = cg.memory_dir(&node);
    let read =
        |file: &str| std::fs::read_to_string(dir.join(file)).expect("reads").trim().to_owned();
    assert_eq!(read("memory.limit_in_bytes"), (256 * MIB).to_string());

    let p = Protection {
        low: Some(Limit::Bytes(64 * MIB)),
        max: Some(Limit::Bytes(128 * MIB)),
        swap: Some(SwapPolicy::Never),
        ..Protection::default()
    };
    assert_eq!(cg.protect(&node, &p).expect("protects"), Outcome::Done(()));
    assert_eq!(read("memory.soft_limit_in_bytes"), (64 * MIB).to_string());
    assert_eq!(read("memory.limit_in_bytes"), (128 * MIB).to_string());
    assert_eq!(read("memory.swappiness"), "0");
    let lift = Protection { max: Some(Limit::Unlimited), ..Protection::default() };
    assert_eq!(cg.protect(&node, &lift).expect("lifts"), Outcome::Done(()));
    assert!(read("memory.limit_in_bytes").parse::<u64>().is_ok_and(|v| v > 1 << 60));
    let v2_only = Protection { min: Some(Limit::Bytes(1)), ..Protection::default() };
    assert!(matches!(cg.protect(&node, &v2_only), Err(CgroupError::Unsupported { .. })));

    assert!(matches!(cg.create(&node, None), Err(CgroupError::Exists { .. })));
    let orphan = node.child("no-parent").and_then(|p| p.child("child")).expect("valid");
    assert_eq!(cg.create(&orphan, None).expect("no error"), Outcome::Vanished);
    let unused = Pid::new(Pid::MAX).expect("valid");
    assert!(matches!(cg.add_process(&node, unused), Err(CgroupError::NoSuchProcess { .. })));
    assert_eq!(cg.members(&node).expect("reads").done().map(|m| m.is_empty()), Some(true));
}

/// Issue 13: v1's `cgroup.procs` is not recursive. A container whose only
/// process sits in a child cgroup of its own (as a pod's containers do)
/// counts it as a member, a kill of the container kills it, a freeze
/// stops it, and removing the container removes its child too.
#[test]
fn a_process_in_a_nested_cgroup_is_counted_frozen_killed_and_removed_with_its_container() {
    let Some(cg) = host() else { return };
    let mut scratch = scratch(cg.clone());
    let node = scratch.top("nested", Some(Limit::Bytes(512 * MIB)));
    let pod = node.child("be-nest").expect("valid");
    scratch.create(&pod, None);
    let inner = pod.child("inner").expect("valid");
    scratch.create(&inner, None);
    let mut worker = spawn_worker(&mut scratch);
    assert_eq!(cg.add_process(&inner, worker.pid).expect("moves"), Outcome::Done(()));
    writeln!(worker.stdin, "go").expect("start worker");
    let ready = worker.lines.recv_timeout(Duration::from_secs(30)).expect("worker ready");
    assert_eq!(ready, "ready");
    assert_eq!(cg.discover(&node).expect("lists"), Outcome::Done(vec![pod.clone()]));
    assert!(
        poll(SETTLE, || {
            matches!(cg.members(&pod), Ok(Outcome::Done(m)) if m.pids.contains(&worker.pid))
        }),
        "the nested shell is a member of its container"
    );
    assert_eq!(cg.freeze(&pod, SETTLE).expect("freezes"), Outcome::Done(()));
    let before = cpu_ticks(worker.pid);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cpu_ticks(worker.pid), before, "frozen with its container");
    assert_eq!(cg.thaw(&pod, SETTLE).expect("thaws"), Outcome::Done(()));
    let report = cg.kill(&pod).expect("kills").done().expect("there");
    assert!(report.signalled >= 2, "the shell and its sleep: {report:?}");
    assert!(poll(SETTLE, || dead(worker.pid)), "the nested process died");
    assert!(
        poll(SETTLE, || matches!(cg.members(&pod), Ok(Outcome::Done(m)) if m.is_empty())),
        "nothing left"
    );
    assert!(poll(SETTLE, || cg.remove(&pod).is_ok()), "removed with its child");
    assert_eq!(cg.discover(&node).expect("lists"), Outcome::Done(vec![]));
}

/// Issue 13: a directory whose name is no container name (a control
/// character in it) is skipped, never a failure to list the others.
#[test]
fn a_child_with_a_control_character_in_its_name_is_skipped_not_a_failure() {
    let Some(cg) = host() else { return };
    let mut scratch = scratch(cg.clone());
    let node = scratch.top("oddname", None);
    let good = node.child("be-good").expect("valid");
    scratch.create(&good, None);
    let odd = cg.memory_dir(&node).join("be-\u{7}bell");
    std::fs::create_dir(&odd).expect("make the odd cgroup");
    let listed = cg.discover(&node);
    let _ = std::fs::remove_dir(&odd);
    assert_eq!(listed.expect("lists"), Outcome::Done(vec![good]));
}

#[test]
fn a_container_s_cpu_share_is_set_in_its_cpu_mirror_with_its_processes() {
    let Some(cg) = host() else { return };
    let Some(cpu_top) = cg.cpu_dir(&ContainerPath::root()) else {
        let why = "no cgroup v1 cpu hierarchy";
        common::cannot_run::<()>("v1_host", why, "this test needs the v1 cpu hierarchy");
        return;
    };
    let mut scratch = scratch(cg.clone());
    let node = scratch.top("cpu-share", Some(Limit::Bytes(256 * MIB)));
    let be = node.child("be-cpu").expect("valid");
    scratch.create(&be, None);
    let mirror = cg.cpu_dir(&be).expect("mirrored");
    assert!(mirror.is_dir(), "made with the container: {}", mirror.display());
    let mut worker = spawn_worker(&mut scratch);
    assert_eq!(cg.add_process(&be, worker.pid).expect("moves"), Outcome::Done(()));
    writeln!(worker.stdin, "go").expect("start worker");
    let idle = cg.set_cpu_share(&be, CpuShare::Idle).expect("set").done().expect("there");
    let read = |f: &str| std::fs::read_to_string(mirror.join(f)).expect("read").trim().to_string();
    if mirror.join("cpu.idle").exists() {
        assert_eq!(idle, "cpu.idle = 1");
        assert_eq!(read("cpu.idle"), "1");
    } else {
        assert_eq!(idle, "cpu.shares = 2");
        assert_eq!(read("cpu.shares"), "2");
    }
    let procs: Vec<String> = read("cgroup.procs").lines().map(str::to_string).collect();
    assert!(procs.contains(&worker.pid.to_string()), "{procs:?}");
    let weight = cg.set_cpu_share(&be, CpuShare::Weight(50)).expect("set").done().expect("there");
    assert_eq!(weight, "cpu.shares = 512");
    assert_eq!(read("cpu.shares"), "512");
    if mirror.join("cpu.idle").exists() {
        assert_eq!(read("cpu.idle"), "0", "a weight undoes idle");
    }
    assert!(cpu_top.is_dir());
    let report = cg.kill(&be).expect("kills").done().expect("there");
    assert!(report.signalled >= 1);
    assert!(poll(SETTLE, || dead(worker.pid)), "killed");
    assert!(poll(SETTLE, || cg.remove(&be).is_ok_and(|o| o == Outcome::Done(()))), "removed");
    assert!(!mirror.exists(), "the cpu mirror goes with the container");
}

/// A best-effort container's CPU ceiling (`cpu.cfs_quota_us`) holds a
/// spinning member back: the kernel counts periods it throttled.
#[test]
fn a_container_s_cpu_ceiling_throttles_its_members() {
    let Some(cg) = host() else { return };
    if cg.cpu_dir(&ContainerPath::root()).is_none() {
        let why = "no cgroup v1 cpu hierarchy";
        common::cannot_run::<()>("v1_host", why, "this test needs the v1 cpu hierarchy");
        return;
    }
    let mut scratch = scratch(cg.clone());
    let node = scratch.top("cpu-max", Some(Limit::Bytes(256 * MIB)));
    let be = node.child("be-spin").expect("valid");
    scratch.create(&be, None);
    let mirror = cg.cpu_dir(&be).expect("mirrored");
    let mut worker = spawn_worker(&mut scratch);
    assert_eq!(cg.add_process(&be, worker.pid).expect("moves"), Outcome::Done(()));
    let read = |f: &str| std::fs::read_to_string(mirror.join(f)).expect("read").trim().to_string();
    let set = cg.set_cpu_max(&be, CpuMax::cores(0.1)).expect("set").done().expect("there");
    assert_eq!(set, "cpu.cfs_quota_us = 10000 of cpu.cfs_period_us = 100000");
    assert_eq!(
        (read("cpu.cfs_quota_us"), read("cpu.cfs_period_us")),
        ("10000".into(), "100000".into())
    );
    writeln!(worker.stdin, "go").expect("start worker");
    let (throttled, stat) = common::throttled_within(&mirror, SETTLE);
    assert!(throttled, "a spinner at 0.1 CPU is throttled: {stat}");
    let unset = cg.set_cpu_max(&be, CpuMax::Unlimited).expect("set").done().expect("there");
    assert_eq!(unset, "cpu.cfs_quota_us = -1");
    assert_eq!(read("cpu.cfs_quota_us"), "-1");
    let report = cg.kill(&be).expect("kills").done().expect("there");
    assert!(report.signalled >= 1);
    assert!(poll(SETTLE, || dead(worker.pid)), "killed");
    assert!(poll(SETTLE, || cg.remove(&be).is_ok_and(|o| o == Outcome::Done(()))), "removed");
    let gone = ContainerPath::new("never-made").expect("valid");
    assert_eq!(cg.set_cpu_max(&gone, CpuMax::cores(1.0)).expect("no error"), Outcome::Vanished);
}

/// A container's CPU time is read from its cpuacct cgroup (a mirror of
/// its own where cpuacct is mounted apart from cpu, as on this host), with
/// its members moved there; it grows while a member spins, and the mirror
/// goes with the container.
#[test]
fn a_container_s_cpu_time_is_counted_in_its_cpuacct_mirror() {
    let Some(cg) = host() else { return };
    if cg.cpuacct_dir(&ContainerPath::root()).is_none() {
        let why = "no cgroup v1 cpuacct hierarchy";
        common::cannot_run::<()>("v1_host", why, "this test needs the v1 cpuacct hierarchy");
        return;
    }
    let mut scratch = scratch(cg.clone());
    let node = scratch.top("cpu-used", Some(Limit::Bytes(256 * MIB)));
    let be = node.child("be-count").expect("valid");
    scratch.create(&be, None);
    let mirror = cg.cpuacct_dir(&be).expect("mirrored");
    assert!(mirror.is_dir(), "made with the container: {}", mirror.display());
    let mut worker = spawn_worker(&mut scratch);
    assert_eq!(cg.add_process(&be, worker.pid).expect("moves"), Outcome::Done(()));
    let before = cg.cpu_used(&be).expect("reads").done().expect("there");
    writeln!(worker.stdin, "go").expect("start worker");
    let by = Duration::from_millis(100);
    let (grew, now) = common::cpu_used_grows(&cg, &be, before, by, SETTLE);
    assert!(grew, "a spinning member's CPU time is counted: {before:?} then {now:?}");
    let procs = std::fs::read_to_string(mirror.join("cgroup.procs")).expect("read");
    assert!(procs.lines().any(|l| l == worker.pid.to_string()), "{procs}");
    let report = cg.kill(&be).expect("kills").done().expect("there");
    assert!(report.signalled >= 1);
    assert!(poll(SETTLE, || dead(worker.pid)), "killed");
    assert!(poll(SETTLE, || cg.remove(&be).is_ok_and(|o| o == Outcome::Done(()))), "removed");
    assert!(!mirror.exists(), "the cpuacct mirror goes with the container");
    let gone = ContainerPath::new("never-made").expect("valid");
    assert_eq!(cg.cpu_used(&gone).expect("no error"), Outcome::Vanished);
}
