//! Issue 13: what an odd node does to the agent, on this host's real
//! cgroups (root and a memory controller, as `real_node.rs`):
//!
//! * a directory under the node's root whose name is no container name (a
//!   control character; bytes that are not UTF-8) once made every sample
//!   fail: now it is skipped, told once as `container-skipped`, and every
//!   other container is still watched;
//! * a container whose processes all sit in a child cgroup (a pod's
//!   containers do) once read as empty and survived its kill: now it is
//!   seen running and a kill ends every process below it.

mod common;

use common::*;
use overbook_agent::tasks::PreemptRequest;
use overbook_core::Time;
use overbook_linux::{ContainerCgroups, Outcome};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Directories made by hand beside the containers, removed on drop.
struct OddDirs(Vec<PathBuf>);

impl Drop for OddDirs {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir(d);
        }
    }
}

#[test]
fn odd_directories_are_skipped_and_told_and_a_nested_pod_is_seen_and_killed_whole() {
    let Some(mut node) = Node::new("odd", 256 * MIB) else { return };
    // The node's directory in the memory hierarchy: where its containers'
    // `cgroup.procs` files are.
    let probe = node.root.child("probe").expect("valid");
    node.container("probe");
    let root_dir = node.cg.join_files(&probe)[0]
        .parent()
        .and_then(|p| p.parent())
        .expect("the node's directory")
        .to_path_buf();
    let odd = OddDirs(vec![
        root_dir.join("odd\u{1}name"),
        root_dir.join(OsStr::from_bytes(b"odd-\xff-bytes")),
    ]);
    for d in &odd.0 {
        std::fs::create_dir(d).expect("the kernel takes any name");
    }

    // A pod: nothing in `be-pod` itself, a 32 MiB hog in `be-pod/inner`.
    let pod = node.container("be-pod");
    let inner = pod.child("inner").expect("valid");
    assert_eq!(node.cg.create(&inner, None).expect("create"), Outcome::Done(()));
    node.adopt(inner.clone());
    let mut hog = hold_in(&node, &inner, "32M");

    let mut agent = node.agent("");
    let start = Instant::now();
    run_for(&mut agent, start, Duration::from_secs(20), |a| {
        a.status().containers.iter().any(|c| c.name == "be-pod" && c.processes > 0)
    });
    let status = agent.status();
    let seen = status.containers.iter().find(|c| c.name == "be-pod").expect("the pod is seen");
    assert_eq!(seen.processes, 1, "its nested process counts: {status:?}");
    assert!(seen.usage >= 32 * MIB, "and its memory: {}", seen.usage);
    // A few more samples: each odd name is told once, not at every sample.
    run_for(&mut agent, start, Duration::from_millis(500), |_| false);
    let skipped = kinds(&agent, "container-skipped");
    let mut names: Vec<&str> =
        skipped.iter().filter_map(|e| e["detail"]["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, vec!["odd\u{1}name", "odd-\u{fffd}-bytes"], "{skipped:?}");
    assert!(agent.status().containers.iter().any(|c| c.name == "probe"), "others watched");

    let order = PreemptRequest { name: "be-pod".into(), how: "kill".into(), wait: true };
    agent.preempt_by_name(Time::from_secs(60), &order).expect("the pod is killed");
    let status = hog.wait().expect("the hog ends");
    assert_eq!(status.signal(), Some(rustix::process::Signal::KILL.as_raw()), "killed, not left");
    drop(agent);
    drop(odd);
}
