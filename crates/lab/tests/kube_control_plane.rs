//! Issue 17's testbed: a real kube-apiserver and kube-scheduler (built from
//! `k8s.io/kubernetes` by `scripts/kube build`) with Debian's etcd, started
//! on loopback by `scripts/kube up`, and stopped with nothing left behind.
//! What the Kubernetes mode will ask of it is checked against it here with
//! the real kubectl: a Node, a Pod bound to it and listed by node, the
//! Node's status patched with overbook's opportunistic resource, and an
//! eviction through the Eviction API.
//!
//! Ignored by a plain `cargo test` (the build takes minutes and gigabytes
//! once per machine); `scripts/test-all` builds the control plane and runs
//! it, and there a missing binary FAILS it.

mod common;

use common::kube::*;
use common::*;
use overbook_agent::{Agent, AgentConfig, EventLog};
use overbook_linux::{host_cgroups, HostSupport};
use std::time::{Duration, Instant};

const NODE: &str = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-a"}}"#;

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod",
 "metadata":{"name":"be-1","namespace":"default","annotations":{"overbook.io/class":"best-effort"}},
 "spec":{"nodeName":"node-a","containers":[{"name":"app","image":"none",
   "resources":{"requests":{"overbook.io/batch-memory":"64Mi"},"limits":{"overbook.io/batch-memory":"64Mi"}}}]}}"#;

#[test]
#[ignore = "needs the control plane built by `scripts/kube build`: run by scripts/test-all"]
fn a_real_control_plane_does_what_the_kubernetes_mode_will_ask_of_it() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let plane = ControlPlane::up(scratch.path().join("plane"));
    assert_eq!(plane.ok(&["get", "--raw", "/readyz"], None).trim(), "ok");
    let version = plane.ok(&["version", "-o", "json"], None);
    assert!(version.contains("\"gitVersion\": \"v1."), "a parsable version: {version}");

    plane.ok(&["create", "-f", "-"], Some(NODE));
    // Opportunistic memory, as the agent will publish it.
    let patch = r#"{"status":{"capacity":{"overbook.io/batch-memory":"1Gi"},"allocatable":{"overbook.io/batch-memory":"1Gi"}}}"#;
    plane.ok(&["patch", "node", "node-a", "--subresource", "status", "-p", patch], None);
    let allocatable = plane.ok(
        &[
            "get",
            "node",
            "node-a",
            "-o",
            r#"jsonpath={.status.allocatable.overbook\.io/batch-memory}"#,
        ],
        None,
    );
    assert_eq!(allocatable, "1Gi");

    plane.ok(&["create", "-f", "-"], Some(POD));
    let bound = plane
        .ok(&["get", "pods", "-A", "--field-selector", "spec.nodeName=node-a", "-o", "name"], None);
    assert_eq!(bound.trim(), "pod/be-1");
    let qos = plane.ok(&["get", "pod", "be-1", "-o", "jsonpath={.status.qosClass}"], None);
    assert_eq!(qos, "BestEffort", "filled in by the API server");

    let eviction = r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"be-1","namespace":"default"}}"#;
    plane.ok(
        &["create", "--raw", "/api/v1/namespaces/default/pods/be-1/eviction", "-f", "-"],
        Some(eviction),
    );
    let deleting =
        plane.ok(&["get", "pod", "be-1", "-o", "jsonpath={.metadata.deletionTimestamp}"], None);
    assert!(!deleting.is_empty(), "the eviction marked it for deletion");

    let pids = plane.pids();
    assert_eq!(pids.len(), 3, "etcd, kube-apiserver, kube-scheduler");
    drop(plane);
    for pid in pids {
        assert!(!alive(pid), "{pid} outlived `scripts/kube down`");
    }
    assert!(!scratch.path().join("plane").exists(), "down removes its directory");
}

/// A pod bound to node-a, as JSON: `extra` goes into its metadata, `spec`
/// into its spec.
fn pod(namespace: &str, name: &str, metadata: &str, spec: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{namespace}"{metadata}}},
 "spec":{{"nodeName":"node-a"{spec},"containers":[{{"name":"app","image":"none"{resources}}}]}}}}"#,
        resources = if name.contains("batch") {
            r#","resources":{"requests":{"overbook.io/batch-memory":"64Mi"},"limits":{"overbook.io/batch-memory":"64Mi"}}"#
        } else {
            ""
        }
    )
}

#[test]
#[ignore = "needs the control plane built by `scripts/kube build`: run by scripts/test-all"]
fn the_agent_takes_its_pods_classes_from_the_api_server_and_follows_their_changes() {
    let Some(mut node) = Node::new("kube-api", 512 * MIB) else { return };
    let plane = ControlPlane::up(node.dir.path().join("plane"));
    plane.ok(&["create", "serviceaccount", "default", "-n", "kube-system"], None);
    let pods = [
        ("default", "be-annotated", r#","annotations":{"overbook.io/class":"best-effort"}"#, ""),
        ("kube-system", "crit", "", r#","priorityClassName":"system-node-critical""#),
        ("default", "be-batch", "", ""),
        ("default", "prod", "", ""),
        ("default", "odd", r#","annotations":{"overbook.io/class":"batch"}"#, ""),
    ];
    for (ns, name, metadata, spec) in pods {
        plane.ok(&["create", "-f", "-"], Some(&pod(ns, name, metadata, spec)));
    }
    // The kubelet's part: each pod's cgroup (by its uid and QoS class, as
    // the API server says them) with one container and a process in it.
    let listed = plane.ok(
        &["get", "pods", "-A", "-o", r#"jsonpath={range .items[*]}{.metadata.name} {.metadata.uid} {.status.qosClass}{"\n"}{end}"#],
        None,
    );
    let kubepods = node.root.child("kubepods").expect("valid");
    let mut uids = std::collections::BTreeMap::new();
    let mut children = Vec::new();
    for line in listed.lines() {
        let [name, uid, qos] = line.split(' ').collect::<Vec<_>>()[..] else { panic!("{line}") };
        let (pod, app) = pod_cgroups(&mut node, &kubepods, qos_of(qos), uid);
        children.push(hold_in(&node, &app, "4M"));
        uids.insert(name.to_string(), pod.name().to_string());
    }
    assert_eq!(uids.len(), 5, "{listed}");

    let text = format!(
        "[node]\nroot = \"{}\"\npods = \"cgroupfs\"\n[agent]\nstate_db = \"\"\nsample_period = 0.1\n\
         task_log_dir = \"{}\"\n[kubernetes]\nnode_name = \"node-a\"\nkubeconfig = \"{}\"\n",
        kubepods.as_str(),
        node.dir.path().join("tasks").display(),
        plane.kubeconfig
    );
    let config = AgentConfig::parse(&text, "test").expect("valid config");
    let cg = host_cgroups(&HostSupport::probe()).expect("host cgroups");
    let mut agent = Agent::new(&config, cg, EventLog::in_memory(1000)).expect("agent starts");
    let start = Instant::now();
    let class_of = |a: &Agent<Box<dyn overbook_linux::NodeCgroups>>, pod: &str| {
        let dir = &uids[pod];
        a.status().containers.iter().find(|c| &c.name == dir).map(|c| c.class.clone())
    };
    let want = [
        ("be-annotated", "best-effort"),
        ("crit", "critical"),
        ("be-batch", "best-effort"),
        ("prod", "production"),
        ("odd", "production"),
    ];
    run_for(&mut agent, start, Duration::from_secs(30), |a| {
        want.iter().all(|(p, c)| class_of(a, p).as_deref() == Some(*c))
    });
    let events = kinds(&agent, "pod-classified");
    for (p, c) in want {
        let all: Vec<_> =
            agent.events().recent().map(|e| format!("{} {}", e.kind.as_str(), e.detail)).collect();
        assert_eq!(class_of(&agent, p).as_deref(), Some(c), "{p}: {all:?}");
    }
    let odd = events.iter().find(|e| e["detail"]["pod"] == "default/odd").expect("told");
    assert!(odd["detail"]["problem"].as_str().is_some_and(|p| p.contains("\"batch\"")), "{odd}");
    assert_eq!(kinds(&agent, "pods-synced").len(), 1, "listed once");

    // A change on the server reaches the node: prod becomes best-effort.
    plane.ok(&["annotate", "pod", "prod", "overbook.io/class=best-effort"], None);
    run_for(&mut agent, start, Duration::from_secs(30), |a| {
        class_of(a, "prod").as_deref() == Some("best-effort")
    });
    assert_eq!(class_of(&agent, "prod").as_deref(), Some("best-effort"));
    let changed = kinds(&agent, "pod-classified");
    let prod = changed.iter().rev().find(|e| e["detail"]["pod"] == "default/prod").expect("told");
    assert_eq!(prod["detail"]["was"], "production", "{prod}");
    drop(agent);
    drop(plane);
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}
