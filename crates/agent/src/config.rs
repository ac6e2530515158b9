//! The agent's configuration: TOML read into a raw form, then checked once
//! into [`AgentConfig`]; every problem is refused with the dotted key it sits
//! at (`policy.detector.tolerance: -1 is outside (0, 600]`), never defaulted
//! silently.

use crate::checkpoint::CheckpointConfig;
use crate::classes::{ClassRule, ClassRules};
use overbook_core::config::{plain_words, ConfigError, PolicyConfig, ProtectConfig};
use overbook_core::detect::DetectorConfig;
use overbook_core::preempt::PreemptorConfig;
use overbook_core::rank::RankerConfig;
use overbook_core::reclaim::ReclaimerConfig;
use overbook_core::Class;
use overbook_linux::{ContainerPath, CpuShare};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A configuration that could not be read or cannot work.
///
/// Each variant says its cause once, in its message, and chains no source:
/// the CLI prints the whole chain, and an OS error printed by both the
/// message and the chain reads twice.
#[derive(Debug, thiserror::Error)]
pub enum AgentConfigError {
    #[error("{path}: cannot read it: {error}")]
    Read { path: PathBuf, error: std::io::Error },
    /// Not TOML, or a value of the wrong type: where it is in the text.
    #[error("{origin}:{line}:{column}: {}", with_key(key, problem))]
    Syntax { origin: String, line: usize, column: usize, key: String, problem: String },
    #[error("{origin}: {}", with_key(key, problem))]
    Invalid { origin: String, key: String, problem: String },
}

fn with_key(key: &str, problem: &str) -> String {
    if key.is_empty() {
        problem.to_string()
    } else {
        format!("{key}: {problem}")
    }
}

/// The checked configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentConfig {
    /// The cgroup (relative to the memory hierarchy's mount, or to the
    /// unified mount on v2) whose children are the node's containers.
    pub root: String,
    /// The node's containers are a kubelet's pods under `root`, named by
    /// this cgroup driver, instead of `root`'s direct children.
    pub pods: Option<overbook_linux::kubepods::CgroupDriver>,
    /// The node's memory: `None` means the root cgroup's limit, or the
    /// machine's memory when the root has none.
    pub capacity: Option<u64>,
    /// Bytes per second the node writes a frozen container's memory to
    /// swap (and reads it back): the cost the `production-first` preemptor
    /// weighs a freeze-and-swap-out by.
    pub swap_write: f64,
    /// Whether the node's own swap-outs move `swap_write` (the configured
    /// pace is then where it starts): a sequential write's pace is not a
    /// swap-out's, and a pace promised too fast makes production wait.
    pub learn_swap_pace: bool,
    /// How often the agent samples every container.
    pub sample_period: Duration,
    /// How often every container is read while the node shows no faults,
    /// refaults or limit hits (the node itself is read every
    /// `sample_period`, and any of those makes the next sample a full one).
    pub calm_period: Duration,
    /// Where the decision log (JSON lines) goes; `None` keeps it in memory only.
    pub event_log: Option<PathBuf>,
    /// Where the output of tasks started by `overbook run` goes (`NAME.log`).
    pub task_log_dir: PathBuf,
    /// The SQLite database of `overbook run` tasks, so a restarted agent
    /// loses none; `None` (`state_db = ""`) keeps them in memory only.
    pub state_db: Option<PathBuf>,
    /// Critical containers bypass swap and have their memory protected
    /// (000 Table 2; v2 `memory.swap.max = 0` and `memory.min`, v1
    /// `memory.swappiness = 0`).
    pub protect_critical: bool,
    /// Which container is of which class; unmatched ones are `default_class`.
    pub classes: ClassRules,
    pub policy: PolicyConfig,
    /// CRIU's image store, for the `checkpoint` and `adaptive` preemptors.
    pub checkpoint: CheckpointConfig,
    /// Each class's CPU share, set on its containers as they are found.
    pub cpu: CpuShares,
    /// Pods' classes from the API server (with `pods`).
    pub kubernetes: Option<KubernetesConfig>,
}

/// `[kubernetes]`: where the agent reads its node's pods' classes.
#[derive(Clone, Debug, PartialEq)]
pub struct KubernetesConfig {
    /// This node's name in the API server (the pods' `spec.nodeName`).
    pub node_name: String,
    /// Credentials; `None`: the pod's service account, else `$KUBECONFIG`
    /// or `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// PriorityClass names and their pods' class.
    pub priority_classes: std::collections::BTreeMap<String, Class>,
    /// Publish `overbook.io/batch-memory` in the Node's status.
    pub offer: bool,
    /// A change of the offer this large is told at once.
    pub offer_step: OfferStep,
    /// A smaller change is told once it has lasted this long.
    pub offer_period: Duration,
    /// After the agent's own kill of a pod, evict it through the Eviction
    /// API (its controller makes it again elsewhere).
    pub evict: bool,
}

/// How large a change of the offer is told at once: a share of the node's
/// capacity (`"2%"`), or a size (`"64MiB"`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OfferStep {
    /// Percent of the node's capacity, (0, 100].
    Percent(f64),
    Bytes(u64),
}

impl Default for OfferStep {
    fn default() -> Self {
        OfferStep::Percent(2.0)
    }
}

impl OfferStep {
    /// The step in bytes on a node of `capacity` bytes.
    pub fn bytes(self, capacity: u64) -> u64 {
        match self {
            OfferStep::Percent(p) => overbook_core::convert::to_u64(capacity as f64 * p / 100.0),
            OfferStep::Bytes(b) => b,
        }
    }
}

/// The default period after which a small change of the offer is told.
pub const DEFAULT_OFFER_PERIOD: Duration = Duration::from_secs(10);

impl KubernetesConfig {
    /// A node's defaults for everything but its name.
    pub fn new(node_name: impl Into<String>) -> KubernetesConfig {
        KubernetesConfig {
            node_name: node_name.into(),
            kubeconfig: None,
            priority_classes: crate::kubernetes::classify::default_priority_classes(),
            offer: true,
            offer_step: OfferStep::default(),
            offer_period: DEFAULT_OFFER_PERIOD,
            evict: true,
        }
    }
}

impl AgentConfig {
    /// The configuration as it takes effect, defaults included, in the
    /// file's own terms: TOML the agent reads back to the same config.
    pub fn effective_toml(&self) -> String {
        use toml::{Table, Value};
        let secs = |d: Duration| Value::Float(d.as_secs_f64());
        let path = |p: &std::path::Path| Value::String(p.display().to_string());
        let mut node = Table::new();
        node.insert("root".into(), Value::String(self.root.clone()));
        if let Some(driver) = self.pods {
            let name = match driver {
                overbook_linux::kubepods::CgroupDriver::Cgroupfs => "cgroupfs",
                overbook_linux::kubepods::CgroupDriver::Systemd => "systemd",
            };
            node.insert("pods".into(), Value::String(name.into()));
        }
        if let Some(c) = self.capacity {
            node.insert("capacity".into(), Value::String(format!("{}MiB", c >> 20)));
        }
        node.insert("swap_mb_s".into(), Value::Float(self.swap_write / 1e6));
        node.insert("learn_swap_pace".into(), Value::Boolean(self.learn_swap_pace));
        let mut agent = Table::new();
        agent.insert("sample_period".into(), secs(self.sample_period));
        agent.insert("calm_period".into(), secs(self.calm_period));
        if let Some(p) = &self.event_log {
            agent.insert("event_log".into(), path(p));
        }
        agent.insert("task_log_dir".into(), path(&self.task_log_dir));
        let state_db = self.state_db.as_deref().map_or(Value::String(String::new()), path);
        agent.insert("state_db".into(), state_db);
        agent.insert("protect_critical".into(), Value::Boolean(self.protect_critical));
        let mut cpu = Table::new();
        for (key, class) in [
            ("best-effort", Class::BestEffort),
            ("production", Class::Production),
            ("critical", Class::Critical),
        ] {
            let share = match self.cpu.of(class) {
                None => Value::String("unchanged".into()),
                Some(CpuShare::Idle) => Value::String("idle".into()),
                Some(CpuShare::Weight(w)) => Value::Integer(i64::from(w)),
            };
            cpu.insert(key.into(), share);
        }
        let max = match self.cpu.best_effort_max {
            CpuCeiling::Unlimited => Value::String("unlimited".into()),
            CpuCeiling::Fixed(cpus) => Value::Float(cpus),
            CpuCeiling::Leftover { busy_target, floor } => {
                cpu.insert("busy-target".into(), Value::Float(busy_target));
                cpu.insert("best-effort-min".into(), Value::Float(floor));
                Value::String("leftover".into())
            }
        };
        cpu.insert("best-effort-max".into(), max);
        let c = &self.checkpoint;
        let mut checkpoint = Table::new();
        checkpoint.insert("images_dir".into(), path(&c.images_dir));
        checkpoint.insert("shared".into(), Value::Boolean(c.shared));
        checkpoint.insert("timeout".into(), secs(c.timeout));
        if let Some(bw) = c.bandwidth {
            checkpoint.insert("write_mb_s".into(), Value::Float(bw.write / 1e6));
            checkpoint.insert("read_mb_s".into(), Value::Float(bw.read / 1e6));
        }
        checkpoint.insert(
            "pre_dump_interval".into(),
            c.pre_dump_interval.map_or(Value::Float(0.0), secs),
        );
        let (rules, default) = self.classes.rules();
        let classes = rules.into_iter().map(|(pattern, class, weight)| {
            let mut rule = Table::new();
            rule.insert("pattern".into(), Value::String(pattern));
            rule.insert("class".into(), Value::String(class.to_string()));
            rule.insert("weight".into(), Value::Integer(i64::from(weight)));
            Value::Table(rule)
        });
        let mut all = Table::new();
        all.insert("default_class".into(), Value::String(default.to_string()));
        all.insert("node".into(), Value::Table(node));
        all.insert("agent".into(), Value::Table(agent));
        all.insert("cpu".into(), Value::Table(cpu));
        all.insert("checkpoint".into(), Value::Table(checkpoint));
        all.insert("classes".into(), Value::Array(classes.collect()));
        if let Some(k) = &self.kubernetes {
            let mut kube = Table::new();
            kube.insert("node_name".into(), Value::String(k.node_name.clone()));
            if let Some(p) = &k.kubeconfig {
                kube.insert("kubeconfig".into(), path(p));
            }
            let classes = k.priority_classes.iter();
            let classes = classes.map(|(n, c)| (n.clone(), Value::String(c.to_string())));
            kube.insert("priority_classes".into(), Value::Table(classes.collect()));
            kube.insert("offer".into(), Value::Boolean(k.offer));
            let step = match k.offer_step {
                OfferStep::Percent(p) => Value::String(format!("{p}%")),
                OfferStep::Bytes(b) => Value::Integer(i64::try_from(b).unwrap_or(i64::MAX)),
            };
            kube.insert("offer_step".into(), step);
            kube.insert("offer_period".into(), secs(k.offer_period));
            kube.insert("evict".into(), Value::Boolean(k.evict));
            all.insert("kubernetes".into(), Value::Table(kube));
        }
        if let Ok(Value::Table(policy)) = Value::try_from(&self.policy) {
            all.insert("policy".into(), Value::Table(policy));
        }
        toml::to_string(&all).unwrap_or_else(|e| format!("# cannot be shown as TOML: {e}\n"))
    }
}

/// The CPU share the agent gives each class's containers (`None`: left as
/// the kernel or their maker set it). Why: best-effort work that competes
/// with production for CPU as an equal slows it as surely as memory does
/// (002 §3.4, guest priority), so by default best-effort containers only
/// get CPU no one else wants.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuShares {
    pub best_effort: Option<CpuShare>,
    pub production: Option<CpuShare>,
    pub critical: Option<CpuShare>,
    /// CPUs the best-effort containers may use together. Why: even at
    /// the lowest share a best-effort job keeps a CPU busy, and a
    /// production wakeup that finds it busy can wait; a ceiling leaves that
    /// CPU idle part of every 100 ms. Split evenly between the best-effort
    /// containers with processes and not frozen.
    pub best_effort_max: CpuCeiling,
}

/// The best-effort containers' CPU ceiling (`[cpu] best-effort-max`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CpuCeiling {
    /// No ceiling (the default).
    Unlimited,
    /// This many CPUs, whatever the rest of the node does.
    Fixed(f64),
    /// What the node's CPU target leaves once everything but best-effort
    /// work has what it used lately (`"leftover"`; see
    /// [`overbook_core::cpu_budget`]): all the node's idle CPU while
    /// production is idle, the floor while it is busy.
    Leftover {
        /// `busy-target`: the share of the node's CPUs it may keep busy.
        busy_target: f64,
        /// `best-effort-min`: the least best-effort work gets, in CPUs.
        floor: f64,
    },
}

impl CpuCeiling {
    /// `busy-target` when not given: Koordinator's default CPU suppression
    /// threshold, 65% of the node.
    pub const BUSY_TARGET: f64 = 0.65;
    /// `best-effort-min` when not given, in CPUs.
    pub const FLOOR: f64 = 0.1;
}

impl Default for CpuShares {
    fn default() -> Self {
        CpuShares {
            best_effort: Some(CpuShare::Idle),
            production: None,
            critical: None,
            best_effort_max: CpuCeiling::Unlimited,
        }
    }
}

impl CpuShares {
    /// The share of `class`'s containers, if the agent sets one.
    pub fn of(&self, class: Class) -> Option<CpuShare> {
        match class {
            Class::BestEffort => self.best_effort,
            Class::Production => self.production,
            Class::Critical => self.critical,
        }
    }
}

impl Default for AgentConfig {
    fn default() -> AgentConfig {
        AgentConfig {
            root: "overbook".into(),
            pods: None,
            capacity: None,
            swap_write: DEFAULT_SWAP_MB_S * 1e6,
            learn_swap_pace: true,
            sample_period: Duration::from_millis(100),
            calm_period: Duration::from_secs(3),
            event_log: None,
            task_log_dir: PathBuf::from("/var/log/overbook/tasks"),
            state_db: Some(PathBuf::from("/var/lib/overbook/state.db")),
            protect_critical: true,
            classes: ClassRules::default(),
            policy: PolicyConfig::production_first(),
            checkpoint: CheckpointConfig::default(),
            cpu: CpuShares::default(),
            kubernetes: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    node: RawNode,
    #[serde(default)]
    agent: RawAgent,
    #[serde(default)]
    classes: Vec<RawClassRule>,
    #[serde(default)]
    default_class: Option<String>,
    #[serde(default)]
    policy: RawPolicy,
    #[serde(default)]
    checkpoint: RawCheckpoint,
    #[serde(default)]
    cpu: RawCpu,
    kubernetes: Option<RawKubernetes>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKubernetes {
    node_name: Option<String>,
    kubeconfig: Option<PathBuf>,
    priority_classes: Option<std::collections::BTreeMap<String, String>>,
    offer: Option<bool>,
    offer_step: Option<toml::Value>,
    offer_period: Option<f64>,
    evict: Option<bool>,
}

/// `[policy]` as written: a stage left out is the agent's default
/// ([`PolicyConfig::production_first`]), not the papers' (the simulator's
/// base); launcher keys left out keep the agent's defaults too.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    detector: Option<DetectorConfig>,
    ranker: Option<RankerConfig>,
    preemptor: Option<PreemptorConfig>,
    launcher: Option<toml::Table>,
    reclaimer: Option<ReclaimerConfig>,
    protect: Option<ProtectConfig>,
}

impl RawPolicy {
    fn check(self) -> Result<PolicyConfig, ConfigError> {
        let d = PolicyConfig::production_first();
        let launcher = match self.launcher {
            None => d.launcher,
            Some(mut keys) => {
                // `resync_on_finish` needs the charge: a file that turns the
                // charge off and says nothing of the resync means it off
                // too, not a refusal of a default it never wrote.
                if keys.get("charge_until_peak") == Some(&toml::Value::Boolean(false)) {
                    keys.entry("resync_on_finish").or_insert(toml::Value::Boolean(false));
                }
                let mut table = toml::Table::try_from(&d.launcher)
                    .map_err(|e| ConfigError::new("policy.launcher", e.to_string()))?;
                table.extend(keys);
                serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
                    let path = e.path().to_string();
                    let key = if path == "." {
                        "policy.launcher".to_string()
                    } else {
                        format!("policy.launcher.{path}")
                    };
                    ConfigError::new(key, plain_words(e.into_inner().message()))
                })?
            }
        };
        let policy = PolicyConfig {
            detector: self.detector.unwrap_or(d.detector),
            ranker: self.ranker.unwrap_or(d.ranker),
            preemptor: self.preemptor.unwrap_or(d.preemptor),
            launcher,
            reclaimer: self.reclaimer.unwrap_or(d.reclaimer),
            protect: self.protect.unwrap_or(d.protect),
        };
        policy.validate().map_err(|e| e.under("policy"))?;
        Ok(policy)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawCpu {
    best_effort: Option<toml::Value>,
    production: Option<toml::Value>,
    critical: Option<toml::Value>,
    best_effort_max: Option<toml::Value>,
    busy_target: Option<toml::Value>,
    best_effort_min: Option<toml::Value>,
}

/// A class's CPU share: `"idle"`, a weight from 1 to 10000 (v2's scale:
/// 100 is the kernel's default), or `"unchanged"`.
fn check_cpu_share(
    key: &str,
    v: Option<toml::Value>,
    default: Option<CpuShare>,
) -> Result<Option<CpuShare>, ConfigError> {
    let problem = |what: String| {
        ConfigError::new(
            key,
            format!("{what}: give \"idle\", a weight from 1 to 10000, or \"unchanged\""),
        )
    };
    match v {
        None => Ok(default),
        Some(toml::Value::String(s)) if s == "idle" => Ok(Some(CpuShare::Idle)),
        Some(toml::Value::String(s)) if s == "unchanged" => Ok(None),
        Some(toml::Value::Integer(w)) => u32::try_from(w)
            .ok()
            .filter(|w| (1..=10_000).contains(w))
            .map(|w| Some(CpuShare::Weight(w)))
            .ok_or_else(|| problem(format!("{w} is not from 1 to 10000"))),
        Some(other) => Err(problem(format!("{other} is not a CPU share"))),
    }
}

/// The best-effort containers' CPU ceiling: a number of CPUs (0.25: a
/// quarter of one), `"leftover"` (with `busy-target` and
/// `best-effort-min`), or `"unlimited"` (the default).
fn check_cpu_ceiling(raw: &RawCpu) -> Result<CpuCeiling, ConfigError> {
    const KEY: &str = "cpu.best-effort-max";
    let problem = |what: String| {
        ConfigError::new(
            KEY,
            format!(
                "{what}: give a number of CPUs from 0.01 to 4096 (0.5: half of one), \
                 \"leftover\" (what production leaves), or \"unlimited\""
            ),
        )
    };
    let ceiling = match &raw.best_effort_max {
        None => CpuCeiling::Unlimited,
        Some(toml::Value::String(s)) if s == "unlimited" => CpuCeiling::Unlimited,
        Some(toml::Value::String(s)) if s == "leftover" => CpuCeiling::Leftover {
            busy_target: check_number(
                "cpu.busy-target",
                raw.busy_target.as_ref(),
                CpuCeiling::BUSY_TARGET,
                (0.05, 1.0),
                "a share of the node's CPUs (0.65: 65%)",
            )?,
            floor: check_number(
                "cpu.best-effort-min",
                raw.best_effort_min.as_ref(),
                CpuCeiling::FLOOR,
                (0.01, 4096.0),
                "a number of CPUs (0.1: a tenth of one)",
            )?,
        },
        Some(v) => match number(v) {
            Some(cpus) if (0.01..=4096.0).contains(&cpus) => CpuCeiling::Fixed(cpus),
            Some(cpus) => return Err(problem(format!("{cpus} is out of range"))),
            None => return Err(problem(format!("{v} is not a number of CPUs"))),
        },
    };
    if !matches!(ceiling, CpuCeiling::Leftover { .. }) {
        for (key, v) in
            [("busy-target", &raw.busy_target), ("best-effort-min", &raw.best_effort_min)]
        {
            if v.is_some() {
                return Err(ConfigError::new(
                    format!("cpu.{key}"),
                    "is only used with best-effort-max = \"leftover\"; remove it or set that",
                ));
            }
        }
    }
    Ok(ceiling)
}

/// A TOML integer or float as a number.
fn number(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Integer(n) => Some(*n as f64),
        toml::Value::Float(x) => Some(*x),
        _ => None,
    }
}

/// `key`'s number within `range` (inclusive), `default` when not given.
fn check_number(
    key: &str,
    v: Option<&toml::Value>,
    default: f64,
    (low, high): (f64, f64),
    what: &str,
) -> Result<f64, ConfigError> {
    let Some(v) = v else { return Ok(default) };
    match number(v) {
        Some(x) if (low..=high).contains(&x) => Ok(x),
        Some(x) => Err(ConfigError::new(
            key,
            format!("{x} is out of range: give {what} from {low} to {high}"),
        )),
        None => Err(ConfigError::new(
            key,
            format!("{v} is not a number: give {what} from {low} to {high}"),
        )),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheckpoint {
    images_dir: Option<PathBuf>,
    shared: Option<bool>,
    timeout: Option<f64>,
    write_mb_s: Option<f64>,
    read_mb_s: Option<f64>,
    net_mb_s: Option<f64>,
    pre_dump_interval: Option<f64>,
}

impl RawCheckpoint {
    fn check(self) -> Result<CheckpointConfig, ConfigError> {
        use overbook_core::config::check_range;
        let d = CheckpointConfig::default();
        let images_dir = match self.images_dir {
            Some(p) if p.as_os_str().is_empty() || p.is_relative() => {
                return Err(ConfigError::new(
                    "checkpoint.images_dir",
                    format!("{:?} is not an absolute path", p.display().to_string()),
                ))
            }
            Some(p) => p,
            None => d.images_dir,
        };
        let timeout = match self.timeout {
            None => d.timeout,
            Some(t) => {
                check_range("checkpoint.timeout", t, 1.0, 86_400.0)?;
                Duration::from_secs_f64(t)
            }
        };
        let mb = |key: &str, v: Option<f64>| -> Result<Option<f64>, ConfigError> {
            match v {
                None => Ok(None),
                Some(x) => {
                    check_range(key, x, 0.001, 1e6)?;
                    Ok(Some(x * 1e6))
                }
            }
        };
        let write = mb("checkpoint.write_mb_s", self.write_mb_s)?;
        let read = mb("checkpoint.read_mb_s", self.read_mb_s)?;
        let net = mb("checkpoint.net_mb_s", self.net_mb_s)?;
        let bandwidth = match (write, read) {
            (None, None) if net.is_none() => None,
            (Some(write), Some(read)) => Some(overbook_core::preempt::StoreBandwidth {
                write,
                read,
                net: net.unwrap_or(read),
            }),
            _ => {
                return Err(ConfigError::new(
                    "checkpoint",
                    "give write_mb_s and read_mb_s together (net_mb_s optional), or none to \
                     measure the store at start",
                ))
            }
        };
        let pre_dump_interval = match self.pre_dump_interval {
            None => d.pre_dump_interval,
            Some(0.0) => None,
            Some(x) => {
                check_range("checkpoint.pre_dump_interval", x, 1.0, 86_400.0)?;
                Some(Duration::from_secs_f64(x))
            }
        };
        Ok(CheckpointConfig {
            images_dir,
            shared: self.shared.unwrap_or(d.shared),
            timeout,
            bandwidth,
            pre_dump_interval,
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    root: Option<String>,
    pods: Option<String>,
    capacity: Option<toml::Value>,
    swap_mb_s: Option<f64>,
    learn_swap_pace: Option<bool>,
}

/// `node.swap_mb_s` when not given: what a SATA SSD sustains writing
/// scattered pages, so a freeze-and-swap-out is not promised faster than
/// most nodes can do it.
const DEFAULT_SWAP_MB_S: f64 = 100.0;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    sample_period: Option<f64>,
    calm_period: Option<f64>,
    event_log: Option<PathBuf>,
    task_log_dir: Option<PathBuf>,
    state_db: Option<PathBuf>,
    protect_critical: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClassRule {
    pattern: String,
    class: String,
    weight: Option<i64>,
}

impl AgentConfig {
    /// Read and check a config file.
    pub fn load(path: &Path) -> Result<AgentConfig, AgentConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| AgentConfigError::Read { path: path.to_path_buf(), error })?;
        AgentConfig::parse(&text, &path.display().to_string())
    }

    /// Check config text; `origin` names it in errors (a path).
    pub fn parse(text: &str, origin: &str) -> Result<AgentConfig, AgentConfigError> {
        let de = toml::Deserializer::new(text);
        let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let e = e.into_inner();
            // toml's messages run over several lines ("invalid table
            // header\nexpected `.`, `]`"); one error is one line here.
            let problem = plain_words(
                &e.message().trim().lines().map(str::trim).collect::<Vec<_>>().join("; "),
            );
            // The path is "." when the text did not parse far enough to
            // reach a key: then the key is read off the text around the
            // error.
            let key = if path == "." { None } else { Some(path) };
            match e.span() {
                Some(span) => {
                    let (line, column) = line_column(text, span.start);
                    AgentConfigError::Syntax {
                        origin: origin.to_string(),
                        line,
                        column,
                        key: key.unwrap_or_else(|| key_at(text, span.start)),
                        problem,
                    }
                }
                None => AgentConfigError::Invalid {
                    origin: origin.to_string(),
                    key: key.unwrap_or_default(),
                    problem,
                },
            }
        })?;
        raw.check().map_err(|e: ConfigError| AgentConfigError::Invalid {
            origin: origin.to_string(),
            key: e.key,
            problem: e.problem,
        })
    }
}

/// Line and column (both from 1, the column in characters, as toml's own
/// messages count them) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
}

/// The dotted key at byte `offset` of a TOML text that did not parse, as
/// far as reading it line by line can tell (there is no tree to ask): the
/// table header in force and the key before `=` on the offending line.
/// Empty where that reading would guess: on a header line, or a line with
/// no `=`.
fn key_at(text: &str, offset: usize) -> String {
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let mut table = String::new();
    let mut arrays: std::collections::BTreeMap<String, usize> = Default::default();
    for line in text[..line_start].lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
            let n = arrays.entry(name.trim().to_string()).or_insert(0);
            table = format!("{}[{n}]", name.trim());
            *n += 1;
        } else if let Some(name) = line.strip_prefix('[').and_then(|r| r.split(']').next()) {
            table = name.trim().to_string();
        }
    }
    let line = text[line_start..].lines().next().unwrap_or("").trim();
    if line.starts_with('[') || line.starts_with('#') {
        return String::new();
    }
    match line.split_once('=').map(|(k, _)| k.trim()).filter(|k| !k.is_empty()) {
        None => String::new(),
        Some(k) if table.is_empty() => k.to_string(),
        Some(k) => format!("{table}.{k}"),
    }
}

impl RawConfig {
    fn check(self) -> Result<AgentConfig, ConfigError> {
        let defaults = AgentConfig::default();
        let root = match self.node.root {
            Some(r) => check_root(&r)?,
            None => defaults.root,
        };
        let pods = match self.node.pods.as_deref() {
            None => None,
            Some(name) => {
                Some(overbook_linux::kubepods::CgroupDriver::parse(name).ok_or_else(|| {
                    ConfigError::new(
                        "node.pods",
                        format!(
                            "{name:?}: the kubelet's cgroup driver is \"cgroupfs\" or \"systemd\""
                        ),
                    )
                })?)
            }
        };
        let capacity = match self.node.capacity {
            None => None,
            Some(v) => Some(check_capacity(&v)?),
        };
        let swap_write = match self.node.swap_mb_s {
            None => defaults.swap_write,
            Some(x) => {
                overbook_core::config::check_range("node.swap_mb_s", x, 0.001, 1e6)?;
                x * 1e6
            }
        };
        let sample_period = match self.agent.sample_period {
            None => defaults.sample_period,
            Some(s) => {
                overbook_core::config::check_range("agent.sample_period", s, 0.01, 60.0)?;
                Duration::from_secs_f64(s)
            }
        };
        let calm_period = match self.agent.calm_period {
            None => defaults.calm_period.max(sample_period),
            Some(s) => {
                overbook_core::config::check_range("agent.calm_period", s, 0.01, 60.0)?;
                let calm = Duration::from_secs_f64(s);
                if calm < sample_period {
                    return Err(ConfigError::new(
                        "agent.calm_period",
                        format!("{s} is shorter than agent.sample_period"),
                    ));
                }
                calm
            }
        };
        let default_class = match &self.default_class {
            None => Class::Production,
            Some(c) => c.parse().map_err(|_| {
                ConfigError::new(
                    "default_class",
                    format!("{c:?} is not a class ({})", class_names()),
                )
            })?,
        };
        let mut rules = Vec::with_capacity(self.classes.len());
        for (i, r) in self.classes.into_iter().enumerate() {
            let key = |k: &str| format!("classes[{i}].{k}");
            let class: Class = r.class.parse().map_err(|_| {
                ConfigError::new(
                    key("class"),
                    format!("{:?} is not a class ({})", r.class, class_names()),
                )
            })?;
            let mut rule = ClassRule::new(&r.pattern, class)
                .map_err(|problem| ConfigError::new(key("pattern"), problem))?;
            if let Some(w) = r.weight {
                let w = u32::try_from(w).ok().filter(|w| (1..=10_000).contains(w)).ok_or_else(
                    || ConfigError::new(key("weight"), format!("{w} is not from 1 to 10000")),
                )?;
                rule = rule.with_weight(w);
            }
            rules.push(rule);
        }
        let policy = self.policy.check()?;
        let checkpoint = self.checkpoint.check()?;
        let d = CpuShares::default();
        let ceiling = check_cpu_ceiling(&self.cpu)?;
        let cpu = CpuShares {
            best_effort: check_cpu_share("cpu.best-effort", self.cpu.best_effort, d.best_effort)?,
            production: check_cpu_share("cpu.production", self.cpu.production, d.production)?,
            critical: check_cpu_share("cpu.critical", self.cpu.critical, d.critical)?,
            best_effort_max: ceiling,
        };
        let kubernetes = match self.kubernetes {
            None => None,
            Some(k) => Some(check_kubernetes(k, pods.is_some())?),
        };
        Ok(AgentConfig {
            kubernetes,
            root,
            pods,
            capacity,
            swap_write,
            learn_swap_pace: self.node.learn_swap_pace.unwrap_or(defaults.learn_swap_pace),
            sample_period,
            calm_period,
            event_log: match self.agent.event_log {
                Some(p) if p.as_os_str().is_empty() => {
                    return Err(ConfigError::new(
                        "agent.event_log",
                        "is empty: give a file, or leave the key out to keep events in memory \
                         only",
                    ))
                }
                p => p,
            },
            task_log_dir: match self.agent.task_log_dir {
                None => defaults.task_log_dir,
                Some(p) => check_absolute("agent.task_log_dir", p)?,
            },
            state_db: match self.agent.state_db {
                None => defaults.state_db,
                Some(p) if p.as_os_str().is_empty() => None,
                Some(p) => Some(p),
            },
            protect_critical: self.agent.protect_critical.unwrap_or(defaults.protect_critical),
            classes: ClassRules::new(rules, default_class),
            policy,
            checkpoint,
            cpu,
        })
    }
}

fn check_kubernetes(k: RawKubernetes, pods: bool) -> Result<KubernetesConfig, ConfigError> {
    if !pods {
        return Err(ConfigError::new(
            "kubernetes",
            "needs node.pods (the kubelet's cgroup driver): the pods the API server names are \
             found in the kubelet's cgroups",
        ));
    }
    let node_name = k.node_name.filter(|n| !n.trim().is_empty()).ok_or_else(|| {
        ConfigError::new("kubernetes.node_name", "missing: this node's name in the API server")
    })?;
    let mut priority_classes = crate::kubernetes::classify::default_priority_classes();
    for (name, class) in k.priority_classes.unwrap_or_default() {
        let class = class.parse::<Class>().map_err(|_| {
            ConfigError::new(
                format!("kubernetes.priority_classes.{name}"),
                format!("{class:?} is no class: {}", class_names()),
            )
        })?;
        priority_classes.insert(name, class);
    }
    let kubeconfig = match k.kubeconfig {
        Some(p) if p.as_os_str().is_empty() => None,
        Some(p) => Some(check_absolute("kubernetes.kubeconfig", p)?),
        None => None,
    };
    let offer_step = match k.offer_step {
        None => OfferStep::default(),
        Some(v) => check_offer_step(&v)?,
    };
    let offer_period = match k.offer_period {
        None => DEFAULT_OFFER_PERIOD,
        Some(s) => {
            overbook_core::config::check_range("kubernetes.offer_period", s, 0.1, 3600.0)?;
            Duration::from_secs_f64(s)
        }
    };
    let d = KubernetesConfig::new(node_name);
    Ok(KubernetesConfig {
        kubeconfig,
        priority_classes,
        offer: k.offer.unwrap_or(d.offer),
        offer_step,
        offer_period,
        evict: k.evict.unwrap_or(d.evict),
        ..d
    })
}

/// `kubernetes.offer_step`: `"2%"` of the node's capacity, or a size.
fn check_offer_step(v: &toml::Value) -> Result<OfferStep, ConfigError> {
    let key = "kubernetes.offer_step";
    if let toml::Value::String(s) = v {
        if let Some(p) = s.trim().strip_suffix('%') {
            let p: f64 = p.trim().parse().map_err(|_| {
                ConfigError::new(key, format!("{s:?} is no share: write it like \"2%\""))
            })?;
            if !(p > 0.0 && p <= 100.0) {
                return Err(ConfigError::new(key, format!("{s:?} is outside (0%, 100%]")));
            }
            return Ok(OfferStep::Percent(p));
        }
    }
    parse_size(v)
        .map(OfferStep::Bytes)
        .map_err(|p| ConfigError::new(key, format!("{p} (or a share like \"2%\")")))
}

fn class_names() -> String {
    Class::ALL.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
}

/// The node's root: below the hierarchy's root (the agent never manages a
/// whole hierarchy), and a path the agent can use, checked by the same
/// [`ContainerPath`] the agent builds from it at start, so a root that
/// passes `--check-config` is one the agent starts with.
fn check_root(root: &str) -> Result<String, ConfigError> {
    let trimmed = root.trim_matches('/');
    let bad = trimmed.split('/').any(|part| part.is_empty() || part == "." || part == "..");
    if trimmed.is_empty() || bad {
        return Err(ConfigError::new(
            "node.root",
            format!("{root:?}: must name a cgroup below the hierarchy's root, like \"overbook\""),
        ));
    }
    ContainerPath::new(trimmed)
        .map_err(|e| ConfigError::new("node.root", format!("{root:?}: {}", e.reason)))?;
    Ok(trimmed.to_string())
}

/// The smallest node capacity taken. Below it a node cannot hold the
/// agent's headroom and one real container, so a smaller figure is a
/// missing or wrong unit (`capacity = 8` meaning 8 GiB), and taking it
/// would have the detector see every node as full and preempt everything.
pub const MIN_CAPACITY: u64 = 64 << 20;

fn check_capacity(v: &toml::Value) -> Result<u64, ConfigError> {
    let bytes = parse_size(v).map_err(|p| ConfigError::new("node.capacity", p))?;
    if bytes < MIN_CAPACITY {
        return Err(ConfigError::new(
            "node.capacity",
            format!(
                "{v} is {bytes} bytes, less than the 64 MiB a node needs (is a unit missing? \
                 write \"8GiB\")"
            ),
        ));
    }
    Ok(bytes)
}

/// A directory the agent writes into: absolute, since a relative one would
/// depend on the directory the agent happened to be started from.
fn check_absolute(key: &str, p: PathBuf) -> Result<PathBuf, ConfigError> {
    if p.as_os_str().is_empty() {
        return Err(ConfigError::new(key, "is empty: give an absolute directory"));
    }
    if p.is_relative() {
        return Err(ConfigError::new(
            key,
            format!("{:?} is not an absolute path", p.display().to_string()),
        ));
    }
    Ok(p)
}

/// A size: bytes as an integer, or a string with a binary unit (`"8GiB"`, `"512M"`).
fn parse_size(v: &toml::Value) -> Result<u64, String> {
    match v {
        toml::Value::Integer(n) if *n > 0 => Ok(n.unsigned_abs()),
        toml::Value::String(s) => parse_size_text(s),
        other => Err(format!("{other} is not a size: give bytes or a string like \"8GiB\"")),
    }
}

/// A size written as text: `"8GiB"`, `"512M"`, `"4096"`.
pub fn parse_size_text(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: f64 = num.parse().map_err(|_| format!("{s:?} is not a size like \"8GiB\""))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        other => return Err(format!("unknown unit {other:?} in {s:?} (B, KiB, MiB, GiB, TiB)")),
    };
    let bytes = num * mult as f64;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("{s:?} must be more than 0 bytes"));
    }
    Ok(overbook_core::convert::to_u64(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        match AgentConfig::parse(text, "agent.toml") {
            Ok(c) => panic!("accepted {text:?}: {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn the_checkpoint_section_is_read_and_checked() {
        let c = AgentConfig::parse(
            "[checkpoint]\nimages_dir = \"/srv/images\"\nshared = true\ntimeout = 30\n\
             write_mb_s = 200\nread_mb_s = 400\npre_dump_interval = 0\n",
            "x",
        )
        .expect("valid");
        let k = &c.checkpoint;
        assert_eq!(k.images_dir, PathBuf::from("/srv/images"));
        assert!(k.shared);
        assert_eq!(k.timeout, Duration::from_secs(30));
        let bw = k.bandwidth.expect("configured");
        assert_eq!((bw.write, bw.read, bw.net), (200e6, 400e6, 400e6));
        assert_eq!(k.pre_dump_interval, None);
        let d = AgentConfig::parse("", "x").expect("valid").checkpoint;
        assert_eq!(d, CheckpointConfig::default());
        assert_eq!(d.bandwidth, None, "measured at start by default");
        for (text, key) in [
            ("images_dir = \"images\"", "checkpoint.images_dir"),
            ("timeout = 0", "checkpoint.timeout"),
            ("write_mb_s = 100", "checkpoint"),
            ("write_mb_s = -1\nread_mb_s = 1", "checkpoint.write_mb_s"),
            ("pre_dump_interval = 0.5", "checkpoint.pre_dump_interval"),
            ("incremental = true", "checkpoint"),
        ] {
            let e = err(&format!("[checkpoint]\n{text}\n"));
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn an_empty_file_gives_the_defaults() {
        let c = AgentConfig::parse("", "x").expect("empty is valid");
        assert_eq!(c, AgentConfig::default());
    }

    #[test]
    fn a_full_file_is_read() {
        let c = AgentConfig::parse(
            r#"
            default_class = "best-effort"
            [node]
            root = "/nodes/n1/"
            capacity = "1.5GiB"
            swap_mb_s = 250
            learn_swap_pace = false
            [agent]
            sample_period = 0.05
            event_log = "/tmp/events.jsonl"
            [[classes]]
            pattern = "prod-*"
            class = "production"
            [policy.detector]
            kind = "constraint-thrashing"
            tolerance = 2.0
            "#,
            "x",
        )
        .expect("valid");
        assert_eq!(c.root, "nodes/n1");
        assert_eq!(c.capacity, Some(3 << 29));
        assert_eq!(c.swap_write, 250e6);
        assert!(!c.learn_swap_pace);
        assert_eq!(c.sample_period, Duration::from_millis(50));
        assert_eq!(c.classes.class_of("prod-db"), Class::Production);
        assert_eq!(c.classes.class_of("batch-1"), Class::BestEffort);
    }

    #[test]
    fn bad_values_are_refused_with_their_key() {
        assert!(err("[node]\nroot = \"../x\"").contains("agent.toml: node.root:"));
        assert!(err("[node]\ncapacity = \"12 parsecs\"").contains("node.capacity: unknown unit"));
        assert!(err("[node]\ncapacity = -5").contains("node.capacity"));
        assert!(err("[node]\nswap_mb_s = 0").contains("agent.toml: node.swap_mb_s: 0 is outside"));
        assert!(err("[agent]\nsample_period = 0").contains("agent.sample_period: 0 is outside"));
        assert!(err("[[classes]]\npattern = \"a[\"\nclass = \"production\"")
            .contains("classes[0].pattern"));
        assert!(err("[[classes]]\npattern = \"a*\"\nclass = \"gold\"")
            .contains("classes[0].class: \"gold\" is not a class"));
        assert!(err("[[classes]]\npattern = \"a*\"\nclass = \"production\"\nweight = 0")
            .contains("classes[0].weight: 0 is not from 1 to 10000"));
        assert!(err("default_class = \"x\"").contains("default_class"));
        let e = err("[policy.detector]\nkind = \"constraint-thrashing\"\ntolerance = -1");
        assert!(e.contains("policy.detector.tolerance"), "{e}");
        let e = err("[agent]\nsampel_period = 1");
        assert!(e.contains("agent") && e.contains("sampel_period"), "{e}");
        let e = err("[node\nroot=1");
        assert!(e.starts_with("agent.toml:1:6: "), "{e}");
    }

    #[test]
    fn a_syntax_error_names_its_line_column_and_key() {
        let e = err("[node]\nroot = \"a\"\n[agent]\nsample_period = 1.0.0\n");
        assert!(e.starts_with("agent.toml:4:"), "{e}");
        assert!(e.contains(": agent.sample_period: "), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
        // A key in the second of an array of tables.
        let e = err("[[classes]]\npattern = \"a*\"\nclass = \"production\"\n\
                     [[classes]]\npattern = \"b*\nclass = \"production\"\n");
        assert!(e.starts_with("agent.toml:5:"), "{e}");
        assert!(e.contains(": classes[1].pattern: "), "{e}");
        // A value of the wrong type: the key from the parser, the place too.
        let e = err("[agent]\n\nsample_period = \"fast\"\n");
        assert_eq!(
            e,
            "agent.toml:3:17: agent.sample_period: expected a number (e.g. 0.1), not \"fast\""
        );
        // A broken header names no key (the table above would be a guess).
        let e = err("[node]\nroot = \"a\"\n[agent\n");
        assert!(e.starts_with("agent.toml:3:7: ") && !e.contains("node"), "{e}");
    }

    #[test]
    fn a_missing_file_says_its_os_error_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("agent.toml");
        let e = AgentConfig::load(&path).expect_err("no file");
        // As the CLI prints it: the message and every source after it.
        let mut chain = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            chain.push_str(&format!(": {s}"));
            source = s.source();
        }
        assert!(chain.starts_with(&format!("{}: cannot read it: ", path.display())), "{chain}");
        assert_eq!(chain.matches("os error 2").count(), 1, "{chain}");
    }

    #[test]
    fn a_root_the_agent_would_refuse_is_refused_here() {
        // As TOML writes them: a newline, a tab, DEL.
        for root in [r#""over\nbook""#, r#""a/b\tc""#, r#""x\u007f""#] {
            let e = err(&format!("[node]\nroot = {root}\n"));
            assert!(e.starts_with("agent.toml: node.root: ") && e.contains("control"), "{e}");
        }
        let c = AgentConfig::parse("[node]\nroot = \"/a/b c/\"\n", "x").expect("valid");
        assert_eq!(c.root, "a/b c");
    }

    #[test]
    fn a_class_pattern_that_matches_nothing_is_refused() {
        for (pattern, why) in [
            ("", "empty"),
            ("/overbook/be-*", "'/'"),
            ("be-*\n", "control"),
            ("..", "\".\""),
            ("[/]x", "admits no character"),
        ] {
            let e = err(&format!("[[classes]]\npattern = {pattern:?}\nclass = \"best-effort\"\n"));
            assert!(e.starts_with("agent.toml: classes[0].pattern: "), "{pattern:?}: {e}");
            assert!(e.contains("can match no container name") && e.contains(why), "{e}");
        }
    }

    #[test]
    fn a_tiny_capacity_is_refused_saying_why() {
        for cap in ["\"1KiB\"", "8", "\"63MiB\""] {
            let e = err(&format!("[node]\ncapacity = {cap}\n"));
            assert!(e.starts_with("agent.toml: node.capacity: "), "{e}");
            assert!(e.contains("less than the 64 MiB") && e.contains("unit"), "{e}");
        }
        let c = AgentConfig::parse("[node]\ncapacity = \"64MiB\"\n", "x").expect("valid");
        assert_eq!(c.capacity, Some(MIN_CAPACITY));
    }

    #[test]
    fn empty_or_relative_log_places_are_refused() {
        let e = err("[agent]\ntask_log_dir = \"\"\n");
        assert!(e.starts_with("agent.toml: agent.task_log_dir: is empty"), "{e}");
        let e = err("[agent]\ntask_log_dir = \"logs\"\n");
        assert!(e.contains("agent.task_log_dir: \"logs\" is not an absolute path"), "{e}");
        let e = err("[agent]\nevent_log = \"\"\n");
        assert!(e.starts_with("agent.toml: agent.event_log: is empty"), "{e}");
        // `state_db = ""` keeps its meaning: no database.
        let c = AgentConfig::parse("[agent]\nstate_db = \"\"\n", "x").expect("valid");
        assert_eq!(c.state_db, None);
    }

    #[test]
    fn cpu_shares_default_to_idle_best_effort_and_are_checked() {
        let c = AgentConfig::parse("", "x").expect("valid");
        assert_eq!(c.cpu.of(Class::BestEffort), Some(CpuShare::Idle));
        assert_eq!(c.cpu.of(Class::Production), None);
        let c = AgentConfig::parse(
            "[cpu]\nbest-effort = 5\nproduction = 400\ncritical = \"unchanged\"\n",
            "x",
        )
        .expect("valid");
        assert_eq!(c.cpu.of(Class::BestEffort), Some(CpuShare::Weight(5)));
        assert_eq!(c.cpu.of(Class::Production), Some(CpuShare::Weight(400)));
        let c = AgentConfig::parse("[cpu]\nbest-effort = \"unchanged\"\n", "x").expect("valid");
        assert_eq!(c.cpu.of(Class::BestEffort), None);
        let err = |t: &str| AgentConfig::parse(t, "agent.toml").expect_err("refused").to_string();
        let e = err("[cpu]\nbest-effort = 0\n");
        assert!(e.contains("cpu.best-effort: 0 is not from 1 to 10000"), "{e}");
        let e = err("[cpu]\nproduction = \"low\"\n");
        assert!(e.contains("cpu.production") && e.contains("\"idle\""), "{e}");
        assert_eq!(c.cpu.best_effort_max, CpuCeiling::Unlimited, "no ceiling unless asked");
        let c = AgentConfig::parse("[cpu]\nbest-effort-max = 0.5\n", "x").expect("valid");
        assert_eq!(c.cpu.best_effort_max, CpuCeiling::Fixed(0.5));
        let c = AgentConfig::parse("[cpu]\nbest-effort-max = 2\n", "x").expect("valid");
        assert_eq!(c.cpu.best_effort_max, CpuCeiling::Fixed(2.0));
        let c = AgentConfig::parse("[cpu]\nbest-effort-max = \"unlimited\"\n", "x").expect("valid");
        assert_eq!(c.cpu.best_effort_max, CpuCeiling::Unlimited);
        let c = AgentConfig::parse("[cpu]\nbest-effort-max = \"leftover\"\n", "x").expect("valid");
        let defaults = CpuCeiling::Leftover { busy_target: 0.65, floor: 0.1 };
        assert_eq!(c.cpu.best_effort_max, defaults);
        let c = AgentConfig::parse(
            "[cpu]\nbest-effort-max = \"leftover\"\nbusy-target = 0.8\nbest-effort-min = 1\n",
            "x",
        )
        .expect("valid");
        let set = CpuCeiling::Leftover { busy_target: 0.8, floor: 1.0 };
        assert_eq!(c.cpu.best_effort_max, set);
        let again = AgentConfig::parse(&c.effective_toml(), "again").expect("its own dump parses");
        assert_eq!(again.cpu.best_effort_max, set, "the dump keeps the leftover rule");
        for (bad, key) in [
            ("busy-target = 0", "cpu.busy-target: 0 is out of range"),
            ("busy-target = 1.5", "cpu.busy-target: 1.5 is out of range"),
            ("busy-target = \"most\"", "cpu.busy-target: \"most\" is not a number"),
            ("best-effort-min = 0", "cpu.best-effort-min: 0 is out of range"),
        ] {
            let e = err(&format!("[cpu]\nbest-effort-max = \"leftover\"\n{bad}\n"));
            assert!(e.contains(key), "{bad}: {e}");
        }
        for lone in ["busy-target = 0.5", "best-effort-min = 0.2"] {
            let e = err(&format!("[cpu]\nbest-effort-max = 1\n{lone}\n"));
            assert!(e.contains("only used with best-effort-max = \"leftover\""), "{lone}: {e}");
        }
        for bad in ["0", "-1", "0.001", "nan", "\"half\"", "1e9"] {
            let e = err(&format!("[cpu]\nbest-effort-max = {bad}\n"));
            assert!(
                e.contains("cpu.best-effort-max") && e.contains("number of CPUs"),
                "{bad}: {e}"
            );
        }
        let e = err("[cpu]\nbatch = 1\n");
        assert!(e.contains("batch"), "{e}");
    }
}

#[cfg(test)]
mod pods {
    use super::*;
    use overbook_linux::kubepods::CgroupDriver;

    #[test]
    fn a_kubelet_s_driver_is_named_and_anything_else_refused_with_the_choices() {
        let c = AgentConfig::parse("[node]\nroot = \"kubepods\"\npods = \"cgroupfs\"\n", "t");
        assert_eq!(c.expect("valid").pods, Some(CgroupDriver::Cgroupfs));
        let c = AgentConfig::parse("[node]\npods = \"systemd\"\n", "t").expect("valid");
        assert_eq!(c.pods, Some(CgroupDriver::Systemd));
        assert_eq!(AgentConfig::parse("", "t").expect("valid").pods, None);
        let e =
            AgentConfig::parse("[node]\npods = \"docker\"\n", "agent.toml").expect_err("refused");
        let e = e.to_string();
        assert!(e.contains("agent.toml") && e.contains("node.pods"), "{e}");
        assert!(e.contains("\"cgroupfs\" or \"systemd\""), "{e}");
    }
}

#[cfg(test)]
mod kubernetes {
    use super::*;

    #[test]
    fn the_api_server_s_part_needs_the_pods_a_node_name_and_known_classes() {
        let err = |t: &str| AgentConfig::parse(t, "agent.toml").expect_err("refused").to_string();
        let e = err("[kubernetes]\nnode_name = \"n1\"\n");
        assert!(e.contains("agent.toml: kubernetes: needs node.pods"), "{e}");
        let pods = "[node]\npods = \"cgroupfs\"\n";
        let e = err(&format!("{pods}[kubernetes]\n"));
        assert!(e.contains("kubernetes.node_name: missing"), "{e}");
        let e = err(&format!(
            "{pods}[kubernetes]\nnode_name = \"n1\"\n[kubernetes.priority_classes]\nhigh = \"urgent\"\n"
        ));
        assert!(e.contains("kubernetes.priority_classes.high: \"urgent\" is no class"), "{e}");
        let e = err(&format!("{pods}[kubernetes]\nnode_name = \"n1\"\nkubeconfig = \"k.conf\"\n"));
        assert!(e.contains("kubernetes.kubeconfig"), "{e}");
        let c = AgentConfig::parse(&format!("{pods}[kubernetes]\nnode_name = \"n1\"\n"), "t")
            .expect("valid");
        let k = c.kubernetes.expect("set");
        assert_eq!(k.priority_classes.get("system-node-critical"), Some(&Class::Critical));
        assert_eq!(k.kubeconfig, None);
        assert_eq!(k, KubernetesConfig::new("n1"));
    }

    #[test]
    fn the_offer_and_evictions_are_configured_and_checked() {
        let pods = "[node]\npods = \"cgroupfs\"\n[kubernetes]\nnode_name = \"n1\"\n";
        let k = |extra: &str| {
            AgentConfig::parse(&format!("{pods}{extra}"), "agent.toml").map(|c| c.kubernetes)
        };
        let d = k("").expect("valid").expect("set");
        assert!(d.offer && d.evict);
        assert_eq!(d.offer_step, OfferStep::Percent(2.0));
        assert_eq!(d.offer_step.bytes(100 << 20), 2 << 20);
        assert_eq!(d.offer_period, Duration::from_secs(10));
        let c = k("offer = false\nevict = false\noffer_step = \"64MiB\"\noffer_period = 2.5\n")
            .expect("valid")
            .expect("set");
        assert!(!c.offer && !c.evict);
        assert_eq!(c.offer_step, OfferStep::Bytes(64 << 20));
        assert_eq!(c.offer_period, Duration::from_millis(2500));
        let c = k("offer_step = \"0.5%\"\n").expect("valid").expect("set");
        assert_eq!(c.offer_step, OfferStep::Percent(0.5));
        for (text, key) in [
            ("offer_step = \"0%\"", "kubernetes.offer_step"),
            ("offer_step = \"150%\"", "kubernetes.offer_step"),
            ("offer_step = \"lots%\"", "kubernetes.offer_step"),
            ("offer_step = \"12 parsecs\"", "kubernetes.offer_step"),
            ("offer_step = -1", "kubernetes.offer_step"),
            ("offer_period = 0", "kubernetes.offer_period"),
            ("offer_period = 1e9", "kubernetes.offer_period"),
            ("offer = \"yes\"", "kubernetes.offer"),
            ("evict = 1", "kubernetes.evict"),
        ] {
            let e = k(&format!("{text}\n")).expect_err(text).to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}

#[cfg(test)]
mod documented {
    use super::*;

    /// The example of docs/agent.md, as written.
    fn documented_example() -> &'static str {
        let doc = include_str!("../../../docs/agent.md");
        let start = doc.find("```toml\n").expect("a toml block") + "```toml\n".len();
        let len = doc[start..].find("```").expect("its end");
        &doc[start..start + len]
    }

    #[test]
    fn the_effective_toml_reads_back_to_the_same_config() {
        let example = AgentConfig::parse(documented_example(), "docs/agent.md").expect("valid");
        let pods = AgentConfig::parse(
            "[node]\nroot = \"kubepods\"\npods = \"systemd\"\n[kubernetes]\nnode_name = \"n1\"\n\
             kubeconfig = \"/etc/k.conf\"\n[kubernetes.priority_classes]\nbatch = \"best-effort\"\n",
            "t",
        )
        .expect("valid");
        let offer = AgentConfig::parse(
            "[node]\npods = \"cgroupfs\"\n[kubernetes]\nnode_name = \"n1\"\noffer = false\n\
             offer_step = \"65MiB\"\noffer_period = 0.3\nevict = false\n",
            "t",
        )
        .expect("valid");
        let share = AgentConfig::parse(
            "[node]\npods = \"cgroupfs\"\n[kubernetes]\nnode_name = \"n1\"\n\
             offer_step = \"0.7%\"\n",
            "t",
        )
        .expect("valid");
        for config in [AgentConfig::default(), example, pods, offer, share] {
            let text = config.effective_toml();
            let back =
                AgentConfig::parse(&text, "effective").unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(back, config, "{text}");
        }
    }

    #[test]
    fn the_documented_example_is_valid_and_shows_the_default_policy() {
        let cfg = AgentConfig::parse(documented_example(), "docs/agent.md")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.policy, PolicyConfig::production_first());
        assert_eq!(AgentConfig::default().policy, PolicyConfig::production_first());
    }

    #[test]
    fn a_stage_or_launcher_key_left_out_keeps_the_agent_s_default() {
        let cfg = AgentConfig::parse("[policy.launcher]\nqueue_limit = 4\n", "t").expect("valid");
        let d = PolicyConfig::production_first();
        assert_eq!(cfg.policy.launcher.queue_limit, 4);
        assert!(cfg.policy.launcher.charge_until_peak && !cfg.policy.launcher.delay_after_kill);
        assert_eq!(cfg.policy.detector, d.detector);
        let cfg = AgentConfig::parse("[policy.launcher]\ncharge_until_peak = false\n", "t")
            .expect("the resync needs the charge: it goes with it");
        assert!(!cfg.policy.launcher.charge_until_peak && !cfg.policy.launcher.resync_on_finish);
        let cfg = AgentConfig::parse("[policy.preemptor]\nkind = \"kill\"\n", "t").expect("valid");
        assert_eq!(cfg.policy.detector, d.detector, "the other stages stay");
        assert_eq!(cfg.policy.preemptor.name(), "kill");
        for (text, key) in [
            ("[policy.launcher]\nqueue_limt = 4\n", "queue_limt"),
            ("[policy.launcher]\nheadroom = \"lots\"\n", "policy.launcher.headroom"),
            ("[policy.launcher]\nheadroom = 0.9\n", "policy.launcher.headroom"),
            ("[policy.detector]\nkind = \"production-first\"\nfloor = 2\n", "floor"),
            (
                "[policy.launcher]\ncharge_until_peak = false\nresync_on_finish = true\n",
                "policy.launcher.resync_on_finish",
            ),
        ] {
            let e = AgentConfig::parse(text, "t").expect_err(text).to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
