//! The Kubernetes tests' helpers: the real control plane
//! (`control_plane.rs`), and the kubelet's part they play: each bound pod's
//! cgroup where a kubelet puts it, with a process in it.

// Not every test binary that has `common` uses it.
#[allow(unused_imports)]
pub use super::control_plane::{script, text, ControlPlane};
use super::{wait_ready, Node, WORKLOAD};
use overbook_linux::kubepods::{CgroupDriver, QosClass};
use overbook_linux::{ContainerCgroups, ContainerPath, Outcome};
use std::time::{Duration, Instant};

/// Whether process `pid` runs (a zombie waiting for its reaper does not).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// Polls `check` until it gives a value or `within` is over (then panics
/// saying `what`). For state another process changes (the API server, the
/// scheduler): the polling is the waiting, with a deadline.
pub fn eventually<T>(what: &str, within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + within;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < until, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The kubelet's part for one pod: the pod's cgroup under `kubepods` where
/// its QoS class puts it (QoS group made if missing), and one container
/// `app` in it. Returns the pod's cgroup and the container's.
pub fn pod_cgroups(
    node: &mut Node,
    kubepods: &ContainerPath,
    qos: QosClass,
    uid: &str,
) -> (ContainerPath, ContainerPath) {
    let driver = CgroupDriver::Cgroupfs;
    let made = |node: &mut Node, path: &ContainerPath| match node.cg.create(path, None) {
        Ok(Outcome::Done(())) => node.adopt(path.clone()),
        // A QoS group made for an earlier pod.
        Err(overbook_linux::CgroupError::Exists { .. }) => {}
        other => panic!("create {path}: {other:?}"),
    };
    made(node, kubepods);
    let group = match driver.qos_dir(qos) {
        Some(dir) => kubepods.child(&dir).expect("valid"),
        None => kubepods.clone(),
    };
    made(node, &group);
    let pod = group.child(&driver.pod_dir(qos, uid)).expect("valid");
    made(node, &pod);
    let app = pod.child("app").expect("valid");
    made(node, &app);
    (pod, app)
}

pub fn qos_of(text: &str) -> QosClass {
    match text {
        "Guaranteed" => QosClass::Guaranteed,
        "Burstable" => QosClass::Burstable,
        _ => QosClass::BestEffort,
    }
}

/// The workload binary with `args` in an existing container, as a
/// container runtime starts a pod's process; returns once it is ready.
pub fn run_in(node: &Node, container: &ContainerPath, args: &[&str]) -> std::process::Child {
    let mut child =
        overbook_agent::spawn::command_in(&*node.cg, container, WORKLOAD, args.iter().copied())
            .expect("the cgroup's files")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the workload");
    wait_ready(&mut child);
    child
}
