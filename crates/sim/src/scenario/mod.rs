//! Scenarios: named, documented experiment files. Each reproduces one
//! evaluation of a paper: a base setting, the variants compared (policies,
//! killers, stores), an optional sweep (loads X1..X4, tolerances, ...), and
//! the paper's own numbers to print beside ours.
//!
//! A run's settings are TOML tables merged in order — built-in defaults, the
//! scenario's `[base]`, the variant, the sweep point, then `--set` overrides
//! from the command line — and only then checked, so every error names the
//! key where the bad value sits.

mod run;
mod spec;

pub use crate::report::{render, write_outputs};
pub use run::{execute, sim_config, RunError};
pub use spec::{ClusterSpec, RunSpec, SimKnobs, TraceSpec, WorkloadSpec};

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use toml::{Table, Value};

/// The scenarios shipped with overbook, by name (also in `scenarios/`).
pub const BUILT_IN: &[(&str, &str)] = &[
    ("default", include_str!("../../../../scenarios/default.toml")),
    ("charon-loads", include_str!("../../../../scenarios/charon-loads.toml")),
    ("charon-snapshot", include_str!("../../../../scenarios/charon-snapshot.toml")),
    ("charon-tolerance", include_str!("../../../../scenarios/charon-tolerance.toml")),
    ("checkpoint-storage", include_str!("../../../../scenarios/checkpoint-storage.toml")),
    ("checkpoint-incremental", include_str!("../../../../scenarios/checkpoint-incremental.toml")),
    ("scale", include_str!("../../../../scenarios/scale.toml")),
    ("reclaim-consolidation", include_str!("../../../../scenarios/reclaim-consolidation.toml")),
];

/// A scenario file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}: {problem}")]
    Invalid { origin: String, problem: String },
    #[error("no scenario named {0:?}; built in: {names}", names = built_in_names())]
    Unknown(String),
}

fn built_in_names() -> String {
    BUILT_IN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: String,
    title: String,
    #[serde(default)]
    paper: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    baseline: Option<String>,
    #[serde(default)]
    plots: Vec<String>,
    #[serde(default)]
    base: Table,
    #[serde(default)]
    variants: Vec<Table>,
    #[serde(default)]
    sweep: Option<RawSweep>,
    #[serde(default)]
    paper_numbers: Vec<PaperNumber>,
}

/// A number the paper reports, printed beside ours.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperNumber {
    /// Our variant it corresponds to, if one.
    #[serde(default)]
    pub variant: Option<String>,
    /// The sweep point's label, if any.
    #[serde(default)]
    pub point: Option<String>,
    pub metric: String,
    /// As the paper states it, with units.
    pub value: String,
    /// Where in the paper (`000 Fig. 9`).
    pub source: String,
    /// Our number to print beside it: a metric of the run of `variant` (at
    /// `point`, or at every point), `"<metric>"`, `"<metric> / <variant>"` or
    /// `"1 - <metric> / <variant>"`; see `report::metrics` for the names.
    #[serde(default)]
    pub ours: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSweep {
    key: String,
    values: Vec<Value>,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    name: Option<String>,
}

/// One run of a scenario: a variant at one sweep point.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    /// `variant` or `variant@label`.
    pub name: String,
    pub variant: String,
    /// The sweep point's label (`X2`, `tolerance=5`), if the scenario sweeps.
    pub point: Option<String>,
    pub spec: RunSpec,
}

/// A loaded scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub title: String,
    pub paper: String,
    pub description: String,
    pub baseline: Option<String>,
    pub plots: Vec<String>,
    /// What the sweep varies, for axis labels (`best-effort load`).
    pub sweep_name: Option<String>,
    pub paper_numbers: Vec<PaperNumber>,
    pub runs: Vec<PlannedRun>,
}

impl Scenario {
    /// A built-in scenario by name, or a scenario file by path.
    pub fn load(name_or_path: &str, overrides: &[String]) -> Result<Scenario, ScenarioError> {
        if let Some((name, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
            return Scenario::parse(text, &format!("built-in scenario {name:?}"), overrides);
        }
        let path = Path::new(name_or_path);
        if !path.exists() && !name_or_path.contains(['/', '.']) {
            return Err(ScenarioError::Unknown(name_or_path.to_string()));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|source| ScenarioError::Read { path: path.to_path_buf(), source })?;
        Scenario::parse(&text, &path.display().to_string(), overrides)
    }

    /// Parse scenario text; `origin` names it in errors; `overrides` are
    /// `key=value` settings applied to every run last.
    pub fn parse(
        text: &str,
        origin: &str,
        overrides: &[String],
    ) -> Result<Scenario, ScenarioError> {
        let invalid =
            |problem: String| ScenarioError::Invalid { origin: origin.to_string(), problem };
        let raw: RawScenario = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let mut override_table = Table::new();
        for o in overrides {
            let (key, value) =
                parse_override(o).map_err(|p| invalid(format!("--set {o:?}: {p}")))?;
            set_dotted(&mut override_table, &key, value)
                .map_err(|p| invalid(format!("--set {o:?}: {p}")))?;
        }
        let variants = if raw.variants.is_empty() { vec![Table::new()] } else { raw.variants };
        let points: Vec<SweepPoint> = match &raw.sweep {
            None => vec![(None, None)],
            Some(sw) => {
                if sw.values.is_empty() {
                    return Err(invalid("sweep.values: must list at least one value".into()));
                }
                if !sw.labels.is_empty() && sw.labels.len() != sw.values.len() {
                    return Err(invalid(format!(
                        "sweep.labels: {} labels for {} values",
                        sw.labels.len(),
                        sw.values.len()
                    )));
                }
                sw.values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let label = sw
                            .labels
                            .get(i)
                            .cloned()
                            .unwrap_or_else(|| format!("{}={}", last_key(&sw.key), v));
                        (Some(label), Some((sw.key.clone(), v.clone())))
                    })
                    .collect()
            }
        };
        let mut runs = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for (vi, variant) in variants.iter().enumerate() {
            let mut variant = variant.clone();
            let vname = match variant.remove("name") {
                Some(Value::String(s)) => s,
                Some(other) => {
                    return Err(invalid(format!(
                        "variants[{vi}].name: expected a string, found {other}"
                    )))
                }
                None => format!("variant-{}", vi + 1),
            };
            if let Some(first) = names.iter().position(|n| n == &vname) {
                return Err(invalid(format!(
                    "variants[{vi}].name: {vname:?} is variants[{first}]'s name too: each \
                     variant needs a name of its own"
                )));
            }
            names.push(vname.clone());
            for (label, point) in &points {
                let mut merged = raw.base.clone();
                merge(&mut merged, &variant);
                if let Some((key, value)) = point {
                    set_dotted(&mut merged, key, value.clone())
                        .map_err(|p| invalid(format!("sweep.key: {p}")))?;
                }
                merge(&mut merged, &override_table);
                // Naming a workload kind on the command line (`--trace`) replaces
                // the scenario's workload whole: generator keys mean nothing to a trace.
                if let Some(w) = override_table.get("workload").filter(|w| w.get("kind").is_some())
                {
                    merged.insert("workload".into(), w.clone());
                }
                let name = match label {
                    Some(l) => format!("{vname}@{l}"),
                    None => vname.clone(),
                };
                let spec = RunSpec::from_table(merged)
                    .map_err(|p| invalid(format!("run {name:?}: {p}")))?;
                runs.push(PlannedRun { name, variant: vname.clone(), point: label.clone(), spec });
            }
        }
        if let Some(b) = &raw.baseline {
            if !runs.iter().any(|r| &r.variant == b) {
                return Err(invalid(format!("baseline: no variant named {b:?}")));
            }
        }
        let mut scenario = Scenario {
            name: raw.name,
            title: raw.title,
            paper: raw.paper,
            description: raw.description,
            baseline: raw.baseline,
            plots: raw.plots,
            sweep_name: raw.sweep.as_ref().map(|s| s.name.clone().unwrap_or_else(|| s.key.clone())),
            paper_numbers: raw.paper_numbers,
            runs,
        };
        if let Some(WorkloadSpec::Trace(t)) = replayed(&override_table, &scenario.runs) {
            // The scenario's title and its paper's numbers are about its own
            // workload, not the trace put in its place.
            let paths: Vec<String> = t.paths.iter().map(|p| p.display().to_string()).collect();
            scenario.title = format!("replay of the {} trace {}", t.format, paths.join(", "));
            scenario.paper.clear();
            scenario.paper_numbers.clear();
        }
        Ok(scenario)
    }
}

/// The trace the overrides put in place of the scenario's workload, if they did.
fn replayed<'a>(overrides: &Table, runs: &'a [PlannedRun]) -> Option<&'a WorkloadSpec> {
    let kind = overrides.get("workload").and_then(|w| w.get("kind")).and_then(Value::as_str);
    (kind == Some("trace")).then(|| runs.first().map(|r| &r.spec.workload)).flatten()
}

/// A sweep point: its label and the setting it makes.
type SweepPoint = (Option<String>, Option<(String, Value)>);

fn last_key(key: &str) -> &str {
    key.rsplit('.').next().unwrap_or(key)
}

/// `policy.detector.tolerance=5` → (`policy.detector.tolerance`, 5). The value
/// is read as TOML, and as a plain string when it is not valid TOML.
fn parse_override(text: &str) -> Result<(String, Value), String> {
    let (key, value) = text.split_once('=').ok_or("expected key=value")?;
    let key = key.trim();
    if key.is_empty() {
        return Err("the key is empty".into());
    }
    let value = value.trim();
    let parsed = toml::from_str::<Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| Value::String(value.to_string()));
    Ok((key.to_string(), parsed))
}

/// Set `a.b.c = value` in `table`, creating the tables on the way.
fn set_dotted(table: &mut Table, key: &str, value: Value) -> Result<(), String> {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last =
        parts.pop().filter(|k| !k.is_empty()).ok_or_else(|| format!("{key:?} is not a key"))?;
    let mut here = table;
    for (i, part) in parts.iter().enumerate() {
        let entry = here.entry(part.to_string()).or_insert_with(|| Value::Table(Table::new()));
        here = match entry {
            Value::Table(t) => t,
            _ => return Err(format!("{} is not a table", parts[..=i].join("."))),
        };
    }
    here.insert(last.to_string(), value);
    Ok(())
}

/// Deep merge: tables merge key by key, anything else in `over` replaces.
fn merge(base: &mut Table, over: &Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(Value::Table(b)), Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_scenario_loads() {
        for (name, _) in BUILT_IN {
            let s = Scenario::load(name, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!s.runs.is_empty(), "{name} has no runs");
            assert_eq!(&s.name, name);
        }
    }

    #[test]
    fn sweep_multiplies_variants_and_overrides_apply_last() {
        let text = r#"
            name = "t"
            title = "t"
            [[variants]]
            name = "a"
            [[variants]]
            name = "b"
            policy.detector.kind = "static"
            [sweep]
            key = "seed"
            values = [1, 2, 3]
        "#;
        let s = Scenario::parse(text, "t", &["cluster.nodes=7".into()]).unwrap();
        assert_eq!(s.runs.len(), 6);
        assert_eq!(s.runs[4].name, "b@seed=2");
        assert_eq!(s.runs[4].spec.seed, 2);
        assert!(s.runs.iter().all(|r| r.spec.cluster.nodes == 7));
    }

    #[test]
    fn a_bad_value_is_refused_with_its_key() {
        let text = "name = \"t\"\ntitle = \"t\"\n[base]\npolicy.detector.kind = \"constraint-thrashing\"\npolicy.detector.tolerance = -1\n";
        let err = Scenario::parse(text, "f.toml", &[]).unwrap_err().to_string();
        assert!(err.contains("f.toml"), "{err}");
        assert!(err.contains("tolerance"), "{err}");
        let err = Scenario::parse(
            "name = \"t\"\ntitle = \"t\"\n[base]\ncluster.nodez = 3\n",
            "f.toml",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("nodez"), "{err}");
    }

    #[test]
    fn duplicate_variant_names_and_tiny_nodes_are_refused() {
        let text = "name = \"t\"\ntitle = \"t\"\n[[variants]]\nname = \"a\"\n[[variants]]\nname = \"b\"\n[[variants]]\nname = \"a\"\n";
        let err = Scenario::parse(text, "t.toml", &[]).unwrap_err().to_string();
        assert!(err.contains("variants[2].name: \"a\" is variants[0]'s name too"), "{err}");
        let err = Scenario::parse(
            "name = \"t\"\ntitle = \"t\"\n",
            "t",
            &["cluster.node_memory=\"1KiB\"".into()],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("cluster.node_memory: 1024 bytes is less than 64 MiB"), "{err}");
        assert!(Scenario::parse(
            "name = \"t\"\ntitle = \"t\"\n",
            "t",
            &["cluster.node_memory=\"64MiB\"".into()]
        )
        .is_ok());
    }

    #[test]
    fn a_replay_is_titled_by_its_trace_without_the_papers_numbers() {
        let overrides = [
            "workload.kind=\"trace\"".to_string(),
            "workload.format=\"google-2011\"".into(),
            "workload.paths=[\"x/task_events\"]".into(),
        ];
        let s = Scenario::load("default", &overrides).unwrap();
        assert_eq!(s.title, "replay of the google-2011 trace x/task_events");
        assert!(s.paper.is_empty() && s.paper_numbers.is_empty(), "{s:?}");
        let plain = Scenario::load("default", &[]).unwrap();
        assert_ne!(plain.title, s.title);
    }

    #[test]
    fn unknown_names_list_the_built_ins() {
        let err = Scenario::load("nonesuch", &[]).unwrap_err().to_string();
        assert!(err.contains("charon-loads"), "{err}");
    }

    #[test]
    fn overrides_parse_toml_values_and_fall_back_to_strings() {
        assert_eq!(parse_override("a.b=3").unwrap(), ("a.b".into(), Value::Integer(3)));
        assert_eq!(parse_override("k = ssd").unwrap(), ("k".into(), Value::String("ssd".into())));
        assert!(parse_override("novalue").is_err());
    }
}
