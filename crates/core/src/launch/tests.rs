use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

const GB: Bytes = 1 << 30;

fn node(capacity: Bytes, available: Bytes) -> NodeStats {
    NodeStats { capacity, available, ..NodeStats::default() }
}

fn task(id: u64, job: u64, class: Class, request: Bytes) -> TaskRequest {
    TaskRequest { id: ContainerId(id), job: JobId(job), class, request, submitted: Time::ZERO }
}

fn be(id: u64, job: u64, request: Bytes) -> TaskRequest {
    task(id, job, Class::BestEffort, request)
}

fn secs(s: u64) -> Time {
    Time::from_secs(s)
}

fn launcher(admission: AdmissionMode) -> Launcher {
    Launcher::new(LaunchConfig { admission, delay_after_kill: false, ..LaunchConfig::default() })
}

/// Ids launched (`L`) and resumed (`R`) by one poll, in order.
fn poll(l: &mut Launcher, now: Time, n: &NodeStats) -> Vec<(char, u64)> {
    let mut out = Vec::new();
    l.poll(now, n, &mut out);
    out.iter()
        .map(|a| match a {
            Action::Launch { id } => ('L', id.0),
            Action::Resume { id, site: ResumeSite::Local } => ('R', id.0),
            other => panic!("the launcher emits launches and local resumes only: {other:?}"),
        })
        .collect()
}

/// Job `job` has finished 20 tasks peaking at `peak` that ran `runtime` each.
fn profile(l: &mut Launcher, job: u64, peak: Bytes, runtime: Duration) {
    for _ in 0..20 {
        l.finished(JobId(job), peak, runtime);
    }
}

/// 000 §4.2's example, at 6 GB: tasks that asked 1 GB but peak at 2 GB, and
/// whose usage shows only after several polls. Launching on what is
/// available right now over-launches; the snapshot stops at 3.
#[test]
fn the_snapshot_stops_the_over_launch_that_available_memory_allows() {
    let n = node(16 * GB, 6 * GB);
    let mut launched = HashMap::new();
    for mode in [AdmissionMode::Available, AdmissionMode::Snapshot] {
        let mut l = launcher(mode);
        // Mean runtime 20 s: sync period min(10 s, 10 s).
        profile(&mut l, 1, 2 * GB, Duration::from_secs(20));
        for id in 0..10 {
            assert_eq!(l.submit(secs(0), be(id, 1, GB), &n), Admission::Queued);
        }
        let mut count = 0;
        // Three polls within a sync period, the kernel still showing 6 GB.
        for t in 0..3 {
            count += poll(&mut l, secs(t), &n).len();
        }
        launched.insert(mode, count);
    }
    assert!(launched[&AdmissionMode::Available] > 3, "{launched:?}");
    assert_eq!(launched[&AdmissionMode::Available], 9);
    assert_eq!(launched[&AdmissionMode::Snapshot], 3);
}

#[test]
fn the_snapshot_syncs_to_what_the_kernel_shows_after_a_period() {
    let mut l = launcher(AdmissionMode::Snapshot);
    // Mean runtime 8 s: sync period 4 s.
    profile(&mut l, 1, 2 * GB, Duration::from_secs(8));
    assert_eq!(l.sync_period(), Duration::from_secs(4));
    for id in 0..10 {
        l.submit(secs(0), be(id, 1, GB), &node(16 * GB, 6 * GB));
    }
    assert_eq!(poll(&mut l, secs(0), &node(16 * GB, 6 * GB)).len(), 3);
    assert_eq!(l.snapshot_mem(), 0);
    assert_eq!(l.wake_at(), Some(secs(4)));
    // Their usage arrived, and 3 GB more came free: one more fits, not two.
    assert_eq!(poll(&mut l, secs(3), &node(16 * GB, 3 * GB)).len(), 0);
    assert_eq!(poll(&mut l, secs(4), &node(16 * GB, 3 * GB)), vec![('L', 3)]);
    assert_eq!(l.snapshot_mem(), GB);
    assert_eq!(l.wake_at(), Some(secs(8)));
}

#[test]
fn production_starts_at_once_and_its_request_is_charged_to_the_snapshot() {
    let mut l = launcher(AdmissionMode::Snapshot);
    let n = node(16 * GB, 6 * GB);
    let p = task(100, 9, Class::Production, 5 * GB);
    assert_eq!(l.submit(secs(0), p, &n), Admission::Launch);
    let c = task(101, 9, Class::Critical, 100 * GB);
    assert_eq!(l.submit(secs(0), c, &n), Admission::Launch, "critical never waits, even too large");
    assert_eq!(l.snapshot_mem(), 0);
    assert_eq!(l.waiting(), (0, 0));
    assert_eq!(l.wake_at(), None, "nothing waits");
    l.submit(secs(0), be(1, 1, GB), &n);
    assert!(poll(&mut l, secs(1), &n).is_empty(), "production took the room");
}

/// A launcher charging until the peak, with or without `resync_on_finish`,
/// whose job 1 peaks at 2 GB (a 10 s sync period), task 1 waiting for
/// room on a node with 1 GB free.
fn waiting_for_room(resync: bool, before: &NodeStats) -> Launcher {
    let mut l = Launcher::new(LaunchConfig {
        charge_until_peak: true,
        resync_on_finish: resync,
        delay_after_kill: false,
        ..LaunchConfig::default()
    });
    profile(&mut l, 1, 2 * GB, Duration::from_secs(20));
    l.submit(secs(0), be(1, 1, GB), before);
    assert!(poll(&mut l, secs(0), before).is_empty(), "1 GB free: a 2 GB peak waits");
    l
}

#[test]
fn with_resync_on_finish_a_finished_task_s_memory_is_used_at_once_not_a_period_later() {
    let before = node(16 * GB, GB);
    let after = node(16 * GB, 3 * GB);
    let mut first_launch = Vec::new();
    for resync in [false, true] {
        let mut l = waiting_for_room(resync, &before);
        // A task finishes at 2 s and its 2 GB are free; the period is 10 s.
        l.finished(JobId(1), 2 * GB, Duration::from_secs(20));
        l.freed_by_finish(secs(2));
        assert_eq!(l.wake_at(), Some(secs(if resync { 2 } else { 10 })));
        first_launch.push((1..=10).find(|&t| !poll(&mut l, secs(t), &after).is_empty()));
    }
    assert_eq!(first_launch, [Some(10), Some(2)]);
}

/// With `launch_gap`, what fits starts one at a time, a gap apart, resumes
/// first; the room is charged as before, and the next start is when the
/// launcher asks to be woken.
#[test]
fn with_a_launch_gap_what_fits_starts_one_at_a_time() {
    let mut l = Launcher::new(LaunchConfig {
        launch_gap: 2.0,
        delay_after_kill: false,
        ..LaunchConfig::default()
    });
    let n = node(16 * GB, 6 * GB);
    for id in 0..4 {
        l.submit(secs(0), be(id, 1, GB), &n);
    }
    l.preempted(secs(0));
    l.suspended(secs(0), be(9, 1, GB), GB);
    assert_eq!(poll(&mut l, secs(0), &n), vec![('R', 9)], "the resume first, alone");
    assert_eq!(l.wake_at(), Some(secs(2)));
    assert!(poll(&mut l, secs(1), &n).is_empty(), "within the gap nothing starts");
    assert_eq!(poll(&mut l, secs(2), &n), vec![('L', 0)]);
    assert_eq!(poll(&mut l, secs(4), &n), vec![('L', 1)]);
    assert_eq!(l.wake_at(), Some(secs(6)));
    // Without the gap all five start at once, into the same 6 GB.
    let mut l = launcher(AdmissionMode::Snapshot);
    for id in 0..4 {
        l.submit(secs(0), be(id, 1, GB), &n);
    }
    assert_eq!(poll(&mut l, secs(0), &n).len(), 4);
    let e = LaunchConfig { launch_gap: 61.0, ..LaunchConfig::default() }.validate();
    assert!(e.expect_err("61 s").to_string().contains("launch_gap"));
}

#[test]
fn a_finish_soon_after_a_preemption_waits_for_the_periodic_sync() {
    let before = node(16 * GB, GB);
    let after = node(16 * GB, 3 * GB);
    let mut l = waiting_for_room(true, &before);
    // Short at 1 s (a preemption), a finish at 2 s: production is taking
    // memory back, so the freed memory waits for the sync at 10 s.
    l.preempted(secs(1));
    l.freed_by_finish(secs(2));
    assert_eq!(l.wake_at(), Some(secs(10)));
    assert!(poll(&mut l, secs(2), &after).is_empty());
    assert_eq!(poll(&mut l, secs(10), &after), [('L', 1)]);
    // A finish a whole period after the preemption resyncs at once again,
    // and a submission's figure (read before the finish) does not spend it.
    l.submit(secs(10), be(2, 1, GB), &after);
    assert!(poll(&mut l, secs(11), &before).is_empty());
    l.freed_by_finish(secs(12));
    l.submit(secs(12), be(3, 1, GB), &before);
    assert_eq!(poll(&mut l, secs(12), &after), [('L', 2)]);
    // A preemption in the same step as a finish: the freed memory is
    // production's too, and waits for the sync at 22 s.
    l.freed_by_finish(secs(13));
    l.preempted(secs(13));
    assert_eq!(l.wake_at(), Some(secs(22)));
    assert!(poll(&mut l, secs(13), &after).is_empty());
}

#[test]
fn resync_on_finish_without_the_charge_is_refused() {
    let cfg = LaunchConfig { resync_on_finish: true, ..LaunchConfig::default() };
    let err = cfg.validate().unwrap_err();
    assert!(err.to_string().contains("resync_on_finish"), "{err}");
    assert!(err.to_string().contains("charge_until_peak"), "{err}");
    let ok = LaunchConfig { charge_until_peak: true, ..cfg };
    assert_eq!(ok.validate(), Ok(()));
}

#[test]
fn charged_until_peak_a_slow_filling_task_is_not_free_memory_at_the_next_sync() {
    let n = node(16 * GB, 6 * GB);
    let mut launched = Vec::new();
    for until_peak in [false, true] {
        let mut l = Launcher::new(LaunchConfig {
            charge_until_peak: until_peak,
            delay_after_kill: false,
            ..LaunchConfig::default()
        });
        profile(&mut l, 1, 2 * GB, Duration::from_secs(20));
        for id in 0..6 {
            l.submit(secs(0), be(id, 1, GB), &n);
        }
        let first = poll(&mut l, secs(0), &n);
        assert_eq!(first.len(), 3, "6 GB fit three 2 GB peaks");
        // A sync later, each has filled only 0.5 GB: 4.5 GB still show free.
        let filling: Vec<ContainerStats> = first
            .iter()
            .map(|&(_, id)| {
                let mut c =
                    ContainerStats::new(ContainerId(id), JobId(1), Class::BestEffort, Time::ZERO);
                c.usage = GB / 2;
                c
            })
            .collect();
        l.note_usage(&filling);
        let later = node(16 * GB, 6 * GB - 3 * GB / 2);
        launched.push(poll(&mut l, secs(11), &later).len());
        // Once they reach their peak they owe nothing.
        let full: Vec<ContainerStats> =
            filling.iter().map(|c| ContainerStats { usage: 2 * GB, ..c.clone() }).collect();
        l.note_usage(&full);
        assert_eq!(poll(&mut l, secs(22), &node(16 * GB, GB)).len(), 0, "nothing fits in 1 GB");
        let mut fresh = full.clone();
        fresh.iter_mut().for_each(|c| c.usage = 0);
        l.note_usage(&fresh);
        let waiting = l.waiting().0;
        assert_eq!(
            poll(&mut l, secs(33), &node(16 * GB, 4 * GB + GB / 2)).len(),
            waiting.min(2),
            "a task that reached its peak is never charged again"
        );
    }
    assert_eq!(launched, vec![2, 0], "000's snapshot launches into memory still owed");
}

#[test]
fn a_killed_task_goes_back_in_line_even_when_the_line_is_full() {
    let mut l = Launcher::new(LaunchConfig { queue_limit: 1, ..LaunchConfig::default() });
    let n = node(8 * GB, 8 * GB);
    assert_eq!(l.submit(secs(0), be(1, 1, GB), &n), Admission::Queued);
    assert_eq!(l.submit(secs(0), be(2, 1, GB), &n), Admission::Rejected(RejectReason::QueueFull));
    // Task 3 ran and was killed: refusing it now would lose it.
    assert_eq!(l.requeue(secs(1), be(3, 1, GB)), Admission::Queued);
    assert_eq!(l.requeue(secs(1), be(3, 1, GB)), Admission::Queued, "once in line");
    assert_eq!(l.waiting(), (2, 0));
    assert_eq!(poll(&mut l, secs(2), &n), vec![('L', 1), ('L', 3)]);
}

#[test]
fn submissions_are_refused_only_when_too_large_or_the_line_is_full() {
    let mut l = Launcher::new(LaunchConfig { queue_limit: 2, ..LaunchConfig::default() });
    let n = node(8 * GB, 8 * GB);
    assert_eq!(
        l.submit(secs(0), be(1, 1, 9 * GB), &n),
        Admission::Rejected(RejectReason::TooLarge)
    );
    // Queued even though it fits now: the next poll launches it.
    assert_eq!(l.submit(secs(0), be(2, 1, GB), &n), Admission::Queued);
    assert_eq!(l.submit(secs(0), be(3, 1, GB), &n), Admission::Queued);
    assert_eq!(l.submit(secs(0), be(4, 1, GB), &n), Admission::Rejected(RejectReason::QueueFull));
    // A repeated submission of a waiting task changes nothing.
    assert_eq!(l.submit(secs(0), be(2, 1, GB), &n), Admission::Queued);
    assert_eq!(l.waiting(), (2, 0));
    // Preempted tasks do not count against the limit: they were admitted already.
    l.suspended(secs(0), be(5, 1, GB), GB);
    assert_eq!(l.waiting(), (2, 1));
    assert_eq!(poll(&mut l, secs(0), &n), vec![('R', 5), ('L', 2), ('L', 3)]);
    assert_eq!(l.submit(secs(0), be(4, 1, GB), &n), Admission::Queued);
}

#[test]
fn launches_wait_one_sync_period_after_a_kill() {
    let mut l = Launcher::new(LaunchConfig::default());
    assert!(l.config().delay_after_kill);
    profile(&mut l, 1, GB, Duration::from_secs(8));
    let n = node(16 * GB, 16 * GB);
    l.killed(secs(100));
    l.submit(secs(100), be(1, 1, GB), &n);
    l.suspended(secs(100), be(2, 1, GB), GB);
    assert!(poll(&mut l, secs(100), &n).is_empty());
    assert_eq!(l.wake_at(), Some(secs(104)));
    assert!(l.delayed(Time::from_millis(103_999)) && !l.delayed(secs(104)));
    assert!(poll(&mut l, Time::from_millis(103_999), &n).is_empty());
    assert_eq!(poll(&mut l, secs(104), &n), vec![('R', 2), ('L', 1)]);

    // Without the delay, the same launches go at once.
    let mut l = launcher(AdmissionMode::Snapshot);
    l.killed(secs(100));
    l.submit(secs(100), be(1, 1, GB), &n);
    assert_eq!(poll(&mut l, secs(100), &n), vec![('L', 1)]);
}

#[test]
fn a_second_kill_extends_the_delay_and_never_shortens_it() {
    let mut l = Launcher::new(LaunchConfig {
        admission: AdmissionMode::Available,
        ..LaunchConfig::default()
    });
    let n = node(16 * GB, 16 * GB);
    l.submit(secs(0), be(1, 1, GB), &n);
    l.killed(secs(10));
    l.killed(secs(15));
    assert_eq!(l.wake_at(), Some(secs(25)));
    l.killed(secs(12));
    assert_eq!(l.wake_at(), Some(secs(25)));
    assert!(poll(&mut l, secs(24), &n).is_empty());
    assert_eq!(poll(&mut l, secs(25), &n), vec![('L', 1)]);
    assert_eq!(l.wake_at(), None);
}

#[test]
fn preempted_tasks_resume_first_come_first_served_and_before_new_work() {
    let mut l = launcher(AdmissionMode::Available);
    let plenty = node(64 * GB, 64 * GB);
    l.submit(secs(0), be(10, 1, GB), &plenty);
    l.suspended(secs(1), be(3, 1, GB), 2 * GB);
    l.suspended(secs(2), be(1, 1, GB), 2 * GB);
    l.suspended(secs(3), be(2, 1, GB), 2 * GB);
    assert_eq!(poll(&mut l, secs(4), &plenty), vec![('R', 3), ('R', 1), ('R', 2), ('L', 10)]);
    assert_eq!(l.waiting(), (0, 0));

    // The first preempted task does not fit: nobody overtakes it, neither a
    // smaller preempted task nor new work.
    l.suspended(secs(5), be(4, 1, GB), 8 * GB);
    l.suspended(secs(6), be(5, 1, GB), GB);
    l.submit(secs(6), be(11, 1, GB), &plenty);
    assert!(poll(&mut l, secs(7), &node(64 * GB, 4 * GB)).is_empty());
    assert_eq!(l.waiting(), (1, 2));
    // 9 GB: the 8 GB task, then the 1 GB one; nothing left to launch with.
    assert_eq!(poll(&mut l, secs(8), &node(64 * GB, 9 * GB)), vec![('R', 4), ('R', 5)]);
    assert_eq!(poll(&mut l, secs(9), &node(64 * GB, GB)), vec![('L', 11)]);
}

#[test]
fn resumes_are_charged_with_the_memory_they_hold() {
    let mut l = launcher(AdmissionMode::Snapshot);
    let n = node(64 * GB, 5 * GB);
    l.suspended(secs(0), be(1, 1, GB), 3 * GB);
    l.suspended(secs(0), be(2, 1, GB), 3 * GB);
    assert_eq!(poll(&mut l, secs(0), &n), vec![('R', 1)]);
    assert_eq!(l.snapshot_mem(), 2 * GB);
}

#[test]
fn a_big_head_holds_the_line_so_it_is_not_starved() {
    let mut l = launcher(AdmissionMode::Available);
    let n = node(16 * GB, 3 * GB);
    l.submit(secs(0), be(1, 1, 4 * GB), &n);
    l.submit(secs(0), be(2, 1, GB), &n);
    assert!(poll(&mut l, secs(0), &n).is_empty(), "the small task must not pass the big one");
    assert_eq!(poll(&mut l, secs(1), &node(16 * GB, 5 * GB)), vec![('L', 1), ('L', 2)]);
}

#[test]
fn reservations_never_exceed_capacity() {
    let mut l = launcher(AdmissionMode::Reserved);
    // Plenty available: Reserved ignores it, unlike Available.
    let n = node(10 * GB, 10 * GB);
    for id in 0..5 {
        l.submit(secs(0), be(id, 1, 3 * GB), &n);
    }
    assert_eq!(poll(&mut l, secs(0), &n).len(), 3, "3 × 3 GB fit 10 GB, a fourth does not");
    assert!(poll(&mut l, secs(1), &n).is_empty());
    l.departed(ContainerId(1));
    assert_eq!(poll(&mut l, secs(2), &n), vec![('L', 3)]);
    // A production task reserves 5 GB more, past capacity: best-effort waits
    // until enough has departed for the reservations to fit again.
    assert_eq!(l.submit(secs(3), task(50, 2, Class::Production, 5 * GB), &n), Admission::Launch);
    l.departed(ContainerId(0));
    assert!(poll(&mut l, secs(4), &n).is_empty(), "9 + 5 - 3 = 11 GB reserved");
    l.departed(ContainerId(2));
    l.departed(ContainerId(2));
    assert!(poll(&mut l, secs(5), &n).is_empty(), "3 + 5 = 8 GB reserved, 3 GB more do not fit");
    l.departed(ContainerId(3));
    assert_eq!(poll(&mut l, secs(6), &n), vec![('L', 4)]);
    // A profile does not matter here, only requests do: 8 + 3 > 10 GB.
    profile(&mut l, 7, GB / 8, Duration::from_secs(1));
    l.submit(secs(7), be(6, 7, 3 * GB), &n);
    assert!(poll(&mut l, secs(7), &n).is_empty());
    // Preempted, its reservation is given back; resumed, taken again.
    l.suspended(secs(8), be(4, 1, 3 * GB), GB);
    assert_eq!(poll(&mut l, secs(8), &n), vec![('R', 4)]);
    assert!(poll(&mut l, secs(9), &n).is_empty());
}

#[test]
fn the_estimate_is_the_mean_peak_of_the_last_20_tasks_of_the_job() {
    let mut l = launcher(AdmissionMode::Snapshot);
    assert_eq!(l.profiled_peak(JobId(1)), None);
    // 25 tasks peaking at 1..=25 GB: the last 20 are 6..=25, mean 15.5 GB.
    for g in 1..=25 {
        l.finished(JobId(1), g * GB, Duration::from_secs(30));
    }
    assert_eq!(l.profiled_peak(JobId(1)), Some(31 * GB / 2));
    // It, not the 1 GB request, decides: 40 GB fit two of them.
    let n = node(64 * GB, 40 * GB);
    for id in 0..3 {
        l.submit(secs(0), be(id, 1, GB), &n);
    }
    assert_eq!(poll(&mut l, secs(0), &n).len(), 2);
    // A job without history is estimated at its request.
    let mut l = launcher(AdmissionMode::Snapshot);
    for id in 0..5 {
        l.submit(secs(0), be(id, 2, 10 * GB), &n);
    }
    assert_eq!(poll(&mut l, secs(0), &n).len(), 4);
}

#[test]
fn a_profile_larger_than_the_node_falls_back_to_the_request() {
    let mut l = launcher(AdmissionMode::Available);
    profile(&mut l, 1, 20 * GB, Duration::from_secs(30));
    let n = node(16 * GB, 12 * GB);
    l.submit(secs(0), be(1, 1, 4 * GB), &n);
    // At 20 GB it could never fit and would hold the line forever.
    assert_eq!(poll(&mut l, secs(0), &n), vec![('L', 1)]);
}

#[test]
fn a_task_that_leaves_while_waiting_never_launches() {
    let mut l = launcher(AdmissionMode::Available);
    let n = node(16 * GB, 16 * GB);
    l.submit(secs(0), be(1, 1, GB), &n);
    l.submit(secs(0), be(2, 1, GB), &n);
    l.suspended(secs(0), be(3, 1, GB), GB);
    l.departed(ContainerId(1));
    l.departed(ContainerId(3));
    l.departed(ContainerId(99));
    assert_eq!(l.waiting(), (1, 0));
    assert_eq!(poll(&mut l, secs(0), &n), vec![('L', 2)]);
}

#[test]
fn the_sync_period_is_half_the_mean_runtime_within_its_bounds() {
    let mut l = launcher(AdmissionMode::Snapshot);
    assert_eq!(l.sync_period(), Duration::from_secs(10), "no history: the maximum");
    l.finished(JobId(1), GB, Duration::from_secs(6));
    assert_eq!(l.sync_period(), Duration::from_secs(3));
    l.finished(JobId(1), GB, Duration::from_secs(60));
    assert_eq!(l.sync_period(), Duration::from_secs(10), "33 s / 2 capped at 10 s");
    let mut l = launcher(AdmissionMode::Snapshot);
    l.finished(JobId(1), GB, Duration::from_millis(10));
    assert_eq!(l.sync_period(), Duration::from_secs(1), "floored at min_sync_period");
}

#[test]
fn wake_at_says_when_waiting_work_might_start() {
    let mut l = launcher(AdmissionMode::Snapshot);
    let full = node(16 * GB, 0);
    assert_eq!(l.wake_at(), None);
    l.suspended(secs(1), be(1, 1, GB), GB);
    assert_eq!(l.wake_at(), Some(secs(1)), "never synced: poll now");
    assert!(poll(&mut l, secs(1), &full).is_empty());
    assert_eq!(l.wake_at(), Some(secs(11)), "the next sync");
    assert_eq!(poll(&mut l, secs(11), &node(16 * GB, GB)), vec![('R', 1)]);
    assert_eq!(l.wake_at(), None);

    // Available and Reserved only wait for events the caller sees.
    for mode in [AdmissionMode::Available, AdmissionMode::Reserved] {
        let mut l = launcher(mode);
        l.submit(secs(0), be(1, 1, 32 * GB), &node(64 * GB, 0));
        l.submit(secs(0), task(2, 1, Class::Production, 64 * GB), &node(64 * GB, 0));
        assert!(poll(&mut l, secs(0), &node(64 * GB, 0)).is_empty());
        assert_eq!(l.wake_at(), None, "{mode:?}");
    }
}

#[test]
fn validate_names_the_bad_key() {
    assert_eq!(LaunchConfig::default().validate(), Ok(()));
    let bad = |c: LaunchConfig| c.validate().map_err(|e| e.key);
    let d = LaunchConfig::default;
    assert_eq!(bad(LaunchConfig { queue_limit: 0, ..d() }), Err("queue_limit".into()));
    assert_eq!(bad(LaunchConfig { profile_history: 0, ..d() }), Err("profile_history".into()));
    let longest = LaunchConfig { profile_history: MAX_PROFILE_HISTORY, ..d() };
    assert_eq!(bad(longest), Ok(()));
    let too_long = LaunchConfig { profile_history: MAX_PROFILE_HISTORY + 1, ..d() };
    assert_eq!(bad(too_long), Err("profile_history".into()));
    assert_eq!(bad(LaunchConfig { profile_jobs: 0, ..d() }), Err("profile_jobs".into()));
    for v in [0.0, -1.0, f64::NAN, f64::INFINITY, 3600.5] {
        assert_eq!(bad(LaunchConfig { max_sync_period: v, ..d() }), Err("max_sync_period".into()));
    }
    assert_eq!(bad(LaunchConfig { max_sync_period: 3600.0, ..d() }), Ok(()));
    for v in [0.0, f64::NAN, 10.5] {
        assert_eq!(bad(LaunchConfig { min_sync_period: v, ..d() }), Err("min_sync_period".into()));
    }
    let e = LaunchConfig { queue_limit: 0, ..d() }.validate().unwrap_err().under("launcher");
    assert_eq!(e.key, "launcher.queue_limit");
}

#[test]
fn an_unvalidated_config_does_not_panic() {
    let cfg = LaunchConfig {
        queue_limit: 0,
        profile_history: 0,
        profile_jobs: 0,
        max_sync_period: f64::NAN,
        min_sync_period: -4.0,
        ..LaunchConfig::default()
    };
    let mut l = Launcher::new(cfg);
    let n = node(GB, GB);
    assert_eq!(l.submit(secs(0), be(1, 1, 1), &n), Admission::Rejected(RejectReason::QueueFull));
    l.finished(JobId(1), 1, Duration::from_secs(1));
    l.killed(secs(0));
    assert!(l.sync_period() > Duration::ZERO);
    assert!(poll(&mut l, secs(0), &n).is_empty());
}

#[test]
fn the_launcher_section_parses_from_toml() {
    #[derive(Debug, Deserialize)]
    struct File {
        launcher: LaunchConfig,
    }
    let f: File = toml::from_str(
        r#"
        [launcher]
        admission = "reserved"
        queue_limit = 5
        retry_budget = 1
        profile_history = 10
        profile_jobs = 64
        max_sync_period = 5.0
        min_sync_period = 0.5
        delay_after_kill = false
        charge_until_peak = true
        resync_on_finish = true
        hold_while_thrashing = true
        max_restarts = 4
        restart_backoff = 0.5
        launch_gap = 1.5
        "#,
    )
    .unwrap();
    let want = LaunchConfig {
        admission: AdmissionMode::Reserved,
        queue_limit: 5,
        retry_budget: 1,
        profile_history: 10,
        profile_jobs: 64,
        max_sync_period: 5.0,
        min_sync_period: 0.5,
        delay_after_kill: false,
        headroom: 0.0,
        charge_until_peak: true,
        resync_on_finish: true,
        hold_while_thrashing: true,
        max_restarts: 4,
        restart_backoff: 0.5,
        launch_gap: 1.5,
    };
    assert_eq!(f.launcher, want);
    assert_eq!(f.launcher.validate(), Ok(()));
    // Missing keys take their defaults; every mode has its name.
    for (name, mode) in [
        ("snapshot", AdmissionMode::Snapshot),
        ("available", AdmissionMode::Available),
        ("reserved", AdmissionMode::Reserved),
    ] {
        let f: File = toml::from_str(&format!("[launcher]\nadmission = \"{name}\"\n")).unwrap();
        assert_eq!(f.launcher, LaunchConfig { admission: mode, ..LaunchConfig::default() });
    }
    // A misspelt key is refused, not ignored.
    let err = toml::from_str::<File>("[launcher]\nqueue_limt = 5\n").unwrap_err();
    assert!(err.to_string().contains("queue_limt"), "{err}");
}

// ---- property: no task is ever lost or launched twice ----------------------

#[derive(Clone, Debug)]
enum Op {
    Submit {
        job: u64,
        request_mb: u64,
        class: Class,
    },
    /// Preempt a running best-effort task (`pick` among them) or, if none,
    /// a new one arriving from another node.
    Suspend {
        pick: usize,
        memory_mb: u64,
    },
    Poll {
        dt_ms: u64,
        available_mb: u64,
    },
    Killed,
    /// Any task ever seen leaves (`pick` among them): running, waiting or gone.
    Depart {
        pick: usize,
    },
    Finished {
        job: u64,
        peak_mb: u64,
        runtime_ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let class = prop_oneof![
        6 => Just(Class::BestEffort),
        1 => Just(Class::Production),
        1 => Just(Class::Critical),
    ];
    prop_oneof![
        4 => (0..4u64, 1..20_000u64, class)
            .prop_map(|(job, request_mb, class)| Op::Submit { job, request_mb, class }),
        1 => (any::<usize>(), 1..20_000u64).prop_map(|(pick, memory_mb)| Op::Suspend { pick, memory_mb }),
        4 => (0..20_000u64, 0..40_000u64).prop_map(|(dt_ms, available_mb)| Op::Poll { dt_ms, available_mb }),
        1 => Just(Op::Killed),
        2 => any::<usize>().prop_map(|pick| Op::Depart { pick }),
        2 => (0..4u64, 1..30_000u64, 0..60_000u64)
            .prop_map(|(job, peak_mb, runtime_ms)| Op::Finished { job, peak_mb, runtime_ms }),
    ]
}

fn mode() -> impl Strategy<Value = AdmissionMode> {
    prop_oneof![
        Just(AdmissionMode::Snapshot),
        Just(AdmissionMode::Available),
        Just(AdmissionMode::Reserved),
    ]
}

const MB: Bytes = 1 << 20;

/// What the test believes: which tasks wait where, which run, with what request.
#[derive(Default)]
struct Model {
    waiting: HashMap<u64, char>,
    running: HashMap<u64, (Class, Bytes)>,
    seen: Vec<TaskRequest>,
    next: u64,
}

impl Model {
    fn reserved(&self) -> u128 {
        self.running.values().map(|&(_, r)| u128::from(r)).sum()
    }

    /// Apply one poll's actions, failing on any the model forbids.
    fn apply(&mut self, out: &[Action]) -> Result<(), TestCaseError> {
        let mut launched_any = false;
        for a in out {
            let (id, line) = match *a {
                Action::Resume { id, site: ResumeSite::Local } => {
                    prop_assert!(!launched_any, "a resume after a launch: {out:?}");
                    (id, 'R')
                }
                Action::Launch { id } => {
                    launched_any = true;
                    (id, 'L')
                }
                ref other => return Err(TestCaseError::fail(format!("unexpected {other:?}"))),
            };
            prop_assert_eq!(
                self.waiting.remove(&id.0),
                Some(line),
                "{:?} for a task not waiting in that line (twice, or never queued)",
                a
            );
            let t = self.seen.iter().find(|t| t.id == id);
            let request = t.map_or(0, |t| t.request);
            self.running.insert(id.0, (Class::BestEffort, request));
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_queued_task_launches_exactly_once_and_none_is_lost(
        mode in mode(),
        queue_limit in 1..12usize,
        capacity_gb in 1..32u64,
        delay in any::<bool>(),
        ops in proptest::collection::vec(op(), 0..150),
    ) {
        let cfg = LaunchConfig { admission: mode, queue_limit, delay_after_kill: delay, ..LaunchConfig::default() };
        let mut l = Launcher::new(cfg);
        let capacity = capacity_gb * GB;
        let mut m = Model::default();
        let mut now = Time::ZERO;
        let mut stats = node(capacity, capacity);
        let mut out = Vec::new();
        for op in ops {
            match op {
                Op::Submit { job, request_mb, class } => {
                    m.next += 1;
                    let t = task(m.next, job, class, request_mb * MB);
                    m.seen.push(t);
                    let queued = m.waiting.values().filter(|&&c| c == 'L').count();
                    let got = l.submit(now, t, &stats);
                    let want = if class != Class::BestEffort {
                        Admission::Launch
                    } else if t.request > capacity {
                        Admission::Rejected(RejectReason::TooLarge)
                    } else if queued >= queue_limit {
                        Admission::Rejected(RejectReason::QueueFull)
                    } else {
                        Admission::Queued
                    };
                    prop_assert_eq!(got, want);
                    match got {
                        Admission::Launch => { m.running.insert(t.id.0, (class, t.request)); }
                        Admission::Queued => { m.waiting.insert(t.id.0, 'L'); }
                        Admission::Rejected(_) => {}
                    }
                }
                Op::Suspend { pick, memory_mb } => {
                    let mut running: Vec<u64> = m.running.iter()
                        .filter(|(_, &(c, _))| c == Class::BestEffort)
                        .map(|(&id, _)| id)
                        .collect();
                    running.sort_unstable();
                    let t = match running.get(pick % running.len().max(1)) {
                        Some(&id) => {
                            // As the simulator does: it leaves, then waits to resume.
                            l.departed(ContainerId(id));
                            m.running.remove(&id);
                            m.seen.iter().copied().find(|t| t.id.0 == id)
                                .unwrap_or_else(|| be(id, 0, GB))
                        }
                        None => {
                            m.next += 1;
                            let t = be(m.next, 0, (memory_mb * MB).min(capacity));
                            m.seen.push(t);
                            t
                        }
                    };
                    l.suspended(now, t, memory_mb * MB);
                    m.waiting.insert(t.id.0, 'R');
                }
                Op::Poll { dt_ms, available_mb } => {
                    now += Duration::from_millis(dt_ms);
                    stats = node(capacity, (available_mb * MB).min(capacity));
                    out.clear();
                    l.poll(now, &stats, &mut out);
                    let reserved_before = m.reserved();
                    m.apply(&out)?;
                    if mode == AdmissionMode::Reserved && !out.is_empty() {
                        // Only whatever fit was added, and it all fit.
                        prop_assert!(m.reserved() <= u128::from(capacity),
                            "reserved {} of {} (was {})", m.reserved(), capacity, reserved_before);
                    }
                }
                Op::Killed => l.killed(now),
                Op::Depart { pick } => {
                    if let Some(t) = m.seen.get(pick % m.seen.len().max(1)) {
                        l.departed(t.id);
                        m.waiting.remove(&t.id.0);
                        m.running.remove(&t.id.0);
                    }
                }
                Op::Finished { job, peak_mb, runtime_ms } => {
                    l.finished(JobId(job), peak_mb * MB, Duration::from_millis(runtime_ms));
                }
            }
            let lines = (
                m.waiting.values().filter(|&&c| c == 'L').count(),
                m.waiting.values().filter(|&&c| c == 'R').count(),
            );
            prop_assert_eq!(l.waiting(), lines);
            match l.wake_at() {
                None => prop_assert!(m.waiting.is_empty() || mode != AdmissionMode::Snapshot),
                Some(at) => {
                    prop_assert!(!m.waiting.is_empty(), "a wake-up with nothing waiting");
                    // Outside Snapshot mode only the post-kill delay wakes a node.
                    prop_assert!(mode == AdmissionMode::Snapshot || (delay && at > now));
                }
            }
        }
        // Memory becomes plentiful and everything running leaves: after the
        // delay and a sync, every waiting task comes out, exactly once.
        for &id in m.running.keys() {
            l.departed(ContainerId(id));
        }
        m.running.clear();
        now += Duration::from_secs(3600);
        out.clear();
        l.poll(now, &node(1 << 50, 1 << 50), &mut out);
        m.apply(&out)?;
        prop_assert!(m.waiting.is_empty(), "left waiting: {:?}", m.waiting);
        prop_assert_eq!(l.waiting(), (0, 0));
        prop_assert_eq!(l.wake_at(), None);
    }
}

#[test]
fn headroom_keeps_best_effort_launches_off_the_detector_s_free_share() {
    let node = NodeStats { capacity: 1000, available: 1000, ..NodeStats::default() };
    let task = |id: u64, request: u64| TaskRequest {
        id: ContainerId(id),
        job: JobId(id),
        class: Class::BestEffort,
        request,
        submitted: Time::ZERO,
    };
    let cfg = LaunchConfig {
        admission: AdmissionMode::Available,
        delay_after_kill: false,
        headroom: 0.1,
        ..LaunchConfig::default()
    };
    assert_eq!(cfg.validate(), Ok(()));
    let mut l = Launcher::new(cfg);
    assert_eq!(l.submit(Time::ZERO, task(1, 950), &node), Admission::Queued);
    let mut out = Vec::new();
    l.poll(Time::ZERO, &node, &mut out);
    assert!(out.is_empty(), "950 of 1000 would leave less than 10% free: {out:?}");
    let mut l = Launcher::new(LaunchConfig { headroom: 0.0, ..l.config().clone() });
    assert_eq!(l.submit(Time::ZERO, task(1, 950), &node), Admission::Queued);
    l.poll(Time::ZERO, &node, &mut out);
    assert_eq!(out.len(), 1, "without headroom it fits");
    for bad in [-0.1, 0.6, f64::NAN] {
        let e = LaunchConfig { headroom: bad, ..LaunchConfig::default() }.validate();
        assert!(e.is_err_and(|e| e.key == "headroom"), "{bad}");
    }
}

#[test]
fn a_killed_task_restarts_later_each_time_and_is_given_up_past_its_budget() {
    let cfg = LaunchConfig { max_restarts: 8, restart_backoff: 2.0, ..LaunchConfig::default() };
    assert_eq!(cfg.validate(), Ok(()));
    let waits: Vec<AfterKill> = (1..=9).map(|r| cfg.after_kill(r)).collect();
    let secs = |s: u64| AfterKill::Requeue { after: Duration::from_secs(s) };
    assert_eq!(
        waits,
        vec![
            secs(2),
            secs(4),
            secs(8),
            secs(16),
            secs(32),
            secs(64),
            secs(128),
            secs(128),
            AfterKill::GiveUp
        ],
        "doubling from the base, capped at 64 times it, given up past the budget"
    );
    let none = LaunchConfig { max_restarts: 0, ..LaunchConfig::default() };
    assert_eq!(none.after_kill(1), AfterKill::GiveUp);
    let at_once = LaunchConfig { restart_backoff: 0.0, ..LaunchConfig::default() };
    assert_eq!(at_once.after_kill(3), AfterKill::Requeue { after: Duration::ZERO });
    for bad in [-1.0, 3601.0, f64::NAN, f64::INFINITY] {
        let e = LaunchConfig { restart_backoff: bad, ..LaunchConfig::default() }.validate();
        assert!(e.is_err_and(|e| e.key == "restart_backoff"), "{bad}");
    }
}
