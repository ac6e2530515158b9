//! Google clusterdata-2011-2: the `task_events` and `task_usage` tables.
//!
//! Headerless CSV, plain or gzip, in part files (`task_events/part-00000-of-00500.csv.gz`,
//! read in name order), columns as the trace's schema document (v2.1) lists
//! them. Times are microseconds; 0 means "before the trace" (which starts at
//! 600 s) and 2^63 − 1 "after it": such rows are skipped. Resources are
//! normalized to the largest machine and scaled by
//! [`TraceOptions::memory_scale`] and [`TraceOptions::cpu_scale`].
//!
//! `task_events` (13 columns): time, missing info, job ID, task index,
//! machine ID, event type, user, scheduling class, priority, CPU request,
//! memory request, disk request, different-machine constraint. Event types:
//! 0 SUBMIT, 1 SCHEDULE, 2 EVICT, 3 FAIL, 4 FINISH, 5 KILL, 6 LOST,
//! 7 UPDATE_PENDING, 8 UPDATE_RUNNING (what each becomes: [`super::borg`]).
//!
//! `task_usage` (20 columns; 19 in clusterdata-2011-1, which lacks the last):
//! start time, end time, job ID, task index, machine ID, CPU rate, canonical
//! memory usage, assigned memory, unmapped page cache, total page cache,
//! maximum memory usage, disk I/O time, local disk space, max CPU rate, max
//! disk I/O time, CPI, MAI, sample portion, aggregation type, sampled CPU
//! usage. The sample is the canonical memory usage (the mean over the
//! window, as the other formats give), at the window's start. Without a
//! `task_usage` table each task holds its memory request for its whole run.
//!
//! Class: priorities 9..=11 are production, 0..=8 best-effort. The trace
//! documentation calls 0-1 "free" and 9-11 "production"; 004 (Table 1)
//! groups them free 0-1, middle 2-8, production 9-11, and 000 has only
//! production and best-effort, so the middle band, which Borg does preempt,
//! is best-effort. The priority itself is kept for per-band reports.
//!
//! Both tables are time-sorted in the published trace; parts given in any
//! order are sorted (see [`super`]), and the tables merged by time with
//! events first at equal times (a task's SUBMIT before its usage).

use super::borg::{Borg, Kind, Row, Submitted, TaskEvent, Usage};
use super::counter::BadRowCounter;
use super::csvrows::{CsvRow, CsvTable};
use super::fields::required;
use super::files::{classify, TraceFile};
use super::ids::{self, Part};
use super::merge::{parsed, reorder, stream, Table, Timed};
use super::sort::{sorted, Make};
use super::TraceOptions;
use crate::workload::{TraceError, WorkloadStream};
use overbook_core::{Class, JobId};
use std::path::Path;
use std::sync::Arc;

/// Times at or past this (2^63 − 1) are "after the end of the trace".
const AFTER_TRACE: u64 = i64::MAX as u64;

pub(crate) fn open(
    root: &Path,
    files: &[TraceFile],
    opts: &TraceOptions,
    counter: &Arc<BadRowCounter>,
) -> Result<WorkloadStream, TraceError> {
    // machine_events is the cluster's (`super::machines`), not the replay's.
    let mut found = classify(files, &["task_events", "task_usage", "machine_events"])?.into_iter();
    let (events, usage) = (found.next().unwrap_or_default(), found.next().unwrap_or_default());
    if events.is_empty() {
        return Err(TraceError::BadFile {
            path: root.to_path_buf(),
            problem: "no task_events files here (google-2011 needs task_events, and task_usage for memory over time)".into(),
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

type Parse = fn(&CsvRow, &TraceOptions) -> Result<Option<Timed<Row>>, String>;

fn table(
    files: Vec<std::path::PathBuf>,
    opts: &TraceOptions,
    counter: &Arc<BadRowCounter>,
    parse: Parse,
) -> Table<Row> {
    let o = opts.clone();
    let make: Make<Row> = Box::new(move |c: &Arc<BadRowCounter>| {
        let (o, c) = (o.clone(), c.clone());
        // The shared set is locked only for a machine new to this table.
        let mut seen = std::collections::HashSet::new();
        parsed(CsvTable::headerless(files.clone()), o.skip_bad_rows, &c.clone(), move |r, out| {
            out.extend(parse(r, &o)?);
            // Both tables name the machine in column 4 (empty while pending).
            if let Ok(Some(machine)) = r.at(4).u64("machine ID") {
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

fn key(job: u64, index: u64) -> crate::workload::TaskKey {
    ids::task("google-2011", &[Part::Num(job), Part::Num(index)])
}

fn class_of(priority: u8) -> Class {
    if priority >= 9 {
        Class::Production
    } else {
        Class::BestEffort
    }
}

fn parse_event(r: &CsvRow, opts: &TraceOptions) -> Result<Option<Timed<Row>>, String> {
    r.expect_columns(&[13], "the 2011 task_events schema")?;
    let time = required("time", r.at(0).u64("time"))?;
    let job = required("job ID", r.at(2).u64("job ID"))?;
    let index = required("task index", r.at(3).u64("task index"))?;
    let event = required("event type", r.at(5).u64("event type"))?;
    let priority = match r.at(8).u64("priority")? {
        Some(p @ 0..=11) => u8::try_from(p).ok(),
        Some(p) => return Err(format!("priority: {p} is not in 0..=11")),
        None => None,
    };
    let cpu = r.at(9).f64("CPU request")?;
    let mem = r.at(10).f64("memory request")?;
    let kind = match event {
        0 => {
            let priority = required("priority", Ok(priority))?;
            Kind::Submit(Submitted {
                class: class_of(priority),
                priority,
                request: opts.bytes(mem.unwrap_or(0.0), 1.0),
                cpus: cpu.unwrap_or(0.0) * opts.cpu_scale,
            })
        }
        1 => Kind::Schedule,
        4 => Kind::Finish,
        2 | 3 | 5 | 6 => Kind::Death,
        7 | 8 => Kind::Other,
        other => return Err(format!("event type: {other} is not in 0..=8")),
    };
    if time >= AFTER_TRACE {
        return Ok(None);
    }
    let at = opts.time_us(time);
    Ok(Some(Timed {
        at,
        row: Row::Event(TaskEvent { time: at, key: key(job, index), job: JobId(job), kind }),
    }))
}

fn parse_usage(r: &CsvRow, opts: &TraceOptions) -> Result<Option<Timed<Row>>, String> {
    r.expect_columns(&[20, 19], "the 2011 task_usage schema")?;
    let start = required("start time", r.at(0).u64("start time"))?;
    let end = r.at(1).u64("end time")?;
    if end.is_some_and(|e| e < start) {
        return Err(format!("end time {} is before start time {start}", end.unwrap_or(0)));
    }
    let job = required("job ID", r.at(2).u64("job ID"))?;
    let index = required("task index", r.at(3).u64("task index"))?;
    let mem = r.at(6).f64("canonical memory usage")?;
    // A window without a memory measurement says nothing about memory.
    let Some(mem) = mem else { return Ok(None) };
    if start >= AFTER_TRACE {
        return Ok(None);
    }
    let at = opts.time_us(start);
    Ok(Some(Timed {
        at,
        row: Row::Usage(Usage { start: at, key: key(job, index), mem: opts.bytes(mem, 1.0) }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::csvrows::Fields;
    use crate::workload::TaskKey;

    fn row(text: &str) -> CsvRow {
        CsvRow {
            path: Path::new("t.csv").into(),
            line: 1,
            fields: Fields::split(text).expect("fields"),
            header: None,
        }
    }

    #[test]
    fn a_submit_becomes_a_task_of_its_priority_band() {
        let opts = TraceOptions { memory_scale: 1000, cpu_scale: 10.0, ..TraceOptions::default() };
        let got = parse_event(&row("5,,42,3,,0,u,2,10,0.5,0.25,0.01,0"), &opts)
            .expect("row")
            .expect("an event");
        assert_eq!(got.at.0, 5);
        let Row::Event(ev) = got.row else { panic!("not an event") };
        assert_eq!((ev.key, ev.job), (key(42, 3), JobId(42)));
        assert_eq!(
            ev.kind,
            Kind::Submit(Submitted {
                class: Class::Production,
                priority: 10,
                request: 250,
                cpus: 5.0
            })
        );
        assert_ne!(key(42, 3), TaskKey(0));
    }

    #[test]
    fn bad_fields_are_named() {
        let opts = TraceOptions::default();
        let err = |t: &str| parse_event(&row(t), &opts).expect_err("bad row");
        assert_eq!(
            err("5,,42,3,,0,u,2,10,0.5,0.25,0.01"),
            "expected 13 columns (the 2011 task_events schema), found 12"
        );
        assert_eq!(err("-5,,42,3,,0,u,2,10,0.5,0.25,0.01,0"), "time: -5 is negative");
        assert_eq!(err("5,,x,3,,0,u,2,10,0.5,0.25,0.01,0"), "job ID: \"x\" is not a whole number");
        assert_eq!(err("5,,4,3,,9,u,2,10,,,,0"), "event type: 9 is not in 0..=8");
        assert_eq!(err("5,,4,3,,0,u,2,,,,,0"), "priority is missing");
    }

    #[test]
    fn rows_after_the_trace_and_usage_without_memory_are_skipped() {
        let opts = TraceOptions::default();
        let after = format!("{AFTER_TRACE},,42,3,,4,u,2,10,,,,0");
        assert_eq!(parse_event(&row(&after), &opts).map(|r| r.is_none()), Ok(true));
        let usage = "10,20,42,3,1,0.1,,,,,,,,,,,,,,0.1";
        assert_eq!(parse_usage(&row(usage), &opts).map(|r| r.is_none()), Ok(true));
    }
}
