//! The agent on a real kernel: a small node cgroup with a memory limit,
//! a production container whose working set is a file in the page cache, and
//! best-effort containers holding anonymous memory. When they do not all
//! fit, the kernel evicts pages and their owners fault them back: real
//! thrashing, seen by the agent only through the kernel's counters. On
//! the host that is production's page cache; in the VM (its file on
//! tmpfs, swapped to zram) the kernel may take the room from the
//! best-effort containers alone, so the two thrashing-window tests ask it
//! of the node.
//!
//! Runs on whatever this host has (cgroup v1 here, v2 in the VM). Needs
//! root and a memory controller; without them every test says so loudly and
//! FAILS, unless `OVERBOOK_ALLOW_SKIP=1`. Everything made is removed by a
//! guard's `Drop`, on failure too.

mod common;

use common::*;
use overbook_agent::{Agent, EventLog};
use overbook_core::Time;
use overbook_linux::parse::FreezerState;
use overbook_linux::{
    host_cgroups, CgroupVersion, ContainerCgroups, ContainerControl, HostSupport, Limit,
    NodeCgroups,
};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[test]
fn thrashing_longer_than_the_window_kills_exactly_one_best_effort_container() {
    let Some(mut node) = Node::new("long", 256 * MIB) else { return };
    let prod = node.production_reader(150);
    let be1 = node.hog("be-1", 64, None);
    let be2 = node.hog("be-2", 64, None);
    let mut agent = node.agent(KILL);
    let start = Instant::now();
    // The node's, not production's: in the VM (tmpfs, zram) the kernel
    // may take the room from the hogs alone, which then fault it back.
    let before = node.node_refaults();
    let took =
        run_for(&mut agent, start, Duration::from_secs(40), |a| !kinds(a, "preempted").is_empty());
    let preempted = kinds(&agent, "preempted");
    assert_eq!(preempted.len(), 1, "one victim within 40 s: {preempted:?}");
    assert!(node.node_refaults() > before, "the node really faulted pages back");
    assert!(took >= Duration::from_secs(2), "not before the tolerance window: {took:?}");
    // Three more windows: the pressure is gone, nobody else pays.
    run_for(&mut agent, start, Duration::from_secs(6), |_| false);
    let preempted = kinds(&agent, "preempted");
    assert_eq!(preempted.len(), 1, "exactly one victim: {preempted:?}");
    let victim = preempted[0]["container"].as_str().expect("named").to_string();
    assert!(victim.ends_with("/be-1") || victim.ends_with("/be-2"), "{victim}");
    assert_eq!(preempted[0]["detail"]["how"], "kill");
    assert!(preempted[0]["detail"]["evidence"]["thrashing"]
        .as_array()
        .is_some_and(|t| !t.is_empty()));
    let dead = if victim.ends_with("/be-1") { be1 } else { be2 };
    let live = if dead == be1 { be2 } else { be1 };
    assert!(!node.workers[dead].alive(), "the victim's process is gone");
    assert!(node.workers[live].alive(), "the other best-effort container runs on");
    assert!(node.workers[prod].alive(), "production is never touched");
    assert!(node.workers[prod].last_rate().is_some_and(|r| r > 0.0));
}

#[test]
fn thrashing_shorter_than_the_window_preempts_nobody() {
    let Some(mut node) = Node::new("short", 256 * MIB) else { return };
    let prod = node.production_reader(150);
    // A window three times 000's: a burst of one second and the refaults
    // after it lasted 5.1 s in a VM on a busy host, and were rightly acted on
    // at 5 s.
    let mut agent = node.agent(
        "[policy.detector]\nkind = \"constraint-thrashing\"\ntolerance = 15.0\n\
         [policy.preemptor]\nkind = \"kill\"\n",
    );
    let start = Instant::now();
    run_for(&mut agent, start, Duration::from_millis(500), |_| false);
    let before = node.node_refaults();
    let production_before = node.refaults("prod-reader");
    // A burst: 128 MiB for one second, then gone by itself. Where the
    // kernel finds the room is its choice: production's pages, which it
    // reads all the time, or the burst's own, which it then touches back.
    // Either is thrashing the detector sees (it watches every container),
    // and either lasts no longer than the burst.
    let burst = node.hog("be-burst", 128, Some(1.0));
    let exited = |n: &Node| {
        matches!(n.workers[burst].lines.try_recv(), Err(mpsc::TryRecvError::Disconnected))
    };
    run_for(&mut agent, start, Duration::from_secs(30), |_| exited(&node));
    assert!(exited(&node), "the burst ended by itself");
    let after = node.node_refaults();
    eprintln!(
        "short burst: the node's faults {before} -> {after}, production's {production_before} -> {}",
        node.refaults("prod-reader")
    );
    assert!(after > before, "the burst made the node fault pages back");
    // Past a whole window after the burst: a watch that outlived the
    // pressure would fire by then.
    run_for(&mut agent, start, Duration::from_secs(16), |_| false);
    assert_eq!(kinds(&agent, "preempted"), Vec::<serde_json::Value>::new());
    drop(agent);
    assert!(node.workers[prod].alive());
}

#[test]
fn production_and_critical_containers_are_never_preempted_whatever_their_usage() {
    let Some(mut node) = Node::new("protected", 256 * MIB) else { return };
    let prod = node.production_reader(150);
    let big = node.hog("prod-hog", 64, None);
    let crit = node.hog("crit-am", 64, None);
    let mut agent = node.agent(KILL);
    let start = Instant::now();
    let before = node.refaults("prod-reader");
    run_for(&mut agent, start, Duration::from_secs(8), |_| false);
    assert!(node.refaults("prod-reader") > before, "the node thrashed");
    assert_eq!(kinds(&agent, "preempted"), Vec::<serde_json::Value>::new());
    assert_eq!(kinds(&agent, "preempt-refused"), Vec::<serde_json::Value>::new());
    for w in [prod, big, crit] {
        assert!(node.workers[w].alive());
    }
}

#[test]
fn a_frozen_container_is_resumed_when_memory_is_back_even_by_a_restarted_agent() {
    let Some(mut node) = Node::new("freeze", 256 * MIB) else { return };
    let prod = node.production_reader(180);
    let be = node.hog("be-1", 100, None);
    let freeze = "[policy.detector]\nkind = \"constraint-thrashing\"\ntolerance = 2.0\n\
                  [policy.preemptor]\nkind = \"suspend\"\n";
    let mut agent = node.agent(freeze);
    let start = Instant::now();
    run_for(&mut agent, start, Duration::from_secs(40), |a| !kinds(a, "preempted").is_empty());
    let preempted = kinds(&agent, "preempted");
    assert_eq!(preempted.len(), 1, "{preempted:?}");
    assert_eq!(preempted[0]["detail"]["how"], "freeze");
    let be_path = node.root.child("be-1").expect("valid");
    assert_eq!(node.cg.freezer_state(&be_path).expect("read").done(), Some(FreezerState::Frozen));
    assert!(node.workers[be].alive(), "frozen, not killed");

    // The agent dies; production finishes; a new agent finds the frozen
    // container and thaws it once it fits.
    drop(agent);
    let mut w = node.workers.swap_remove(prod);
    let _ = node.cg.kill(&node.root.child("prod-reader").expect("valid"));
    let _ = w.child.wait();
    let mut agent = node.agent(freeze);
    let start = Instant::now();
    run_for(&mut agent, start, Duration::from_secs(20), |a| !kinds(a, "resumed").is_empty());
    let found = kinds(&agent, "found");
    assert!(found.iter().any(|f| f["detail"]["frozen"] == true), "{found:?}");
    assert_eq!(kinds(&agent, "resumed").len(), 1);
    assert_eq!(node.cg.freezer_state(&be_path).expect("read").done(), Some(FreezerState::Thawed));
}

/// A freeze-and-swap-out freezes at once and pushes the memory out on a
/// thread of its own, so the agent keeps ticking; its end is told as an
/// event of its own, after the preemption's, with what the kernel took.
/// Needs swap: the VM has it (zram); a host without it says so loudly.
/// (Swap is not made here for the test: it would change what the tests
/// running beside it see.)
#[test]
fn a_swap_out_runs_off_the_agent_s_loop_and_its_end_is_told() {
    let swaps = overbook_linux::host::swaps().expect("/proc/swaps");
    if swaps.areas.is_empty() {
        let why = "this machine has no swap";
        let flag = |k: &str| std::env::var(k).is_ok_and(|v| v == "1");
        assert!(
            !flag("OVERBOOK_VM") && (flag("OVERBOOK_NOT_VM") || flag("OVERBOOK_ALLOW_SKIP")),
            "the swap-out test cannot run here: {why} (it runs in the VM: `scripts/vm test`)"
        );
        eprintln!(
            "\n!!!!! swap-out test: CANNOT RUN: {why}; NOT RUN on this host (told it is not \
             the VM): it runs in the cgroup v2 VM (`scripts/vm test --only real_node`)\n"
        );
        return;
    }
    let Some(mut node) = Node::new("swapout", 256 * MIB) else { return };
    node.hog("be-big", 96, None);
    let mut agent = node.agent(KILL);
    let start = Instant::now();
    let big = |a: &Agent<_>| {
        a.status().containers.iter().any(|c| c.name == "be-big" && c.usage >= 90 * MIB)
    };
    run_for(&mut agent, start, Duration::from_secs(20), big);
    assert!(big(&agent), "the hog holds its 96 MiB");
    let order = overbook_agent::tasks::PreemptRequest {
        name: "be-big".into(),
        how: "freeze-and-swap-out".into(),
        wait: true,
    };
    let now = Time::from_duration(start.elapsed());
    let reply = agent.preempt_by_name(now, &order).expect("preempts");
    assert_eq!(reply["preempted"], true, "{reply}");
    let path = node.root.child("be-big").expect("valid");
    assert_eq!(node.cg.freezer_state(&path).expect("read").done(), Some(FreezerState::Frozen));
    run_for(&mut agent, start, Duration::from_secs(60), |a| !kinds(a, "swapped-out").is_empty());
    let order_of = |kind: &str| agent.events().recent().position(|e| e.kind.as_str() == kind);
    let (preempted, swapped) = (order_of("preempted"), order_of("swapped-out"));
    assert!(preempted.is_some() && swapped > preempted, "{preempted:?} {swapped:?}");
    let done = &kinds(&agent, "swapped-out")[0];
    let got = done["detail"]["reclaimed"].as_u64().unwrap_or(0);
    assert!(got >= 48 * MIB, "the kernel took {got} of 96 MiB: {done}");
    // The first swap-out timed sets the pace the next freeze is weighed
    // by: what this one went at, not the configured guess.
    let took_us = done["detail"]["swap_out_us"].as_u64().unwrap_or(0);
    assert!(took_us > 0 && done["detail"]["pace_learned"] == true, "{done}");
    let pace = done["detail"]["swap_mb_s"].as_f64().unwrap_or(0.0);
    let went_at = got as f64 / took_us as f64;
    assert!(
        (pace - went_at).abs() <= 0.01 * went_at,
        "pace {pace} MB/s, went at {went_at}: {done}"
    );
    let limit = node.cg.limit(&path).expect("read").done().expect("there");
    assert_eq!(limit, Limit::Unlimited, "the limit is put back after the squeeze");
    drop(agent);
}

#[test]
fn a_best_effort_run_waits_until_its_memory_fits_then_runs_and_finishes() {
    use overbook_agent::tasks::RunRequest;
    use overbook_core::Class;
    let Some(node) = Node::new("run", 256 * MIB) else { return };
    let mut agent = node.agent(KILL);
    let start = Instant::now();
    let now = || Time::from_duration(start.elapsed());
    agent.tick(now()).expect("tick");
    let run = |name: &str, class, peak: Option<u64>, args: &[&str]| RunRequest {
        name: name.into(),
        class,
        mem_peak: peak,
        job: None,
        weight: None,
        command: std::iter::once(WORKLOAD).chain(args.iter().copied()).map(String::from).collect(),
        cwd: None,
    };
    let prod =
        agent.submit(now(), run("prod-hog", Class::Production, Some(200 * MIB), &["anon", "200M"]));
    assert_eq!(prod.expect("production starts").state, "started");
    let be = agent
        .submit(now(), run("be-task", Class::BestEffort, Some(100 * MIB), &["anon", "10M", "0.5"]));
    assert_eq!(be.expect("queued").state, "queued");
    let dup = agent.submit(now(), run("be-task", Class::BestEffort, None, &["anon", "1M"]));
    assert!(dup.is_err(), "{dup:?}");
    // While production holds 200 of 256 MiB, 100 MiB does not fit.
    run_for(&mut agent, start, Duration::from_secs(2), |_| false);
    let started = |a: &Agent<Box<dyn NodeCgroups>>| {
        kinds(a, "started")
            .iter()
            .filter(|e| e["container"].as_str().is_some_and(|c| c.ends_with("/be-task")))
            .count()
    };
    assert_eq!(started(&agent), 0, "{:?}", kinds(&agent, "queued"));
    assert_eq!(agent.status().queued, vec!["be-task".to_string()]);
    // Production leaves: the queued task starts, runs, and finishes.
    let _ = node.cg.kill(&node.root.child("prod-hog").expect("valid"));
    run_for(&mut agent, start, Duration::from_secs(30), |a| {
        kinds(a, "finished")
            .iter()
            .any(|e| e["container"].as_str().is_some_and(|c| c.ends_with("/be-task")))
    });
    assert_eq!(started(&agent), 1);
    let finished = kinds(&agent, "finished");
    let be =
        finished.iter().find(|e| e["container"].as_str().is_some_and(|c| c.ends_with("/be-task")));
    let be = be.expect("be-task finished");
    assert_eq!(be["detail"]["status"], "exit status: 0");
    assert!(be["detail"]["peak"].as_u64().is_some_and(|p| p >= 10 * MIB), "{be}");
    assert!(agent.status().queued.is_empty());
    let gone = node.cg.counters(&node.root.child("be-task").expect("valid")).expect("read");
    assert!(gone.is_vanished(), "a finished task's container is removed");
}

#[test]
fn a_run_task_killed_by_a_preemption_is_queued_again_not_lost() {
    use overbook_agent::tasks::RunRequest;
    use overbook_core::Class;
    let Some(mut node) = Node::new("requeue", 256 * MIB) else { return };
    node.production_reader(150);
    let mut agent = node.agent(KILL);
    let start = Instant::now();
    let now = || Time::from_duration(start.elapsed());
    agent.tick(now()).expect("tick");
    for name in ["be-a", "be-b"] {
        let request = RunRequest {
            name: name.into(),
            class: Class::BestEffort,
            mem_peak: Some(MIB),
            job: None,
            weight: None,
            command: vec![WORKLOAD.into(), "anon".into(), "64M".into()],
            cwd: None,
        };
        assert_eq!(agent.submit(now(), request).expect("admitted").state, "queued");
    }
    run_for(&mut agent, start, Duration::from_secs(60), |a| !kinds(a, "requeued").is_empty());
    let requeued = kinds(&agent, "requeued");
    assert_eq!(requeued.len(), 1, "{requeued:?}");
    assert_eq!(requeued[0]["detail"]["restarts"], 1);
    let victim =
        requeued[0]["container"].as_str().expect("named").rsplit('/').next().map(String::from);
    let victim = victim.expect("a name");
    let waiting = agent.status().queued;
    let running = agent.status().containers.iter().any(|c| c.name == victim && c.processes > 0);
    assert!(waiting.contains(&victim) || running, "{victim} neither queued nor running again");
}

#[test]
fn critical_containers_bypass_swap_and_keep_their_memory_production_does_not() {
    let Some(mut node) = Node::new("protect", 256 * MIB) else { return };
    node.hog("crit-am", 32, None);
    node.hog("prod-web", 32, None);
    let mut agent = node.agent(KILL);
    let start = Instant::now();
    // Critical containers' protection carries `swap`; production's own
    // (the default `protect.production`, below) does not.
    let critical = |a: &Agent<Box<dyn overbook_linux::NodeCgroups>>| -> Vec<serde_json::Value> {
        kinds(a, "protected").into_iter().filter(|e| e["detail"].get("swap").is_some()).collect()
    };
    run_for(&mut agent, start, Duration::from_secs(10), |a| !critical(a).is_empty());
    let protected = critical(&agent);
    assert_eq!(protected.len(), 1, "{protected:?}");
    assert!(protected[0]["container"].as_str().is_some_and(|c| c.ends_with("/crit-am")));
    let read = |name: &str, file: &str| -> String {
        let dir = match node.cg.version() {
            CgroupVersion::V1 => format!("/sys/fs/cgroup/memory/{}/{name}", node.root.as_str()),
            CgroupVersion::V2 => format!("/sys/fs/cgroup/{}/{name}", node.root.as_str()),
        };
        std::fs::read_to_string(format!("{dir}/{file}")).expect("kernel file").trim().to_string()
    };
    match node.cg.version() {
        CgroupVersion::V1 => {
            assert_eq!(read("crit-am", "memory.swappiness"), "0");
            assert_ne!(read("prod-web", "memory.swappiness"), "0", "production keeps the default");
        }
        CgroupVersion::V2 => {
            assert_eq!(read("crit-am", "memory.swap.max"), "0");
            let min: u64 = read("crit-am", "memory.min").parse().expect("bytes");
            assert!(min >= 32 * MIB, "memory.min {min} covers its 32 MiB");
            assert_eq!(read("prod-web", "memory.swap.max"), "max");
            assert_eq!(read("prod-web", "memory.min"), "0");
        }
    }
}

/// `[policy.protect] production` (on by default): production's memory is
/// kept from reclaim while anything else is left. On v2 (the VM) the agent
/// sets `memory.low = max`, and when a best-effort hog outgrows the node,
/// the kernel takes the hog's memory, not production's: production, busy
/// with all of its memory, faults far less than the hog. Asked not to
/// protect, the agent sets nothing. On v1 (this host) the agent says it
/// cannot, once, and sets nothing.
#[test]
fn production_s_memory_is_kept_from_reclaim_where_the_kernel_can_keep_it() {
    // Production's major faults while the hog comes in, with or without
    // protection, and the hog's.
    let scene = |protect: bool| -> Option<(u64, u64)> {
        let mut node = Node::new(if protect { "keep-prod" } else { "keep-prod-off" }, 256 * MIB)?;
        let web = node.start("prod-web", &["anon", "128M"]);
        node.workers[web].ready(Duration::from_secs(60)).expect("production is ready");
        let extra = format!(
            "[policy.detector]\nkind = \"static\"\n[policy.protect]\nproduction = {protect}\n"
        );
        let mut agent = node.agent(&extra);
        let start = Instant::now();
        let said = |a: &Agent<Box<dyn overbook_linux::NodeCgroups>>| {
            kinds(a, "protected").len() + kinds(a, "protect-failed").len()
        };
        run_for(&mut agent, start, Duration::from_secs(10), |a| !protect || said(a) > 0);
        if !protect {
            assert_eq!(said(&agent), 0, "nothing protected when not asked");
        }
        if node.cg.version() == CgroupVersion::V1 {
            let failed = kinds(&agent, "protect-failed");
            assert_eq!(failed.len(), 1, "said once: {failed:?}");
            assert!(failed[0]["container"].as_str().is_some_and(|c| c.ends_with("/prod-web")));
            assert!(kinds(&agent, "protected").is_empty());
            return None;
        }
        let dir = format!("/sys/fs/cgroup/{}", node.root.as_str());
        let read = |name: &str, file: &str| -> String {
            std::fs::read_to_string(format!("{dir}/{name}/{file}")).expect("kernel file")
        };
        if protect {
            let protected = kinds(&agent, "protected");
            assert_eq!(protected.len(), 1, "{protected:?}");
            assert_eq!(read("prod-web", "memory.low").trim(), "max");
        }
        let faults = |name: &str| -> u64 {
            let stat = read(name, "memory.stat");
            let line = stat.lines().find_map(|l| l.strip_prefix("pgmajfault "));
            line.and_then(|v| v.trim().parse().ok()).expect("pgmajfault")
        };
        // 128 + 192 MiB on a 256 MiB node: 64 MiB or more must go to swap.
        node.hog("be-hog", 192, None);
        // Both working at random over all of their memory: production's
        // faults over the next seconds, at the agent's own pace.
        let before = faults("prod-web");
        let hog_before = faults("be-hog");
        run_for(&mut agent, start, Duration::from_secs(5), |_| false);
        let (p, h) = (faults("prod-web") - before, faults("be-hog") - hog_before);
        eprintln!("protect={protect}: production {p} major faults, hog {h}");
        Some((p, h))
    };
    let Some((kept, hog)) = scene(true) else { return };
    assert!(hog > 0 && kept * 4 <= hog, "protected production faulted {kept} times, the hog {hog}");
    // The same scene unprotected, for the record only: this kernel took
    // production's memory in one run (3,876 faults in the window) and not
    // in another (0, the hog 414), so it cannot be asserted on.
    let (lost, hog_open) = scene(false).expect("the same host");
    eprintln!("unprotected: production {lost} major faults, hog {hog_open}");
}

#[test]
fn the_kernel_takes_what_steered_reclaim_asks_of_one_container() {
    let Some(mut node) = Node::new("reclaim", 512 * MIB) else { return };
    node.production_reader(100);
    let path = node.root.child("prod-reader").expect("valid");
    let before = node.cg.counters(&path).expect("read").done().expect("there").usage;
    assert!(before >= 90 * MIB, "its file is cached: {before}");
    let got = node.cg.reclaim(&path, 50 * MIB).expect("reclaim").done().expect("there");
    // Page cache is droppable: most of what was asked is taken (the reader
    // keeps faulting some back while it runs).
    assert!(got >= 25 * MIB, "reclaimed only {got} of 50 MiB");
    let limit = node.cg.limit(&path).expect("read").done().expect("there");
    assert_eq!(limit, Limit::Unlimited, "the limit is put back after the squeeze");
}

/// Issue 4's durable state, first part: an agent that dies (dropped here
/// with no shutdown, as by `kill -9`) loses no `overbook run` task. The
/// next agent on the same database queues the queued one again and
/// watches the running one, which it did not start, until it ends.
#[test]
fn run_tasks_outlive_an_agent_that_dies() {
    use overbook_agent::store::{StoredState, TaskStore};
    use overbook_agent::tasks::RunRequest;
    use overbook_core::Class;
    let Some(node) = Node::new("durable", 256 * MIB) else { return };
    let db = node.dir.path().join("state.db");
    let mut config = node.config(KILL);
    config.state_db = Some(db.clone());
    let cg = || host_cgroups(&HostSupport::probe()).expect("host cgroups");
    let start = Instant::now();
    let now = || Time::from_duration(start.elapsed());
    let run = |name: &str, class, peak: u64, args: &[&str]| RunRequest {
        name: name.into(),
        class,
        mem_peak: Some(peak),
        job: None,
        weight: None,
        command: std::iter::once(WORKLOAD).chain(args.iter().copied()).map(String::from).collect(),
        cwd: None,
    };
    let pid = {
        let mut first = Agent::new(&config, cg(), EventLog::in_memory(1000)).expect("agent starts");
        first.tick(now()).expect("tick");
        let prod = first
            .submit(now(), run("prod-job", Class::Production, 200 * MIB, &["anon", "200M", "6"]));
        assert_eq!(prod.expect("starts").state, "started");
        // 200 MiB charged for production: 100 MiB more does not fit.
        let be = first
            .submit(now(), run("be-later", Class::BestEffort, 100 * MIB, &["anon", "1M", "0.5"]));
        assert_eq!(be.expect("queued").state, "queued");
        // The next agent must see production's memory in use, not charged.
        run_for(&mut first, start, Duration::from_secs(20), |a| {
            a.status().containers.iter().any(|c| c.name == "prod-job" && c.usage >= 190 * MIB)
        });
        let started = kinds(&first, "started");
        i32::try_from(started[0]["detail"]["pid"].as_i64().expect("pid")).expect("a pid")
        // `first` is dropped here without a word, its child left running.
    };
    let store = TaskStore::open(&db).expect("opens");
    let states: Vec<(String, StoredState)> =
        store.tasks().expect("read").good.into_iter().map(|t| (t.request.name, t.state)).collect();
    assert_eq!(
        states,
        vec![("prod-job".into(), StoredState::Running), ("be-later".into(), StoredState::Queued)]
    );
    drop(store);

    let mut second = Agent::new(&config, cg(), EventLog::in_memory(1000)).expect("agent restarts");
    second.tick(now()).expect("tick");
    assert_eq!(
        kinds(&second, "adopted-task").len(),
        1,
        "{:?}",
        second.events().recent().collect::<Vec<_>>()
    );
    assert_eq!(kinds(&second, "restored").len(), 1);
    assert!(
        second.status().queued.contains(&"be-later".to_string()),
        "{:?}",
        second.status().queued
    );
    // The production task ends on its own (6 s); a dead agent's child is
    // reaped by init on a real node, by this test process here.
    let reap = rustix::process::Pid::from_raw(pid).expect("a pid");
    run_for(&mut second, start, Duration::from_secs(30), |a| {
        let _ = rustix::process::waitpid(Some(reap), rustix::process::WaitOptions::NOHANG);
        !kinds(a, "finished").is_empty()
    });
    let finished = kinds(&second, "finished");
    assert!(
        finished.iter().any(|e| e["container"].as_str().is_some_and(|c| c.ends_with("/prod-job"))),
        "{finished:?}"
    );
    // With production gone the queued task fits, starts, and finishes too.
    run_for(&mut second, start, Duration::from_secs(30), |a| {
        kinds(a, "finished")
            .iter()
            .any(|e| e["container"].as_str().is_some_and(|c| c.ends_with("/be-later")))
    });
    drop(second);
    let store = TaskStore::open(&db).expect("opens");
    assert!(store.tasks().expect("read").good.is_empty(), "{:?}", store.tasks());
    let history: Vec<String> =
        store.history("be-later").expect("history").into_iter().map(|h| h.0).collect();
    // `starting` is written before its process is made (issue 13: a start
    // an agent dies in must not run twice).
    assert_eq!(history, vec!["queued", "queued", "starting", "running", "finished"], "{history:?}");
    // Its peak joined its job's profile, for the next agent's launcher.
    let profiles = store.profiles().expect("profiles").good;
    assert!(profiles.iter().any(|(job, peak, _)| job == "be-later" && *peak > 0), "{profiles:?}");
}

#[test]
fn a_checkpoint_where_criu_cannot_run_falls_back_and_says_why() {
    use overbook_agent::tasks::{PreemptRequest, RunRequest};
    use overbook_core::Class;
    let Some(node) = Node::new("ckpt-fallback", 256 * MIB) else { return };
    let extra = format!(
        "[policy.preemptor]\nkind = \"checkpoint\"\n[checkpoint]\nimages_dir = \"{}\"\n\
         write_mb_s = 100\nread_mb_s = 100\n",
        node.dir.path().join("images").display()
    );
    let mut agent = node.agent(&extra);
    let start = Instant::now();
    let now = || Time::from_duration(start.elapsed());
    agent.note_checkpoint_support(now());
    let criu = overbook_linux::criu::Criu::probe();
    let said = if criu.usable() { "checkpoints" } else { "checkpoints-unavailable" };
    assert_eq!(kinds(&agent, said).len(), 1, "{:?}", agent.events().recent().collect::<Vec<_>>());
    agent.tick(now()).expect("tick");
    let run = RunRequest {
        name: "be-fallback".into(),
        class: Class::BestEffort,
        mem_peak: Some(32 * MIB),
        job: None,
        weight: None,
        command: vec![WORKLOAD.into(), "anon".into(), "16M".into(), "30".into()],
        cwd: None,
    };
    agent.submit(now(), run).expect("starts");
    run_for(&mut agent, start, Duration::from_secs(20), |a| {
        a.status().containers.iter().any(|c| c.name == "be-fallback" && c.usage >= 8 * MIB)
    });
    let order = PreemptRequest { name: "be-fallback".into(), how: "checkpoint".into(), wait: true };
    let reply = agent.preempt_by_name(now(), &order).expect("preempts");
    assert_eq!(reply["preempted"], true, "{reply}");
    let event = kinds(&agent, "preempted").pop().expect("preempted");
    let how = event["detail"]["how"].as_str().unwrap_or_default().to_string();
    if criu.usable() {
        assert_eq!(how, "checkpoint", "{event}");
    } else {
        let swap = agent.status().swap_total > 0;
        assert_eq!(how, if swap { "freeze-and-swap-out" } else { "kill" }, "{event}");
        let why = event["detail"]["fallback"].as_str().unwrap_or_default();
        assert!(why.contains("CRIU cannot checkpoint here"), "{event}");
    }
    // A name that runs nowhere is refused, not guessed at.
    let refused = agent.preempt_by_name(
        now(),
        &PreemptRequest { name: "be-nothing".into(), how: "kill".into(), wait: true },
    );
    assert!(refused.is_err());
}

/// Whether the node's memory was full in an interval, for the detector. A
/// node cgroup with a limit counts the hits of its own limit and of every
/// limit above it: here the node's parent binds first (as a kubelet's
/// `kubepods` in a slice no larger can), and its hits are the node's. A
/// node that is the whole machine (no limit) counts the pages the kernel
/// scanned to reclaim.
#[test]
fn a_node_knows_when_its_memory_was_full_under_its_own_limit_a_parents_or_as_the_whole_machine() {
    use overbook_agent::classes::ClassRules;
    use overbook_agent::node::NodeView;
    use overbook_linux::{ContainerPath, Limit, Outcome};
    let Some(mut node) = Node::new("full", 128 * MIB) else { return };
    let made = |node: &mut Node, path: &ContainerPath, limit: Option<u64>| {
        let made = node.cg.create(path, limit.map(Limit::Bytes)).expect("create");
        assert_eq!(made, Outcome::Done(()), "{path}");
        node.adopt(path.clone());
    };
    let inner = node.root.child("inner").expect("valid");
    made(&mut node, &inner, Some(256 * MIB));
    let app = inner.child("app").expect("valid");
    made(&mut node, &app, None);
    let stats = |root: &ContainerPath| {
        let cg = host_cgroups(&HostSupport::probe()).expect("host cgroups");
        let view = NodeView::new(cg, root.clone(), None, ClassRules::default());
        let counters = view.root_counters().expect("the root's counters");
        (view.node_stats(counters.as_ref()).expect("node stats"), counters)
    };
    let (before, _) = stats(&inner);
    assert_eq!(before.capacity, 128 * MIB, "the tightest limit above is the node's");
    let before = before.reclaims.expect("counted");
    // 200 MiB of page cache through a 128 MiB parent: reclaim at its limit.
    let file = node.dir.path().join("fill");
    let file = file.to_str().expect("utf-8").to_string();
    let mut writer = common::kube::run_in(&node, &app, &["file", &file, "200M"]);
    let (after, counters) = stats(&inner);
    let _ = writer.kill();
    let _ = writer.wait();
    let own = counters.and_then(|c| c.limit_hits).unwrap_or(0);
    assert_eq!(own, 0, "the node's own limit was never reached: its parent's binds");
    assert!(
        after.reclaims.expect("counted") > before,
        "the parent's hits count as the node's: {before} then {:?}",
        after.reclaims
    );
    // A second node with no limit, removed by its guard.
    struct Unlimited<'a>(&'a dyn NodeCgroups, ContainerPath);
    impl Drop for Unlimited<'_> {
        fn drop(&mut self) {
            let _ = self.0.remove(&self.1);
        }
    }
    let path = ContainerPath::new(&format!("overbook-test-machine-{}", std::process::id()))
        .expect("valid");
    assert_eq!(node.cg.create(&path, None).expect("create"), Outcome::Done(()));
    let unlimited = Unlimited(&*node.cg, path);
    let (machine, _) = stats(&unlimited.1);
    assert!(machine.capacity > 256 * MIB, "the machine: {}", machine.capacity);
    assert!(machine.reclaims.is_some(), "the kernel's reclaim scans are read");
}
