//! Issue 17, item 1: a Kubernetes node's pods are the agent's containers,
//! found where the kubelet puts their cgroups, with both cgroup drivers,
//! on this host's real cgroups (v1 here, v2 in the VM). The test plays the
//! kubelet's part: it makes the QoS groups, the pods' cgroups and one
//! container cgroup in each, and starts a process in each container.
//! Without the API server (a later step), the class rules match a pod's
//! QoS class and uid (`besteffort-*`).

mod common;

use common::*;
use overbook_agent::tasks::{PreemptRequest, RunRequest};
use overbook_agent::{Agent, AgentConfig, EventLog};
use overbook_core::{Class, Time};
use overbook_linux::kubepods::{CgroupDriver, QosClass};
use overbook_linux::{host_cgroups, ContainerCgroups, ContainerPath, HostSupport, Outcome};
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

const UIDS: [(QosClass, &str); 3] = [
    (QosClass::Guaranteed, "6c1f0a52-0d1e-4a49-9b7e-2f0c8d7e1a01"),
    (QosClass::Burstable, "6c1f0a52-0d1e-4a49-9b7e-2f0c8d7e1a02"),
    (QosClass::BestEffort, "6c1f0a52-0d1e-4a49-9b7e-2f0c8d7e1a03"),
];

/// Makes `path` (its parent exists) and has the node remove it after.
fn make(node: &mut Node, path: &ContainerPath) {
    assert_eq!(node.cg.create(path, None).expect("create"), Outcome::Done(()), "{path}");
    node.adopt(path.clone());
}

fn pods_node_finds_and_preempts_only_best_effort_pods(driver: CgroupDriver, tag: &str) {
    let Some(mut node) = Node::new(tag, 512 * MIB) else { return };
    let kubepods = node.root.child(match driver {
        CgroupDriver::Cgroupfs => "kubepods",
        CgroupDriver::Systemd => "kubepods.slice",
    });
    let kubepods = kubepods.expect("valid");
    make(&mut node, &kubepods);
    let mut children = Vec::new();
    let mut pods = Vec::new();
    for (qos, uid) in UIDS {
        let group = match driver.qos_dir(qos) {
            Some(dir) => {
                let group = kubepods.child(&dir).expect("valid");
                make(&mut node, &group);
                group
            }
            None => kubepods.clone(),
        };
        let pod = group.child(&driver.pod_dir(qos, uid)).expect("valid");
        make(&mut node, &pod);
        // The pod's own cgroup holds nothing: its container's does.
        let container = pod.child("app").expect("valid");
        make(&mut node, &container);
        children.push(hold_in(&node, &container, "16M"));
        pods.push(pod);
    }
    // Not pods: what the kubelet's neighbours may leave there.
    let stray = kubepods.child("not-a-pod").expect("valid");
    make(&mut node, &stray);

    let text = format!(
        "[node]\nroot = \"{}\"\npods = \"{}\"\n[agent]\nstate_db = \"\"\nsample_period = 0.1\n\
         task_log_dir = \"{}\"\n[[classes]]\npattern = \"besteffort-*\"\nclass = \"best-effort\"\n",
        kubepods.as_str(),
        match driver {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        },
        node.dir.path().join("tasks").display()
    );
    let config = AgentConfig::parse(&text, "test").expect("valid config");
    let cg = host_cgroups(&HostSupport::probe()).expect("host cgroups");
    let mut agent = Agent::new(&config, cg, EventLog::in_memory(1000)).expect("agent starts");
    let start = Instant::now();
    let names: Vec<String> = pods.iter().map(|p| p.name().to_string()).collect();
    run_for(&mut agent, start, Duration::from_secs(20), |a| {
        let s = a.status();
        names.iter().all(|n| s.containers.iter().any(|c| &c.name == n && c.processes > 0))
    });
    let status = agent.status();
    assert_eq!(status.containers.len(), 3, "the three pods and nothing else: {status:?}");
    for ((qos, _), name) in UIDS.iter().zip(&names) {
        let seen = status.containers.iter().find(|c| &c.name == name).expect("seen");
        let class =
            if *qos == QosClass::BestEffort { Class::BestEffort } else { Class::Production };
        assert_eq!(seen.class, class.to_string(), "{qos}: {seen:?}");
        assert_eq!(seen.processes, 1, "{qos}: its container's process: {seen:?}");
        assert!(seen.usage >= 16 * MIB, "{qos}: and its memory: {seen:?}");
    }
    // The kubelet's CPU shares are left as they are (on v1 a share set on
    // the pod would move its processes).
    assert!(kinds(&agent, "cpu-share").is_empty(), "{:?}", kinds(&agent, "cpu-share"));
    assert!(kinds(&agent, "cpu-share-failed").is_empty());
    let skipped = kinds(&agent, "container-skipped");
    assert!(
        skipped
            .iter()
            .any(|e| e["detail"]["name"].as_str().is_some_and(|n| n.ends_with("not-a-pod"))),
        "{skipped:?}"
    );

    // Production pods are refused; the best-effort one is killed whole.
    for name in &names[..2] {
        let order = PreemptRequest { name: name.clone(), how: "kill".into(), wait: true };
        assert!(agent.preempt_by_name(Time::from_secs(60), &order).is_err(), "{name}");
    }
    let order = PreemptRequest { name: names[2].clone(), how: "kill".into(), wait: true };
    let reply = agent.preempt_by_name(Time::from_secs(60), &order).expect("killed");
    assert_eq!(reply["preempted"], true, "{reply}");
    let status = children[2].wait().expect("ends");
    assert_eq!(status.signal(), Some(rustix::process::Signal::KILL.as_raw()), "killed");
    for child in &mut children[..2] {
        assert_eq!(child.try_wait().expect("reads"), None, "production pods run on");
    }
    // The kubelet starts a pod's processes, not `overbook run`.
    let run = RunRequest {
        name: "be-task".into(),
        class: Class::BestEffort,
        mem_peak: None,
        job: None,
        weight: None,
        command: vec![WORKLOAD.into(), "anon".into(), "1M".into()],
        cwd: None,
    };
    let refused = agent.submit(Time::from_secs(61), run).expect_err("refused");
    assert!(refused.to_string().contains("kubelet"), "{refused}");
    drop(agent);
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn a_cgroupfs_kubelet_s_pods_are_found_classed_and_only_best_effort_ones_preempted() {
    pods_node_finds_and_preempts_only_best_effort_pods(CgroupDriver::Cgroupfs, "kube-cgroupfs");
}

#[test]
fn a_systemd_kubelet_s_pods_are_found_classed_and_only_best_effort_ones_preempted() {
    pods_node_finds_and_preempts_only_best_effort_pods(CgroupDriver::Systemd, "kube-systemd");
}
