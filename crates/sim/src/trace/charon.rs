//! Charon-SLS: the input of the Charon paper's simulator (000 §5.5), built on
//! YARN's Scheduler Load Simulator, which reads job descriptions with their
//! containers. The paper gives no schema; this is overbook's, in SLS's style
//! (dotted keys), also in `tests/fixtures/traces/charon-sls/README.md`.
//!
//! A file is a JSON array or JSON lines (gzip or not; in a directory, files
//! whose name contains `json`), of values that are each a **container** or a
//! **job** holding containers:
//!
//! ```json
//! {"job.id": "job_1", "job.start.ms": 0, "job.tasks": [
//!   {"container.id": "c1", "container.exetype": "best-effort",
//!    "container.start.ms": 1000, "container.duration.ms": 60000,
//!    "container.memory": 2048, "container.vcores": 1,
//!    "container.musage": {"times": [0, 30000], "mems": [512, 1900]}}
//! ]}
//! ```
//!
//! Container fields (a dotted key may also be written nested:
//! `"container": {"exetype": ...}`; numbers may be strings):
//!
//! | key | | meaning |
//! |---|---|---|
//! | `container.exetype` | required | `production` (or YARN's `guaranteed`), `best-effort` (or `opportunistic`), `critical`; any case, `-`/`_` optional |
//! | `container.start.ms` | required unless the job has `job.start.ms` | submission, ms since the trace began |
//! | `container.duration.ms` or `container.end.ms` | one required | run time on an unloaded node, or its end (ms since the trace began) |
//! | `container.memory` | required unless `container.musage` is given (then its peak) | request, MiB |
//! | `container.musage` | optional | `{"times": [ms into the run], "mems": [MiB]}`, equal lengths; without it the container holds its request |
//! | `container.vcores` | optional, 1 | cores |
//! | `container.priority` | optional | 0..=255; default 0 best-effort, 9 production, 11 critical (Google 2011's bands) |
//! | `container.id` | optional | text or number, unique within its job; without it containers are numbered in file order |
//! | `job.id` | optional | text or number; on the container or its job; without it a container is its own job |
//!
//! A job's `job.start.ms` is its containers' default start. Each container is
//! a `Submit` carrying its whole profile and work, at its start; values
//! should be in start order (containers of one job may start later than the
//! next job: the reorder window puts them in place).

use super::counter::BadRowCounter;
use super::fields::{required, to_bytes, Field};
use super::files::TraceFile;
use super::ids::{self, Part};
use super::jsonrows::{lookup, JsonRow, JsonTable};
use super::merge::{parsed, reorder, stream, Replay, Timed};
use super::sort::{sorted, Make, Spill};
use super::TraceOptions;
use crate::workload::{MemProfile, TaskSpec, TraceError, WorkloadEvent, WorkloadStream};
use overbook_core::{Bytes, Class, JobId, Time};
use serde_json::Value;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const MIB: f64 = 1024.0 * 1024.0;

pub(crate) fn open(
    root: &Path,
    files: &[TraceFile],
    opts: &TraceOptions,
    counter: &Arc<BadRowCounter>,
) -> Result<WorkloadStream, TraceError> {
    let mut paths: Vec<_> = files
        .iter()
        .filter(|f| {
            f.explicit
                || f.path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().to_ascii_lowercase().contains("json"))
        })
        .map(|f| f.path.clone())
        .collect();
    if paths.is_empty() {
        return Err(TraceError::BadFile {
            path: root.to_path_buf(),
            problem: "no JSON files here (charon-sls reads files whose name contains json)".into(),
        });
    }
    paths.sort();
    let o = opts.clone();
    let make: Make<TaskSpec> = Box::new(move |c: &Arc<BadRowCounter>| {
        let o = o.clone();
        let mut seq = 0u64;
        parsed(JsonTable::new(paths.clone()), o.skip_bad_rows, c, move |r: &JsonRow, out| {
            parse(r, &o, &mut seq, out)
        })
    });
    let rows = sorted(make, counter, opts.sort_budget(), opts.spill_dir.clone());
    let table = reorder(rows, opts.reorder_window, counter);
    Ok(stream(vec![table], Charon, opts.window_from.map(|from| (from, counter.clone()))))
}

impl Spill for TaskSpec {
    fn tie(&self) -> u64 {
        self.key.0
    }

    fn heap_bytes(&self) -> usize {
        self.profile.heap_bytes()
            + self.pauses.len() * std::mem::size_of::<crate::workload::Pause>()
    }
}

/// Containers carry everything: each is submitted as it comes.
#[derive(Debug)]
struct Charon;

impl Replay for Charon {
    type Row = TaskSpec;
    fn apply(&mut self, at: Time, mut spec: TaskSpec, out: &mut VecDeque<WorkloadEvent>) {
        spec.submit = at;
        out.push_back(WorkloadEvent::Submit(spec));
    }
}

/// The job a container inherits from: its id and default start.
struct Job<'a> {
    id: Option<String>,
    start: Field<'a>,
}

fn parse(
    r: &JsonRow,
    opts: &TraceOptions,
    seq: &mut u64,
    out: &mut Vec<Timed<TaskSpec>>,
) -> Result<(), String> {
    if !r.value.is_object() {
        return Err("expected an object (a container or a job)".into());
    }
    let Some(tasks) = lookup(&r.value, "job.tasks") else {
        let job = Job { id: None, start: Field::Missing };
        out.push(container(&r.value, &job, opts, seq)?);
        return Ok(());
    };
    let job = Job { id: r.named("job.id").string("job.id")?, start: r.named("job.start.ms") };
    let Value::Array(tasks) = tasks else {
        return Err("job.tasks: expected an array of containers".into());
    };
    for (i, c) in tasks.iter().enumerate() {
        let spec = container(c, &job, opts, seq).map_err(|e| format!("job.tasks[{i}]: {e}"))?;
        out.push(spec);
    }
    Ok(())
}

fn field<'a>(c: &'a Value, name: &str) -> Field<'a> {
    Field::json(lookup(c, name))
}

fn ms(f: Field<'_>, what: &str) -> Result<Option<Duration>, String> {
    Ok(f.f64(what)?.map(|v| Duration::from_micros(super::fields::secs_to_us(v / 1e3))))
}

fn container(
    c: &Value,
    job: &Job<'_>,
    opts: &TraceOptions,
    seq: &mut u64,
) -> Result<Timed<TaskSpec>, String> {
    if !c.is_object() {
        return Err("expected a container object".into());
    }
    let exetype =
        required("container.exetype", field(c, "container.exetype").string("container.exetype"))?;
    let class = class_of(&exetype)?;
    let start = match ms(field(c, "container.start.ms"), "container.start.ms")? {
        Some(s) => s,
        None => required("container.start.ms", ms(job.start, "job.start.ms"))?,
    };
    let work = match ms(field(c, "container.duration.ms"), "container.duration.ms")? {
        Some(d) => d,
        None => {
            let end = ms(field(c, "container.end.ms"), "container.end.ms")?
                .ok_or("container.duration.ms and container.end.ms are both missing")?;
            end.checked_sub(start).ok_or_else(|| {
                format!(
                    "container.end.ms {} is before container.start.ms {}",
                    end.as_millis(),
                    start.as_millis()
                )
            })?
        }
    };
    let musage = musage(c)?;
    let request = match field(c, "container.memory").f64("container.memory")? {
        Some(m) => to_bytes(m * MIB),
        None => musage
            .as_ref()
            .map(MemProfile::peak)
            .ok_or("container.memory and container.musage are both missing")?,
    };
    let priority = match field(c, "container.priority").u64("container.priority")? {
        Some(p) => {
            u8::try_from(p).map_err(|_| format!("container.priority: {p} is not in 0..=255"))?
        }
        None => match class {
            Class::BestEffort => 0,
            Class::Production => 9,
            Class::Critical => 11,
        },
    };
    let cpus = field(c, "container.vcores").f64("container.vcores")?.unwrap_or(1.0);
    let job_id = match field(c, "job.id").string("job.id")? {
        Some(id) => Some(id),
        None => job.id.clone(),
    };
    let key = match field(c, "container.id").string("container.id")? {
        Some(id) => {
            ids::task("charon", &[Part::Text(job_id.as_deref().unwrap_or("")), Part::Text(&id)])
        }
        None => {
            *seq += 1;
            ids::task("charon-seq", &[Part::Num(*seq)])
        }
    };
    let job = match job_id {
        Some(id) => {
            id.parse::<u64>().map_or_else(|_| ids::job("charon-job", &[Part::Text(&id)]), JobId)
        }
        None => JobId(key.0),
    };
    let at = opts.time_us(u64::try_from(start.as_micros()).unwrap_or(u64::MAX));
    Ok(Timed {
        at,
        row: TaskSpec {
            key,
            job,
            submit: at,
            class,
            priority,
            request,
            cpus,
            work: Some(work),
            profile: musage.unwrap_or_else(|| MemProfile::flat(request)),
            weight: 1,
            pauses: Vec::new(),
        },
    })
}

/// The paper's names and YARN's execution types, in any case and spelling
/// of the separator.
fn class_of(name: &str) -> Result<Class, String> {
    let plain: String = name
        .chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .flat_map(char::to_lowercase)
        .collect();
    match plain.as_str() {
        "production" | "guaranteed" => Ok(Class::Production),
        "besteffort" | "opportunistic" => Ok(Class::BestEffort),
        "critical" => Ok(Class::Critical),
        _ => Err(format!("container.exetype: {name:?} is not production, best-effort or critical")),
    }
}

fn musage(c: &Value) -> Result<Option<MemProfile>, String> {
    let Some(m) = lookup(c, "container.musage").filter(|m| !m.is_null()) else {
        return Ok(None);
    };
    let list = |name: &str| match lookup(m, name) {
        Some(Value::Array(a)) => Ok(a),
        _ => Err(format!("container.musage.{name}: expected an array")),
    };
    let (times, mems) = (list("times")?, list("mems")?);
    if times.len() != mems.len() {
        return Err(format!("container.musage: {} times but {} mems", times.len(), mems.len()));
    }
    let mut points: Vec<(Duration, Bytes)> = Vec::with_capacity(times.len());
    for (i, (t, m)) in times.iter().zip(mems).enumerate() {
        let what = format!("container.musage.times[{i}]");
        let t = required(&what, ms(Field::json(Some(t)), &what))?;
        let what = format!("container.musage.mems[{i}]");
        let m = required(&what, Field::json(Some(m)).f64(&what))?;
        points.push((t, to_bytes(m * MIB)));
    }
    Ok(Some(MemProfile::from_points(points)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn specs(v: Value) -> Result<Vec<TaskSpec>, String> {
        let r = JsonRow { path: Path::new("c.json").into(), line: 1, value: v };
        let mut out = Vec::new();
        parse(&r, &TraceOptions::default(), &mut 0, &mut out)?;
        Ok(out.into_iter().map(|t| t.row).collect())
    }

    #[test]
    fn a_job_gives_its_containers_its_id_and_start() {
        let got = specs(json!({"job.id": 7, "job.start.ms": 2000, "job.tasks": [
            {"container.exetype": "OPPORTUNISTIC", "container.duration.ms": 500,
             "container.musage": {"times": [0, 100], "mems": [1, 3]}},
            {"container": {"exetype": "critical", "end": {"ms": 9000}, "memory": 2}}
        ]}))
        .expect("job");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].job, JobId(7));
        assert_eq!(got[0].submit, Time::from_secs(2));
        assert_eq!((got[0].class, got[0].priority), (Class::BestEffort, 0));
        assert_eq!(got[0].request, 3 << 20);
        assert_eq!(got[0].work, Some(Duration::from_millis(500)));
        assert_eq!(got[1].class, Class::Critical);
        assert_eq!(got[1].work, Some(Duration::from_secs(7)));
        assert_eq!(got[1].profile, MemProfile::flat(2 << 20));
    }

    #[test]
    fn problems_are_named() {
        let e = specs(json!({"container.exetype": "gold", "container.start.ms": 0,
            "container.duration.ms": 1, "container.memory": 1}))
        .expect_err("bad class");
        assert!(e.contains("\"gold\" is not production"), "{e}");
        let e = specs(json!({"job.tasks": [{"container.exetype": "production",
            "container.start.ms": 5, "container.end.ms": 1, "container.memory": 1}]}))
        .expect_err("end before start");
        assert!(e.starts_with("job.tasks[0]: container.end.ms 1 is before"), "{e}");
        let e = specs(json!({"container.exetype": "production", "container.start.ms": 0,
            "container.duration.ms": 1, "container.musage": {"times": [0], "mems": []}}))
        .expect_err("length mismatch");
        assert_eq!(e, "container.musage: 1 times but 0 mems");
        assert!(specs(json!([1, 2])).is_err());
    }
}
