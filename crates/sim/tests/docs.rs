//! `docs/config.md` documents every key the code accepts, and
//! `docs/workload.md` every generator key and trace format.
//!
//! The keys are taken from the code, never listed here by hand: structs with
//! a `Default` are serialized and their field names read back; everything
//! else (the scenario file's own keys, `[sweep]`, `[[paper_numbers]]`, the
//! trace workload, every kind of every policy stage and its fields) is read
//! from the error serde gives for an unknown key or kind, which lists every
//! field or variant it expected. A key added to the code and not to the docs
//! fails here, and so does a key removed from the docs: each must be a row
//! (`` | `key` | ``) of the table under its own heading, not just a word
//! somewhere in the file.

use overbook_core::config::{PolicyConfig, ProtectConfig};
use overbook_core::detect::DetectorConfig;
use overbook_core::launch::LaunchConfig;
use overbook_core::preempt::PreemptorConfig;
use overbook_core::rank::RankerConfig;
use overbook_core::reclaim::ReclaimerConfig;
use overbook_sim::consolidate::ConsolidationConfig;
use overbook_sim::generate::GeneratorConfig;
use overbook_sim::killdelay::KillDelayDist;
use overbook_sim::report::PLOTS;
use overbook_sim::scenario::{ClusterSpec, RunSpec, Scenario, SimKnobs};
use overbook_sim::storage::Preset;
use overbook_sim::trace::TraceFormat;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::Path;

fn read_doc(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The level of a Markdown heading line (`## x` → 2), or 0 for other lines.
fn heading_level(line: &str) -> usize {
    let hashes = line.chars().take_while(|&c| c == '#').count();
    if hashes > 0 && line[hashes..].starts_with(' ') {
        hashes
    } else {
        0
    }
}

/// The text under the first heading that contains `title`, up to the next
/// heading of the same or a higher level (its subsections included).
fn section<'a>(doc: &'a str, title: &str, file: &str) -> &'a str {
    let mut start = None;
    let mut offset = 0;
    let mut in_code = false;
    for line in doc.split_inclusive('\n') {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        let level = if in_code { 0 } else { heading_level(line) };
        match start {
            None if level > 0 && line.contains(title) => start = Some((offset, level)),
            Some((from, at)) if level > 0 && level <= at => return &doc[from..offset],
            _ => {}
        }
        offset += line.len();
    }
    match start {
        Some((from, _)) => &doc[from..],
        None => panic!("{file}: no heading containing {title}"),
    }
}

/// The table row documenting `key` in `section` (a line starting `` | `key` ``).
fn find_row<'a>(section: &'a str, key: &str) -> Option<&'a str> {
    let start = format!("| `{key}`");
    section.lines().find(|l| l.trim_start().starts_with(&start))
}

fn row<'a>(section: &'a str, key: &str, what: &str) -> &'a str {
    find_row(section, key)
        .unwrap_or_else(|| panic!("docs/config.md: {what} has no row for `{key}`"))
}

/// Every name between backticks after "expected" in a serde error for an
/// unknown field or variant; empty for "there are no fields".
fn expected(err: &str) -> BTreeSet<String> {
    if err.contains("there are no fields") {
        return BTreeSet::new();
    }
    let Some(at) = err.find("expected") else {
        panic!("not an unknown-field error: {err}");
    };
    let names: BTreeSet<String> =
        err[at..].split('`').skip(1).step_by(2).map(str::to_string).collect();
    assert!(!names.is_empty(), "no names listed in: {err}");
    names
}

/// The error `text` gives as a `T`.
fn error_of<T: DeserializeOwned + std::fmt::Debug>(text: &str) -> String {
    toml::from_str::<T>(text).expect_err(text).to_string()
}

/// The field names `value` serializes with.
fn keys_of<T: Serialize>(value: &T) -> BTreeSet<String> {
    match serde_json::to_value(value).expect("serializes") {
        serde_json::Value::Object(map) => map.keys().cloned().collect(),
        other => panic!("not a table: {other}"),
    }
}

/// The kinds a policy stage accepts, and each kind's fields.
fn kinds<T: DeserializeOwned + Serialize + std::fmt::Debug>() -> Vec<(String, BTreeSet<String>)> {
    let names = expected(&error_of::<T>("kind = \"no-such-kind\""));
    names
        .into_iter()
        .map(|kind| {
            let fields = expected(&error_of::<T>(&format!("kind = \"{kind}\"\nno_such_key = 1")));
            // The error's list must be the fields the kind really has: its
            // defaults, serialized, carry the same names (and the tag).
            if let Ok(default) = toml::from_str::<T>(&format!("kind = \"{kind}\"")) {
                let mut serialized = keys_of(&default);
                assert!(serialized.remove("kind"), "{kind} serializes without its tag");
                assert_eq!(serialized, fields, "fields of kind {kind}");
            }
            (kind, fields)
        })
        .collect()
}

fn assert_rows(section: &str, what: &str, keys: &BTreeSet<String>) {
    assert!(!keys.is_empty(), "{what}: no keys found in the code");
    for key in keys {
        row(section, key, what);
    }
}

fn scenario_error(text: &str) -> String {
    let text = format!("name = \"t\"\ntitle = \"t\"\n{text}");
    Scenario::parse(&text, "t", &[]).expect_err(&text).to_string()
}

#[test]
fn every_scenario_file_key_is_documented() {
    let doc = read_doc("config.md");
    let top = section(&doc, "Scenario files", "config.md");
    let keys = expected(&scenario_error("no_such_key = 1"));
    assert!(keys.contains("variants") && keys.contains("sweep"), "{keys:?}");
    assert_rows(top, "the scenario file", &keys);

    let sweep = section(&doc, "`[sweep]`", "config.md");
    assert_rows(sweep, "[sweep]", &expected(&scenario_error("[sweep]\nno_such_key = 1")));
    let numbers = section(&doc, "`[[paper_numbers]]`", "config.md");
    let keys = expected(&scenario_error("[[paper_numbers]]\nno_such_key = 1"));
    assert_rows(numbers, "[[paper_numbers]]", &keys);
    // `name` is taken out of a variant by hand before the rest is merged.
    row(section(&doc, "`[[variants]]`", "config.md"), "name", "[[variants]]");

    let plots = row(top, "plots", "the scenario file");
    for (name, _) in PLOTS {
        assert!(plots.contains(&format!("`{name}`")), "plots row lacks `{name}`: {plots}");
    }
}

#[test]
fn every_run_setting_is_documented() {
    let doc = read_doc("config.md");
    let mut table = toml::Table::new();
    table.insert("no_such_key".into(), toml::Value::Integer(1));
    let keys = expected(&RunSpec::from_table(table).expect_err("unknown key"));
    assert!(keys.contains("seed") && keys.contains("policy"), "{keys:?}");
    assert_rows(section(&doc, "Run settings", "config.md"), "the run settings", &keys);

    let cluster = section(&doc, "`[cluster]`", "config.md");
    assert_rows(cluster, "[cluster]", &keys_of(&ClusterSpec::default()));
    let store = row(cluster, "store", "[cluster]");
    for preset in Preset::ALL {
        assert!(store.contains(&format!("`{}`", preset.name())), "store row: {store}");
    }
    let kill_delay = row(cluster, "kill_delay", "[cluster]");
    for killer in [KillDelayDist::UserSpace, KillDelayDist::InKernel] {
        assert!(kill_delay.contains(&format!("`{killer}`")), "kill_delay row: {kill_delay}");
    }
    assert_rows(section(&doc, "`[sim]`", "config.md"), "[sim]", &keys_of(&SimKnobs::default()));
}

#[test]
fn every_workload_key_is_documented() {
    let doc = read_doc("config.md");
    let workload = section(&doc, "`[workload]`", "config.md");
    let generate = section(workload, "`kind = \"generate\"`", "config.md");
    let generator_keys = keys_of(&GeneratorConfig::default());
    assert_rows(generate, "[workload] kind = \"generate\"", &generator_keys);

    let consolidation = section(workload, "`kind = \"consolidation\"`", "config.md");
    let what = "[workload] kind = \"consolidation\"";
    assert_rows(consolidation, what, &keys_of(&ConsolidationConfig::default()));

    let mut table = toml::Table::new();
    let mut w = toml::Table::new();
    w.insert("kind".into(), "trace".into());
    w.insert("no_such_key".into(), toml::Value::Integer(1));
    table.insert("workload".into(), toml::Value::Table(w));
    let keys = expected(&RunSpec::from_table(table).expect_err("unknown key"));
    assert!(keys.contains("format"), "{keys:?}");
    let trace = section(workload, "`kind = \"trace\"`", "config.md");
    assert_rows(trace, "[workload] kind = \"trace\"", &keys);
    let format = row(trace, "format", "[workload] kind = \"trace\"");
    for f in TraceFormat::ALL {
        assert!(format.contains(&format!("`{f}`")), "format row lacks `{f}`: {format}");
    }

    // docs/workload.md explains the model behind every generator key and
    // describes every trace format under its own heading.
    let model = read_doc("workload.md");
    for key in &generator_keys {
        assert!(model.contains(&format!("`{key}`")), "docs/workload.md never mentions `{key}`");
    }
    for f in TraceFormat::ALL {
        section(&model, &format!("`{f}`"), "workload.md");
    }
}

#[test]
fn every_policy_kind_and_field_is_documented() {
    let doc = read_doc("config.md");
    let stages = [
        ("`[policy.detector]`", kinds::<DetectorConfig>()),
        ("`[policy.ranker]`", kinds::<RankerConfig>()),
        ("`[policy.preemptor]`", kinds::<PreemptorConfig>()),
        ("`[policy.reclaimer]`", kinds::<ReclaimerConfig>()),
    ];
    for (heading, kinds) in stages {
        assert!(kinds.len() >= 3, "{heading}: {kinds:?}");
        let stage = section(&doc, heading, "config.md");
        for (kind, fields) in kinds {
            let what = format!("{heading} kind = \"{kind}\"");
            let sub = section(stage, &format!("`kind = \"{kind}\"`"), "config.md");
            for field in &fields {
                row(sub, field, &what);
            }
        }
    }

    let launcher = section(&doc, "`[policy.launcher]`", "config.md");
    assert_rows(launcher, "[policy.launcher]", &keys_of(&LaunchConfig::default()));
    let modes = expected(&error_of::<LaunchConfig>("admission = \"no-such-mode\""));
    let admission = row(launcher, "admission", "[policy.launcher]");
    for mode in &modes {
        assert!(admission.contains(&format!("`{mode}`")), "admission row lacks `{mode}`");
    }
    let protect = section(&doc, "`[policy.protect]`", "config.md");
    assert_rows(protect, "[policy.protect]", &keys_of(&ProtectConfig::default()));
    // The stages are all there is to a policy.
    let stages = expected(&error_of::<PolicyConfig>("[no_such_stage]\nkind = \"x\""));
    for stage in stages {
        section(&doc, &format!("`[policy.{stage}]`"), "config.md");
    }
}

#[test]
fn the_section_finder_is_strict() {
    let doc = "# A\n## `[x]`\n| `a` | 1 |\n### sub\n| `b` | 2 |\n## `[y]`\n| `c` | 3 |\n";
    let x = section(doc, "`[x]`", "t");
    assert!(row(x, "a", "x").contains('1'));
    assert!(row(x, "b", "x").contains('2'), "subsections belong to their section");
    assert_eq!(find_row(x, "c"), None, "the next section does not");
    assert_eq!(find_row(x, "d"), None);
    assert_eq!(find_row(section(doc, "`[y]`", "t"), "a"), None);
    assert_eq!(expected("unknown field `q`, expected `a` or `b`").len(), 2);
    assert!(expected("unknown field `q`, there are no fields").is_empty());
}
