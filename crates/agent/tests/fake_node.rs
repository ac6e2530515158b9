//! The agent's executor and task supervisor without root: the agent runs
//! over a fake cgroup v1 tree (plain files in a temporary directory, laid
//! out as cgroupfs; see `crates/linux/tests/fake_tree.rs`), with real
//! processes of this test listed in its `cgroup.procs` files.
//!
//! Why fake files and real processes: what the kernel alone does (charge
//! memory, settle a freeze, refuse an rmdir) is tested as root on the real
//! kernel (`overbook-lab`'s `real_node`, `restarts`, the VM suite); what
//! the agent does with it (which container it acts on, the guards, which
//! events and states follow, which processes get the signal) runs here on
//! any machine. A freeze "settles" because the fake `freezer.state` reads
//! back what was written; a kill signals the listed pids through pidfds,
//! as on a real v1 node.

use overbook_agent::tasks::{PreemptRequest, RunError, RunRequest};
use overbook_agent::{Agent, AgentConfig, EventLog};
use overbook_core::{Class, Time};
use overbook_linux::V1Cgroups;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

const MIB: u64 = 1 << 20;
/// A real v1 `memory.stat` (the linux crate's fixture): its counters never
/// move here, so nothing ever thrashes.
const STAT: &str = include_str!("../../linux/tests/fixtures/v1/leaf/memory.stat");

/// A fake v1 node: `memory/<root>` and `freezer/<root>` in a temp dir.
struct FakeNode {
    dir: tempfile::TempDir,
    children: Vec<Child>,
}

impl FakeNode {
    fn new() -> FakeNode {
        let node = FakeNode { dir: tempfile::tempdir().expect("temp dir"), children: Vec::new() };
        node.cgroup("", 64 * MIB);
        node
    }

    fn memory(&self) -> PathBuf {
        self.dir.path().join("memory")
    }

    fn freezer(&self) -> PathBuf {
        self.dir.path().join("freezer")
    }

    fn cpu(&self) -> PathBuf {
        self.dir.path().join("cpu")
    }

    fn cpuacct(&self) -> PathBuf {
        self.dir.path().join("cpuacct")
    }

    fn memory_dir(&self, name: &str) -> PathBuf {
        self.memory().join("node").join(name)
    }

    fn freezer_state(&self, name: &str) -> String {
        let file = self.freezer().join("node").join(name).join("freezer.state");
        fs::read_to_string(file).expect("freezer.state").trim().to_string()
    }

    /// A cgroup `name` under the node (`""`: the node itself) using `usage`.
    fn cgroup(&self, name: &str, usage: u64) {
        let memory = self.memory_dir(name);
        let put = |dir: &Path, file: &str, text: &str| {
            fs::create_dir_all(dir).expect("mkdir");
            fs::write(dir.join(file), text).expect("write");
        };
        put(&memory, "memory.usage_in_bytes", &format!("{usage}\n"));
        put(&memory, "memory.stat", STAT);
        put(&memory, "memory.limit_in_bytes", &format!("{}\n", 1u64 << 40));
        put(&memory, "memory.failcnt", "0\n");
        for knob in ["memory.soft_limit_in_bytes", "memory.swappiness", "memory.force_empty"] {
            put(&memory, knob, "");
        }
        let freezer = self.freezer().join("node").join(name);
        put(&freezer, "freezer.state", "THAWED\n");
        for dir in [&memory, &freezer] {
            put(dir, "cgroup.procs", "");
            put(dir, "tasks", "");
        }
    }

    /// A real process of this test (a `sleep`), listed as `name`'s member.
    fn member(&mut self, name: &str) -> u32 {
        let child = Command::new("sleep").arg("600").spawn().expect("sleep");
        let pid = child.id();
        fs::write(self.memory_dir(name).join("cgroup.procs"), format!("{pid}\n")).expect("procs");
        self.children.push(child);
        pid
    }

    /// Whether this test's child `pid` has exited (reaped now if so).
    fn exited(&mut self, pid: u32) -> bool {
        let child = self.children.iter_mut().find(|c| c.id() == pid).expect("a child of ours");
        child.try_wait().expect("wait").is_some()
    }

    fn agent(&self, preemptor: &str) -> Agent<V1Cgroups> {
        self.agent_with(preemptor, "")
    }

    /// An agent whose config adds `more` (whole TOML tables) to the usual.
    fn agent_with(&self, preemptor: &str, more: &str) -> Agent<V1Cgroups> {
        let toml = format!(
            "[node]\nroot = \"node\"\ncapacity = \"1GiB\"\n\
             [agent]\nstate_db = \"\"\ntask_log_dir = \"{}\"\n\
             [[classes]]\npattern = \"be-*\"\nclass = \"best-effort\"\n\
             [[classes]]\npattern = \"critical-*\"\nclass = \"critical\"\n\
             [policy.preemptor]\nkind = \"{preemptor}\"\n{more}",
            self.dir.path().join("logs").display()
        );
        let config = AgentConfig::parse(&toml, "fake.toml").expect("config");
        let cg = (V1Cgroups::new(self.memory(), Some(self.freezer())))
            .with_cpu(self.cpu())
            .with_cpuacct(self.cpuacct());
        Agent::new(&config, cg, EventLog::in_memory(1000)).expect("agent")
    }
}

impl Drop for FakeNode {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn kinds<C>(agent: &Agent<C>) -> Vec<String> {
    agent.events().recent().map(|e| e.kind.as_str().to_string()).collect()
}

fn order(name: &str, how: &str) -> PreemptRequest {
    PreemptRequest { name: name.into(), how: how.into(), wait: true }
}

#[test]
fn a_kill_signals_every_member_of_the_victim_and_no_one_else() {
    let mut node = FakeNode::new();
    node.cgroup("be-victim", 8 * MIB);
    node.cgroup("be-bystander", 8 * MIB);
    let victim = node.member("be-victim");
    let bystander = node.member("be-bystander");
    let mut agent = node.agent("kill");
    agent.tick(Time::ZERO).expect("tick");
    let answer = agent.preempt_by_name(Time::from_secs(1), &order("be-victim", "kill"));
    let answer = answer.expect("a best-effort container is preemptible");
    assert_eq!(answer["preempted"], true, "{answer}");
    let preempted = agent.events().recent().find(|e| e.kind.as_str() == "preempted");
    let preempted = preempted.expect("a preempted event");
    assert_eq!(preempted.container.as_deref(), Some("/node/be-victim"));
    assert_eq!(preempted.detail["how"], "kill");
    assert_eq!(preempted.detail["report"]["signalled"], 1, "{}", preempted.detail);
    assert_eq!(preempted.detail["evidence"]["detector"], "operator");
    // The signal is real: the victim's process is gone, the other lives.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !node.exited(victim) {
        assert!(std::time::Instant::now() < deadline, "the victim outlived its kill");
        std::thread::yield_now();
    }
    assert!(!node.exited(bystander), "a container not chosen is never touched");
    assert_eq!(node.freezer_state("be-victim"), "THAWED", "left thawed after the kill");
}

#[test]
fn a_protected_container_is_never_preempted_by_any_path() {
    let mut node = FakeNode::new();
    node.cgroup("prod-db", 8 * MIB);
    node.cgroup("critical-manager", 8 * MIB);
    let db = node.member("prod-db");
    let manager = node.member("critical-manager");
    let mut agent = node.agent("kill");
    agent.tick(Time::ZERO).expect("tick");
    for name in ["prod-db", "critical-manager"] {
        for how in ["kill", "freeze", "freeze-and-swap-out", "policy"] {
            let refused = agent.preempt_by_name(Time::from_secs(1), &order(name, how));
            assert!(
                matches!(refused, Err(RunError::Protected { .. })),
                "{name} {how}: {refused:?}"
            );
        }
    }
    assert!(!node.exited(db) && !node.exited(manager));
    assert_eq!(node.freezer_state("prod-db"), "THAWED");
    assert!(!kinds(&agent).iter().any(|k| k == "preempted"), "{:?}", kinds(&agent));
}

#[test]
fn a_frozen_container_is_thawed_by_the_policy_once_memory_is_back() {
    let mut node = FakeNode::new();
    node.cgroup("be-paused", 8 * MIB);
    let pid = node.member("be-paused");
    let mut agent = node.agent("suspend");
    agent.tick(Time::ZERO).expect("tick");
    let answer = agent.preempt_by_name(Time::from_secs(1), &order("be-paused", "freeze"));
    assert_eq!(answer.expect("frozen")["preempted"], true);
    assert_eq!(node.freezer_state("be-paused"), "FROZEN");
    let shown = agent.status();
    let c = shown.containers.iter().find(|c| c.name == "be-paused").expect("shown");
    assert_eq!(c.state, "frozen");
    let again = agent.preempt_by_name(Time::from_secs(1), &order("be-paused", "kill"));
    assert!(again.is_err(), "a suspended container is not preempted twice: {again:?}");
    // The node has all its memory free: the policy resumes it, first come
    // first served, and the executor thaws it.
    for s in 2..40 {
        agent.tick(Time::from_secs(s)).expect("tick");
        if node.freezer_state("be-paused") == "THAWED" {
            break;
        }
    }
    assert_eq!(node.freezer_state("be-paused"), "THAWED", "{:?}", kinds(&agent));
    let resumed = agent.events().recent().find(|e| e.kind.as_str() == "resumed").expect("resumed");
    assert_eq!(resumed.detail["how"], "thaw");
    assert!(!node.exited(pid), "a freeze keeps the work");
}

#[test]
fn a_task_is_started_in_its_container_and_its_end_recorded() {
    let mut node = FakeNode::new();
    let mut agent = node.agent("kill");
    agent.tick(Time::ZERO).expect("tick");
    // The agent makes the container (an mkdir in each hierarchy); the
    // fake's directories need the files a kernel would make with them, so
    // they are there already.
    cpu_cgroup(&mut node, "be-job");
    let marker = node.dir.path().join("ran");
    let request = be_job(&format!("echo ran > {}", marker.display()));
    let reply = agent.submit(Time::from_secs(1), request).expect("admitted");
    // Best-effort work is launched by the policy, at its next step.
    assert_eq!(reply.state, "queued");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut s = 2;
    while !kinds(&agent).iter().any(|k| k == "started") {
        let all: Vec<String> =
            agent.events().recent().map(|e| format!("{} {}", e.kind.as_str(), e.detail)).collect();
        assert!(
            std::time::Instant::now() < deadline
                && !all.iter().any(|k| k.starts_with("start-failed")),
            "never started: {all:?}"
        );
        agent.tick(Time::from_secs(s)).expect("tick");
        s += 1;
    }
    // The child joined its container before its exec: it wrote itself in
    // (`0`, the writer, as the kernel takes it).
    let joined = fs::read_to_string(node.memory_dir("be-job").join("cgroup.procs")).expect("procs");
    assert_eq!(joined, "0", "the child wrote itself into its container");
    while !kinds(&agent).iter().any(|k| k == "finished") {
        assert!(std::time::Instant::now() < deadline, "never finished: {:?}", kinds(&agent));
        agent.tick(Time::from_secs(s)).expect("tick");
        s += 1;
    }
    assert_eq!(fs::read_to_string(&marker).expect("the command ran"), "ran\n");
    let finished = agent.events().recent().find(|e| e.kind.as_str() == "finished").expect("end");
    assert_eq!(finished.detail["status"], "exit status: 0", "{}", finished.detail);
    let missing = RunRequest {
        name: "prod-x".into(),
        class: Class::Production,
        mem_peak: None,
        job: None,
        weight: None,
        command: vec!["no-such-program-overbook".into()],
        cwd: None,
    };
    let refused = agent.submit(Time::from_secs(s), missing);
    assert!(refused.is_err(), "a program that is not there is refused at once: {refused:?}");
    let huge = RunRequest {
        name: "be-huge".into(),
        class: Class::BestEffort,
        mem_peak: Some(2 << 30),
        job: None,
        weight: None,
        command: vec!["sh".into(), "-c".into(), "true".into()],
        cwd: None,
    };
    let refused = agent.submit(Time::from_secs(s), huge).expect_err("it can never fit");
    assert_eq!(
        refused.to_string(),
        "refused by the launcher: it asks for 2.0 GiB (--mem-peak) and the node has 1.0 GiB: \
         it can never fit"
    );
    let queued = agent.events().recent().find(|e| e.kind.as_str() == "queued").expect("queued");
    assert_eq!(queued.detail["job"], "be-job", "the job by its name: {}", queued.detail);
}

#[test]
fn best_effort_containers_get_only_idle_cpu_and_production_keeps_its_own() {
    let mut node = FakeNode::new();
    node.cgroup("be-batch", 8 * MIB);
    node.cgroup("prod-web", 8 * MIB);
    node.cgroup("be-empty", 0);
    let batch = node.member("be-batch");
    node.member("prod-web");
    // The container's mirror in the cpu hierarchy, as a kernel makes it
    // (without `cpu.idle`: an older kernel, so the lowest weight instead).
    // Its process is still in the hierarchy's root: the agent moves it in.
    let mirror = node.cpu().join("node/be-batch");
    fs::create_dir_all(&mirror).expect("cpu mirror");
    fs::write(mirror.join("cpu.shares"), "1024\n").expect("shares");
    fs::write(mirror.join("cgroup.procs"), "").expect("procs");
    let mut agent = node.agent("kill");
    agent.tick(Time::ZERO).expect("tick");
    assert_eq!(fs::read_to_string(mirror.join("cpu.shares")).expect("shares"), "2");
    assert_eq!(fs::read_to_string(mirror.join("cgroup.procs")).expect("procs"), batch.to_string());
    assert!(!node.cpu().join("node/prod-web").exists(), "production is left as it is");
    assert!(!node.cpu().join("node/be-empty").exists(), "set once it has processes");
    let set: Vec<_> = agent.events().recent().filter(|e| e.kind.as_str() == "cpu-share").collect();
    assert_eq!(set.len(), 1, "{:?}", kinds(&agent));
    assert_eq!(set[0].detail["set"], "cpu.shares = 2");
    agent.tick(Time::from_secs(5)).expect("tick");
    let again = agent.events().recent().filter(|e| e.kind.as_str() == "cpu-share").count();
    assert_eq!(again, 1, "set once a container");
}

#[test]
fn best_effort_containers_share_the_cpu_ceiling_and_production_has_none() {
    let mut node = FakeNode::new();
    let make = |node: &mut FakeNode, name: &str| cpu_cgroup(node, name);
    for name in ["be-a", "be-b", "be-c", "prod-web"] {
        make(&mut node, name);
    }
    node.member("be-a");
    node.member("be-b");
    node.member("prod-web");
    let mirrors = node.cpu().join("node");
    let quota = |name: &str| {
        let f = mirrors.join(name).join("cpu.cfs_quota_us");
        fs::read_to_string(f).expect("quota").trim().to_string()
    };
    let mut agent = node.agent_with("kill", "[cpu]\nbest-effort-max = 0.5\n");
    agent.tick(Time::ZERO).expect("tick");
    assert_eq!(
        (quota("be-a"), quota("be-b")),
        ("25000".into(), "25000".into()),
        "half a CPU, split"
    );
    assert_eq!(quota("prod-web"), "-1", "production has no ceiling");
    assert_eq!(quota("be-c"), "-1", "set once it has processes");
    let set: Vec<_> = agent.events().recent().filter(|e| e.kind.as_str() == "cpu-max").collect();
    assert_eq!(set.len(), 2, "{:?}", kinds(&agent));
    assert_eq!(set[0].detail["containers"], 2);
    assert_eq!(set[0].detail["set"], "cpu.cfs_quota_us = 25000 of cpu.cfs_period_us = 100000");
    agent.tick(Time::from_secs(1)).expect("tick");
    let again = agent.events().recent().filter(|e| e.kind.as_str() == "cpu-max").count();
    assert_eq!(again, 2, "written again only when the split changes");
    node.member("be-c");
    // Members are counted at the next full read: on a calm node, once a
    // calm period (3 s by default) has passed.
    agent.tick(Time::from_secs(10)).expect("tick");
    for name in ["be-a", "be-b", "be-c"] {
        assert_eq!(quota(name), "16667", "{name}: half a CPU between three");
    }
    assert_eq!(quota("prod-web"), "-1");
    // A frozen container (here found so) uses no CPU: it takes no part.
    make(&mut node, "be-d");
    node.member("be-d");
    fs::write(node.freezer().join("node/be-d/freezer.state"), "FROZEN\n").expect("freeze");
    agent.tick(Time::from_secs(20)).expect("tick");
    assert_eq!(quota("be-d"), "-1", "frozen: no part");
    assert_eq!(quota("be-a"), "16667", "still split by three");
}

#[test]
fn a_best_effort_task_the_agent_starts_has_its_cpu_share_and_ceiling_before_it_runs() {
    let mut node = FakeNode::new();
    let mut agent = node.agent_with("kill", "[cpu]\nbest-effort-max = 0.5\n");
    agent.tick(Time::ZERO).expect("tick");
    // The files a kernel would make with the container's directories.
    cpu_cgroup(&mut node, "be-job");
    let mirror = node.cpu().join("node/be-job");
    let seen = node.dir.path().join("seen");
    // What its cpu cgroup says when its command first runs.
    let request = be_job(&format!(
        "echo $(cat {}) $(cat {}) > {}",
        mirror.join("cpu.shares").display(),
        mirror.join("cpu.cfs_quota_us").display(),
        seen.display()
    ));
    agent.submit(Time::from_secs(1), request).expect("admitted");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut s = 2;
    while !kinds(&agent).iter().any(|k| k == "finished") {
        assert!(std::time::Instant::now() < deadline, "never finished: {:?}", kinds(&agent));
        agent.tick(Time::from_secs(s)).expect("tick");
        s += 1;
    }
    assert_eq!(
        fs::read_to_string(&seen).expect("the command ran"),
        "2 50000\n",
        "the lowest weight and the whole half CPU (no other best-effort container runs)"
    );
    let before: Vec<String> = (agent.events().recent())
        .filter(|e| e.detail["before_start"] == true)
        .map(|e| format!("{} {}", e.kind.as_str(), e.detail["set"]))
        .collect();
    assert_eq!(
        before,
        [
            "cpu-share \"cpu.shares = 2\"",
            "cpu-max \"cpu.cfs_quota_us = 50000 of cpu.cfs_period_us = 100000\""
        ],
        "{:?}",
        kinds(&agent)
    );
    let shares = agent.events().recent().filter(|e| e.kind.as_str() == "cpu-share").count();
    assert_eq!(shares, 1, "not set again when a full read finds it: {:?}", kinds(&agent));
}

/// A best-effort task `be-job` of 4 MiB running `sh -c script`.
fn be_job(script: &str) -> RunRequest {
    RunRequest {
        name: "be-job".into(),
        class: Class::BestEffort,
        mem_peak: Some(4 * MIB),
        job: None,
        weight: None,
        command: vec!["sh".into(), "-c".into(), script.into()],
        cwd: None,
    }
}

/// A container with its cpu and cpuacct mirrors as a kernel makes them,
/// with the knobs' files (no CPU time used yet).
fn cpu_cgroup(node: &mut FakeNode, name: &str) {
    node.cgroup(name, 8 * MIB);
    let mirror = node.cpu().join("node").join(name);
    fs::create_dir_all(&mirror).expect("cpu mirror");
    for (file, value) in [
        ("cpu.shares", "1024\n"),
        ("cpu.cfs_period_us", "100000\n"),
        ("cpu.cfs_quota_us", "-1\n"),
        ("cgroup.procs", ""),
    ] {
        fs::write(mirror.join(file), value).expect("cpu file");
    }
    let acct = node.cpuacct().join("node").join(name);
    fs::create_dir_all(&acct).expect("cpuacct mirror");
    fs::write(acct.join("cpuacct.usage"), "0\n").expect("cpuacct file");
    fs::write(acct.join("cgroup.procs"), "").expect("cpuacct file");
}

/// With `best-effort-max = "leftover"` the ceiling starts at the floor
/// (what the rest of the node uses is not known from one reading), then
/// is what the target leaves once the rest is seen to use nothing: here
/// the best-effort containers claim more time than the whole node was
/// busy, so the rest's part is 0 and they get the whole target.
#[test]
fn best_effort_containers_get_what_the_rest_leaves_from_the_floor_up() {
    let mut node = FakeNode::new();
    for name in ["be-a", "be-b", "prod-web"] {
        cpu_cgroup(&mut node, name);
        node.member(name);
    }
    let config =
        "[cpu]\nbest-effort-max = \"leftover\"\nbusy-target = 1.0\nbest-effort-min = 0.3\n";
    let mut agent = node.agent_with("kill", config);
    let mirrors = node.cpu().join("node");
    let quota = |name: &str| {
        let f = mirrors.join(name).join("cpu.cfs_quota_us");
        fs::read_to_string(f).expect("quota").trim().to_string()
    };
    let caps = |agent: &Agent<V1Cgroups>| -> Vec<serde_json::Value> {
        let set = agent.events().recent().filter(|e| e.kind.as_str() == "cpu-max");
        set.map(|e| e.detail.clone()).collect()
    };
    agent.tick(Time::ZERO).expect("tick");
    assert_eq!(
        (quota("be-a"), quota("be-b")),
        ("15000".into(), "15000".into()),
        "the floor, split"
    );
    let first = caps(&agent);
    assert_eq!(first.len(), 2, "{:?}", kinds(&agent));
    assert!(first[0]["others_cpus"].is_null(), "not known from one reading: {}", first[0]);
    let acct = node.cpuacct().join("node");
    for name in ["be-a", "be-b"] {
        fs::write(acct.join(name).join("cpuacct.usage"), "1000000000000000\n").expect("usage");
    }
    agent.tick(Time::from_secs(10)).expect("tick");
    let stat = fs::read_to_string("/proc/stat").expect("/proc/stat");
    let cpus = (stat.lines())
        .filter(|l| {
            l.strip_prefix("cpu").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count();
    let half = (cpus as u64 * 100_000 / 2).to_string();
    assert_eq!((quota("be-a"), quota("be-b")), (half.clone(), half), "{cpus} CPUs, split");
    let second = caps(&agent);
    assert_eq!(second.len(), 4, "{:?}", kinds(&agent));
    assert_eq!(second[3]["others_cpus"], 0.0, "{}", second[3]);
    assert_eq!(quota("prod-web"), "-1", "production has no ceiling");
    let procs = fs::read_to_string(acct.join("prod-web/cgroup.procs")).expect("procs");
    assert!(procs.is_empty(), "production's time is not read, its processes not moved: {procs}");
}
