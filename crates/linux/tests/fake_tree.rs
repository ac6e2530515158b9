//! The v1 and v2 implementations on fake cgroup trees: plain files in a
//! temporary directory laid out like cgroupfs, filled from the fixtures.
//!
//! Why: these run anywhere without root and pin down which file each
//! operation reads or writes and what it does with a missing file or a
//! vanished cgroup. Behaviour only a kernel has (a freeze settling, a kill)
//! is tested on the real kernel in `v1_host.rs`.

use std::fs;
use std::path::Path;
use std::time::Duration;

use overbook_linux::parse::FreezerState;
use overbook_linux::{
    CgroupError, CgroupVersion, ContainerCgroups, ContainerControl, ContainerPath, KillMethod,
    Limit, Outcome, Protection, SwapPolicy, V1Cgroups, V2Cgroups,
};

fn put(dir: &Path, file: &str, text: &str) {
    fs::create_dir_all(dir).expect("mkdir");
    fs::write(dir.join(file), text).expect("write fixture");
}

fn read(dir: &Path, file: &str) -> String {
    fs::read_to_string(dir.join(file)).expect("read back")
}

fn path(p: &str) -> ContainerPath {
    ContainerPath::new(p).expect("valid path")
}

/// A v2 container directory with every file the implementation touches.
fn v2_container(dir: &Path) {
    put(dir, "memory.current", include_str!("fixtures/v2/memory.current"));
    put(dir, "memory.stat", include_str!("fixtures/v2/memory.stat"));
    put(dir, "memory.swap.current", include_str!("fixtures/v2/memory.swap.current"));
    put(dir, "memory.pressure", include_str!("fixtures/v2/memory.pressure"));
    put(dir, "cgroup.procs", "");
    put(dir, "cgroup.freeze", "0\n");
    put(dir, "cgroup.events", "populated 0\nfrozen 0\n");
    put(dir, "cgroup.kill", "");
    for knob in ["memory.min", "memory.low", "memory.high", "memory.max", "memory.swap.max"] {
        put(dir, knob, "");
    }
}

#[test]
fn v2_discovers_and_reads_counters() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    put(root, "cgroup.subtree_control", "memory\n");
    v2_container(&root.join("best-effort/job-1"));
    v2_container(&root.join("production"));
    let cg = V2Cgroups::new(root.to_path_buf());
    assert_eq!(cg.version(), CgroupVersion::V2);

    let top = cg.discover(&ContainerPath::root()).expect("lists").done().expect("root exists");
    assert_eq!(top, vec![path("best-effort"), path("production")]);
    let be = cg.discover(&path("best-effort")).expect("lists").done().expect("exists");
    assert_eq!(be, vec![path("best-effort/job-1")]);

    let c = cg.counters(&path("production")).expect("reads").done().expect("exists");
    assert_eq!(c.usage, 66715648);
    assert_eq!(c.major_faults, 1342);
    assert_eq!((c.refault_anon, c.refault_file), (Some(2048), Some(4711)));
    assert_eq!(c.swap, Some(0));
    assert!(c.pressure.is_some_and(|p| p.full.is_some()));

    // No swap accounting, PSI not built: those are `None`, not errors.
    fs::remove_file(root.join("production/memory.swap.current")).expect("rm");
    fs::remove_file(root.join("production/memory.pressure")).expect("rm");
    let c = cg.counters(&path("production")).expect("reads").done().expect("exists");
    assert_eq!((c.swap, c.pressure), (None, None));

    assert_eq!(cg.counters(&path("gone")).expect("no error"), Outcome::Vanished);
    assert_eq!(cg.discover(&path("gone")).expect("no error"), Outcome::Vanished);
    assert_eq!(cg.members(&path("gone")).expect("no error"), Outcome::Vanished);
}

#[test]
fn v2_reports_the_file_and_line_of_odd_kernel_text() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    v2_container(&dir);
    put(&dir, "memory.stat", "anon 1\nfile x\n");
    let cg = V2Cgroups::new(tmp.path().to_path_buf());
    let err = cg.counters(&path("c")).expect_err("bad memory.stat");
    let text = err.to_string();
    assert!(text.contains("c/memory.stat: memory.stat: line 2: `file`"), "{text}");
    assert!(matches!(err, CgroupError::Parse { .. }));
}

#[test]
fn v2_protect_writes_each_knob_or_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("critical");
    v2_container(&dir);
    let cg = V2Cgroups::new(tmp.path().to_path_buf());
    let p = Protection {
        min: Some(Limit::Bytes(1 << 30)),
        low: Some(Limit::Bytes(2 << 30)),
        high: Some(Limit::Unlimited),
        max: None,
        swap: Some(SwapPolicy::Never),
    };
    assert_eq!(cg.protect(&path("critical"), &p).expect("writes"), Outcome::Done(()));
    assert_eq!(read(&dir, "memory.min"), "1073741824");
    assert_eq!(read(&dir, "memory.low"), "2147483648");
    assert_eq!(read(&dir, "memory.high"), "max");
    assert_eq!(read(&dir, "memory.max"), "");
    assert_eq!(read(&dir, "memory.swap.max"), "0");

    let swappiness = Protection { swap: Some(SwapPolicy::Swappiness(0)), ..Protection::default() };
    assert!(matches!(
        cg.protect(&path("critical"), &swappiness),
        Err(CgroupError::Unsupported { .. })
    ));

    // Without swap accounting there is no memory.swap.max: nothing is written.
    fs::remove_file(dir.join("memory.swap.max")).expect("rm");
    let p = Protection { min: Some(Limit::Bytes(7)), ..p };
    assert!(matches!(cg.protect(&path("critical"), &p), Err(CgroupError::NoSuchFile { .. })));
    assert_eq!(read(&dir, "memory.min"), "1073741824");
    assert_eq!(cg.protect(&path("gone"), &p).expect("no error"), Outcome::Vanished);
}

#[test]
fn v2_freeze_waits_for_the_kernel_to_say_frozen() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("be");
    v2_container(&dir);
    let cg = V2Cgroups::new(tmp.path().to_path_buf());
    let be = path("be");

    // The "kernel" never reports frozen: the wait times out, the request stays.
    let err = cg.freeze(&be, Duration::from_millis(20)).expect_err("never settles");
    assert!(matches!(err, CgroupError::Timeout { what: "freezing", .. }), "{err}");
    assert_eq!(read(&dir, "cgroup.freeze"), "1");
    assert_eq!(cg.freezer_state(&be).expect("reads"), Outcome::Done(FreezerState::Freezing));

    put(&dir, "cgroup.events", "populated 1\nfrozen 1\n");
    assert_eq!(cg.freeze(&be, Duration::from_secs(1)).expect("settles"), Outcome::Done(()));
    assert_eq!(cg.freezer_state(&be).expect("reads"), Outcome::Done(FreezerState::Frozen));

    put(&dir, "cgroup.events", "populated 1\nfrozen 0\n");
    assert_eq!(cg.thaw(&be, Duration::from_secs(1)).expect("settles"), Outcome::Done(()));
    assert_eq!(read(&dir, "cgroup.freeze"), "0");
    assert_eq!(cg.freezer_state(&be).expect("reads"), Outcome::Done(FreezerState::Thawed));

    fs::remove_file(dir.join("cgroup.freeze")).expect("rm");
    assert!(matches!(cg.freeze(&be, Duration::ZERO), Err(CgroupError::Unsupported { .. })));
    assert_eq!(cg.freeze(&path("gone"), Duration::ZERO).expect("no error"), Outcome::Vanished);
}

#[test]
fn v2_kill_uses_cgroup_kill_when_present() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("be");
    v2_container(&dir);
    let cg = V2Cgroups::new(tmp.path().to_path_buf());
    let report = cg.kill(&path("be")).expect("kills").done().expect("exists");
    assert_eq!(report.method, KillMethod::CgroupKill);
    assert_eq!(report.signalled, 0);
    assert_eq!(read(&dir, "cgroup.kill"), "1");
    assert_eq!(cg.kill(&path("gone")).expect("no error"), Outcome::Vanished);
}

#[test]
fn v2_kill_leaves_a_frozen_container_thawed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("be");
    v2_container(&dir);
    put(&dir, "cgroup.freeze", "1\n");
    let cg = V2Cgroups::new(tmp.path().to_path_buf());
    let report = cg.kill(&path("be")).expect("kills").done().expect("exists");
    assert_eq!(report.method, KillMethod::CgroupKill);
    assert_eq!(read(&dir, "cgroup.freeze"), "0");
    // Without a freezer file there is nothing to thaw, and no error.
    fs::remove_file(dir.join("cgroup.freeze")).expect("rm");
    assert!(cg.kill(&path("be")).expect("kills").done().is_some());
}

#[test]
fn v1_reads_hierarchical_counters_and_protects() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (memory, freezer) = (tmp.path().join("memory"), tmp.path().join("freezer"));
    let dir = memory.join("be");
    put(&dir, "memory.usage_in_bytes", include_str!("fixtures/v1/leaf/memory.usage_in_bytes"));
    put(&dir, "memory.stat", include_str!("fixtures/v1/leaf/memory.stat"));
    for knob in ["memory.soft_limit_in_bytes", "memory.limit_in_bytes", "memory.swappiness"] {
        put(&dir, knob, "");
    }
    put(&freezer.join("be"), "freezer.state", "THAWED\n");
    let cg = V1Cgroups::new(memory.clone(), Some(freezer.clone()));
    assert_eq!(cg.version(), CgroupVersion::V1);
    assert_eq!(
        cg.discover(&ContainerPath::root()).expect("lists"),
        Outcome::Done(vec![path("be")])
    );

    let c = cg.counters(&path("be")).expect("reads").done().expect("exists");
    assert_eq!(c.usage, 34451456);
    assert_eq!(c.major_faults, 1, "total_pgmajfault");
    assert_eq!(c.refault_file, Some(14));
    assert_eq!(c.swap, Some(0));
    assert_eq!(c.pressure, None);

    let p = Protection {
        low: Some(Limit::Bytes(1 << 20)),
        max: Some(Limit::Unlimited),
        swap: Some(SwapPolicy::Never),
        ..Protection::default()
    };
    assert_eq!(cg.protect(&path("be"), &p).expect("writes"), Outcome::Done(()));
    assert_eq!(read(&dir, "memory.soft_limit_in_bytes"), "1048576");
    assert_eq!(read(&dir, "memory.limit_in_bytes"), "-1");
    assert_eq!(read(&dir, "memory.swappiness"), "0");
    for v2_only in [
        Protection { min: Some(Limit::Bytes(1)), ..Protection::default() },
        Protection { high: Some(Limit::Bytes(1)), ..Protection::default() },
        Protection { swap: Some(SwapPolicy::Limit(Limit::Bytes(0))), ..Protection::default() },
    ] {
        assert!(matches!(cg.protect(&path("be"), &v2_only), Err(CgroupError::Unsupported { .. })));
    }

    assert_eq!(cg.freezer_state(&path("be")).expect("reads"), Outcome::Done(FreezerState::Thawed));
    // A plain file "settles" as soon as it is written.
    assert_eq!(cg.freeze(&path("be"), Duration::from_secs(1)).expect("freezes"), Outcome::Done(()));
    assert_eq!(read(&freezer.join("be"), "freezer.state"), "FROZEN");

    let no_freezer = V1Cgroups::new(memory, None);
    assert!(matches!(
        no_freezer.freeze(&path("be"), Duration::ZERO),
        Err(CgroupError::Unsupported { .. })
    ));
}

/// A container's CPU time on v1 is read in its cpuacct mirror, and only
/// the members not in the mirror yet are moved there (a plain file keeps
/// what was last written to it, so it shows which writes were made).
#[test]
fn v1_cpu_time_moves_only_members_not_yet_in_the_cpuacct_mirror() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (memory, cpuacct) = (tmp.path().join("memory"), tmp.path().join("cpuacct"));
    put(&memory.join("be"), "cgroup.procs", "101\n102\n");
    // A member in a child cgroup of the container's own.
    put(&memory.join("be").join("worker"), "cgroup.procs", "103\n");
    let mirror = cpuacct.join("be");
    put(&mirror, "cpuacct.usage", "2500000000\n");
    put(&mirror, "cgroup.procs", "101\n102\n103\n");
    let cg = V1Cgroups::new(memory.clone(), None).with_cpuacct(cpuacct);
    let used = cg.cpu_used(&path("be")).expect("reads");
    assert_eq!(used, Outcome::Done(Duration::from_millis(2500)));
    assert_eq!(read(&mirror, "cgroup.procs"), "101\n102\n103\n", "all there: nothing written");

    // 104 joined the container from outside (`cgroup.procs` written by
    // someone else): it alone is moved.
    put(&memory.join("be"), "cgroup.procs", "101\n102\n104\n");
    let used = cg.cpu_used(&path("be")).expect("reads");
    assert_eq!(used, Outcome::Done(Duration::from_millis(2500)));
    assert_eq!(read(&mirror, "cgroup.procs"), "104", "only the newcomer written");
}
