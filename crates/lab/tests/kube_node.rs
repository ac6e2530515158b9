//! Issue 17 on a real control plane (`scripts/kube`: kube-apiserver and
//! kube-scheduler built from `k8s.io/kubernetes`, Debian's etcd): the node
//! offers its spare memory as `overbook.io/batch-memory`, the real
//! scheduler places best-effort pods only within it, a thrashing node
//! preempts a best-effort pod (never production) and tells the API server
//! (an Event, an eviction), and neither an agent restart nor an API server
//! outage loses what the server must be told.
//!
//! The test plays the kubelet: it registers the Node, makes the bound pods'
//! cgroups where a kubelet puts them and starts their processes. Ignored by
//! a plain `cargo test` (the control plane is built once per machine);
//! `scripts/test-all` builds it and runs these, and there a missing binary
//! FAILS them.

mod common;

use common::kube::*;
use common::*;
use overbook_agent::tasks::PreemptRequest;
use overbook_agent::{Agent, AgentConfig, EventLog};
use overbook_core::Time;
use overbook_linux::{host_cgroups, ContainerControl, ContainerPath, HostSupport, NodeCgroups};
use std::path::Path;
use std::time::{Duration, Instant};

const NODE_NAME: &str = "node-a";
const BATCH: &str = r"overbook\.io/batch-memory";

fn config(node: &Node, kubepods: &ContainerPath, kubeconfig: &str, state_db: &Path) -> AgentConfig {
    let text = format!(
        "[node]\nroot = \"{}\"\npods = \"cgroupfs\"\n[agent]\nstate_db = \"{}\"\nsample_period = 0.1\n\
         task_log_dir = \"{}\"\n[kubernetes]\nnode_name = \"{NODE_NAME}\"\nkubeconfig = \"{}\"\n\
         offer_period = 1.0\n{KILL}",
        kubepods.as_str(),
        state_db.display(),
        node.dir.path().join("tasks").display(),
        kubeconfig,
    );
    AgentConfig::parse(&text, "test").expect("valid config")
}

/// `kubepods` under the test's node, limited to `limit` as a kubelet
/// enforcing node allocatable limits it: the agent's node is kubepods.
fn kubepods(node: &mut Node, limit: u64) -> ContainerPath {
    let kubepods = node.root.child("kubepods").expect("valid");
    match node.cg.create(&kubepods, Some(overbook_linux::Limit::Bytes(limit))) {
        Ok(overbook_linux::Outcome::Done(())) => node.adopt(kubepods.clone()),
        other => panic!("create {kubepods}: {other:?}"),
    }
    kubepods
}

fn start_agent(config: &AgentConfig) -> Agent<Box<dyn NodeCgroups>> {
    let cg = host_cgroups(&HostSupport::probe()).expect("host cgroups");
    Agent::new(config, cg, EventLog::in_memory(5000)).expect("agent starts")
}

/// A pod as JSON: bound to the node when `bound`, else left to the
/// scheduler; best-effort pods request 64 MiB of the offer.
fn pod(name: &str, bound: bool, batch: bool) -> String {
    let node = if bound { format!(r#""nodeName":"{NODE_NAME}","#) } else { String::new() };
    let resources = if batch {
        r#","resources":{"requests":{"overbook.io/batch-memory":"64Mi"},"limits":{"overbook.io/batch-memory":"64Mi"}}"#
    } else {
        ""
    };
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default"}},
 "spec":{{{node}"containers":[{{"name":"app","image":"none"{resources}}}]}}}}"#
    )
}

/// The node's offer as the API server has it, in MiB (None: not yet).
fn offer(plane: &ControlPlane) -> Option<u64> {
    let q = plane.field(&["node", NODE_NAME], &format!("{{.status.allocatable.{BATCH}}}"));
    let q = q.trim();
    if q.is_empty() {
        return None;
    }
    let mib = q.strip_suffix("Mi").unwrap_or(q);
    Some(mib.parse().unwrap_or_else(|_| panic!("the offer {q:?} is not whole MiB")))
}

/// Reasons and reporting components of the Events about pod `name`.
fn pod_events(plane: &ControlPlane, name: &str) -> Vec<(String, String)> {
    let out = plane.ok(
        &[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            &format!("involvedObject.name={name}"),
            "-o",
            r#"jsonpath={range .items[*]}{.reason} {.source.component}{"\n"}{end}"#,
        ],
        None,
    );
    out.lines()
        .filter_map(|l| l.split_once(' ').map(|(r, c)| (r.to_string(), c.to_string())))
        .collect()
}

fn frozen_condition(plane: &ControlPlane, name: &str) -> String {
    plane.field(&["pod", name], r#"{.status.conditions[?(@.type=="overbook.io/Frozen")].status}"#)
}

#[test]
#[ignore = "needs the control plane built by `scripts/kube build`: run by scripts/test-all"]
fn a_kubernetes_node_offers_its_spare_memory_preempts_best_effort_pods_and_tells_the_api_server() {
    let Some(mut node) = Node::new("kube-node", 256 * MIB) else { return };
    let plane = ControlPlane::up(node.dir.path().join("plane"));
    plane.register_node(NODE_NAME);
    let kubepods = kubepods(&mut node, 256 * MIB);
    let state_db = node.dir.path().join("state.db");
    let config = config(&node, &kubepods, &plane.kubeconfig, &state_db);
    let mut children = Vec::new();

    // Production, bound to the node, with a little memory of its own.
    plane.ok(&["create", "-f", "-"], Some(&pod("prod", true, false)));
    let uid = |name: &str| plane.field(&["pod", name], "{.metadata.uid}");
    let qos = |name: &str| qos_of(&plane.field(&["pod", name], "{.status.qosClass}"));
    let (_, prod_app) = pod_cgroups(&mut node, &kubepods, qos("prod"), &uid("prod"));
    children.push(run_in(&node, &prod_app, &["anon", "8M"]));

    // Item 3: the offer reaches the Node.
    let mut agent = start_agent(&config);
    let start = Instant::now();
    let mut offered = None;
    run_for(&mut agent, start, Duration::from_secs(30), |_| {
        offered = offer(&plane).filter(|&mib| mib > 0);
        offered.is_some()
    });
    let offered = offered.expect("an offer on the Node within 30 s");
    assert!(offered <= 256, "no more than the node has: {offered} MiB");
    assert!(!kinds(&agent, "offered").is_empty(), "the offer is an event too");

    // The real scheduler binds best-effort pods within the offer only.
    let names: Vec<String> = (1..=5).map(|i| format!("be-{i}")).collect();
    for name in &names {
        plane.ok(&["create", "-f", "-"], Some(&pod(name, false, true)));
    }
    let decided = |name: &str| {
        let bound = plane.field(&["pod", name], "{.spec.nodeName}");
        let refused = plane
            .field(&["pod", name], r#"{.status.conditions[?(@.type=="PodScheduled")].reason}"#);
        if !bound.is_empty() {
            Some(true)
        } else if refused == "Unschedulable" {
            Some(false)
        } else {
            None
        }
    };
    let placed: Vec<bool> =
        eventually("the scheduler decides every pod", Duration::from_secs(60), || {
            names.iter().map(|n| decided(n)).collect()
        });
    let bound: Vec<&String> =
        names.iter().zip(&placed).filter(|(_, b)| **b).map(|(n, _)| n).collect();
    let offer_now = offer(&plane).expect("still offered");
    assert_eq!(
        bound.len() as u64,
        (offer_now / 64).min(5),
        "the scheduler placed ⌊{offer_now} MiB / 64 MiB⌋ of five: {placed:?}"
    );
    assert!(bound.len() >= 2 && bound.len() < 5, "some placed, some not: {placed:?}");

    // The kubelet's part for the bound ones; the agent classes them.
    let mut be = Vec::new();
    for name in &bound {
        let (pod_cg, app) = pod_cgroups(&mut node, &kubepods, qos(name), &uid(name));
        children.push(run_in(&node, &app, &["anon", "40M"]));
        be.push((name.to_string(), pod_cg, children.len() - 1));
    }
    let class_of = |a: &Agent<Box<dyn NodeCgroups>>, cg: &ContainerPath| {
        a.status().containers.iter().find(|c| c.name == cg.name()).map(|c| c.class.clone())
    };
    run_for(&mut agent, start, Duration::from_secs(30), |a| {
        be.iter().all(|(_, cg, _)| class_of(a, cg).as_deref() == Some("best-effort"))
    });
    for (name, cg, _) in &be {
        assert_eq!(class_of(&agent, cg).as_deref(), Some("best-effort"), "{name}");
    }

    // Item 4: production thrashes on its file; one best-effort pod pays.
    let file = node.dir.path().join("working-set");
    let file = file.to_str().expect("utf-8").to_string();
    // Sized so that production and the pods placed want ~32 MiB more than
    // the node has, however many the offer let in.
    let size = format!("{}M", 280 - 40 * be.len());
    let mut reader = run_in(&node, &prod_app, &["file", &file, &size]);
    run_for(&mut agent, start, Duration::from_secs(60), |a| !kinds(a, "preempted").is_empty());
    let preempted = kinds(&agent, "preempted");
    if preempted.len() != 1 {
        let seen: Vec<String> = agent
            .events()
            .recent()
            .filter(|e| e.kind.as_str() != "offered" && e.kind.as_str() != "sampled")
            .map(|e| {
                format!(
                    "{} {} {}",
                    e.kind.as_str(),
                    e.container.as_deref().unwrap_or("-"),
                    e.detail
                )
            })
            .collect();
        // What the agent saw, to tell a quiet node from a blind detector.
        panic!(
            "one victim within 60 s, {} placed, file {size}: {preempted:?}\nevents: {seen:#?}\n\
             status: {:#?}",
            be.len(),
            agent.status()
        );
    }
    assert_eq!(preempted[0]["detail"]["how"], "kill");
    let victim = preempted[0]["container"].as_str().expect("named").to_string();
    let (victim_name, _, victim_child) = be
        .iter()
        .find(|(_, cg, _)| victim.ends_with(cg.name()))
        .expect("a best-effort pod")
        .clone();
    let status = eventually("the victim's process ends", Duration::from_secs(30), || {
        children[victim_child].try_wait().expect("waits")
    });
    assert!(!status.success(), "killed: {status:?}");
    assert_eq!(reader.try_wait().expect("reads"), None, "production is never touched");
    assert_eq!(children[0].try_wait().expect("reads"), None, "production is never touched");
    let _ = reader.kill();
    let _ = reader.wait();
    // The offer went to zero while launches waited after the kill.
    let zero = kinds(&agent, "offered").into_iter().any(|e| e["detail"]["mib"] == 0);
    assert!(zero, "a zero offer after the kill: {:?}", kinds(&agent, "offered"));
    // The API server is told: an Event from the agent, and an eviction.
    run_for(&mut agent, start, Duration::from_secs(20), |_| {
        pod_events(&plane, &victim_name).iter().any(|(r, _)| r == "Killed")
            && !plane.field(&["pod", &victim_name], "{.metadata.deletionTimestamp}").is_empty()
    });
    let events = pod_events(&plane, &victim_name);
    assert!(
        events.iter().any(|(r, c)| r == "Killed" && c == "overbook-agent"),
        "the victim's Event: {events:?}"
    );
    let deleting = plane.field(&["pod", &victim_name], "{.metadata.deletionTimestamp}");
    assert!(!deleting.is_empty(), "{victim_name} evicted");
    for (name, _, _) in &be {
        if *name != victim_name {
            let ours = pod_events(&plane, name).into_iter().filter(|(_, c)| c == "overbook-agent");
            assert_eq!(ours.count(), 0, "{name} was not touched");
        }
    }
    let ours = pod_events(&plane, "prod").into_iter().filter(|(_, c)| c == "overbook-agent");
    assert_eq!(ours.count(), 0, "production was not touched");

    // An agent restart: the pods are known again.
    drop(agent);
    let mut agent = start_agent(&config);
    let survivor = be.iter().find(|(n, _, _)| *n != victim_name).expect("a survivor").clone();
    run_for(&mut agent, start, Duration::from_secs(30), |a| {
        class_of(a, &survivor.1).as_deref() == Some("best-effort")
    });
    assert_eq!(class_of(&agent, &survivor.1).as_deref(), Some("best-effort"));

    // Item 6: the API server goes away. A freeze is done at once anyway;
    // what the server must be told waits, through a restart of the agent.
    plane.apiserver_stop();
    let order =
        PreemptRequest { name: survivor.1.name().to_string(), how: "freeze".into(), wait: true };
    let now = Time::from_duration(start.elapsed());
    let reply = agent.preempt_by_name(now, &order).expect("frozen with the server away");
    assert_eq!(reply["preempted"], true, "{reply}");
    // The offer may be written (and fail) too: the freeze changed it.
    let about_pods = |a: &Agent<Box<dyn NodeCgroups>>| {
        let failed = kinds(a, "api-write-failed");
        failed.into_iter().filter(|e| !e["detail"]["pod"].is_null()).collect::<Vec<_>>()
    };
    run_for(&mut agent, start, Duration::from_secs(30), |a| !about_pods(a).is_empty());
    let failed = about_pods(&agent);
    assert!(
        !failed.is_empty(),
        "the failed write is said: {:?}",
        kinds(&agent, "api-write-failed")
    );
    assert!(
        failed.iter().all(|e| e["detail"]["pod"] == format!("default/{}", survivor.0)),
        "{failed:?}"
    );
    drop(agent);
    let mut agent = start_agent(&config);
    let carried = kinds(&agent, "api-writes-carried");
    assert!(
        carried.first().is_some_and(|e| e["detail"]["writes"].as_u64().unwrap_or(0) >= 1),
        "the next agent takes up the writes: {carried:?}"
    );
    plane.apiserver_start();
    // Once back, the server has the freeze's Event, and the condition says
    // what the pod's cgroup really is (a calm node may have resumed it).
    let mut settled = false;
    run_for(&mut agent, start, Duration::from_secs(60), |a| {
        let frozen = a
            .status()
            .containers
            .iter()
            .find(|c| c.name == survivor.1.name())
            .is_some_and(|c| c.state == "frozen");
        let want = if frozen { "True" } else { "False" };
        settled = pod_events(&plane, &survivor.0).iter().any(|(r, _)| r == "Frozen")
            && frozen_condition(&plane, &survivor.0) == want;
        settled
    });
    assert!(
        settled,
        "after the outage: events {:?}, condition {:?}, agent's events {:?}",
        pod_events(&plane, &survivor.0),
        frozen_condition(&plane, &survivor.0),
        kinds(&agent, "api-written")
    );
    // The watch came back too: a change on the server reaches the node.
    plane.ok(&["annotate", "pod", &survivor.0, "overbook.io/class=critical"], None);
    run_for(&mut agent, start, Duration::from_secs(30), |a| {
        class_of(a, &survivor.1).as_deref() == Some("critical")
    });
    assert_eq!(class_of(&agent, &survivor.1).as_deref(), Some("critical"));

    drop(agent);
    // A frozen process takes no signal: its cgroup is killed whole (which
    // thaws it) before its processes are reaped.
    let _ = node.cg.kill(&survivor.1);
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
    drop(plane);
}

/// A kubeconfig for `plane` with `token` as its credentials.
fn kubeconfig_with(plane: &ControlPlane, dir: &Path, name: &str, token: &str) -> String {
    let path = dir.join(format!("{name}.kubeconfig"));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    \
         certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: x\n  \
         context: {{cluster: c, user: u}}\ncurrent-context: x\n",
        plane.env("KUBE_API"),
        plane.dir.join("ca.crt").display()
    );
    std::fs::write(&path, text).expect("writes the kubeconfig");
    path.display().to_string()
}

#[test]
#[ignore = "needs the control plane built by `scripts/kube build`: run by scripts/test-all"]
fn the_deploy_manifests_apply_and_grant_the_agent_every_verb_it_uses_and_no_more() {
    let Some(mut node) = Node::new("kube-deploy", 512 * MIB) else { return };
    let plane = ControlPlane::up(node.dir.path().join("plane"));
    plane.register_node(NODE_NAME);
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes");
    plane.ok(&["apply", "-f", deploy.to_str().expect("utf-8")], None);
    for (kind, name) in [
        ("namespace", "overbook"),
        ("serviceaccount", "overbook-agent"),
        ("clusterrole", "overbook-agent"),
        ("clusterrolebinding", "overbook-agent"),
        ("configmap", "overbook-agent"),
        ("daemonset", "overbook-agent"),
    ] {
        let ns: &[&str] = if kind.starts_with("cluster") || kind == "namespace" {
            &[]
        } else {
            &["-n", "overbook"]
        };
        let mut args = vec!["get", kind, name, "-o", "name"];
        args.extend_from_slice(ns);
        plane.ok(&args, None);
    }
    // The ConfigMap's TOML is one the agent takes.
    let toml =
        plane.field(&["configmap", "overbook-agent", "-n", "overbook"], r"{.data.agent\.toml}");
    AgentConfig::parse(&toml, "the ConfigMap's agent.toml").expect("the agent takes it");

    // The agent with the DaemonSet's own ServiceAccount: nothing refused.
    let token = plane.ok(&["create", "token", "overbook-agent", "-n", "overbook"], None);
    let granted = kubeconfig_with(&plane, node.dir.path(), "granted", token.trim());
    let kubepods = kubepods(&mut node, 512 * MIB);
    let state_db = node.dir.path().join("state.db");
    let mut children = Vec::new();
    let mut pods = Vec::new();
    for name in ["be-frozen", "be-killed"] {
        plane.ok(&["create", "-f", "-"], Some(&pod(name, true, true)));
        let uid = plane.field(&["pod", name], "{.metadata.uid}");
        let qos = qos_of(&plane.field(&["pod", name], "{.status.qosClass}"));
        let (pod_cg, app) = pod_cgroups(&mut node, &kubepods, qos, &uid);
        children.push(run_in(&node, &app, &["anon", "4M"]));
        pods.push(pod_cg);
    }
    let mut agent = start_agent(&config(&node, &kubepods, &granted, &state_db));
    let start = Instant::now();
    let class_of = |a: &Agent<Box<dyn NodeCgroups>>, cg: &ContainerPath| {
        a.status().containers.iter().find(|c| c.name == cg.name()).map(|c| c.class.clone())
    };
    run_for(&mut agent, start, Duration::from_secs(30), |a| {
        pods.iter().all(|p| class_of(a, p).as_deref() == Some("best-effort"))
            && offer(&plane).is_some()
    });
    assert!(
        offer(&plane).is_some(),
        "the offer was written: {:?}",
        kinds(&agent, "api-write-failed")
    );
    let now = Time::from_duration(start.elapsed());
    for (p, how) in pods.iter().zip(["freeze", "kill"]) {
        let order = PreemptRequest { name: p.name().to_string(), how: how.into(), wait: true };
        agent.preempt_by_name(now, &order).expect("preempted");
    }
    let written = |a: &Agent<Box<dyn NodeCgroups>>, what: &str, pod: &str| {
        kinds(a, "api-written")
            .iter()
            .any(|e| e["detail"]["what"] == what && e["detail"]["pod"] == format!("default/{pod}"))
    };
    run_for(&mut agent, start, Duration::from_secs(30), |a| {
        written(a, "condition", "be-frozen") && written(a, "eviction", "be-killed")
    });
    for (what, pod) in [
        ("event", "be-frozen"),
        ("condition", "be-frozen"),
        ("event", "be-killed"),
        ("eviction", "be-killed"),
    ] {
        assert!(written(&agent, what, pod), "{what} of {pod}: {:?}", kinds(&agent, "api-written"));
    }
    let failed = kinds(&agent, "api-write-failed");
    assert!(failed.is_empty(), "nothing refused to the DaemonSet's account: {failed:?}");
    assert!(
        kinds(&agent, "api-server-trouble").is_empty(),
        "{:?}",
        kinds(&agent, "api-server-trouble")
    );
    drop(agent);
    let _ = node.cg.kill(&pods[0]);

    // An account the manifests did not bind: refused, and said plainly.
    plane.ok(&["create", "serviceaccount", "nobody", "-n", "overbook"], None);
    let token = plane.ok(&["create", "token", "nobody", "-n", "overbook"], None);
    let unbound = kubeconfig_with(&plane, node.dir.path(), "unbound", token.trim());
    let _ = std::fs::remove_file(&state_db);
    let mut agent = start_agent(&config(&node, &kubepods, &unbound, &state_db));
    run_for(&mut agent, start, Duration::from_secs(30), |a| {
        !kinds(a, "api-server-trouble").is_empty()
            && kinds(a, "api-write-failed").iter().any(|e| e["detail"]["what"] == "offer")
    });
    let trouble = kinds(&agent, "api-server-trouble");
    assert!(
        trouble
            .iter()
            .any(|e| e["detail"]["error"].as_str().is_some_and(|t| t.contains("forbidden"))),
        "{trouble:?}"
    );
    let refused = kinds(&agent, "api-write-failed");
    let offer_refused = refused.iter().find(|e| e["detail"]["what"] == "offer").expect("said");
    let said = offer_refused["detail"]["error"].as_str().unwrap_or_default();
    assert!(
        said.contains("patch nodes/status") && said.contains("10-rbac.yaml"),
        "{offer_refused}"
    );
    drop(agent);

    // Bad kubeconfigs: errors that name the file.
    let garbage = node.dir.path().join("garbage.kubeconfig");
    std::fs::write(&garbage, "this: [is not a kubeconfig").expect("writes");
    for bad in [node.dir.path().join("missing.kubeconfig"), garbage] {
        let cg = host_cgroups(&HostSupport::probe()).expect("host cgroups");
        let c = config(&node, &kubepods, bad.to_str().expect("utf-8"), &state_db);
        let e = Agent::new(&c, cg, EventLog::in_memory(10)).expect_err("refused");
        assert!(e.to_string().contains(&bad.display().to_string()), "{e}");
    }
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
    drop(plane);
}
