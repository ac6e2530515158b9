//! `overbook bench kubernetes`: issue 17's goals, measured against a real
//! control plane (`scripts/kube up`), the bench playing the kubelet.
//!
//! The bench registers a Node (a name of its own per run), creates `pods`
//! pods bound to it (a few production, the rest best-effort requesting
//! 16 MiB of `overbook.io/batch-memory`), and makes each pod's cgroup where
//! a cgroupfs kubelet puts it (`kubepods/<qos>/pod<uid>/app`, under a node
//! cgroup of its own, `kubepods` limited to the node's memory as a kubelet
//! limits it) with one `sleep` in it. Each repeat then runs a fresh agent,
//! as deployed: its own process, `overbook agent --config ... --socket
//! ...`, with `[node] pods = "cgroupfs"` and `[kubernetes]` offering the
//! node's spare memory and evicting what it kills. Once the agent has
//! classed every pod and published an offer, and after a warm-up:
//!
//! * **cost**: its CPU (`utime + stime` of `/proc/<pid>/stat`) over a
//!   window of `seconds`, as % of one core, and its peak resident memory
//!   (`VmHWM` of `/proc/<pid>/status`) at the repeat's end;
//! * **the offer follows production**: a 128 MiB hog starts in a
//!   production pod; from its start (it has touched all its memory about
//!   0.2 s later: included, and reported apart) to the Node's
//!   `status.allocatable["overbook.io/batch-memory"]` lower by ≥ 100 MiB;
//!   then the hog is killed; from the kill to the offer higher by ≥ 100 MiB
//!   (two such cycles, 2 s apart, so that each change is told on its own
//!   and not held by the agent's once-a-second limit on the last one);
//! * **preemption to Event**: `POST /v1/preempt` (what `overbook preempt`
//!   sends) of a best-effort pod, `kill`; from sending it to a `Killed`
//!   Event on that pod readable from the API server (two per repeat, each
//!   on a pod of its own).
//!
//! Times are `Instant`s on the bench's side; the API server is read every
//! 10 ms, so a latency is late by at most that (and the read's own time).
//! Everything made is removed on every path: the agent process, the
//! pods (grace period 0), the Node, the cgroups and their processes.

use super::{cpu_ticks, BenchNode, Percentiles, WorkloadProgram, MIB};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use overbook_linux::kubepods::{CgroupDriver, QosClass};
use overbook_linux::{process, ContainerPath, Pid};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The extended resource the agent offers and best-effort pods request.
pub const BATCH_MEMORY: &str = "overbook.io/batch-memory";
/// How often the API server is read while a latency is measured.
pub const POLL: Duration = Duration::from_millis(10);
/// What each best-effort pod requests of the offer.
const BE_REQUEST: &str = "16Mi";
/// A move of the offer that counts as following the hog.
const MOVE: f64 = 100.0;
/// Namespace of the pods.
const NAMESPACE: &str = "default";
/// Longest any one API call may take.
const CALL: Duration = Duration::from_secs(15);

/// What to measure.
#[derive(Clone, Debug)]
pub struct KubePlan {
    /// The `overbook` binary (run as `overbook agent`).
    pub overbook: PathBuf,
    /// The hog (`overbook workload anon SIZE`).
    pub workload: WorkloadProgram,
    /// An admin's kubeconfig for the control plane (`scripts/kube up`'s).
    pub kubeconfig: PathBuf,
    /// Pods bound to the node (the kubelet's default maximum is 110).
    pub pods: usize,
    /// Seconds of each repeat's CPU window.
    pub seconds: u64,
    pub repeats: usize,
    /// Before the CPU window, after the agent is ready.
    pub warmup: Duration,
    /// The hog's size (the change of production's usage).
    pub hog: u64,
    /// The node's memory: the `kubepods` cgroup's limit.
    pub capacity: u64,
    /// Set (by a signal handler) to end the run at its next wait: its
    /// agent, pods, cgroups and Node are then removed as on any error.
    pub stop: Arc<AtomicBool>,
}

impl KubePlan {
    /// Production pods among `pods`: one in twenty, 1 to 5.
    pub fn production(&self) -> usize {
        (self.pods / 20).clamp(1, 5)
    }
}

/// Progress, for the caller to show.
#[derive(Debug)]
pub enum Progress<'a> {
    Say(&'a str),
    /// Repeat `n` (from 1) is done.
    Repeat(usize),
}

/// One repeat: one agent process, start to stop.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RepeatResult {
    pub repeat: usize,
    pub agent_pid: u32,
    /// From the agent's start to every pod classed and an offer on the Node.
    pub ready_s: f64,
    pub cpu_window_s: f64,
    pub cpu_percent_of_core: f64,
    pub user_percent: f64,
    pub system_percent: f64,
    /// CPU % of each one-second slice of the window.
    pub cpu_percent_per_second: Percentiles,
    /// `VmHWM` at the end of the CPU window and at the repeat's end.
    pub vm_hwm_kib_after_window: u64,
    pub vm_hwm_kib: u64,
    pub vm_rss_kib: u64,
    pub threads: u64,
    /// The offer when the hog started, MiB.
    pub offer_mib_before: Vec<f64>,
    /// Hog spawned → ready (its memory touched), ms.
    pub hog_ready_ms: Vec<f64>,
    /// Hog started → offer lower by ≥ 100 MiB, ms (its start → ready included).
    pub offer_down_ms: Vec<f64>,
    /// The same from the hog's ready (its whole memory touched), ms.
    pub offer_down_from_ready_ms: Vec<f64>,
    /// Hog killed → offer higher by ≥ 100 MiB, ms.
    pub offer_up_ms: Vec<f64>,
    /// `POST /v1/preempt` sent → its answer, ms.
    pub preempt_reply_ms: Vec<f64>,
    /// `POST /v1/preempt` sent → the pod's `Killed` Event readable, ms.
    pub event_ms: Vec<f64>,
    /// What did not happen within its deadline (the sample is missing).
    pub problems: Vec<String>,
    /// The agent's own account: its `offered`, `api-written` and
    /// `api-write-failed` events, as it logged them.
    pub agent_events: Vec<serde_json::Value>,
}

/// A figure over the repeats (or over every sample of them).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stat {
    pub n: usize,
    pub mean: Option<f64>,
    /// 95% percentile bootstrap interval of the mean.
    pub ci95: Option<[f64; 2]>,
    pub min: Option<f64>,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Stat {
    pub fn of(xs: &[f64]) -> Stat {
        let v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Stat::default();
        }
        let p = Percentiles::of(&v);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        Stat {
            n: v.len(),
            mean: Some(mean),
            ci95: Some(bootstrap(&v, 17)),
            min: v.iter().copied().reduce(f64::min),
            p50: p.p50,
            p99: p.p99,
            max: p.max,
        }
    }
}

/// 95% percentile bootstrap interval of the mean (seeded: the same samples
/// give the same interval).
fn bootstrap(v: &[f64], seed: u64) -> [f64; 2] {
    const RESAMPLES: usize = 2000;
    if v.len() < 2 {
        return [v[0], v[0]];
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut means: Vec<f64> = (0..RESAMPLES)
        .map(|_| (0..v.len()).map(|_| v[rng.gen_range(0..v.len())]).sum::<f64>() / v.len() as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    [means[RESAMPLES * 25 / 1000], means[RESAMPLES * 975 / 1000 - 1]]
}

/// One of issue 17's goals against what was measured (its worst: the
/// largest over the repeats or samples).
#[derive(Clone, Debug, Serialize)]
pub struct Goal {
    pub what: String,
    pub goal: String,
    pub worst: Option<f64>,
    pub met: bool,
}

/// What was measured.
#[derive(Clone, Debug, Serialize)]
pub struct KubeReport {
    pub kernel: String,
    pub cgroup_version: String,
    pub kubernetes_version: String,
    pub node_name: String,
    pub pods: usize,
    pub production_pods: usize,
    pub best_effort_pods: usize,
    pub capacity_mib: u64,
    pub hog_mib: u64,
    pub repeats: usize,
    pub seconds_per_window: u64,
    /// How often the API server was read for the latencies (they are late
    /// by at most this).
    pub poll_ms: u64,
    /// Over the repeats: CPU % of one core, peak RSS in MiB.
    pub cpu_percent_of_core: Stat,
    pub vm_hwm_mib: Stat,
    /// Over every sample: the offer following the hog's start, its end, both.
    pub offer_down_ms: Stat,
    pub offer_up_ms: Stat,
    pub offer_follow_ms: Stat,
    pub offer_down_from_ready_ms: Stat,
    pub hog_ready_ms: Stat,
    pub event_ms: Stat,
    pub preempt_reply_ms: Stat,
    pub goals: Vec<Goal>,
    pub runs: Vec<RepeatResult>,
}

/// The API server, through a runtime of the bench's own; every call under
/// a deadline.
struct Kube {
    rt: tokio::runtime::Runtime,
    client: Client,
}

impl Kube {
    fn connect(kubeconfig: &std::path::Path) -> Result<Kube, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("a runtime for the API client: {e}"))?;
        let path = kubeconfig.to_path_buf();
        let client = rt.block_on(async move {
            let kc = kube::config::Kubeconfig::read_from(&path)
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
            let config = kube::Config::from_custom_kubeconfig(
                kc,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
            Client::try_from(config).map_err(|e| format!("a client for the API server: {e}"))
        })?;
        Ok(Kube { rt, client })
    }

    /// Runs `f` on the client, failing after [`CALL`].
    fn call<T, F>(&self, what: &str, f: impl FnOnce(Client) -> F) -> Result<T, String>
    where
        F: std::future::Future<Output = Result<T, kube::Error>>,
    {
        let fut = f(self.client.clone());
        match self.rt.block_on(async { tokio::time::timeout(CALL, fut).await }) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(format!("{what}: {e}")),
            Err(_) => Err(format!("{what}: no answer within {CALL:?}")),
        }
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    /// The offer on the Node's allocatable, MiB (`None`: none yet).
    fn offer(&self, node: &str) -> Result<Option<f64>, String> {
        let api = self.nodes();
        let n = self.call("reading the Node", |_| async move { api.get(node).await })?;
        let q = n.status.and_then(|s| s.allocatable).and_then(|a| a.get(BATCH_MEMORY).cloned());
        match q {
            None => Ok(None),
            Some(q) => quantity_mib(&q.0)
                .map(Some)
                .ok_or_else(|| format!("the offer {:?} is not a quantity", q.0)),
        }
    }

    /// Whether pod `name` has an Event of `reason`.
    fn has_event(&self, name: &str, reason: &str) -> Result<bool, String> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), NAMESPACE);
        let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
        let list = self.call("listing Events", |_| async move { api.list(&lp).await })?;
        Ok(list.items.iter().any(|e| e.reason.as_deref() == Some(reason)))
    }

    fn version(&self) -> String {
        self.call("the server's version", |c| async move { c.apiserver_version().await })
            .map_or_else(|e| format!("unknown ({e})"), |v| v.git_version)
    }
}

/// A quantity in MiB: `512Mi`, `1Gi`, `0`, `1048576`, `1M`, ...
pub fn quantity_mib(q: &str) -> Option<f64> {
    let q = q.trim();
    let units: [(&str, f64); 10] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024f64.powi(4)),
        ("k", 1e3),
        ("K", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("m", 1e-3),
    ];
    let (num, scale) =
        units.iter().find_map(|(s, f)| q.strip_suffix(s).map(|n| (n, *f))).unwrap_or((q, 1.0));
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v >= 0.0).then(|| v * scale / MIB as f64)
}

/// The Node and pods the bench made, deleted on drop.
struct Cluster {
    kube: Kube,
    node: String,
    pods: Vec<String>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let api = self.kube.pods();
        let dp = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
        for name in &self.pods {
            let (api, dp) = (api.clone(), dp.clone());
            let _ =
                self.kube.call("deleting a pod", |_| async move { api.delete(name, &dp).await });
        }
        let nodes = self.kube.nodes();
        let node = self.node.clone();
        let _ = self.kube.call("deleting the Node", |_| async move {
            nodes.delete(&node, &DeleteParams::default()).await
        });
    }
}

/// One pod the bench made and plays the kubelet for.
#[derive(Clone, Debug)]
struct BenchPod {
    name: String,
    /// Its cgroup's directory name (`pod<uid>`): the agent's name for it.
    dir: String,
    cgroup: ContainerPath,
    best_effort: bool,
}

/// The agent process, stopped (SIGTERM, then SIGKILL) on drop.
#[derive(Debug)]
struct AgentProcess {
    child: Child,
    log: PathBuf,
}

impl AgentProcess {
    fn pid(&self) -> Result<Pid, String> {
        Pid::new(self.child.id()).ok_or_else(|| "the agent has no pid".into())
    }

    /// Fails saying the end of the agent's log if it has exited.
    fn check(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(10).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                Err(format!("the agent exited ({status}):\n{}", tail.join("\n")))
            }
            Err(e) => Err(format!("the agent: {e}")),
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Some(pid) = Pid::new(self.child.id()) {
            let _ = process::terminate(pid);
        }
        let until = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Polls `check` every [`POLL`] until it says yes (the instant its answer
/// came), or `within` is over (`None`); an error once `stop` is set.
fn poll_until(
    stop: &AtomicBool,
    within: Duration,
    mut check: impl FnMut() -> Result<bool, String>,
) -> Result<Option<Instant>, String> {
    let until = Instant::now() + within;
    loop {
        let asked = Instant::now();
        if check()? {
            return Ok(Some(Instant::now()));
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        pause(stop, (asked + POLL).saturating_duration_since(Instant::now()))?;
    }
}

/// Sleeps `d`, in slices short enough that a stop is taken within a tenth
/// of a second; an error once `stop` is set.
fn pause(stop: &AtomicBool, d: Duration) -> Result<(), String> {
    let until = Instant::now() + d;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err("interrupted: everything the run made is being removed".into());
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
}

/// Runs the benchmark.
pub fn run(plan: &KubePlan, progress: &mut dyn FnMut(Progress<'_>)) -> Result<KubeReport, String> {
    if plan.pods < 2 {
        return Err("needs at least 2 pods (one production, one best-effort)".into());
    }
    if plan.repeats == 0 {
        return Err("needs at least one repeat".into());
    }
    let tag = std::process::id();
    let node_name = format!("overbook-bench-{tag}");
    let kube = Kube::connect(&plan.kubeconfig)?;
    let kubernetes_version = kube.version();
    // Declared first, dropped last: the cgroups outlive the agent and the
    // API objects.
    let mut node = BenchNode::new(&format!("overbook-bench-kube-{tag}"), None)?;
    let mut cluster = Cluster { kube, node: node_name.clone(), pods: Vec::new() };
    progress(Progress::Say(&format!(
        "Kubernetes {kubernetes_version}: registering Node {node_name}, {} pods bound to it",
        plan.pods
    )));
    register_node(&cluster, plan)?;
    let kubepods = node.root.child("kubepods").map_err(|e| e.to_string())?;
    node.make(&kubepods, Some(plan.capacity))?;
    let production = plan.production();
    let mut pods = Vec::new();
    for i in 0..plan.pods {
        let best_effort = i >= production;
        let name = if best_effort {
            format!("obb-{tag}-be-{i:03}")
        } else {
            format!("obb-{tag}-prod-{i:02}")
        };
        let pod = create_pod(&mut cluster, &node_name, &name, best_effort)?;
        let (qos, uid) = pod;
        let driver = CgroupDriver::Cgroupfs;
        let group = match driver.qos_dir(qos) {
            Some(dir) => kubepods.child(&dir).map_err(|e| e.to_string())?,
            None => kubepods.clone(),
        };
        node.make(&group, None)?;
        let dir = driver.pod_dir(qos, &uid);
        let cgroup = group.child(&dir).map_err(|e| e.to_string())?;
        node.make(&cgroup, None)?;
        let app = cgroup.child("app").map_err(|e| e.to_string())?;
        node.make(&app, None)?;
        node.spawn_quiet_in(&app, "sleep", &["infinity".to_string()])?;
        pods.push(BenchPod { name, dir, cgroup, best_effort });
    }
    let hog_cg = pods[0].cgroup.child("hog").map_err(|e| e.to_string())?;
    node.make(&hog_cg, None)?;
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let config = scratch.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[node]\nroot = \"{root}\"\npods = \"cgroupfs\"\n\
             [agent]\nstate_db = \"\"\ntask_log_dir = \"{tasks}\"\n\
             [kubernetes]\nnode_name = \"{node_name}\"\nkubeconfig = \"{kc}\"\n\
             offer = true\nevict = true\n",
            root = kubepods.as_str(),
            tasks = scratch.path().join("tasks").display(),
            kc = plan.kubeconfig.display(),
        ),
    )
    .map_err(|e| e.to_string())?;
    let mut runs = Vec::new();
    // Best-effort pods not preempted yet, in order.
    let mut fresh: Vec<BenchPod> = pods.iter().filter(|p| p.best_effort).cloned().collect();
    fresh.reverse();
    let mut preempted: Vec<String> = Vec::new();
    for r in 1..=plan.repeats {
        let mut ctx = RepeatCtx {
            plan,
            node: &node,
            cluster: &cluster,
            pods: &pods,
            preempted: &preempted,
            hog_cg: &hog_cg,
            scratch: scratch.path(),
            config: &config,
        };
        let (result, used) = ctx.run(r, &mut fresh, progress)?;
        preempted.extend(used);
        runs.push(result);
        progress(Progress::Repeat(r));
    }
    let all = |f: fn(&RepeatResult) -> &Vec<f64>| -> Vec<f64> {
        runs.iter().flat_map(|r| f(r).iter().copied()).collect()
    };
    let cpu: Vec<f64> = runs.iter().map(|r| r.cpu_percent_of_core).collect();
    let hwm: Vec<f64> = runs.iter().map(|r| r.vm_hwm_kib as f64 / 1024.0).collect();
    let down = all(|r| &r.offer_down_ms);
    let up = all(|r| &r.offer_up_ms);
    let both: Vec<f64> = down.iter().chain(&up).copied().collect();
    let event = all(|r| &r.event_ms);
    let expected_offer = runs.iter().map(|r| r.offer_mib_before.len() * 2).sum::<usize>();
    let expected_events = runs.iter().map(|r| r.preempt_reply_ms.len()).sum::<usize>();
    let goal = |what: &str, goal: &str, xs: &[f64], limit: f64, expected: usize| {
        let worst = Stat::of(xs).max;
        Goal {
            what: what.into(),
            goal: goal.into(),
            worst,
            met: xs.len() >= expected.max(1) && worst.is_some_and(|w| w <= limit),
        }
    };
    let goals = vec![
        goal("agent CPU watching the pods, % of one core", "≤ 1%", &cpu, 1.0, plan.repeats),
        goal("agent peak RSS (VmHWM), MiB", "≤ 30 MiB", &hwm, 30.0, plan.repeats),
        goal("offer follows production's usage, ms", "≤ 2000 ms", &both, 2000.0, expected_offer),
        goal("preemption → its Event readable, ms", "≤ 1000 ms", &event, 1000.0, expected_events),
    ];
    let report = KubeReport {
        kernel: overbook_linux::host::kernel_release().unwrap_or_default(),
        cgroup_version: format!("{:?}", node.version),
        kubernetes_version,
        node_name,
        pods: plan.pods,
        production_pods: production,
        best_effort_pods: plan.pods - production,
        capacity_mib: plan.capacity / MIB,
        hog_mib: plan.hog / MIB,
        repeats: plan.repeats,
        seconds_per_window: plan.seconds,
        poll_ms: 10,
        cpu_percent_of_core: Stat::of(&cpu),
        vm_hwm_mib: Stat::of(&hwm),
        offer_down_ms: Stat::of(&down),
        offer_up_ms: Stat::of(&up),
        offer_follow_ms: Stat::of(&both),
        offer_down_from_ready_ms: Stat::of(&all(|r| &r.offer_down_from_ready_ms)),
        hog_ready_ms: Stat::of(&all(|r| &r.hog_ready_ms)),
        event_ms: Stat::of(&event),
        preempt_reply_ms: Stat::of(&all(|r| &r.preempt_reply_ms)),
        goals,
        runs,
    };
    progress(Progress::Say("removing the pods, the Node, the cgroups"));
    drop(cluster);
    drop(node);
    drop(scratch);
    Ok(report)
}

/// Registers the Node as a kubelet would: its capacity (pods "110"), Ready,
/// and the not-ready taint the API server adds lifted (no node controller
/// lifts it here).
fn register_node(cluster: &Cluster, plan: &KubePlan) -> Result<(), String> {
    let name = &cluster.node;
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name}
    }))
    .map_err(|e| e.to_string())?;
    let api = cluster.kube.nodes();
    cluster.kube.call("registering the Node", |_| {
        let api = api.clone();
        async move { api.create(&PostParams::default(), &node).await }
    })?;
    let memory = format!("{}Mi", plan.capacity / MIB);
    let status = serde_json::json!({"status": {
        "capacity": {"cpu": "2", "memory": memory, "pods": "110"},
        "allocatable": {"cpu": "2", "memory": memory, "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "played by overbook bench kubernetes"}]
    }});
    cluster.kube.call("the Node's status", |_| {
        let api = api.clone();
        async move { api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await }
    })?;
    let untaint = serde_json::json!({"spec": {"taints": null}});
    cluster.kube.call("lifting the Node's taints", |_| {
        let api = api.clone();
        async move { api.patch(name, &PatchParams::default(), &Patch::Merge(&untaint)).await }
    })?;
    Ok(())
}

/// Creates a pod bound to the node; its QoS class and uid as the API
/// server says them.
fn create_pod(
    cluster: &mut Cluster,
    node: &str,
    name: &str,
    best_effort: bool,
) -> Result<(QosClass, String), String> {
    let mut container = serde_json::json!({"name": "app", "image": "none"});
    if best_effort {
        container["resources"] = serde_json::json!({
            "requests": {BATCH_MEMORY: BE_REQUEST}, "limits": {BATCH_MEMORY: BE_REQUEST}
        });
    }
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"nodeName": node, "containers": [container]}
    }))
    .map_err(|e| e.to_string())?;
    let api = cluster.kube.pods();
    let made = cluster.kube.call(&format!("creating pod {name}"), |_| async move {
        api.create(&PostParams::default(), &pod).await
    })?;
    cluster.pods.push(name.to_string());
    let uid = made.metadata.uid.ok_or_else(|| format!("pod {name} has no uid"))?;
    let qos = match made.status.and_then(|s| s.qos_class).as_deref() {
        Some("Guaranteed") => QosClass::Guaranteed,
        Some("Burstable") => QosClass::Burstable,
        _ => QosClass::BestEffort,
    };
    Ok((qos, uid))
}

/// What one repeat works with.
struct RepeatCtx<'a> {
    plan: &'a KubePlan,
    node: &'a BenchNode,
    cluster: &'a Cluster,
    pods: &'a [BenchPod],
    /// Pods preempted in earlier repeats (no longer expected to be seen).
    preempted: &'a [String],
    hog_cg: &'a ContainerPath,
    scratch: &'a std::path::Path,
    config: &'a std::path::Path,
}

/// Offer cycles and preemptions in each repeat.
const PER_REPEAT: usize = 2;

impl RepeatCtx<'_> {
    fn run(
        &mut self,
        r: usize,
        fresh: &mut Vec<BenchPod>,
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<(RepeatResult, Vec<String>), String> {
        let plan = self.plan;
        let kube = &self.cluster.kube;
        let node_name = &self.cluster.node;
        let socket = self.scratch.join(format!("agent-{r}.sock"));
        let log = self.scratch.join(format!("agent-{r}.log"));
        let log_file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let child = Command::new(&plan.overbook)
            .arg("agent")
            .arg("--config")
            .arg(self.config)
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("cannot start {} agent: {e}", plan.overbook.display()))?;
        let mut agent = AgentProcess { child, log };
        let pid = agent.pid()?;
        let mut out =
            RepeatResult { repeat: r, agent_pid: agent.child.id(), ..RepeatResult::default() };
        progress(Progress::Say(&format!(
            "repeat {r}/{}: agent pid {pid}; waiting for every pod classed and an offer",
            plan.repeats
        )));

        // Ready: every pod still running seen in its class, an offer published.
        let want: BTreeMap<&str, &str> = self
            .pods
            .iter()
            .filter(|p| !self.preempted.contains(&p.name))
            .map(|p| (p.dir.as_str(), if p.best_effort { "best-effort" } else { "production" }))
            .collect();
        let until = Instant::now() + Duration::from_secs(90);
        loop {
            agent.check()?;
            let status = overbook_agent::api::get(&socket, "/v1/status")
                .ok()
                .and_then(|b| serde_json::from_str::<overbook_agent::NodeStatus>(&b).ok());
            let classed = status.as_ref().map_or(0, |s| {
                s.containers
                    .iter()
                    .filter(|c| want.get(c.name.as_str()) == Some(&c.class.as_str()))
                    .count()
            });
            if classed == want.len() && kube.offer(node_name)?.is_some_and(|m| m > 0.0) {
                break;
            }
            if Instant::now() >= until {
                return Err(format!(
                    "repeat {r}: within 90 s the agent classed {classed} of {} pods and/or \
                     published no offer on Node {node_name}",
                    want.len()
                ));
            }
            pause(&plan.stop, Duration::from_millis(100))?;
        }
        out.ready_s = started.elapsed().as_secs_f64();
        pause(&plan.stop, plan.warmup)?;
        agent.check()?;

        // Cost: CPU over the window.
        progress(Progress::Say(&format!(
            "repeat {r}: ready in {:.1} s; CPU over {} s",
            out.ready_s, plan.seconds
        )));
        let hz = 100.0; // USER_HZ: /proc's ticks, 100 a second on every Linux ABI.
        let (u0, s0) = cpu_ticks(pid)?;
        let start = Instant::now();
        let mut last = (u0 + s0, start);
        let mut per_second = Vec::new();
        for s in 1..=plan.seconds {
            pause(
                &plan.stop,
                (start + Duration::from_secs(s)).saturating_duration_since(Instant::now()),
            )?;
            let (u, st) = cpu_ticks(pid)?;
            let now = Instant::now();
            let d = (u + st).saturating_sub(last.0) as f64 / hz;
            per_second.push(100.0 * d / (now - last.1).as_secs_f64());
            last = (u + st, now);
        }
        let (u1, s1) = cpu_ticks(pid)?;
        let wall = start.elapsed().as_secs_f64();
        out.cpu_window_s = wall;
        out.user_percent = 100.0 * u1.saturating_sub(u0) as f64 / hz / wall;
        out.system_percent = 100.0 * s1.saturating_sub(s0) as f64 / hz / wall;
        out.cpu_percent_of_core = out.user_percent + out.system_percent;
        out.cpu_percent_per_second = Percentiles::of(&per_second);
        out.vm_hwm_kib_after_window =
            process::status(pid).ok().and_then(|s| s.vm_hwm).unwrap_or(0) / 1024;

        // The offer follows production's usage.
        for cycle in 0..PER_REPEAT {
            agent.check()?;
            if let Err(e) = self.offer_cycle(&mut out) {
                out.problems.push(format!("offer cycle {}: {e}", cycle + 1));
            }
        }
        progress(Progress::Say(&format!(
            "repeat {r}: offer followed in {:?} ms (down) and {:?} ms (up); preempting",
            out.offer_down_ms.iter().map(|v| v.round()).collect::<Vec<_>>(),
            out.offer_up_ms.iter().map(|v| v.round()).collect::<Vec<_>>(),
        )));

        // Preemption → Event.
        let mut used = Vec::new();
        for _ in 0..PER_REPEAT {
            agent.check()?;
            let Some(victim) = fresh.pop() else {
                out.problems.push("no best-effort pod left to preempt".into());
                break;
            };
            used.push(victim.name.clone());
            if let Err(e) = self.preempt(&socket, &victim, &mut out) {
                out.problems.push(format!("preempting {}: {e}", victim.name));
            }
            // The next one on its own, not queued behind this one's eviction.
            pause(&plan.stop, Duration::from_millis(500))?;
        }
        agent.check()?;
        out.agent_events = overbook_agent::api::get(&socket, "/v1/events?after=0")
            .map(|body| {
                body.lines()
                    .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                    .filter(|e| {
                        matches!(
                            e["kind"].as_str(),
                            Some("offered" | "api-written" | "api-write-failed")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let status = process::status(pid).ok();
        out.vm_hwm_kib = status.and_then(|s| s.vm_hwm).unwrap_or(0) / 1024;
        out.vm_rss_kib = status.and_then(|s| s.vm_rss).unwrap_or(0) / 1024;
        out.threads = status.map_or(0, |s| s.threads);
        drop(agent);
        for p in &out.problems {
            progress(Progress::Say(&format!("repeat {r}: {p}")));
        }
        Ok((out, used))
    }

    /// One hog: its start (the offer down), its end (the offer up).
    fn offer_cycle(&self, out: &mut RepeatResult) -> Result<(), String> {
        let kube = &self.cluster.kube;
        let node = &self.cluster.node;
        let need = self.plan.hog as f64 / MIB as f64 + MOVE;
        // The offer must have room to fall: not while launches wait (zero).
        let mut before = 0.0;
        let roomy = poll_until(&self.plan.stop, Duration::from_secs(60), || {
            before = kube.offer(node)?.unwrap_or(0.0);
            Ok(before >= need)
        })?;
        if roomy.is_none() {
            return Err(format!("the offer stayed below {need:.0} MiB for 60 s ({before} MiB)"));
        }
        out.offer_mib_before.push(before);
        // Held untouched once ready: production's usage changes, nothing else.
        let args = vec!["anon".to_string(), format!("{}MiB", self.plan.hog / MIB), "--idle".into()];
        let spawned = Instant::now();
        let mut hog = self.node.worker_in(&self.plan.workload, self.hog_cg, &args)?;
        // The instant the kill was sent: its memory goes as it exits.
        let ended = |hog: &mut super::Worker| {
            let sent = Instant::now();
            let _ = hog.child.kill();
            let _ = hog.child.wait();
            sent
        };
        if let Err(e) = hog.ready(Duration::from_secs(30)) {
            ended(&mut hog);
            return Err(e);
        }
        let ready = Instant::now();
        out.hog_ready_ms.push(ms(ready - spawned));
        let down = poll_until(&self.plan.stop, Duration::from_secs(30), || {
            Ok(kube.offer(node)?.is_some_and(|m| m <= before - MOVE))
        });
        let down = match down {
            Ok(d) => d,
            Err(e) => {
                ended(&mut hog);
                return Err(e);
            }
        };
        match down {
            Some(t) => {
                out.offer_down_ms.push(ms(t - spawned));
                out.offer_down_from_ready_ms.push(ms(t.saturating_duration_since(ready)));
            }
            None => out.problems.push(format!(
                "the offer did not fall by {MOVE} MiB from {before} MiB within 30 s of the hog"
            )),
        }
        // Each change on its own (the agent tells at most one a second).
        pause(&self.plan.stop, Duration::from_secs(2))?;
        let low = match kube.offer(node) {
            Ok(low) => low.unwrap_or(0.0),
            Err(e) => {
                ended(&mut hog);
                return Err(e);
            }
        };
        let killed = ended(&mut hog);
        let up = poll_until(&self.plan.stop, Duration::from_secs(30), || {
            Ok(kube.offer(node)?.is_some_and(|m| m >= low + MOVE))
        })?;
        match up {
            Some(t) => out.offer_up_ms.push(ms(t - killed)),
            None => out.problems.push(format!(
                "the offer did not rise by {MOVE} MiB from {low} MiB within 30 s of the hog's end"
            )),
        }
        pause(&self.plan.stop, Duration::from_secs(2))?;
        Ok(())
    }

    /// `overbook preempt <pod> --how kill`, through the socket; then the
    /// pod's `Killed` Event, polled.
    fn preempt(
        &self,
        socket: &std::path::Path,
        victim: &BenchPod,
        out: &mut RepeatResult,
    ) -> Result<(), String> {
        let order = overbook_agent::tasks::PreemptRequest {
            name: victim.dir.clone(),
            how: "kill".into(),
            wait: true,
        };
        let body = serde_json::to_string(&order).map_err(|e| e.to_string())?;
        let sent = Instant::now();
        let reply = overbook_agent::api::post(socket, "/v1/preempt", &body)
            .map_err(|e| format!("the agent refused: {e}"))?;
        out.preempt_reply_ms.push(ms(sent.elapsed()));
        let reply: serde_json::Value =
            serde_json::from_str(&reply).map_err(|e| format!("the agent's answer: {e}"))?;
        if reply["preempted"] != true {
            return Err(format!("not preempted: {reply}"));
        }
        let kube = &self.cluster.kube;
        let seen = poll_until(&self.plan.stop, Duration::from_secs(30), || {
            kube.has_event(&victim.name, "Killed")
        })?;
        match seen {
            Some(t) => out.event_ms.push(ms(t - sent)),
            None => out.problems.push(format!("no Killed Event on {} within 30 s", victim.name)),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_mib() {
        assert_eq!(quantity_mib("512Mi"), Some(512.0));
        assert_eq!(quantity_mib("1Gi"), Some(1024.0));
        assert_eq!(quantity_mib("0"), Some(0.0));
        assert_eq!(quantity_mib("1048576"), Some(1.0));
        assert_eq!(quantity_mib("2048Ki"), Some(2.0));
        assert_eq!(quantity_mib("x"), None);
        assert_eq!(quantity_mib("-1Mi"), None);
    }

    #[test]
    fn a_stat_has_its_interval_and_extremes() {
        let s = Stat::of(&[1.0, 2.0, 3.0, 4.0, f64::NAN]);
        assert_eq!((s.n, s.min, s.max, s.mean), (4, Some(1.0), Some(4.0), Some(2.5)));
        let [lo, hi] = s.ci95.expect("an interval");
        assert!((1.0..=2.5).contains(&lo) && (2.5..=4.0).contains(&hi), "{lo} {hi}");
        assert_eq!(Stat::of(&[]).n, 0);
        assert_eq!(Stat::of(&[5.0]).ci95, Some([5.0, 5.0]));
    }
}
