//! The task life cycle both Google traces record (Borg's): a task is
//! submitted, scheduled, and then finishes or dies (evicted, failed, killed,
//! lost), after which it may be submitted and scheduled again. Usage is
//! sampled while it runs.
//!
//! Events:
//! * a SUBMIT of a task not alive is a `Submit` (the first, or a
//!   resubmission after a death: a new attempt); a SUBMIT of a live task
//!   (an update of a pending one) is nothing;
//! * a usage sample starting at `s` is a `Usage` at offset `s` − the
//!   attempt's first SCHEDULE (zero if it has none yet);
//! * FINISH is a `Finish` whose work is the last run: FINISH − the last
//!   SCHEDULE (zero if it never ran);
//! * EVICT, FAIL, KILL and LOST are a `Death`: the attempt ends wherever it
//!   is, its work lost;
//! * updates emit nothing.
//!
//! State is kept only for live attempts: a finished or dead one is
//! forgotten at once (its later rows, but a SUBMIT, are unmatched).

use super::counter::BadRowCounter;
use super::merge::Replay;
use crate::workload::{MemProfile, TaskKey, TaskSpec, WorkloadEvent};
use overbook_core::{Bytes, Class, JobId, Time};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// A task event row, reduced to what the life cycle needs.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct TaskEvent {
    /// The event's own time (replay may put it later, see `merge`).
    pub time: Time,
    pub key: TaskKey,
    pub job: JobId,
    pub kind: Kind,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Kind {
    Submit(Submitted),
    Schedule,
    Finish,
    /// Evicted, failed, killed or lost.
    Death,
    /// Anything else (updates, queueing): nothing to do.
    Other,
}

/// What a SUBMIT row tells of the task.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Submitted {
    pub class: Class,
    pub priority: u8,
    pub request: Bytes,
    pub cpus: f64,
}

/// A usage row: the task held `mem` during a window starting at `start`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Usage {
    pub start: Time,
    pub key: TaskKey,
    pub mem: Bytes,
}

impl super::sort::Spill for Row {
    fn tie(&self) -> u64 {
        match self {
            Row::Event(e) => e.key.0,
            Row::Usage(u) => u.key.0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Row {
    Event(TaskEvent),
    Usage(Usage),
}

#[derive(Debug, Default)]
struct Task {
    first_schedule: Option<Time>,
    last_schedule: Option<Time>,
}

#[derive(Debug)]
pub(crate) struct Borg {
    tasks: HashMap<TaskKey, Task>,
    /// No usage table: each task holds its request for its whole run.
    flat_profiles: bool,
    counter: Arc<BadRowCounter>,
}

impl Borg {
    pub fn new(flat_profiles: bool, counter: &Arc<BadRowCounter>) -> Borg {
        Borg { tasks: HashMap::new(), flat_profiles, counter: counter.clone() }
    }

    fn event(&mut self, at: Time, ev: TaskEvent, out: &mut VecDeque<WorkloadEvent>) {
        let known = self.tasks.contains_key(&ev.key);
        match ev.kind {
            Kind::Submit(s) if !known => {
                self.tasks.insert(ev.key, Task::default());
                let profile = if self.flat_profiles {
                    MemProfile::flat(s.request)
                } else {
                    MemProfile::default()
                };
                out.push_back(WorkloadEvent::Submit(TaskSpec {
                    key: ev.key,
                    job: ev.job,
                    submit: at,
                    class: s.class,
                    priority: s.priority,
                    request: s.request,
                    cpus: s.cpus,
                    work: None,
                    profile,
                    weight: 1,
                    pauses: Vec::new(),
                }));
            }
            Kind::Other | Kind::Submit(_) => {}
            _ if !known => self.counter.record_unmatched(),
            Kind::Schedule => {
                if let Some(t) = self.tasks.get_mut(&ev.key) {
                    t.first_schedule.get_or_insert(ev.time);
                    t.last_schedule = Some(ev.time);
                }
            }
            Kind::Finish => {
                if let Some(t) = self.tasks.remove(&ev.key) {
                    let work = t.last_schedule.map_or(Duration::ZERO, |s| ev.time - s);
                    out.push_back(WorkloadEvent::Finish { task: ev.key, at, work });
                }
            }
            Kind::Death => {
                if self.tasks.remove(&ev.key).is_some() {
                    out.push_back(WorkloadEvent::Death { task: ev.key, at });
                }
            }
        }
    }

    fn usage(&mut self, at: Time, u: Usage, out: &mut VecDeque<WorkloadEvent>) {
        let Some(t) = self.tasks.get(&u.key) else {
            self.counter.record_unmatched();
            return;
        };
        let offset = t.first_schedule.map_or(Duration::ZERO, |s| u.start - s);
        out.push_back(WorkloadEvent::Usage { task: u.key, at, offset, mem: u.mem });
    }
}

impl Replay for Borg {
    type Row = Row;

    fn apply(&mut self, at: Time, row: Row, out: &mut VecDeque<WorkloadEvent>) {
        match row {
            Row::Event(ev) => self.event(at, ev, out),
            Row::Usage(u) => self.usage(at, u, out),
        }
    }

    /// A task runs from its last SCHEDULE (its FINISH's work counts from it).
    fn started(&self, task: TaskKey, _submitted: Time) -> Option<Time> {
        self.tasks.get(&task).and_then(|t| t.last_schedule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t: u64, kind: Kind) -> Row {
        Row::Event(TaskEvent { time: Time::from_secs(t), key: TaskKey(1), job: JobId(1), kind })
    }

    fn submit() -> Kind {
        Kind::Submit(Submitted { class: Class::BestEffort, priority: 0, request: 100, cpus: 1.0 })
    }

    fn usage(t: u64) -> Row {
        Row::Usage(Usage { start: Time::from_secs(t), key: TaskKey(1), mem: 7 })
    }

    fn replay(rows: Vec<Row>) -> (Vec<WorkloadEvent>, Arc<BadRowCounter>) {
        let c = Arc::new(BadRowCounter::default());
        let mut b = Borg::new(false, &c);
        let mut out = VecDeque::new();
        for row in rows {
            let at = match &row {
                Row::Event(e) => e.time,
                Row::Usage(u) => u.start,
            };
            b.apply(at, row, &mut out);
        }
        (out.into(), c)
    }

    #[test]
    fn a_death_ends_the_attempt_and_a_resubmission_is_a_new_one() {
        let (evs, c) = replay(vec![
            ev(0, submit()),
            ev(10, Kind::Schedule),
            usage(20),
            ev(30, Kind::Death),
            usage(30),
            ev(31, submit()),
            ev(40, Kind::Schedule),
            usage(50),
            ev(100, Kind::Finish),
            usage(110),
        ]);
        assert_eq!(evs.len(), 6, "{evs:?}");
        assert!(matches!(&evs[0], WorkloadEvent::Submit(s) if s.submit == Time::ZERO));
        assert!(
            matches!(evs[1], WorkloadEvent::Usage { offset, .. } if offset == Duration::from_secs(10))
        );
        assert_eq!(evs[2], WorkloadEvent::Death { task: TaskKey(1), at: Time::from_secs(30) });
        assert!(matches!(&evs[3], WorkloadEvent::Submit(s) if s.submit == Time::from_secs(31)));
        assert!(
            matches!(evs[4], WorkloadEvent::Usage { offset, .. } if offset == Duration::from_secs(10)),
            "offsets from the new attempt's schedule"
        );
        assert!(
            matches!(evs[5], WorkloadEvent::Finish { work, .. } if work == Duration::from_secs(60))
        );
        assert_eq!(c.unmatched_rows(), 2, "usage after the death and after the finish");
    }

    #[test]
    fn a_pending_task_killed_dies_and_rows_after_are_unmatched() {
        let (evs, c) = replay(vec![
            ev(0, submit()),
            ev(5, submit()),
            ev(20, Kind::Death),
            ev(25, Kind::Death),
            ev(200, Kind::Schedule),
        ]);
        assert_eq!(evs.len(), 2, "{evs:?}");
        assert!(matches!(evs[1], WorkloadEvent::Death { .. }));
        assert_eq!(c.unmatched_rows(), 2, "the second death and the schedule");
    }
}
