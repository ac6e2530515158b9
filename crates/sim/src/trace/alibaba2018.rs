//! Alibaba cluster-trace-v2018: `batch_task`, `batch_instance`,
//! `container_meta` and `container_usage` (the machine tables are not
//! needed). Any subset may be given: batch only, containers only, or both.
//!
//! Headerless CSV, plain or gzip, columns in the order of the trace's
//! `schema.md` (which the published files follow). Times are seconds since
//! the trace began (0 also means "before or after the 8 days"); memory is
//! normalized so that 100 is the largest machine (scaled by
//! [`TraceOptions::memory_scale`]), and -1 or 101 mark an invalid value,
//! read as no value. CPU is in hundredths of a core.
//!
//! * `batch_task` (9): task_name, instance_num, job_name, task_type, status,
//!   start_time, end_time, plan_cpu, plan_mem. Kept per (job, task) until
//!   [`TraceOptions::forget_after`] past its end, for its instances' request.
//! * `batch_instance` (14): instance_name, task_name, job_name, task_type,
//!   status, start_time, end_time, machine_id, seq_no, total_seq_no,
//!   cpu_avg, cpu_max, mem_avg, mem_max. Each row (each `seq_no`: an
//!   attempt) is a **best-effort** task (priority 0) submitted at its start,
//!   requesting its task's plan_mem (its own mem_max if the task is
//!   unknown, counted as unmatched), holding mem_avg over its run (only mean
//!   and peak are recorded; the mean is what the other formats give), with
//!   work end − start when it has an end (whatever its status: it held the
//!   memory that long). One over by its status (Terminated, Failed,
//!   Cancelled, Interrupted) with no usable end (0, missing, or before its
//!   start) dies where it began (a `Death` at its start); one still running
//!   runs on. A row with neither start nor end is skipped.
//! * `container_meta` (8): container_id, machine_id, time_stamp, app_du,
//!   status, cpu_request, cpu_limit, mem_size. A container (an online
//!   service) is a **production** task (priority 9, Google's production
//!   band) submitted at its first row, requesting mem_size, in job app_du;
//!   a later `stopped` row finishes it, other statuses change nothing.
//! * `container_usage` (11): container_id, machine_id, time_stamp,
//!   cpu_util_percent, mem_util_percent, cpi, mem_gps, mpki, net_in,
//!   net_out, disk_io_percent. mem_util_percent is read as a percentage of
//!   the container's mem_size. Without this table containers hold mem_size.
//!
//! The published downloads are `.tar.gz` archives: extract them (a
//! `.csv.gz` is read as is). The files are not all sorted by time; sort
//! them first, for
//! instance `sort -t, -k6,6n batch_task.csv` (and `-k6,6n` for
//! batch_instance, `-k3,3n` for container_meta and container_usage).
//! Rows out of order by more than the reorder window are replayed late.

use super::counter::BadRowCounter;
use super::csvrows::{CsvRow, CsvTable};
use super::fields::{required, secs_to_us, Field};
use super::files::{classify, TraceFile};
use super::ids::{self, Part};
use super::merge::{parsed, reorder, stream, Replay, Table, Timed};
use super::sort::{sorted, Make, Spill};
use super::TraceOptions;
use crate::workload::{MemProfile, TaskKey, TaskSpec, TraceError, WorkloadEvent, WorkloadStream};
use overbook_core::{Bytes, Class, JobId, Time};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// batch_instance statuses of an instance that is over.
const OVER: [&str; 4] = ["Terminated", "Failed", "Cancelled", "Interrupted"];

const TABLES: [&str; 4] = ["batch_task", "batch_instance", "container_meta", "container_usage"];

pub(crate) fn open(
    root: &Path,
    files: &[TraceFile],
    opts: &TraceOptions,
    counter: &Arc<BadRowCounter>,
) -> Result<WorkloadStream, TraceError> {
    // machine_meta is the cluster's (`super::machines`), not the replay's.
    let mut found = classify(files, &[TABLES[0], TABLES[1], TABLES[2], TABLES[3], "machine_meta"])?;
    found.truncate(TABLES.len());
    if found[1].is_empty() && found[2].is_empty() {
        return Err(TraceError::BadFile {
            path: root.to_path_buf(),
            problem: "no batch_instance or container_meta files here (alibaba-2018 reads batch_task, batch_instance, container_meta, container_usage)".into(),
        });
    }
    let flat_containers = found[3].is_empty();
    let parsers: [Parse; 4] = [parse_task, parse_instance, parse_meta, parse_usage];
    // Where each table names its machine (batch_task names none).
    let machines = [None, Some(7), Some(1), Some(1)];
    // Table order breaks ties: a task before its instances, a container's
    // meta before its usage.
    let tables = found
        .into_iter()
        .zip(parsers.into_iter().zip(machines))
        .filter(|(files, _)| !files.is_empty())
        .map(|(files, (parse, machine))| table(files, opts, counter, parse, machine))
        .collect();
    let replay = Alibaba {
        tasks: HashMap::new(),
        expiry: BinaryHeap::new(),
        containers: HashMap::new(),
        forget_after: opts.forget_after,
        flat_containers,
        counter: counter.clone(),
    };
    Ok(stream(tables, replay, opts.window_from.map(|from| (from, counter.clone()))))
}

impl Spill for Row {
    fn tie(&self) -> u64 {
        match self {
            Row::Task(t) => t.key,
            Row::Instance(i) => i.key.0,
            Row::Meta(m) => m.key.0,
            Row::Usage(u) => u.key.0,
        }
    }
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
enum Row {
    Task(BatchTask),
    Instance(Instance),
    Meta(Meta),
    Usage(ContainerUsage),
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct BatchTask {
    key: u64,
    plan_mem: Option<Bytes>,
    plan_cpu: Option<f64>,
    end: Option<Time>,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Instance {
    key: TaskKey,
    job: JobId,
    task: u64,
    start: Time,
    end: Option<Time>,
    /// Its status says it is over (terminated, failed, cancelled, interrupted).
    over: bool,
    cpu_avg: Option<f64>,
    mem_avg: Option<Bytes>,
    mem_max: Option<Bytes>,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Meta {
    key: TaskKey,
    job: JobId,
    time: Time,
    stopped: bool,
    request: Bytes,
    cpus: f64,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ContainerUsage {
    key: TaskKey,
    time: Time,
    /// Percent of the container's mem_size; `None` when the trace marks it invalid.
    percent: Option<f64>,
}

type Parse = fn(&CsvRow, &TraceOptions) -> Result<Option<Timed<Row>>, String>;

fn table(
    files: Vec<PathBuf>,
    opts: &TraceOptions,
    counter: &Arc<BadRowCounter>,
    parse: Parse,
    machine_column: Option<usize>,
) -> Table<Row> {
    let o = opts.clone();
    let make: Make<Row> = Box::new(move |c: &Arc<BadRowCounter>| {
        let (o, c) = (o.clone(), c.clone());
        // The shared set is locked only for a machine new to this table.
        let mut seen = std::collections::HashSet::new();
        parsed(CsvTable::headerless(files.clone()), o.skip_bad_rows, &c.clone(), move |r, out| {
            out.extend(parse(r, &o)?);
            let machine = machine_column.and_then(|i| r.fields.get(i)).filter(|m| !m.is_empty());
            if let Some(m) = machine {
                let id = ids::hash("alibaba-machine", &[Part::Text(m)]);
                if seen.insert(id) {
                    c.record_machine(id);
                }
            }
            Ok(())
        })
    });
    let rows = sorted(make, counter, opts.sort_budget(), opts.spill_dir.clone());
    reorder(rows, opts.reorder_window, counter)
}

fn name(r: &CsvRow, i: usize, what: &str) -> Result<String, String> {
    required(what, r.at(i).string(what))
}

fn time(r: &CsvRow, i: usize, what: &str, opts: &TraceOptions) -> Result<Option<Time>, String> {
    Ok(r.at(i).f64(what)?.map(|s| opts.time_us(secs_to_us(s))))
}

/// A normalized value in [0, 100], where -1 and 101 mean "invalid".
fn normalized(f: Field<'_>, what: &str) -> Result<Option<f64>, String> {
    match f.signed_f64(what)? {
        Some(v) if v == -1.0 || v == 101.0 => Ok(None),
        Some(v) if !(0.0..=100.0).contains(&v) => Err(format!("{what}: {v} is not in 0..=100")),
        v => Ok(v),
    }
}

fn mem(r: &CsvRow, i: usize, what: &str, opts: &TraceOptions) -> Result<Option<Bytes>, String> {
    Ok(normalized(r.at(i), what)?.map(|v| opts.bytes(v, 100.0)))
}

fn task_of(job: &str, task: &str) -> u64 {
    ids::hash("alibaba-task", &[Part::Text(job), Part::Text(task)])
}

fn parse_task(r: &CsvRow, opts: &TraceOptions) -> Result<Option<Timed<Row>>, String> {
    r.expect_columns(&[9], "the 2018 batch_task schema")?;
    let task = name(r, 0, "task_name")?;
    let job = name(r, 2, "job_name")?;
    let start = time(r, 5, "start_time", opts)?.unwrap_or(Time::ZERO);
    let end = time(r, 6, "end_time", opts)?.filter(|&e| e > Time::ZERO);
    let plan_cpu = r.at(7).f64("plan_cpu")?.map(|c| c / 100.0);
    let plan_mem = mem(r, 8, "plan_mem", opts)?;
    Ok(Some(Timed {
        at: start,
        row: Row::Task(BatchTask { key: task_of(&job, &task), plan_mem, plan_cpu, end }),
    }))
}

fn parse_instance(r: &CsvRow, opts: &TraceOptions) -> Result<Option<Timed<Row>>, String> {
    r.expect_columns(&[14], "the 2018 batch_instance schema")?;
    let instance = name(r, 0, "instance_name")?;
    let task = name(r, 1, "task_name")?;
    let job = name(r, 2, "job_name")?;
    let start = time(r, 5, "start_time", opts)?.unwrap_or(Time::ZERO);
    let end = time(r, 6, "end_time", opts)?.filter(|&e| e > Time::ZERO);
    let status = r.at(4).string("status")?.unwrap_or_default();
    let over = OVER.iter().any(|s| status.eq_ignore_ascii_case(s));
    let seq = r.at(8).u64("seq_no")?.unwrap_or(0);
    let cpu_avg = r.at(10).f64("cpu_avg")?.map(|c| c / 100.0);
    let mem_avg = mem(r, 12, "mem_avg", opts)?;
    let mem_max = mem(r, 13, "mem_max", opts)?;
    if start == Time::ZERO && end.is_none() {
        return Ok(None);
    }
    let key = ids::task(
        "alibaba-instance",
        &[Part::Text(&job), Part::Text(&task), Part::Text(&instance), Part::Num(seq)],
    );
    Ok(Some(Timed {
        at: start,
        row: Row::Instance(Instance {
            key,
            job: ids::job("alibaba-job", &[Part::Text(&job)]),
            task: task_of(&job, &task),
            start,
            end,
            over,
            cpu_avg,
            mem_avg,
            mem_max,
        }),
    }))
}

fn parse_meta(r: &CsvRow, opts: &TraceOptions) -> Result<Option<Timed<Row>>, String> {
    r.expect_columns(&[8], "the 2018 container_meta schema")?;
    let id = name(r, 0, "container_id")?;
    let at = time(r, 2, "time_stamp", opts)?.unwrap_or(Time::ZERO);
    let app = name(r, 3, "app_du")?;
    let status = r.at(4).string("status")?.unwrap_or_default();
    let cpus = r.at(5).f64("cpu_request")?.map_or(0.0, |c| c / 100.0);
    let request = mem(r, 7, "mem_size", opts)?.unwrap_or(0);
    Ok(Some(Timed {
        at,
        row: Row::Meta(Meta {
            key: ids::task("alibaba-container", &[Part::Text(&id)]),
            job: ids::job("alibaba-app", &[Part::Text(&app)]),
            time: at,
            stopped: status.eq_ignore_ascii_case("stopped"),
            request,
            cpus,
        }),
    }))
}

fn parse_usage(r: &CsvRow, opts: &TraceOptions) -> Result<Option<Timed<Row>>, String> {
    r.expect_columns(&[11], "the 2018 container_usage schema")?;
    let id = name(r, 0, "container_id")?;
    let at = required("time_stamp", time(r, 2, "time_stamp", opts))?;
    let percent = normalized(r.at(4), "mem_util_percent")?;
    Ok(Some(Timed {
        at,
        row: Row::Usage(ContainerUsage {
            key: ids::task("alibaba-container", &[Part::Text(&id)]),
            time: at,
            percent,
        }),
    }))
}

#[derive(Debug)]
struct TaskInfo {
    plan_mem: Option<Bytes>,
    plan_cpu: Option<f64>,
    expires: Option<Time>,
}

#[derive(Debug)]
struct Container {
    submit: Time,
    request: Bytes,
}

#[derive(Debug)]
struct Alibaba {
    tasks: HashMap<u64, TaskInfo>,
    /// Batch tasks by expiry; ends are not in time order, hence a heap.
    expiry: BinaryHeap<Reverse<(Time, u64)>>,
    containers: HashMap<TaskKey, Container>,
    forget_after: Duration,
    flat_containers: bool,
    counter: Arc<BadRowCounter>,
}

impl Alibaba {
    fn expire(&mut self, now: Time) {
        while let Some(&Reverse((when, key))) = self.expiry.peek() {
            if when >= now {
                break;
            }
            self.expiry.pop();
            // Only if no later row of the same task pushed it back.
            if self.tasks.get(&key).is_some_and(|t| t.expires == Some(when)) {
                self.tasks.remove(&key);
            }
        }
    }

    fn instance(&mut self, at: Time, i: Instance) -> WorkloadEvent {
        let task = self.tasks.get(&i.task);
        if task.is_none() {
            self.counter.record_unmatched();
        }
        let request = task.and_then(|t| t.plan_mem).or(i.mem_max).or(i.mem_avg).unwrap_or(0);
        let cpus = task.and_then(|t| t.plan_cpu).or(i.cpu_avg).unwrap_or(0.0);
        let held = i.mem_avg.or(i.mem_max).unwrap_or(request);
        WorkloadEvent::Submit(TaskSpec {
            key: i.key,
            job: i.job,
            submit: at,
            class: Class::BestEffort,
            priority: 0,
            request,
            cpus,
            work: i.end.filter(|&e| e >= i.start).map(|e| e - i.start),
            profile: MemProfile::flat(held),
            weight: 1,
            pauses: Vec::new(),
        })
    }

    fn meta(&mut self, at: Time, m: Meta, out: &mut VecDeque<WorkloadEvent>) {
        match self.containers.get(&m.key) {
            Some(c) if m.stopped => {
                let work = m.time - c.submit;
                self.containers.remove(&m.key);
                out.push_back(WorkloadEvent::Finish { task: m.key, at, work });
            }
            Some(_) => {}
            None if m.stopped => self.counter.record_unmatched(),
            None => {
                self.containers.insert(m.key, Container { submit: m.time, request: m.request });
                let profile = if self.flat_containers {
                    MemProfile::flat(m.request)
                } else {
                    MemProfile::default()
                };
                out.push_back(WorkloadEvent::Submit(TaskSpec {
                    key: m.key,
                    job: m.job,
                    submit: at,
                    class: Class::Production,
                    priority: 9,
                    request: m.request,
                    cpus: m.cpus,
                    work: None,
                    profile,
                    weight: 1,
                    pauses: Vec::new(),
                }));
            }
        }
    }
}

impl Replay for Alibaba {
    type Row = Row;

    fn apply(&mut self, at: Time, row: Row, out: &mut VecDeque<WorkloadEvent>) {
        self.expire(at);
        match row {
            Row::Task(t) => {
                let expires = t.end.map(|e| e.max(at) + self.forget_after);
                if let Some(when) = expires {
                    self.expiry.push(Reverse((when, t.key)));
                }
                self.tasks.insert(
                    t.key,
                    TaskInfo { plan_mem: t.plan_mem, plan_cpu: t.plan_cpu, expires },
                );
            }
            Row::Instance(i) => {
                // Over, but with no end to run to: it dies where it began,
                // rather than hold its memory to the end of the replay.
                let dies = i.over && i.end.filter(|&e| e >= i.start).is_none();
                let key = i.key;
                let ev = self.instance(at, i);
                out.push_back(ev);
                if dies {
                    out.push_back(WorkloadEvent::Death { task: key, at });
                }
            }
            Row::Meta(m) => self.meta(at, m, out),
            Row::Usage(u) => match self.containers.get(&u.key) {
                None => self.counter.record_unmatched(),
                Some(c) => {
                    if let Some(p) = u.percent {
                        out.push_back(WorkloadEvent::Usage {
                            task: u.key,
                            at,
                            offset: u.time - c.submit,
                            mem: super::fields::to_bytes(p / 100.0 * c.request as f64),
                        });
                    }
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::csvrows::Fields;

    fn row(text: &str) -> CsvRow {
        CsvRow {
            path: Path::new("t.csv").into(),
            line: 1,
            fields: Fields::split(text).expect("fields"),
            header: None,
        }
    }

    fn opts() -> TraceOptions {
        TraceOptions { memory_scale: 10_000, ..TraceOptions::default() }
    }

    #[test]
    fn an_instance_takes_its_tasks_request_and_runs_its_span() {
        let c = Arc::new(BadRowCounter::default());
        let mut a = Alibaba {
            tasks: HashMap::new(),
            expiry: BinaryHeap::new(),
            containers: HashMap::new(),
            forget_after: Duration::from_secs(60),
            flat_containers: true,
            counter: c.clone(),
        };
        let mut out = VecDeque::new();
        for line in [
            "M1,2,j_1,1,Terminated,100,200,50,1.5",
            "ins_1,M1,j_1,1,Terminated,110,170,m_1,1,1,40,60,0.5,0.9",
        ] {
            let t = if line.starts_with("ins") {
                parse_instance(&row(line), &opts())
            } else {
                parse_task(&row(line), &opts())
            };
            let t = t.expect("row").expect("timed");
            a.apply(t.at, t.row, &mut out);
        }
        let Some(WorkloadEvent::Submit(s)) = out.pop_front() else { panic!("no submit") };
        assert_eq!((s.class, s.request, s.cpus), (Class::BestEffort, 150, 0.5));
        assert_eq!(s.work, Some(Duration::from_secs(60)));
        assert_eq!(s.profile.peak(), 50);
        assert_eq!(c.unmatched_rows(), 0);
    }

    #[test]
    fn an_instance_over_without_an_end_dies_where_it_began() {
        let c = Arc::new(BadRowCounter::default());
        let mut a = Alibaba {
            tasks: HashMap::new(),
            expiry: BinaryHeap::new(),
            containers: HashMap::new(),
            forget_after: Duration::from_secs(60),
            flat_containers: true,
            counter: c.clone(),
        };
        let mut out = VecDeque::new();
        for line in [
            "ins_1,M1,j_1,1,Failed,110,0,m_1,1,1,40,60,0.5,0.9",
            "ins_2,M1,j_1,1,Terminated,120,100,m_1,1,1,40,60,0.5,0.9",
            "ins_3,M1,j_1,1,Running,130,0,m_1,1,1,40,60,0.5,0.9",
        ] {
            let t = parse_instance(&row(line), &opts()).expect("row").expect("timed");
            a.apply(t.at, t.row, &mut out);
        }
        let kinds: Vec<(&str, u64)> = out
            .iter()
            .map(|e| match e {
                WorkloadEvent::Submit(s) => ("submit", s.submit.0 / 1_000_000),
                WorkloadEvent::Death { at, .. } => ("death", at.0 / 1_000_000),
                _ => ("other", 0),
            })
            .collect();
        assert_eq!(
            kinds,
            [("submit", 110), ("death", 110), ("submit", 120), ("death", 120), ("submit", 130)],
            "a running one with no end runs on"
        );
    }

    #[test]
    fn invalid_markers_are_no_value_and_out_of_range_is_bad() {
        assert_eq!(normalized(Field::text("-1"), "m"), Ok(None));
        assert_eq!(normalized(Field::text("101"), "m"), Ok(None));
        assert_eq!(normalized(Field::text("50"), "m"), Ok(Some(50.0)));
        assert!(normalized(Field::text("-2"), "m").is_err());
        assert!(normalized(Field::text("250"), "m").is_err());
    }
}
