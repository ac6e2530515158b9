//! One run's numbers, computed from its [`RunResult`] alone (plus the node
//! size the energy model needs): per class and per priority band, and run-wide.

use crate::outcome::{RunResult, TaskOutcome};
use crate::tally::{Job, Tally};
use overbook_core::Class;
use serde::Serialize;
use std::time::Duration;

/// Power of an idle node, watts (the linear model's intercept, see the module doc of `report`).
pub const P_IDLE_WATTS: f64 = 100.0;
/// Power of a node with every core busy, watts.
pub const P_PEAK_WATTS: f64 = 250.0;

const SECONDS_PER_HOUR: f64 = 3600.0;
const JOULES_PER_KWH: f64 = 3.6e6;

/// 004 Table 1's priority bands of the Google trace; 004 §3.3.2 reports
/// response times for "low", "medium" and "high" priority jobs, which we read
/// as these bands (004 never maps them; PAPER_NUMBERS.md §0.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Band {
    /// Priorities 0–1 ("free").
    Low,
    /// Priorities 2–8 ("middle").
    Medium,
    /// Priorities 9–11 ("production").
    High,
}

impl Band {
    pub const ALL: [Band; 3] = [Band::Low, Band::Medium, Band::High];

    pub fn of(priority: u8) -> Band {
        match priority {
            0..=1 => Band::Low,
            2..=8 => Band::Medium,
            _ => Band::High,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Band::Low => "low",
            Band::Medium => "medium",
            Band::High => "high",
        }
    }
}

/// Which tasks and jobs a group summarizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupKey {
    Class(Class),
    Band(Band),
}

impl GroupKey {
    /// Every group a metric may name, in report order.
    pub const ALL: [GroupKey; 6] = [
        GroupKey::Class(Class::Production),
        GroupKey::Class(Class::BestEffort),
        GroupKey::Class(Class::Critical),
        GroupKey::Band(Band::Low),
        GroupKey::Band(Band::Medium),
        GroupKey::Band(Band::High),
    ];
    pub const BEST_EFFORT: GroupKey = GroupKey::Class(Class::BestEffort);
    pub const PRODUCTION: GroupKey = GroupKey::Class(Class::Production);

    pub fn name(self) -> &'static str {
        match self {
            GroupKey::Class(c) => c.as_str(),
            GroupKey::Band(b) => b.as_str(),
        }
    }

    /// Its place in [`GroupKey::ALL`].
    pub fn index(self) -> usize {
        match self {
            GroupKey::Class(Class::Production) => 0,
            GroupKey::Class(Class::BestEffort) => 1,
            GroupKey::Class(Class::Critical) => 2,
            GroupKey::Band(Band::Low) => 3,
            GroupKey::Band(Band::Medium) => 4,
            GroupKey::Band(Band::High) => 5,
        }
    }

    pub fn parse(name: &str) -> Option<GroupKey> {
        GroupKey::ALL.into_iter().find(|g| g.name() == name)
    }

    /// Whether a task (or a job, through its first task) belongs here.
    pub fn holds(self, class: Class, priority: u8) -> bool {
        match self {
            GroupKey::Class(c) => c == class,
            GroupKey::Band(b) => b == Band::of(priority),
        }
    }
}

/// How often the policy acted on a set of tasks.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ActionCounts {
    pub kills: u64,
    pub suspensions: u64,
    pub checkpoints: u64,
    pub incremental_checkpoints: u64,
    pub remote_resumes: u64,
    pub restarts: u64,
    pub rejections: u64,
}

impl ActionCounts {
    pub(crate) fn add(&mut self, t: &TaskOutcome) {
        self.kills += u64::from(t.kills);
        self.suspensions += u64::from(t.suspensions);
        self.checkpoints += u64::from(t.checkpoints);
        self.incremental_checkpoints += u64::from(t.incremental_checkpoints);
        self.remote_resumes += u64::from(t.remote_resumes);
        self.restarts += u64::from(t.restarts);
        self.rejections += u64::from(t.rejections);
    }
}

/// The numbers of one class or band of one run. Times are seconds; `None`
/// where there is nothing to measure (no job, or no completed job).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupSummary {
    pub group: &'static str,
    pub tasks: usize,
    pub jobs: usize,
    pub completed_jobs: usize,
    /// Job completion ratio: completed jobs / jobs (000 §5.1).
    pub jcr: Option<f64>,
    /// Job completion time percentiles over completed jobs (nearest rank).
    pub jct_p50: Option<f64>,
    pub jct_p90: Option<f64>,
    pub jct_p95: Option<f64>,
    pub jct_p99: Option<f64>,
    /// Mean job response time, queueing plus execution (004 §3.3.2): the mean JCT.
    pub response_mean: Option<f64>,
    #[serde(flatten)]
    pub actions: ActionCounts,
    /// Task-hours run slowed by thrashing.
    pub thrashing_task_hours: f64,
    /// CPU-hours of work thrown away by kills plus checkpoint time.
    pub wasted_cpu_hours: f64,
}

/// Everything the reports say about one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunSummary {
    /// `variant` or `variant@point`.
    pub run: String,
    pub variant: String,
    pub point: Option<String>,
    pub nodes: usize,
    pub node_cores: u32,
    /// Simulated time covered, seconds.
    pub horizon_s: f64,
    pub tasks: usize,
    pub jobs: usize,
    pub groups: Vec<GroupSummary>,
    #[serde(flatten)]
    pub actions: ActionCounts,
    /// CPU time of unsuccessful executions plus checkpoint overhead (004 §3.3.2).
    pub wasted_cpu_hours: f64,
    pub busy_cpu_hours: f64,
    /// Wasted as a percentage of busy CPU-hours.
    pub wasted_pct: Option<f64>,
    /// Energy of the whole cluster over the horizon, by the linear power model.
    pub energy_kwh: f64,
    pub thrashing_node_seconds: f64,
    /// Task-hours spent dumping and restoring images.
    pub checkpoint_hours: f64,
    pub checkpoint_gb_written: f64,
    pub checkpoint_gb_read: f64,
    pub events: u64,
    pub skipped_rows: u64,
    pub first_skipped_row: Option<String>,
    pub late_rows: u64,
    /// A trace replay's counts (absent for a generated workload).
    #[serde(flatten)]
    pub trace: Option<TraceStats>,
}

/// What a trace replay read and dropped, beside what it ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceStats {
    /// Rows read from the trace's files, good or bad.
    pub rows_read: u64,
    /// Well-formed rows about no task the reader knew, dropped.
    pub unmatched: u64,
    /// Tasks submitted after the horizon, not run.
    pub after_horizon: u64,
    /// Attempts the trace ended (`WorkloadEvent::Death`).
    pub trace_deaths: u64,
    /// Machines the trace's tasks ran on (0: the format does not say).
    pub trace_machines: u64,
    /// The trace's first row, seconds of the trace's own clock (absent: no
    /// row was read).
    pub trace_first_row_s: Option<f64>,
    /// How long after that row the window (time zero) began; it lasts
    /// `horizon_s`.
    pub window_from_s: Option<f64>,
    /// The trace's machine table, when among its files: its machines, the
    /// memory most of them had (bytes), how many had it, and whether it
    /// sized the cluster (`workload.cluster`).
    pub machine_table: Option<MachineTable>,
}

/// What the trace's machine table says of its cluster.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MachineTable {
    pub machines: u64,
    pub node_memory: u64,
    pub with_that_memory: u64,
    /// The simulated cluster is the table's (else the settings').
    pub sized_the_cluster: bool,
}

impl RunSummary {
    /// Summarize a run; `node_cores` sizes the nodes for the energy model.
    /// The run is named after its variant; see [`RunSummary::at_point`].
    pub fn new(result: &RunResult, node_cores: u32) -> RunSummary {
        let tally = &result.tally;
        let present: Vec<GroupKey> = GroupKey::ALL
            .into_iter()
            .filter(|g| *g != GroupKey::Class(Class::Critical) || tally.has(Class::Critical))
            .collect();
        let groups = present.into_iter().map(|g| summarize_group(g, tally)).collect();
        let c = &result.counters;
        let wasted_cpu_hours = tally.all.wasted_cpu_hours();
        let busy_cpu_hours = c.busy_core_seconds / SECONDS_PER_HOUR;
        RunSummary {
            run: result.variant.clone(),
            variant: result.variant.clone(),
            point: None,
            nodes: c.nodes,
            node_cores,
            horizon_s: c.horizon.as_secs_f64(),
            tasks: tally.all.tasks,
            jobs: tally.jobs().len(),
            groups,
            actions: tally.all.actions.clone(),
            wasted_cpu_hours,
            busy_cpu_hours,
            wasted_pct: (busy_cpu_hours > 0.0).then(|| 100.0 * wasted_cpu_hours / busy_cpu_hours),
            energy_kwh: energy_kwh(c.nodes, node_cores, c.horizon, c.busy_core_seconds),
            thrashing_node_seconds: c.thrashing_node_seconds,
            checkpoint_hours: tally.all.checkpoint_hours(),
            checkpoint_gb_written: c.checkpoint_bytes_written as f64 / 1e9,
            checkpoint_gb_read: c.checkpoint_bytes_read as f64 / 1e9,
            events: c.events,
            skipped_rows: c.skipped_rows,
            first_skipped_row: c.first_skipped_row.clone(),
            late_rows: c.late_rows,
            trace: c.trace.map(|t| TraceStats {
                rows_read: t.rows_read,
                unmatched: t.unmatched,
                after_horizon: c.after_horizon,
                trace_deaths: c.trace_deaths,
                trace_machines: t.machines,
                trace_first_row_s: t.window.map(|w| w.0),
                window_from_s: t.window.map(|w| w.1),
                machine_table: t.machine_table.map(|(machines, node_memory, with, sized)| {
                    MachineTable {
                        machines,
                        node_memory,
                        with_that_memory: with,
                        sized_the_cluster: sized,
                    }
                }),
            }),
        }
    }

    /// Name the run as the scenario does (`charon@X2`).
    pub fn at_point(mut self, run: &str, point: Option<&str>) -> RunSummary {
        self.run = run.to_string();
        self.point = point.map(str::to_string);
        self
    }

    /// The summary of a group, if the run has that group (critical only when present).
    pub fn group(&self, key: GroupKey) -> Option<&GroupSummary> {
        self.groups.iter().find(|g| g.group == key.name())
    }
}

/// Energy by the linear power model, kWh: every node draws `P_IDLE_WATTS`
/// for the whole horizon, and each busy core adds its share of the dynamic range.
pub fn energy_kwh(nodes: usize, node_cores: u32, horizon: Duration, busy_core_seconds: f64) -> f64 {
    let idle_joules = nodes as f64 * P_IDLE_WATTS * horizon.as_secs_f64();
    let dynamic_joules =
        (P_PEAK_WATTS - P_IDLE_WATTS) / f64::from(node_cores.max(1)) * busy_core_seconds;
    (idle_joules + dynamic_joules) / JOULES_PER_KWH
}

/// Sorted completion times (seconds) of the completed jobs of a group.
pub(crate) fn completion_times(jobs: &[Job], key: GroupKey) -> Vec<f64> {
    let mut times: Vec<f64> = jobs
        .iter()
        .filter(|j| key.holds(j.class, j.priority))
        .filter_map(Job::completion_secs)
        .collect();
    times.sort_by(f64::total_cmp);
    times
}

/// The nearest-rank percentile `p` (0–100] of ascending `sorted` values:
/// the smallest value with at least p% of the values at or below it.
pub fn nearest_rank(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = overbook_core::convert::to_usize((p / 100.0 * sorted.len() as f64).ceil());
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn summarize_group(key: GroupKey, tally: &Tally) -> GroupSummary {
    let group = tally.group(key);
    let jobs = tally.jobs();
    let job_count = jobs.iter().filter(|j| key.holds(j.class, j.priority)).count();
    let jct = completion_times(jobs, key);
    GroupSummary {
        group: key.name(),
        tasks: group.tasks,
        jobs: job_count,
        completed_jobs: jct.len(),
        jcr: (job_count > 0).then(|| jct.len() as f64 / job_count as f64),
        jct_p50: nearest_rank(&jct, 50.0),
        jct_p90: nearest_rank(&jct, 90.0),
        jct_p95: nearest_rank(&jct, 95.0),
        jct_p99: nearest_rank(&jct, 99.0),
        response_mean: (!jct.is_empty()).then(|| jct.iter().sum::<f64>() / jct.len() as f64),
        actions: group.actions.clone(),
        thrashing_task_hours: group.thrashing_hours(),
        wasted_cpu_hours: group.wasted_cpu_hours(),
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Hand-built results for the report tests.
    use super::*;
    use crate::outcome::{RunCounters, Span, Stamp};
    use crate::workload::TaskKey;
    use overbook_core::{JobId, Time};

    /// A completed task of `job`, submitted at `submit` s and ending at `end` s.
    pub fn task(job: u64, class: Class, priority: u8, submit: u64, end: u64) -> TaskOutcome {
        TaskOutcome {
            key: TaskKey(job * 100 + submit),
            job: JobId(job),
            class,
            priority,
            submit: Time::ZERO + Duration::from_secs(submit),
            first_start: Stamp::at(Time::ZERO + Duration::from_secs(submit)),
            end: Stamp::at(Time::ZERO + Duration::from_secs(end)),
            completed: true,
            trace_death: false,
            rejections: 0,
            kills: 0,
            suspensions: 0,
            checkpoints: 0,
            incremental_checkpoints: 0,
            remote_resumes: 0,
            restarts: 0,
            cpus: 1.0,
            work: Duration::from_secs(end.saturating_sub(submit)).into(),
            lost_work: Span::ZERO,
            checkpoint_time: Span::ZERO,
            thrashing_time: Span::ZERO,
            reclaimed: 0,
            lost_share: 0.0,
            refault_time: Span::ZERO,
        }
    }

    /// A result of `variant` on `nodes` nodes over `horizon_s` seconds.
    pub fn result(variant: &str, outcomes: Vec<TaskOutcome>) -> RunResult {
        let counters = RunCounters {
            events: 10,
            nodes: 2,
            horizon: Duration::from_secs(3600),
            busy_core_seconds: 7200.0,
            ..RunCounters::default()
        };
        RunResult::of_outcomes(variant, counters, outcomes)
    }

    /// Best-effort jobs 1..=n (one task each, priority 0) with JCT = job id × 10 s.
    pub fn be_jobs(n: u64) -> Vec<TaskOutcome> {
        (1..=n).map(|j| task(j, Class::BestEffort, 0, 0, j * 10)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn nearest_rank_picks_the_smallest_value_covering_p_percent() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 50.0), Some(50.0));
        assert_eq!(nearest_rank(&v, 99.0), Some(99.0));
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(nearest_rank(&v, 50.0), Some(3.0));
        assert_eq!(nearest_rank(&v, 90.0), Some(5.0));
        assert_eq!(nearest_rank(&v, 20.0), Some(1.0));
        assert_eq!(nearest_rank(&[7.0], 99.0), Some(7.0));
        assert_eq!(nearest_rank(&[], 50.0), None);
    }

    #[test]
    fn percentiles_are_over_completed_jobs() {
        let s = RunSummary::new(&result("r", be_jobs(20)), 32);
        let be = s.group(GroupKey::BEST_EFFORT).unwrap();
        assert_eq!(be.jobs, 20);
        assert_eq!(be.jct_p50, Some(100.0));
        assert_eq!(be.jct_p90, Some(180.0));
        assert_eq!(be.jct_p95, Some(190.0));
        assert_eq!(be.jct_p99, Some(200.0));
        assert_eq!(be.response_mean, Some(105.0));
        assert_eq!(be.jcr, Some(1.0));
    }

    #[test]
    fn a_job_completes_only_when_all_its_tasks_do_and_spans_first_submit_to_last_end() {
        let mut lost = task(2, Class::BestEffort, 0, 0, 50);
        lost.completed = false;
        let tasks = vec![
            task(1, Class::BestEffort, 0, 10, 40),
            task(1, Class::BestEffort, 0, 5, 90),
            task(2, Class::BestEffort, 0, 0, 30),
            lost,
            task(3, Class::Production, 10, 0, 20),
        ];
        let s = RunSummary::new(&result("r", tasks), 32);
        let be = s.group(GroupKey::BEST_EFFORT).unwrap();
        assert_eq!((be.tasks, be.jobs, be.completed_jobs), (4, 2, 1));
        assert_eq!(be.jcr, Some(0.5));
        assert_eq!(be.jct_p99, Some(85.0));
        let prod = s.group(GroupKey::PRODUCTION).unwrap();
        assert_eq!((prod.jobs, prod.jcr, prod.jct_p50), (1, Some(1.0), Some(20.0)));
        assert_eq!(s.group(GroupKey::Band(Band::High)).unwrap().jobs, 1);
        assert_eq!(s.group(GroupKey::Band(Band::Low)).unwrap().jobs, 2);
        assert!(s.group(GroupKey::Class(Class::Critical)).is_none(), "no critical tasks");
    }

    #[test]
    fn a_job_takes_its_first_tasks_class_and_band() {
        let tasks = vec![task(1, Class::Critical, 11, 0, 10), task(1, Class::BestEffort, 5, 0, 30)];
        let s = RunSummary::new(&result("r", tasks), 32);
        assert_eq!(s.group(GroupKey::Class(Class::Critical)).unwrap().jobs, 1);
        assert_eq!(s.group(GroupKey::BEST_EFFORT).unwrap().jobs, 0);
        assert_eq!(s.group(GroupKey::BEST_EFFORT).unwrap().tasks, 1);
        assert_eq!(s.group(GroupKey::Band(Band::High)).unwrap().jct_p50, Some(30.0));
    }

    #[test]
    fn an_empty_group_has_no_percentiles_and_no_jcr() {
        let s = RunSummary::new(&result("r", be_jobs(3)), 32);
        let prod = s.group(GroupKey::PRODUCTION).unwrap();
        assert_eq!((prod.tasks, prod.jobs), (0, 0));
        assert_eq!(
            (prod.jcr, prod.jct_p50, prod.jct_p99, prod.response_mean),
            (None, None, None, None)
        );
        let mut failed = be_jobs(1);
        failed[0].completed = false;
        let s = RunSummary::new(&result("r", failed), 32);
        let be = s.group(GroupKey::BEST_EFFORT).unwrap();
        assert_eq!((be.jcr, be.jct_p90), (Some(0.0), None));
    }

    #[test]
    fn wasted_cpu_hours_count_lost_work_and_checkpoint_time_times_cores() {
        let mut a = task(1, Class::BestEffort, 0, 0, 10);
        a.cpus = 2.0;
        a.lost_work = Duration::from_secs(1800).into();
        a.checkpoint_time = Duration::from_secs(1800).into();
        a.kills = 3;
        let mut b = task(2, Class::BestEffort, 0, 0, 10);
        b.cpus = 0.5;
        b.checkpoint_time = Duration::from_secs(3600).into();
        b.checkpoints = 2;
        let s = RunSummary::new(&result("r", vec![a, b]), 32);
        assert!((s.wasted_cpu_hours - 2.5).abs() < 1e-9, "{}", s.wasted_cpu_hours);
        assert!((s.checkpoint_hours - 1.5).abs() < 1e-9);
        // busy: 7200 core-seconds = 2 CPU-hours.
        assert!((s.wasted_pct.unwrap() - 125.0).abs() < 1e-9);
        assert_eq!((s.actions.kills, s.actions.checkpoints), (3, 2));
    }

    #[test]
    fn energy_follows_the_linear_power_model() {
        // 2 nodes idle for an hour: 200 Wh; 7200 busy core-seconds on
        // 32-core nodes add 150 W / 32 × 7200 s = 33,750 J.
        let s = RunSummary::new(&result("r", vec![]), 32);
        let expected = (2.0 * 100.0 * 3600.0 + 150.0 / 32.0 * 7200.0) / 3.6e6;
        assert!((s.energy_kwh - expected).abs() < 1e-12, "{} vs {expected}", s.energy_kwh);
        // All cores of both nodes busy all hour: peak power.
        let full = energy_kwh(2, 32, Duration::from_secs(3600), 2.0 * 32.0 * 3600.0);
        assert!((full - 0.5).abs() < 1e-12, "{full}");
    }

    #[test]
    fn bands_follow_004_table_1() {
        assert_eq!(
            [0, 1, 2, 8, 9, 11].map(Band::of),
            [Band::Low, Band::Low, Band::Medium, Band::Medium, Band::High, Band::High]
        );
    }
}
