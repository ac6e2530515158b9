//! Turning a planned run into a simulation: the cluster, the models and the
//! workload its settings name, then the engine.

use super::spec::{ClusterFrom, RunSpec, TraceSpec, WorkloadSpec};
use super::PlannedRun;
use crate::calibration::Calibration;
use crate::engine::{Engine, Progress, SimConfig, SimError};
use crate::generate::Generator;
use crate::killdelay::KillDelayDist;
use crate::outcome::{RunResult, TraceCounts};
use crate::storage::StoreSpec;
use crate::tally::Outcomes;
use crate::trace::{self, TraceFormat, TraceOptions};
use crate::workload::TraceError;
use overbook_core::Time;
use std::time::Duration;

/// Why a run could not be done.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A setting that parsed but cannot be used; names its key.
    #[error("{key}: {problem}")]
    Setting { key: String, problem: String },
    #[error("the built-in calibration: {0}")]
    Calibration(String),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Sim(#[from] SimError),
    /// A trace replay that ran no task: nothing to report on.
    #[error(
        "the trace replay ran no task: {rows_read} rows read, {skipped} skipped as bad, \
         {unmatched} unmatched, {after_horizon} tasks submitted after the horizon \
         ({window}{first}){hint}"
    )]
    EmptyReplay {
        rows_read: u64,
        skipped: u64,
        unmatched: u64,
        after_horizon: u64,
        /// Where the window is, in the settings' terms.
        window: String,
        /// Where the trace's first event is, as `; its first event is at …`.
        first: String,
        hint: &'static str,
    },
}

fn spec_cluster(spec: &RunSpec) -> ClusterFrom {
    match &spec.workload {
        WorkloadSpec::Trace(t) => t.cluster,
        _ => ClusterFrom::Settings,
    }
}

/// The cluster of the trace's machine table, if it has one: to size the
/// cluster when `workload.cluster` asks, else to warn when the settings'
/// differs by far (then read leniently: a table that sizes nothing fails
/// no run).
fn trace_cluster(t: &TraceSpec) -> Result<Option<trace::TraceCluster>, RunError> {
    let format: TraceFormat = match t.format.parse() {
        Ok(f) => f,
        Err(_) => return Ok(None), // said with its names where the trace is opened
    };
    let opts = TraceOptions {
        memory_scale: t.memory_scale.0,
        skip_bad_rows: t.skip_bad_rows || t.cluster == ClusterFrom::Settings,
        ..TraceOptions::default()
    };
    let found = trace::cluster(format, &t.paths, &opts)?;
    if found.is_none() && t.cluster == ClusterFrom::Trace {
        let why = match trace::machine_table(format) {
            Some(table) => format!("no {table} table among the trace's files"),
            None => format!("{format} traces have no machine table"),
        };
        return Err(setting("workload.cluster", format!("\"trace\": {why}")));
    }
    Ok(found)
}

/// Where a replay's window is: its length and start as set, and the
/// trace's first row on its own clock once one was read.
fn window_said(spec: &RunSpec, window: Option<(Time, Duration)>) -> String {
    let span = |d: Duration| humantime::format_duration(Duration::from_secs(d.as_secs()));
    let from = match &spec.workload {
        WorkloadSpec::Trace(t) => t.from.0,
        _ => Duration::ZERO,
    };
    let first = match window {
        Some((first, _)) => format!(", at {} s on its clock", first.as_secs_f64().round()),
        None => String::new(),
    };
    format!(
        "sim.horizon = {}; the window starts {} after the trace's first row{first} \
         (workload.from)",
        span(spec.sim.horizon.0),
        span(from),
    )
}

fn setting(key: &str, problem: impl ToString) -> RunError {
    RunError::Setting { key: key.to_string(), problem: problem.to_string() }
}

/// The engine's configuration for a run.
pub fn sim_config(spec: &RunSpec) -> Result<SimConfig, RunError> {
    let store: StoreSpec = spec.cluster.store.parse().map_err(|e| setting("cluster.store", e))?;
    store.validate().map_err(|e| setting("cluster.store", e))?;
    Ok(SimConfig {
        nodes: spec.cluster.nodes,
        node_memory: spec.cluster.node_memory.0,
        node_swap: spec.cluster.node_swap.0,
        policy: spec.policy.clone(),
        store: store.into(),
        dump_overhead: spec.cluster.dump_overhead.0,
        can_checkpoint: spec.cluster.checkpoint,
        can_incremental: spec.cluster.checkpoint && spec.cluster.incremental,
        shared_store: spec.cluster.shared_store,
        swap_bandwidth: spec.cluster.swap_bandwidth.0 as f64,
        sample_period: spec.sim.sample_period.0,
        max_attempts: spec.sim.max_attempts,
        retry_backoff: spec.sim.retry_backoff.0,
        stop_submissions_at: Time::ZERO + spec.sim.horizon.0,
        end: spec.end_time(),
        seed: spec.seed,
    })
}

/// Run one planned run to its end, keeping every task's outcome or only
/// their tally.
pub fn execute(
    run: &PlannedRun,
    outcomes: Outcomes,
    progress: &mut dyn Progress,
) -> Result<RunResult, RunError> {
    let spec = &run.spec;
    let cfg = sim_config(spec)?;
    let killer: KillDelayDist =
        spec.cluster.kill_delay.parse().map_err(|e| setting("cluster.kill_delay", e))?;
    let model = if spec.sim.calibration.is_empty() {
        Calibration::builtin().map_err(|e| RunError::Calibration(e.to_string()))?
    } else {
        Calibration::load(std::path::Path::new(&spec.sim.calibration))
            .map_err(|e| setting("sim.calibration", format!("{}: {e}", spec.sim.calibration)))?
    };
    let mut cfg = cfg;
    let from_trace = match &spec.workload {
        WorkloadSpec::Trace(t) => trace_cluster(t)?,
        _ => None,
    };
    let sizes = spec_cluster(spec) != ClusterFrom::Settings;
    if let (Some(c), true) = (&from_trace, sizes) {
        cfg.nodes = usize::try_from(c.machines).unwrap_or(usize::MAX);
        cfg.node_memory = c.memory;
    }
    let engine = Engine::new(cfg, &model, &killer)?.keeping(outcomes);
    match &spec.workload {
        WorkloadSpec::Generate(table) => {
            let generator = Generator::from_spec(table, spec)
                .map_err(|e| setting(&format!("workload.{}", e.key), e.problem))?;
            Ok(engine.run(&run.variant, Box::new(generator), progress)?)
        }
        WorkloadSpec::Consolidation(c) => {
            let stream = c.stream(spec.cluster.nodes, spec.cluster.node_memory.0, spec.seed);
            Ok(engine.run(&run.variant, Box::new(stream), progress)?)
        }
        WorkloadSpec::Trace(t) => {
            let format: TraceFormat = t.format.parse().map_err(|_| {
                let names: Vec<&str> = TraceFormat::ALL.iter().map(|f| f.as_str()).collect();
                setting(
                    "workload.format",
                    format!("{:?} is not one of {}", t.format, names.join(", ")),
                )
            })?;
            let opts = TraceOptions {
                memory_scale: t.memory_scale.0,
                skip_bad_rows: t.skip_bad_rows,
                sort_memory: usize::try_from(t.sort_memory.0).unwrap_or(usize::MAX),
                spill_dir: t.spill_dir.clone(),
                assume_sorted: t.assume_sorted,
                window_from: Some(t.from.0),
                ..TraceOptions::default()
            };
            let (stream, counter) = trace::open(format, &t.paths, &opts)?;
            if let Some(hook) = progress.sort_hook() {
                counter.on_sort_progress(hook);
            }
            let mut result = engine.run(&run.variant, stream, progress)?;
            let c = &mut result.counters;
            c.skipped_rows = counter.bad_rows();
            c.late_rows = counter.late_rows();
            c.first_skipped_row = counter.first_bad_row();
            c.trace = Some(TraceCounts {
                rows_read: counter.rows_read(),
                unmatched: counter.unmatched_rows(),
                machines: counter.machines(),
                machine_table: from_trace
                    .map(|t| (t.machines, t.memory, t.with_that_memory, sizes)),
                window: counter
                    .window()
                    .map(|(first, from)| (first.as_secs_f64(), from.as_secs_f64())),
            });
            if result.tally.all.tasks == 0 {
                let c = &result.counters;
                let horizon = Time::ZERO + spec.sim.horizon.0;
                let late = c.first_event_at.is_some_and(|t| t > horizon);
                let first = match c.first_event_at {
                    Some(t) => format!(
                        "; its first event is at {}",
                        humantime::format_duration(Duration::from_secs(
                            t.since(Time::ZERO).as_secs()
                        ))
                    ),
                    None => String::new(),
                };
                let hint = if counter.rows_read() == 0 {
                    "; the trace's files hold no rows"
                } else if late || c.after_horizon > 0 {
                    "; raise sim.horizon to reach them"
                } else if c.skipped_rows > 0 {
                    "; every task row was bad"
                } else {
                    ""
                };
                return Err(RunError::EmptyReplay {
                    rows_read: counter.rows_read(),
                    skipped: c.skipped_rows,
                    unmatched: counter.unmatched_rows(),
                    after_horizon: c.after_horizon,
                    window: window_said(spec, counter.window()),
                    first,
                    hint,
                });
            }
            Ok(result)
        }
    }
}
