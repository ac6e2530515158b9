//! Google clusterdata-2019: the `instance_events` and `instance_usage`
//! tables of one cell, as exported from BigQuery.
//!
//! A file whose name contains `json` is JSON (lines, or one array), any
//! other is CSV with a header row; gzip either way. Columns are picked by
//! name, so their order and any extra columns do not matter. Nested fields
//! are found nested (`"resource_request": {"memory": 0.1}`) or flattened
//! (`resource_request.memory` or `resource_request_memory`), and numbers as
//! numbers or as strings (BigQuery's JSON writes 64-bit integers as
//! strings). Times are microseconds (2^63 − 1: after the trace, skipped);
//! resources are normalized like 2011's.
//!
//! `instance_events`: `time`, `type` (0 SUBMIT, 1 QUEUE, 2 ENABLE,
//! 3 SCHEDULE, 4 EVICT, 5 FAIL, 6 FINISH, 7 KILL, 8 LOST, 9 UPDATE_PENDING,
//! 10 UPDATE_RUNNING; the names are accepted too), `collection_id`,
//! `instance_index`, `priority`, `collection_type` (rows of alloc-set
//! instances, type 1, are reservations rather than work and are skipped),
//! `resource_request.cpus`, `resource_request.memory`.
//!
//! `instance_usage`: `start_time`, `end_time`, `collection_id`,
//! `instance_index`, `collection_type`, `average_usage.memory` (the sample,
//! at the window's start, as 2011's canonical memory usage).
//!
//! Class, by the tiers of the trace's documentation: production (120..=359)
//! and monitoring (>= 360) are production; free (<= 99), best-effort batch
//! (100..=115) and mid (116..=119) are best-effort. The priority (up to 450,
//! which `TaskSpec`'s `u8` cannot hold) is kept as its 2011 equivalent, so
//! per-band reports read alike for both traces: free 0, best-effort batch 2,
//! mid 8, production 9, monitoring 10.

use super::borg::{Borg, Kind, Row, Submitted, TaskEvent, Usage};
use super::counter::BadRowCounter;
use super::csvrows::{CsvRow, CsvTable};
use super::fields::{required, Field};
use super::files::{classify, TraceFile};
use super::ids::{self, Part};
use super::jsonrows::{JsonRow, JsonTable};
use super::merge::{parsed, reorder, stream, Located, Table, Timed};
use super::sort::{sorted, Make};
use super::TraceOptions;
use crate::workload::{TaskKey, TraceError, WorkloadStream};
use overbook_core::{Class, JobId};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const AFTER_TRACE: u64 = i64::MAX as u64;

const EVENT_TYPES: [&str; 11] = [
    "SUBMIT",
    "QUEUE",
    "ENABLE",
    "SCHEDULE",
    "EVICT",
    "FAIL",
    "FINISH",
    "KILL",
    "LOST",
    "UPDATE_PENDING",
    "UPDATE_RUNNING",
];

pub(crate) fn open(
    root: &Path,
    files: &[TraceFile],
    opts: &TraceOptions,
    counter: &Arc<BadRowCounter>,
) -> Result<WorkloadStream, TraceError> {
    // machine_events is the cluster's (`super::machines`), not the replay's.
    let mut found =
        classify(files, &["instance_events", "instance_usage", "machine_events"])?.into_iter();
    let (events, usage) = (found.next().unwrap_or_default(), found.next().unwrap_or_default());
    if events.is_empty() {
        return Err(TraceError::BadFile {
            path: root.to_path_buf(),
            problem: "no instance_events files here (google-2019 needs instance_events, and instance_usage for memory over time)".into(),
        });
    }
    let flat_profiles = usage.is_empty();
    let mut tables = vec![table(events, opts, counter, parse_event)];
    if !usage.is_empty() {
        tables.push(table(usage, opts, counter, parse_usage));
    }
    Ok(stream(
        tables,
        Borg::new(flat_profiles, counter),
        opts.window_from.map(|from| (from, counter.clone())),
    ))
}

/// A row of either export.
#[derive(Debug)]
enum Named {
    Csv(CsvRow),
    Json(JsonRow),
}

impl Named {
    fn field(&self, name: &str) -> Field<'_> {
        match self {
            Named::Csv(r) => r.named(name),
            Named::Json(r) => r.named(name),
        }
    }

    /// A field the row cannot do without: for CSV, a header without the
    /// column is said so, rather than "missing" on every row.
    fn need(&self, name: &str) -> Result<Field<'_>, String> {
        if let Named::Csv(r) = self {
            if r.header.as_ref().is_some_and(|h| h.column(name).is_none()) {
                return Err(format!("the header has no column {name}"));
            }
        }
        Ok(self.field(name))
    }
}

impl Located for Named {
    fn path(&self) -> &Path {
        match self {
            Named::Csv(r) => r.path(),
            Named::Json(r) => r.path(),
        }
    }
    fn line(&self) -> u64 {
        match self {
            Named::Csv(r) => r.line(),
            Named::Json(r) => r.line(),
        }
    }
}

type Parse = fn(&Named, &TraceOptions) -> Result<Option<Timed<Row>>, String>;

fn table(
    files: Vec<PathBuf>,
    opts: &TraceOptions,
    counter: &Arc<BadRowCounter>,
    parse: Parse,
) -> Table<Row> {
    let o = opts.clone();
    let make: Make<Row> = Box::new(move |c: &Arc<BadRowCounter>| {
        let raw = files.clone().into_iter().flat_map(
            |path| -> Box<dyn Iterator<Item = Result<Named, TraceError>> + Send> {
                let name = path.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase());
                if name.is_some_and(|n| n.contains("json")) {
                    Box::new(JsonTable::new(vec![path]).map(|r| r.map(Named::Json)))
                } else {
                    Box::new(CsvTable::with_header(vec![path]).map(|r| r.map(Named::Csv)))
                }
            },
        );
        let (o, c) = (o.clone(), c.clone());
        // The shared set is locked only for a machine new to this table.
        let mut seen = std::collections::HashSet::new();
        parsed(raw, o.skip_bad_rows, &c.clone(), move |r, out| {
            out.extend(parse(r, &o)?);
            if let Ok(Some(machine)) = r.field("machine_id").u64("machine_id") {
                if seen.insert(machine) {
                    c.record_machine(machine);
                }
            }
            Ok(())
        })
    });
    let rows = sorted(make, counter, opts.sort_budget(), opts.spill_dir.clone());
    reorder(rows, opts.reorder_window, counter)
}

fn key(collection: u64, index: u64) -> TaskKey {
    ids::task("google-2019", &[Part::Num(collection), Part::Num(index)])
}

/// Class and 2011-equivalent priority of a 2019 priority (see the module).
fn band(priority: u64) -> (Class, u8) {
    match priority {
        0..=99 => (Class::BestEffort, 0),
        100..=115 => (Class::BestEffort, 2),
        116..=119 => (Class::BestEffort, 8),
        120..=359 => (Class::Production, 9),
        _ => (Class::Production, 10),
    }
}

/// An enum field written as its number or its name.
fn code(f: Field<'_>, what: &str, names: &[&str]) -> Result<Option<u64>, String> {
    if let Field::Text(s) = f {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            return Ok(Some(i as u64));
        }
    }
    f.u64(what)
}

/// Rows of alloc-set instances: reservations, not work.
fn is_alloc(r: &Named) -> Result<bool, String> {
    Ok(code(r.field("collection_type"), "collection_type", &["JOB", "ALLOC_SET"])? == Some(1))
}

fn ids(r: &Named) -> Result<(u64, u64), String> {
    let collection = required("collection_id", r.need("collection_id")?.u64("collection_id"))?;
    let index = required("instance_index", r.need("instance_index")?.u64("instance_index"))?;
    Ok((collection, index))
}

fn parse_event(r: &Named, opts: &TraceOptions) -> Result<Option<Timed<Row>>, String> {
    let time = required("time", r.need("time")?.u64("time"))?;
    let event = required("type", code(r.need("type")?, "type", &EVENT_TYPES))?;
    let (collection, index) = ids(r)?;
    let priority = r.field("priority").u64("priority")?;
    let cpus = r.field("resource_request.cpus").f64("resource_request.cpus")?;
    let mem = r.field("resource_request.memory").f64("resource_request.memory")?;
    let kind = match event {
        0 => {
            let (class, priority) = band(required("priority", Ok(priority))?);
            Kind::Submit(Submitted {
                class,
                priority,
                request: opts.bytes(mem.unwrap_or(0.0), 1.0),
                cpus: cpus.unwrap_or(0.0) * opts.cpu_scale,
            })
        }
        3 => Kind::Schedule,
        6 => Kind::Finish,
        4 | 5 | 7 | 8 => Kind::Death,
        1 | 2 | 9 | 10 => Kind::Other,
        other => return Err(format!("type: {other} is not in 0..=10")),
    };
    if is_alloc(r)? || time >= AFTER_TRACE {
        return Ok(None);
    }
    let at = opts.time_us(time);
    Ok(Some(Timed {
        at,
        row: Row::Event(TaskEvent {
            time: at,
            key: key(collection, index),
            job: JobId(collection),
            kind,
        }),
    }))
}

fn parse_usage(r: &Named, opts: &TraceOptions) -> Result<Option<Timed<Row>>, String> {
    let start = required("start_time", r.need("start_time")?.u64("start_time"))?;
    let end = r.field("end_time").u64("end_time")?;
    if let Some(end) = end.filter(|&e| e < start) {
        return Err(format!("end_time {end} is before start_time {start}"));
    }
    let (collection, index) = ids(r)?;
    let mem = r.field("average_usage.memory").f64("average_usage.memory")?;
    let Some(mem) = mem else { return Ok(None) };
    if is_alloc(r)? || start >= AFTER_TRACE {
        return Ok(None);
    }
    let at = opts.time_us(start);
    Ok(Some(Timed {
        at,
        row: Row::Usage(Usage {
            start: at,
            key: key(collection, index),
            mem: opts.bytes(mem, 1.0),
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn json_row(v: serde_json::Value) -> Named {
        Named::Json(JsonRow { path: Path::new("e.json").into(), line: 1, value: v })
    }

    #[test]
    fn nested_and_string_numbers_read_alike() {
        let opts = TraceOptions { memory_scale: 1000, ..TraceOptions::default() };
        let r = json_row(json!({
            "time": "700000000", "type": "0", "collection_id": "123",
            "instance_index": 4, "priority": 200, "collection_type": "0",
            "resource_request": {"cpus": 0.1, "memory": 0.5}
        }));
        let got = parse_event(&r, &opts).expect("row").expect("event");
        let Row::Event(ev) = got.row else { panic!("not an event") };
        assert_eq!(ev.key, key(123, 4));
        let Kind::Submit(s) = ev.kind else { panic!("not a submit") };
        assert_eq!((s.class, s.priority, s.request), (Class::Production, 9, 500));
    }

    #[test]
    fn type_names_work_and_alloc_instances_are_skipped() {
        let opts = TraceOptions::default();
        let r = json_row(json!({"time": 5, "type": "SCHEDULE", "collection_id": 1,
            "instance_index": 0, "collection_type": "ALLOC_SET"}));
        assert_eq!(parse_event(&r, &opts).map(|e| e.is_none()), Ok(true));
        let r = json_row(json!({"time": 5, "type": "BOGUS", "collection_id": 1,
            "instance_index": 0}));
        assert_eq!(
            parse_event(&r, &opts).expect_err("bad type"),
            "type: \"BOGUS\" is not a whole number"
        );
    }

    #[test]
    fn bands_follow_the_documented_tiers() {
        assert_eq!(band(0), (Class::BestEffort, 0));
        assert_eq!(band(103), (Class::BestEffort, 2));
        assert_eq!(band(119), (Class::BestEffort, 8));
        assert_eq!(band(120), (Class::Production, 9));
        assert_eq!(band(360), (Class::Production, 10));
    }
}
