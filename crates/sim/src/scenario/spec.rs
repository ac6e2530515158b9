//! One run's settings, checked: what the merged TOML of a scenario run must say.

use crate::units::{Size, Span};
use overbook_core::config::{plain_words, PolicyConfig};
use overbook_core::Time;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use toml::Table;

/// The simulated cluster (`[cluster]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSpec {
    /// Number of nodes.
    pub nodes: usize,
    /// Memory of each node.
    pub node_memory: Size,
    /// Swap of each node (frozen tasks go there).
    pub node_swap: Size,
    /// Swap device bandwidth per second (freeze out, thaw in).
    pub swap_bandwidth: Size,
    /// Checkpoint store preset: `hdd`, `ssd`, `nvm` (004 §3.3.1, Table 3).
    pub store: String,
    /// Whether images sit on a store every node can read (remote resume).
    pub shared_store: bool,
    /// Whether CRIU works on the nodes, and incremental dumps.
    pub checkpoint: bool,
    pub incremental: bool,
    /// How long a kill takes to free memory: `in-kernel` (000's UA killer),
    /// `user-space` (000 §2.3's long tail), or a fixed `"250ms"`.
    pub kill_delay: String,
    /// Cores of each node (for the energy model; 000 §5.5 simulates 32-core nodes).
    pub node_cores: u32,
    /// Fixed cost of every dump on top of size / bandwidth (CRIU's process walk).
    pub dump_overhead: Span,
}

impl Default for ClusterSpec {
    fn default() -> ClusterSpec {
        ClusterSpec {
            nodes: 50,
            node_memory: Size(64 << 30),
            node_swap: Size(16 << 30),
            swap_bandwidth: Size(500 << 20),
            store: "ssd".into(),
            shared_store: true,
            checkpoint: true,
            incremental: true,
            kill_delay: "in-kernel".into(),
            node_cores: 32,
            dump_overhead: Span(std::time::Duration::from_millis(200)),
        }
    }
}

/// Where tasks come from (`[workload]`): `kind = "generate"` (the built-in
/// generator; its keys are in docs/workload.md), `kind = "trace"`, or
/// `kind = "consolidation"` (001's three containers on every node).
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadSpec {
    Generate(Table),
    Trace(TraceSpec),
    Consolidation(crate::consolidate::ConsolidationConfig),
}

/// `[workload] kind = "trace"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSpec {
    /// `google-2011`, `google-2019`, `alibaba-2018`, `charon-sls`.
    pub format: String,
    /// Files or directories of the trace.
    pub paths: Vec<PathBuf>,
    /// Bytes that a normalized memory of 1.0 stands for (Google: the largest machine).
    #[serde(default = "default_memory_scale")]
    pub memory_scale: Size,
    /// Skip and count rows that cannot be read instead of stopping.
    #[serde(default)]
    pub skip_bad_rows: bool,
    /// Memory a table's rows may take while it is sorted by time; beyond
    /// it, sorted runs are written to temporary files and merged.
    #[serde(default = "default_sort_memory")]
    pub sort_memory: Size,
    /// Where those files go [default: the system's temporary directory].
    #[serde(default)]
    pub spill_dir: Option<PathBuf>,
    /// Trust the tables to be in time order: stream them, no sort.
    #[serde(default)]
    pub assume_sorted: bool,
    /// Replay from this long after the trace's first row (the CLI's
    /// `--from`); the window's length is `sim.horizon` (`--for`).
    #[serde(default)]
    pub from: Span,
    /// Where the cluster's size comes from: `cluster.nodes` and
    /// `cluster.node_memory` (`settings`, the default: a run's own settings,
    /// `--small`'s too, are never overridden unasked), the trace's machine
    /// table (`trace`, an error without one), or the table when there is
    /// one (`auto`).
    #[serde(default)]
    pub cluster: ClusterFrom,
}

/// `workload.cluster` (see [`TraceSpec::cluster`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClusterFrom {
    #[default]
    Settings,
    Trace,
    Auto,
}

fn default_sort_memory() -> Size {
    Size(512 << 20)
}

fn default_memory_scale() -> Size {
    Size(64 << 30)
}

/// The engine's own knobs (`[sim]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimKnobs {
    /// How long tasks are submitted for.
    pub horizon: Span,
    /// How long the run goes on after the last submission, for work to finish.
    pub drain: Span,
    /// How often a thrashing node's policy samples.
    pub sample_period: Span,
    /// Runs a task gets before its job gives up (Spark's default 4).
    pub max_attempts: u32,
    /// Wait before a refused task is submitted again.
    pub retry_backoff: Span,
    /// A thrashing calibration file (`overbook bench calibrate`); empty:
    /// the built-in one.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub calibration: String,
}

impl Default for SimKnobs {
    fn default() -> SimKnobs {
        SimKnobs {
            horizon: Span(std::time::Duration::from_secs(6 * 3600)),
            drain: Span(std::time::Duration::from_secs(6 * 3600)),
            sample_period: Span(std::time::Duration::from_millis(500)),
            max_attempts: 4,
            retry_backoff: Span(std::time::Duration::from_secs(10)),
            calibration: String::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRunSpec {
    #[serde(default = "default_seed")]
    seed: u64,
    #[serde(default)]
    cluster: ClusterSpec,
    #[serde(default)]
    workload: Table,
    #[serde(default)]
    policy: PolicyConfig,
    #[serde(default)]
    sim: SimKnobs,
}

fn default_seed() -> u64 {
    42
}

/// Everything one run needs, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSpec {
    pub seed: u64,
    pub cluster: ClusterSpec,
    pub workload: WorkloadSpec,
    pub policy: PolicyConfig,
    pub sim: SimKnobs,
}

/// A node smaller than this holds no real task (the smallest containers
/// overbook's agent runs take tens of MiB); less is a typo for a unit.
pub const MIN_NODE_MEMORY: u64 = 64 << 20;

impl RunSpec {
    /// When the run stops: the horizon for submissions plus the drain.
    pub fn end_time(&self) -> Time {
        Time::ZERO + self.sim.horizon.0 + self.sim.drain.0
    }

    /// Check a merged table; the error names the dotted key at fault.
    pub fn from_table(table: Table) -> Result<RunSpec, String> {
        let raw: RawRunSpec = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| format!("{}: {}", e.path(), plain_words(e.inner().message())))?;
        raw.policy.validate().map_err(|e| e.under("policy").to_string())?;
        if raw.cluster.nodes == 0 {
            return Err("cluster.nodes: must be at least 1".into());
        }
        if raw.cluster.node_memory.0 < MIN_NODE_MEMORY {
            return Err(format!(
                "cluster.node_memory: {} bytes is less than 64 MiB, the smallest node simulated",
                raw.cluster.node_memory.0
            ));
        }
        if raw.cluster.node_cores == 0 {
            return Err("cluster.node_cores: must be at least 1".into());
        }
        if raw.sim.max_attempts == 0 {
            return Err("sim.max_attempts: must be at least 1".into());
        }
        if raw.sim.sample_period.0.is_zero() {
            return Err("sim.sample_period: must be more than 0".into());
        }
        let mut workload = raw.workload;
        let kind = match workload.remove("kind") {
            None => "generate".to_string(),
            Some(toml::Value::String(s)) => s,
            Some(other) => {
                return Err(format!(
                    "workload.kind: expected \"generate\", \"trace\" or \"consolidation\", \
                     found {other}"
                ))
            }
        };
        let workload = match kind.as_str() {
            "generate" => WorkloadSpec::Generate(workload),
            "trace" => WorkloadSpec::Trace(
                serde_path_to_error::deserialize(toml::Value::Table(workload)).map_err(|e| {
                    format!("workload.{}: {}", e.path(), plain_words(e.inner().message()))
                })?,
            ),
            "consolidation" => WorkloadSpec::Consolidation(
                crate::consolidate::ConsolidationConfig::from_table(&workload)
                    .map_err(|(key, problem)| format!("workload.{key}: {problem}"))?,
            ),
            other => {
                return Err(format!(
                    "workload.kind: {other:?} is not \"generate\", \"trace\" or \
                     \"consolidation\""
                ))
            }
        };
        Ok(RunSpec {
            seed: raw.seed,
            cluster: raw.cluster,
            workload,
            policy: raw.policy,
            sim: raw.sim,
        })
    }
}
