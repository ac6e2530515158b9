//! The built-in workload generator: a cluster's production and best-effort
//! jobs drawn from published statistics, so that `overbook sim` runs a
//! meaningful cluster on a fresh machine with nothing downloaded.
//!
//! Every distribution and its source (details and the arithmetic in
//! `docs/workload.md`):
//!
//! * **Job arrivals**: a Poisson process per class (exponential gaps). The
//!   rate follows from the memory each class is to hold by Little's law
//!   (rate = held memory / (memory per task x mean run time)), so a load is
//!   stated in what matters here: memory.
//! * **Production holds** `production_load` of the cluster's memory in
//!   reservations, and uses `production_usage` of a reservation on average:
//!   000 §5.5 (Fig. 11a) finds production leaving "nearly 30%" of its
//!   allocation unused, §2 (Fig. 1b) 40% of cluster memory idle; the default
//!   0.7 is the former. Usage moves every `usage_period` (the Google 2011
//!   trace samples usage every 5 minutes, Reiss et al. 2012) as a Beta draw
//!   with that mean, so production sometimes reaches its full reservation (000
//!   Fig. 1a: "only reaches the maximum ... at a few moments").
//! * **Best-effort load** is `best_effort_share` of the cluster's memory at
//!   X1; `best_effort_load` replicates every best-effort job that many times
//!   (000 §5.3: "we replicate each best-effort job in the trace file by 2 times
//!   and 3 times"), fractional loads replicating a job once more with the
//!   fraction's probability. Production does not change with the load.
//! * **Tasks per job**: log-normal, sigma 1.5, rounded up, with a mean of
//!   `tasks_per_job` (default 40: 004 §3.3.2's one-day Google trace has
//!   "approximately 15,000 jobs (totaling over 600,000 tasks)"), capped at
//!   four per node so that no single job is the whole cluster.
//! * **Run times**: log-normal with the given medians and `runtime_sigma`;
//!   Google 2011's task durations are heavy-tailed (Reiss et al. 2012), most
//!   tasks short, most task-time in long ones.
//! * **Requests**: log-normal around the given medians (`request_sigma`),
//!   capped at half a node. A job's tasks share a request and a peak (the
//!   executors of one Spark job are alike, which is what 000's launcher
//!   profiles); each task varies its peak by up to 10%.
//! * **Best-effort memory** ramps from half its peak to the peak over the
//!   first fifth of its work and then moves within 80-100% of it (a Spark
//!   task loading its input, then computing); the peak is 60-100% of the
//!   request.
//! * **Priorities** (004 Table 1, tasks in the Google 2011 trace): production
//!   tasks draw 9-11; best-effort tasks draw "free" 0-1 with probability
//!   28.4 / (28.4 + 17.3) = 62% and "middle" 2-8 otherwise.
//!
//! With `warm_start`, production starts in its steady state: at time 0 the
//! cluster already holds its production reservations, each task part-way
//! through its work, instead of an empty cluster filling up for an hour.

use crate::scenario::RunSpec;
use crate::units::{Size, Span};
use crate::workload::{MemProfile, TaskKey, TaskSpec, TraceError, WorkloadEvent};
use overbook_core::{Bytes, Class, JobId, Time};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, LogNormal};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;
use usage::UsageShares;

mod usage;

/// 004 Table 1: tasks at "free" (0-1) and "middle" (2-8) priorities, millions.
const FREE_TASKS_M: f64 = 28.4;
const MIDDLE_TASKS_M: f64 = 17.3;
/// The spread of tasks per job (log-normal sigma).
const TASKS_PER_JOB_SIGMA: f64 = 1.5;
/// Beta concentration of production usage around its mean (a + b).
const USAGE_CONCENTRATION: f64 = 4.0;
/// Share of its work over which a best-effort task ramps up to its peak.
const RAMP_SHARE: f64 = 0.2;
/// Smallest request the generator makes.
const MIN_REQUEST: Bytes = 64 << 20;

/// The generator's settings: `[workload]` with `kind = "generate"` (or no kind).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GeneratorConfig {
    /// How many times the best-effort job stream is replicated (000's X1..X4).
    pub best_effort_load: f64,
    /// Memory best-effort tasks hold at X1, as a share of the cluster's memory.
    pub best_effort_share: f64,
    /// Memory production reserves in steady state, as a share of the cluster's.
    pub production_load: f64,
    /// Mean share of its reservation a production task uses.
    pub production_usage: f64,
    /// Median memory request of a production task.
    pub production_request: Size,
    /// Median memory request of a best-effort task.
    pub best_effort_request: Size,
    /// Spread of requests around their medians (log-normal sigma).
    pub request_sigma: f64,
    /// Median work (unloaded run time) of a production task.
    pub production_runtime: Span,
    /// Median work of a best-effort task.
    pub best_effort_runtime: Span,
    /// Spread of run times around their medians (log-normal sigma).
    pub runtime_sigma: f64,
    /// Mean tasks per job.
    pub tasks_per_job: f64,
    /// How often a task's memory moves.
    pub usage_period: Span,
    /// Start with production in its steady state rather than an empty cluster.
    pub warm_start: bool,
}

impl Default for GeneratorConfig {
    fn default() -> GeneratorConfig {
        GeneratorConfig {
            best_effort_load: 1.0,
            best_effort_share: 0.25,
            production_load: 0.6,
            production_usage: 0.7,
            production_request: Size(4 << 30),
            best_effort_request: Size(2 << 30),
            request_sigma: 0.8,
            production_runtime: Span(Duration::from_secs(30 * 60)),
            best_effort_runtime: Span(Duration::from_secs(5 * 60)),
            runtime_sigma: 1.0,
            tasks_per_job: 40.0,
            usage_period: Span(Duration::from_secs(5 * 60)),
            warm_start: true,
        }
    }
}

/// A generator setting that cannot be used; `key` is under `workload.`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct GenError {
    pub key: String,
    pub problem: String,
}

fn bad(key: &str, problem: impl ToString) -> GenError {
    GenError { key: key.to_string(), problem: problem.to_string() }
}

impl GeneratorConfig {
    /// Read `[workload]` (without its `kind`); unknown keys are refused by name.
    pub fn from_table(table: &toml::Table) -> Result<GeneratorConfig, GenError> {
        let cfg: GeneratorConfig =
            serde_path_to_error::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
                bad(&e.path().to_string(), overbook_core::config::plain_words(e.inner().message()))
            })?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), GenError> {
        let fraction = |key: &str, v: f64, max: f64| {
            if v.is_finite() && (0.0..=max).contains(&v) {
                Ok(())
            } else {
                Err(bad(key, format!("{v} is outside 0..={max}")))
            }
        };
        fraction("best_effort_load", self.best_effort_load, 100.0)?;
        fraction("best_effort_share", self.best_effort_share, 10.0)?;
        fraction("production_load", self.production_load, 1.0)?;
        fraction("request_sigma", self.request_sigma, 4.0)?;
        fraction("runtime_sigma", self.runtime_sigma, 4.0)?;
        if !(self.production_usage > 0.0 && self.production_usage < 1.0) {
            return Err(bad(
                "production_usage",
                format!("{} must be above 0 and below 1", self.production_usage),
            ));
        }
        if !(self.tasks_per_job.is_finite() && self.tasks_per_job >= 1.0) {
            return Err(bad("tasks_per_job", format!("{} must be at least 1", self.tasks_per_job)));
        }
        for (key, size) in [
            ("production_request", self.production_request),
            ("best_effort_request", self.best_effort_request),
        ] {
            if size.0 < MIN_REQUEST {
                return Err(bad(
                    key,
                    format!("{} bytes is below the 64 MiB the generator makes", size.0),
                ));
            }
        }
        for (key, span) in [
            ("production_runtime", self.production_runtime),
            ("best_effort_runtime", self.best_effort_runtime),
            ("usage_period", self.usage_period),
        ] {
            if span.0 < Duration::from_secs(1) {
                return Err(bad(key, "must be at least 1 s"));
            }
        }
        Ok(())
    }
}

/// One class's stream of jobs.
#[derive(Debug)]
struct JobStream {
    /// Jobs per second.
    rate: f64,
    next: Time,
    request: LogNormal<f64>,
    work: LogNormal<f64>,
}

/// The generated workload, produced lazily in time order.
#[derive(Debug)]
pub struct Generator {
    cfg: GeneratorConfig,
    rng: ChaCha8Rng,
    /// Separate draws for replication, so that X2 is X1's stream replicated.
    replicas: ChaCha8Rng,
    /// Production's usage shares; `None` where the mean leaves no Beta
    /// (0 or 1), and every share is the mean.
    usage: Option<UsageShares>,
    /// A task's shares, drawn before its points are made (kept between
    /// tasks for its room).
    shares: Vec<f64>,
    node_memory: Bytes,
    max_tasks: u32,
    tasks_per_job: LogNormal<f64>,
    production: JobStream,
    best_effort: JobStream,
    horizon: Time,
    /// The run's end: profiles keep only what a task can reach by then.
    end: Time,
    ready: VecDeque<TaskSpec>,
    next_job: u64,
    next_task: u64,
}

impl Generator {
    /// The generator a run's `[workload]` table and cluster ask for.
    pub fn from_spec(table: &toml::Table, spec: &RunSpec) -> Result<Generator, GenError> {
        let cfg = GeneratorConfig::from_table(table)?;
        let horizon = Time::ZERO + spec.sim.horizon.0;
        let (nodes, node_memory) = (spec.cluster.nodes, spec.cluster.node_memory.0);
        Generator::new(cfg, nodes, node_memory, horizon, spec.end_time(), spec.seed)
    }

    /// Jobs are submitted until `horizon`; the run ends at `end`, and a
    /// task's profile keeps only what it can reach by then: a task submitted
    /// at `s` does at most `end - s` of work (it runs at most at full speed),
    /// so its points past that never come into force. They are still drawn,
    /// so every task and every reachable point is the same whatever `end`;
    /// only the tail is folded (`ProfileBuilder`). Production work runs up to
    /// 30 days: a day at Google scale held 20 M points, most out of reach.
    pub fn new(
        cfg: GeneratorConfig,
        nodes: usize,
        node_memory: Bytes,
        horizon: Time,
        end: Time,
        seed: u64,
    ) -> Result<Generator, GenError> {
        cfg.validate()?;
        let cluster_memory = nodes as f64 * node_memory as f64;
        let max_tasks = u32::try_from(nodes.saturating_mul(4)).unwrap_or(u32::MAX).max(1);
        // Mean of ceil(LogNormal(mu, s)) is about exp(mu + s^2/2) + 0.5.
        let mu = ((cfg.tasks_per_job - 0.5).max(0.5)).ln()
            - TASKS_PER_JOB_SIGMA * TASKS_PER_JOB_SIGMA / 2.0;
        let tasks_per_job = log_normal(mu, TASKS_PER_JOB_SIGMA, "tasks_per_job")?;
        let stream = |held: f64, request: Size, runtime: Span, usage: f64| {
            let request_d =
                log_normal((request.0 as f64).ln(), cfg.request_sigma, "request_sigma")?;
            let work_d =
                log_normal(runtime.0.as_secs_f64().ln(), cfg.runtime_sigma, "runtime_sigma")?;
            let mean_request = (request.0 as f64 * (cfg.request_sigma.powi(2) / 2.0).exp())
                .min(node_memory as f64 / 2.0);
            let mean_work = runtime.0.as_secs_f64() * (cfg.runtime_sigma.powi(2) / 2.0).exp();
            let mean_tasks = cfg.tasks_per_job.min(f64::from(max_tasks));
            let rate = held / (mean_request * usage * mean_work * mean_tasks);
            Ok::<_, GenError>(JobStream {
                rate,
                next: Time::ZERO,
                request: request_d,
                work: work_d,
            })
        };
        let production = stream(
            cfg.production_load * cluster_memory,
            cfg.production_request,
            cfg.production_runtime,
            1.0,
        )?;
        // A best-effort task holds about 0.8 x 0.9 of its request on average
        // (peak 60-100% of the request, 80-100% of the peak after the ramp).
        let best_effort = stream(
            cfg.best_effort_share * cluster_memory,
            cfg.best_effort_request,
            cfg.best_effort_runtime,
            0.72,
        )?;
        let mut g = Generator {
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x6f76_6572_626f_6f6b),
            replicas: ChaCha8Rng::seed_from_u64(seed.rotate_left(17) ^ 0x7265_706c_6963_6173),
            usage: UsageShares::new(
                cfg.production_usage * USAGE_CONCENTRATION,
                (1.0 - cfg.production_usage) * USAGE_CONCENTRATION,
            ),
            shares: Vec::new(),
            cfg,
            node_memory,
            max_tasks,
            tasks_per_job,
            production,
            best_effort,
            horizon,
            end,
            ready: VecDeque::new(),
            next_job: 0,
            next_task: 0,
        };
        if g.cfg.warm_start {
            g.warm_start(cluster_memory);
        }
        g.production.next = g.gap(g.production.rate, Time::ZERO);
        g.best_effort.next = g.gap(g.best_effort.rate, Time::ZERO);
        Ok(g)
    }

    /// Work a task submitted at `submit` can do by the run's end, with a
    /// second to spare for the clocks' rounding.
    fn reach(&self, submit: Time) -> Duration {
        self.end.since(submit).saturating_add(Duration::from_secs(1))
    }

    pub fn config(&self) -> &GeneratorConfig {
        &self.cfg
    }

    /// Production's steady state at time 0: reservations up to its share,
    /// each task somewhere in its work (a uniform part of a fresh draw left).
    fn warm_start(&mut self, cluster_memory: f64) {
        let target = self.cfg.production_load * cluster_memory;
        let mut held = 0.0;
        while held < target {
            let job = self.new_job_id();
            let request = self.request(&self.production.request.clone());
            let n = self.task_count();
            for _ in 0..n {
                if held >= target {
                    break;
                }
                let full = self.work(&self.production.work.clone());
                let left = full.mul_f64(self.rng.gen_range(0.05..=1.0));
                let spec = self.production_task(job, Time::ZERO, request, left);
                held += request as f64;
                self.ready.push_back(spec);
            }
        }
    }

    fn gap(&mut self, rate: f64, from: Time) -> Time {
        if rate <= 0.0 || !rate.is_finite() {
            return Time(u64::MAX);
        }
        let secs = Exp::new(rate).map(|e| e.sample(&mut self.rng)).unwrap_or(f64::INFINITY);
        if secs.is_finite() && secs < 1e9 {
            from + Duration::from_secs_f64(secs)
        } else {
            Time(u64::MAX)
        }
    }

    fn new_job_id(&mut self) -> JobId {
        self.next_job += 1;
        JobId(self.next_job)
    }

    fn new_task_key(&mut self) -> TaskKey {
        self.next_task += 1;
        TaskKey(self.next_task)
    }

    fn task_count(&mut self) -> u32 {
        let n = self.tasks_per_job.sample(&mut self.rng).ceil();
        overbook_core::convert::to_u32(n.max(1.0)).min(self.max_tasks)
    }

    fn request(&mut self, d: &LogNormal<f64>) -> Bytes {
        let r = d.sample(&mut self.rng);
        overbook_core::convert::to_u64(r)
            .clamp(MIN_REQUEST, (self.node_memory / 2).max(MIN_REQUEST))
    }

    fn work(&mut self, d: &LogNormal<f64>) -> Duration {
        let secs = d.sample(&mut self.rng).clamp(1.0, 30.0 * 86_400.0);
        Duration::from_secs_f64(secs)
    }

    fn priority(&mut self, class: Class) -> u8 {
        match class {
            Class::BestEffort => {
                if self.rng.gen_bool(FREE_TASKS_M / (FREE_TASKS_M + MIDDLE_TASKS_M)) {
                    self.rng.gen_range(0..=1)
                } else {
                    self.rng.gen_range(2..=8)
                }
            }
            _ => self.rng.gen_range(9..=11),
        }
    }

    fn production_task(
        &mut self,
        job: JobId,
        submit: Time,
        request: Bytes,
        work: Duration,
    ) -> TaskSpec {
        let mean = self.cfg.production_usage;
        let period = self.cfg.usage_period.0;
        let mut points = ProfileBuilder::grid(self.reach(submit), work, period);
        // One point every period from 0 while before `work`.
        let count = usize::try_from(work.as_nanos().div_ceil(period.as_nanos()))
            .expect("work of at most 30 days in periods of at least 1 s");
        let mut shares = std::mem::take(&mut self.shares);
        shares.clear();
        match &self.usage {
            Some(usage) => usage.draw(&mut self.rng, count, &mut shares),
            None => shares.resize(count, mean),
        }
        let mut at = Duration::ZERO;
        for &share in &shares {
            points.push(
                at,
                overbook_core::convert::to_u64((request as f64) * share.clamp(0.05, 1.0)),
            );
            at += period;
        }
        debug_assert!(at >= work && (count == 0 || at - period < work), "{count} points");
        self.shares = shares;
        let priority = self.priority(Class::Production);
        TaskSpec {
            key: self.new_task_key(),
            job,
            submit,
            class: Class::Production,
            priority,
            request,
            cpus: 1.0,
            work: Some(work),
            profile: points.finish(),
            weight: 1,
            pauses: Vec::new(),
        }
    }

    fn best_effort_task(
        &mut self,
        job: JobId,
        submit: Time,
        request: Bytes,
        peak_share: f64,
    ) -> TaskSpec {
        let work = self.work(&self.best_effort.work.clone());
        let peak = request as f64 * (peak_share * self.rng.gen_range(0.9..=1.1)).min(1.0);
        let ramp = work.mul_f64(RAMP_SHARE);
        let period = self.cfg.usage_period.0;
        let mut points = ProfileBuilder::listed(self.reach(submit), work, period);
        points.push(Duration::ZERO, overbook_core::convert::to_u64(peak * 0.5));
        let mut at = ramp;
        let mut first = true;
        while at < work {
            let level = if first { 1.0 } else { self.rng.gen_range(0.8..=1.0) };
            first = false;
            points.push(at, overbook_core::convert::to_u64(peak * level));
            at += period;
        }
        let priority = self.priority(Class::BestEffort);
        TaskSpec {
            key: self.new_task_key(),
            job,
            submit,
            class: Class::BestEffort,
            priority,
            request,
            cpus: 1.0,
            work: Some(work),
            profile: points.finish(),
            weight: 1,
            pauses: Vec::new(),
        }
    }

    /// Draw the next job of the earlier stream and queue its tasks.
    fn next_job(&mut self) -> bool {
        let production_first = self.production.next <= self.best_effort.next;
        let at = if production_first { self.production.next } else { self.best_effort.next };
        if at > self.horizon {
            return false;
        }
        let n = self.task_count();
        if production_first {
            let job = self.new_job_id();
            let request = self.request(&self.production.request.clone());
            for _ in 0..n {
                let work = self.work(&self.production.work.clone());
                let spec = self.production_task(job, at, request, work);
                self.ready.push_back(spec);
            }
            self.production.next = self.gap(self.production.rate, at);
        } else {
            let request = self.request(&self.best_effort.request.clone());
            let peak_share = self.rng.gen_range(0.6..=1.0);
            let mut tasks = Vec::with_capacity(n as usize);
            let job = self.new_job_id();
            for _ in 0..n {
                tasks.push(self.best_effort_task(job, at, request, peak_share));
            }
            let load = self.cfg.best_effort_load;
            let whole = overbook_core::convert::to_u32(load.floor());
            let extra = u32::from(self.replicas.gen_bool((load - load.floor()).clamp(0.0, 1.0)));
            for copy in 0..whole + extra {
                let job = if copy == 0 { job } else { self.new_job_id() };
                for t in &tasks {
                    let mut t = t.clone();
                    t.job = job;
                    if copy > 0 {
                        t.key = self.new_task_key();
                    }
                    self.ready.push_back(t);
                }
            }
            self.best_effort.next = self.gap(self.best_effort.rate, at);
        }
        true
    }
}

/// A generated profile's points, in offset order, as far as its task can
/// reach: every point up to `reach`, and the first one after it, exactly
/// (its event is the last one scheduled, and it falls after the run's
/// end). Later points fold into one at the last offset holding their
/// largest memory, so the profile's peak is the drawn one.
struct ProfileBuilder {
    points: Points,
    /// The offset of the last point kept.
    last: Option<Duration>,
    reach: Duration,
    folded: Option<(Duration, Bytes)>,
}

enum Points {
    /// Every `period` from 0 (production's usage): only the memory is kept
    /// (`MemProfile::every`).
    Grid {
        period: Duration,
        mems: Vec<Bytes>,
    },
    Listed(Vec<(Duration, Bytes)>),
}

impl ProfileBuilder {
    /// For points every `period` from offset 0.
    fn grid(reach: Duration, work: Duration, period: Duration) -> ProfileBuilder {
        let mems = Vec::with_capacity(ProfileBuilder::room(reach, work, period));
        ProfileBuilder::with(Points::Grid { period, mems }, reach)
    }

    fn listed(reach: Duration, work: Duration, period: Duration) -> ProfileBuilder {
        let points = Vec::with_capacity(ProfileBuilder::room(reach, work, period));
        ProfileBuilder::with(Points::Listed(points), reach)
    }

    fn with(points: Points, reach: Duration) -> ProfileBuilder {
        ProfileBuilder { points, last: None, reach, folded: None }
    }

    fn room(reach: Duration, work: Duration, period: Duration) -> usize {
        let span = work.min(reach.saturating_add(period));
        2 + points_within(span, period)
    }

    fn push(&mut self, at: Duration, mem: Bytes) {
        if self.last.is_some_and(|last| last > self.reach) {
            let folded = self.folded.get_or_insert((at, mem));
            *folded = (at, folded.1.max(mem));
            return;
        }
        self.push_kept(at, mem);
    }

    fn finish(mut self) -> MemProfile {
        if let Some((at, mem)) = self.folded {
            self.push_kept(at, mem);
        }
        match self.points {
            Points::Grid { period, mems } => {
                MemProfile::every(period, mems, self.last.unwrap_or(Duration::ZERO))
            }
            Points::Listed(points) => MemProfile::from_points(points),
        }
    }

    fn push_kept(&mut self, at: Duration, mem: Bytes) {
        self.last = Some(at);
        match &mut self.points {
            Points::Grid { mems, .. } => mems.push(mem),
            Points::Listed(points) => points.push((at, mem)),
        }
    }
}

/// How many usage points a profile sampled every `period` from 0 until
/// `span` has, to size its vector once: long tasks have hundreds, and
/// growing the vector point by point copied each profile several times.
/// Capped, as it is only a hint.
fn points_within(span: Duration, period: Duration) -> usize {
    let n = span.as_nanos().div_ceil(period.as_nanos().max(1));
    usize::try_from(n.min(1 << 16)).unwrap_or(1 << 16)
}

fn log_normal(mu: f64, sigma: f64, key: &str) -> Result<LogNormal<f64>, GenError> {
    LogNormal::new(mu, sigma).map_err(|e| bad(key, e))
}

impl Iterator for Generator {
    type Item = Result<WorkloadEvent, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(spec) = self.ready.pop_front() {
                return Some(Ok(WorkloadEvent::Submit(spec)));
            }
            if !self.next_job() {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generator(load: f64, seed: u64) -> Generator {
        ending(load, seed, Time(u64::MAX))
    }

    fn ending(load: f64, seed: u64, end: Time) -> Generator {
        let cfg = GeneratorConfig { best_effort_load: load, ..GeneratorConfig::default() };
        Generator::new(cfg, 20, 64 << 30, Time::from_secs(6 * 3600), end, seed).expect("valid")
    }

    fn tasks(g: Generator) -> Vec<TaskSpec> {
        g.map(|e| match e {
            Ok(WorkloadEvent::Submit(s)) => s,
            other => panic!("generator made {other:?}"),
        })
        .collect()
    }

    #[test]
    fn events_come_in_time_order_and_end_at_the_horizon() {
        let all = tasks(generator(1.0, 1));
        assert!(all.len() > 100, "{} tasks", all.len());
        assert!(all.windows(2).all(|w| w[0].submit <= w[1].submit));
        assert!(all.iter().all(|t| t.submit <= Time::from_secs(6 * 3600)));
        let keys: std::collections::HashSet<_> = all.iter().map(|t| t.key).collect();
        assert_eq!(keys.len(), all.len(), "task keys are unique");
    }

    #[test]
    fn the_same_seed_gives_the_same_workload() {
        assert_eq!(tasks(generator(2.0, 7)), tasks(generator(2.0, 7)));
        assert_ne!(tasks(generator(1.0, 7)), tasks(generator(1.0, 8)));
    }

    #[test]
    fn a_higher_load_replicates_best_effort_and_keeps_production() {
        let x1 = tasks(generator(1.0, 3));
        let x3 = tasks(generator(3.0, 3));
        let count = |v: &[TaskSpec], c: Class| v.iter().filter(|t| t.class == c).count();
        assert_eq!(count(&x1, Class::Production), count(&x3, Class::Production));
        assert_eq!(count(&x1, Class::BestEffort) * 3, count(&x3, Class::BestEffort));
        // The replicas are the same tasks under new keys and jobs.
        let first = x1.iter().find(|t| t.class == Class::BestEffort).expect("a best-effort task");
        let copies =
            x3.iter().filter(|t| t.profile == first.profile && t.work == first.work).count();
        assert_eq!(copies, 3);
    }

    #[test]
    fn production_holds_about_its_share_and_uses_about_its_usage() {
        let g = generator(1.0, 5);
        let cluster = 20.0 * (64u64 << 30) as f64;
        let all = tasks(g);
        // The warm start: reservations at time 0.
        let at_zero: f64 = all
            .iter()
            .filter(|t| t.submit == Time::ZERO && t.class == Class::Production)
            .map(|t| t.request as f64)
            .sum();
        assert!(
            (at_zero / cluster - 0.6).abs() < 0.05,
            "production reserves {:.2}",
            at_zero / cluster
        );
        let (used, reserved) =
            all.iter().filter(|t| t.class == Class::Production).fold((0.0, 0.0), |acc, t| {
                let pts = t.profile.to_points();
                let mean = pts.iter().map(|p| p.1 as f64).sum::<f64>() / pts.len() as f64;
                (acc.0 + mean, acc.1 + t.request as f64)
            });
        assert!((used / reserved - 0.7).abs() < 0.05, "production uses {:.2}", used / reserved);
    }

    #[test]
    fn production_profiles_keep_only_their_memory() {
        // Every `usage_period` from 0, so a grid: 8 bytes a point and one
        // word for the last point's offset, where listed points take 24.
        let all = tasks(generator(1.0, 5));
        for t in all.iter().filter(|t| t.class == Class::Production) {
            assert_eq!(t.profile.heap_bytes(), 8 * (t.profile.len() + 1), "task {:?}", t.key);
        }
        let be = all.iter().find(|t| t.class == Class::BestEffort).expect("a best-effort task");
        assert_eq!(be.profile.heap_bytes(), 24 * be.profile.len(), "a ramp is listed");
    }

    #[test]
    fn profiles_keep_what_a_task_can_reach_by_the_run_end() {
        let end = Time::from_secs(2 * 3600);
        let full = tasks(generator(1.0, 11));
        let cut = tasks(ending(1.0, 11, end));
        assert_eq!(full.len(), cut.len());
        let period = GeneratorConfig::default().usage_period.0;
        let mut folded = 0;
        for (f, c) in full.iter().zip(&cut) {
            assert_eq!((f.key, f.submit, f.work, f.request), (c.key, c.submit, c.work, c.request));
            assert_eq!(f.profile.peak(), c.profile.peak(), "task {:?} keeps its peak", f.key);
            let reach = end.since(f.submit) + Duration::from_secs(1);
            let (f_points, c_points) = (f.profile.to_points(), c.profile.to_points());
            let kept = f_points.iter().take_while(|p| p.0 <= reach).count() + 1;
            let kept = &f_points[..kept.min(f_points.len())];
            // Every point it can reach, and the next one (the last event it
            // schedules), as drawn.
            assert_eq!(&c_points[..kept.len()], kept, "task {:?}", f.key);
            // Up to `reach`, a point a period (and a best-effort task's
            // first, before its ramp), then the next one and the fold.
            let most = points_within(reach, period) + 4;
            assert!(c.profile.len() <= most, "{} points", c.profile.len());
            folded += usize::from(c.profile.len() < f.profile.len());
        }
        assert!(folded > 10, "only {folded} profiles reach past two hours");
    }

    #[test]
    fn best_effort_ramps_to_a_peak_within_its_request() {
        for t in tasks(generator(1.0, 9)).iter().filter(|t| t.class == Class::BestEffort) {
            let pts = t.profile.to_points();
            assert!(t.profile.peak() <= t.request, "peak above request");
            assert!(pts[0].1 <= t.profile.peak() / 2 + 1);
            assert!(t.priority <= 8);
        }
    }

    #[test]
    fn bad_settings_name_their_key() {
        let mut table = toml::Table::new();
        table.insert("production_load".into(), toml::Value::Float(1.5));
        let err = GeneratorConfig::from_table(&table).unwrap_err();
        assert_eq!(err.key, "production_load");
        let mut table = toml::Table::new();
        table.insert("best_efort_load".into(), toml::Value::Float(1.0));
        let err = GeneratorConfig::from_table(&table).unwrap_err().to_string();
        assert!(err.contains("best_efort_load"), "{err}");
        let mut table = toml::Table::new();
        table.insert("usage_period".into(), toml::Value::String("fortnight".into()));
        assert!(GeneratorConfig::from_table(&table).is_err());
    }
}
