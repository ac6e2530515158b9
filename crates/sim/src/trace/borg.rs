//! The task life cycle both Google traces record (Borg's): a task is
//! submitted, scheduled, and then finishes or dies (evicted, failed, killed,
//! lost), after which it may be submitted and scheduled again. Usage is
//! sampled while it runs.
//!
//! Events:
//! * the first SUBMIT of a task is a `Submit` (a resubmission after a death
//!   is the same task, so nothing);
//! * a usage sample starting at `s` is a `Usage` at offset `s` − the task's
//!   first SCHEDULE (zero if it has none yet);
//! * FINISH is a `Finish` whose work is the last run: FINISH − the last
//!   SCHEDULE (zero if it never ran);
//! * deaths and updates emit nothing: a task that never finishes in the
//!   trace is left to the engine.
//!
//! State is kept only for live tasks: a finished task is forgotten at once,
//! a dead one after `forget_after` without a new SCHEDULE or SUBMIT (its
//! rows after that are unmatched; a SUBMIT is then a new `Submit`).

use super::counter::BadRowCounter;
use super::merge::Replay;
use crate::workload::{MemProfile, TaskKey, TaskSpec, WorkloadEvent};
use overbook_core::{Bytes, Class, JobId, Time};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// A task event row, reduced to what the life cycle needs.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TaskEvent {
    /// The event's own time (replay may put it later, see `merge`).
    pub time: Time,
    pub key: TaskKey,
    pub job: JobId,
    pub kind: Kind,
}

#[derive(Clone, Debug, PartialEq)]
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
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Submitted {
    pub class: Class,
    pub priority: u8,
    pub request: Bytes,
    pub cpus: f64,
}

/// A usage row: the task held `mem` during a window starting at `start`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Usage {
    pub start: Time,
    pub key: TaskKey,
    pub mem: Bytes,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Row {
    Event(TaskEvent),
    Usage(Usage),
}

#[derive(Debug, Default)]
struct Task {
    first_schedule: Option<Time>,
    last_schedule: Option<Time>,
    /// When it died (replay time), while it has not run again.
    dead_since: Option<Time>,
}

#[derive(Debug)]
pub(crate) struct Borg {
    tasks: HashMap<TaskKey, Task>,
    /// Deaths in replay-time order, for forgetting.
    deaths: VecDeque<(Time, TaskKey)>,
    forget_after: Duration,
    /// No usage table: each task holds its request for its whole run.
    flat_profiles: bool,
    counter: Arc<BadRowCounter>,
}

impl Borg {
    pub fn new(forget_after: Duration, flat_profiles: bool, counter: &Arc<BadRowCounter>) -> Borg {
        Borg {
            tasks: HashMap::new(),
            deaths: VecDeque::new(),
            forget_after,
            flat_profiles,
            counter: counter.clone(),
        }
    }

    fn forget_dead(&mut self, now: Time) {
        while let Some(&(died, key)) = self.deaths.front() {
            if died + self.forget_after >= now {
                break;
            }
            self.deaths.pop_front();
            // Only if it is still that death: it may have run again since.
            if self.tasks.get(&key).is_some_and(|t| t.dead_since == Some(died)) {
                self.tasks.remove(&key);
            }
        }
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
            Kind::Other => {}
            _ if !known => self.counter.record_unmatched(),
            Kind::Submit(_) => {
                if let Some(t) = self.tasks.get_mut(&ev.key) {
                    t.dead_since = None;
                }
            }
            Kind::Schedule => {
                if let Some(t) = self.tasks.get_mut(&ev.key) {
                    t.first_schedule.get_or_insert(ev.time);
                    t.last_schedule = Some(ev.time);
                    t.dead_since = None;
                }
            }
            Kind::Finish => {
                if let Some(t) = self.tasks.remove(&ev.key) {
                    let work = t.last_schedule.map_or(Duration::ZERO, |s| ev.time - s);
                    out.push_back(WorkloadEvent::Finish { task: ev.key, at, work });
                }
            }
            Kind::Death => {
                if let Some(t) = self.tasks.get_mut(&ev.key) {
                    t.dead_since = Some(at);
                    self.deaths.push_back((at, ev.key));
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
        self.forget_dead(at);
        match row {
            Row::Event(ev) => self.event(at, ev, out),
            Row::Usage(u) => self.usage(at, u, out),
        }
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

    fn replay(rows: Vec<Row>, forget_after: u64) -> (Vec<WorkloadEvent>, Arc<BadRowCounter>) {
        let c = Arc::new(BadRowCounter::default());
        let mut b = Borg::new(Duration::from_secs(forget_after), false, &c);
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
    fn an_evicted_task_is_submitted_once_and_its_work_is_the_last_run() {
        let (evs, c) = replay(
            vec![
                ev(0, submit()),
                ev(10, Kind::Schedule),
                usage(20),
                ev(30, Kind::Death),
                ev(31, submit()),
                ev(40, Kind::Schedule),
                usage(50),
                ev(100, Kind::Finish),
                usage(110),
            ],
            3600,
        );
        assert_eq!(evs.len(), 4, "{evs:?}");
        assert!(matches!(evs[0], WorkloadEvent::Submit(_)));
        assert!(
            matches!(evs[1], WorkloadEvent::Usage { offset, .. } if offset == Duration::from_secs(10))
        );
        assert!(
            matches!(evs[2], WorkloadEvent::Usage { offset, .. } if offset == Duration::from_secs(40))
        );
        assert!(
            matches!(evs[3], WorkloadEvent::Finish { work, .. } if work == Duration::from_secs(60))
        );
        assert_eq!(c.unmatched_rows(), 1, "usage after the finish");
    }

    #[test]
    fn a_task_dead_for_long_is_forgotten() {
        let (evs, c) = replay(
            vec![
                ev(0, submit()),
                ev(10, Kind::Schedule),
                ev(20, Kind::Death),
                usage(100),
                ev(200, Kind::Schedule),
            ],
            60,
        );
        assert_eq!(evs.len(), 1, "{evs:?}");
        assert_eq!(c.unmatched_rows(), 2, "the usage and schedule after forgetting");
    }
}
