//! A trace's machine table, when it has one: how many machines its cell
//! had and how much memory most of them held, so that a replay can run on
//! a cluster like the trace's (`workload.cluster`).
//!
//! | format | table | what is read |
//! |---|---|---|
//! | `google-2011` | `machine_events` (headerless CSV) | machine ID (column 1), event type (2; 0 ADD), memory (5, normalized) |
//! | `google-2019` | `machine_events` (BigQuery export) | `machine_id`, `type` (1 ADD), `capacity.memory` (normalized) |
//! | `alibaba-2018` | `machine_meta` (headerless CSV) | machine_id (column 0), mem_size (5, normalized to 100) |
//!
//! The machines are those the table adds (any row, for Alibaba's, which
//! has no event type), each counted once; the memory is the one most of
//! them were added with (the simulated cluster's nodes are all alike),
//! normalized as the task tables are and scaled by `memory_scale`; a
//! machine added with no memory given counts, but has no say in it. A
//! table whose machines give no memory at all sizes nothing.

use super::csvrows::{CsvRow, CsvTable};
use super::fields::Field;
use super::files::{self, TraceFile};
use super::ids::{self, Part};
use super::jsonrows::JsonTable;
use super::merge::Located;
use super::{TraceFormat, TraceOptions};
use crate::workload::TraceError;
use overbook_core::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// What a machine table says of the trace's cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceCluster {
    /// Machines the table adds, each counted once.
    pub machines: u64,
    /// The memory most of them were added with.
    pub memory: Bytes,
    /// How many machines have that memory.
    pub with_that_memory: u64,
}

/// The name of `format`'s machine table, if it has one.
pub fn machine_table(format: TraceFormat) -> Option<&'static str> {
    match format {
        TraceFormat::Google2011 | TraceFormat::Google2019 => Some("machine_events"),
        TraceFormat::Alibaba2018 => Some("machine_meta"),
        TraceFormat::CharonSls => None,
    }
}

/// The cluster `format`'s machine table among `paths` describes; `None`
/// when the format has no machine table or none was given.
pub fn cluster(
    format: TraceFormat,
    paths: &[PathBuf],
    opts: &TraceOptions,
) -> Result<Option<TraceCluster>, TraceError> {
    let Some(table) = machine_table(format) else { return Ok(None) };
    let found = files::expand(paths)?;
    let mine = of_table(&found, table);
    if mine.is_empty() {
        return Ok(None);
    }
    // A machine added with no memory given is counted, but has no say in
    // the nodes' memory.
    let mut memory_of: HashMap<u64, Option<Bytes>> = HashMap::new();
    let mut take = |row: Result<Option<(u64, Option<Bytes>)>, String>, at: &dyn Located| match row {
        Ok(Some((machine, memory))) => {
            let known = memory_of.entry(machine).or_insert(memory);
            if known.is_none() {
                *known = memory;
            }
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(_) if opts.skip_bad_rows => Ok(()),
        Err(problem) => Err(TraceError::BadRow {
            path: at.path().to_path_buf(),
            line: at.line(),
            problem: format!("{table}: {problem}"),
        }),
    };
    match format {
        TraceFormat::Google2019 => {
            for path in mine {
                let json = path.file_name().is_some_and(|n| n.to_string_lossy().contains("json"));
                if json {
                    for row in JsonTable::new(vec![path]) {
                        let row = row?;
                        take(google2019(|n| row.named(n), opts), &row)?;
                    }
                } else {
                    for row in CsvTable::with_header(vec![path]) {
                        let row = row?;
                        take(google2019(|n| row.named(n), opts), &row)?;
                    }
                }
            }
        }
        _ => {
            let parse = if format == TraceFormat::Google2011 { google2011 } else { alibaba2018 };
            for row in CsvTable::headerless(mine) {
                let row = row?;
                take(parse(&row, opts), &row)?;
            }
        }
    }
    let mut count: BTreeMap<Bytes, u64> = BTreeMap::new();
    for memory in memory_of.values().flatten() {
        *count.entry(*memory).or_default() += 1;
    }
    // The most common memory; of equally common ones, the largest.
    let Some((&memory, &with_that_memory)) = count.iter().max_by_key(|(m, n)| (**n, **m)) else {
        return Ok(None);
    };
    Ok(Some(TraceCluster { machines: memory_of.len() as u64, memory, with_that_memory }))
}

/// The files of `table`: by their name, or a directory's on their path.
fn of_table(files: &[TraceFile], table: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = files
        .iter()
        .filter(|f| {
            f.path.file_name().is_some_and(|n| n.to_string_lossy().contains(table))
                || f.path.parent().is_some_and(|d| {
                    d.components().any(|c| c.as_os_str().to_string_lossy().contains(table))
                })
        })
        .map(|f| f.path.clone())
        .collect();
    out.sort();
    out
}

fn memory(
    normalized: Option<f64>,
    full: f64,
    opts: &TraceOptions,
) -> Result<Option<Bytes>, String> {
    match normalized {
        Some(m) if m.is_finite() && m > 0.0 => Ok(Some(opts.bytes(m, full))),
        Some(m) => Err(format!("memory: {m} is not a positive size")),
        None => Ok(None),
    }
}

fn google2011(r: &CsvRow, opts: &TraceOptions) -> Result<Option<(u64, Option<Bytes>)>, String> {
    r.expect_columns(&[6], "the 2011 machine_events schema")?;
    let machine = r.at(1).u64("machine ID")?.ok_or("machine ID: missing")?;
    if r.at(2).u64("event type")?.ok_or("event type: missing")? != 0 {
        return Ok(None); // REMOVE or UPDATE: the machine was added before
    }
    Ok(Some((machine, memory(r.at(5).f64("memory")?, 1.0, opts)?)))
}

fn google2019<'a>(
    field: impl Fn(&str) -> Field<'a>,
    opts: &TraceOptions,
) -> Result<Option<(u64, Option<Bytes>)>, String> {
    let machine = field("machine_id").u64("machine_id")?.ok_or("machine_id: missing")?;
    let kind = match field("type") {
        Field::Text(t) if t.eq_ignore_ascii_case("ADD") => 1,
        f => f.u64("type")?.ok_or("type: missing")?,
    };
    if kind != 1 {
        return Ok(None);
    }
    let mem = match field("capacity.memory") {
        Field::Missing => field("capacity_memory"),
        f => f,
    };
    Ok(Some((machine, memory(mem.f64("capacity.memory")?, 1.0, opts)?)))
}

fn alibaba2018(r: &CsvRow, opts: &TraceOptions) -> Result<Option<(u64, Option<Bytes>)>, String> {
    r.expect_columns(&[7], "the machine_meta schema")?;
    let machine = r.at(0).string("machine_id")?.ok_or("machine_id: missing")?;
    let machine = ids::hash("alibaba-machine", &[Part::Text(&machine)]);
    Ok(Some((machine, memory(r.at(5).f64("mem_size")?, 100.0, opts)?)))
}
