//! From raw rows to one time-ordered event stream: check each row (bad rows
//! fail or are counted), put rows that went back in time in their place,
//! merge a format's tables by time, and replay the merged rows through the
//! format's per-task state.

use super::counter::BadRowCounter;
use crate::workload::{MemProfile, TaskKey, TaskSpec, TraceError, WorkloadEvent, WorkloadStream};
use overbook_core::Bytes;
use overbook_core::Time;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Where a raw row was, for its bad-row error.
pub(crate) trait Located {
    fn path(&self) -> &Path;
    fn line(&self) -> u64;
}

/// A checked row and the time the stream replays it at.
#[derive(Debug)]
pub(crate) struct Timed<R> {
    pub at: Time,
    pub row: R,
}

/// A table of checked rows, in time order once through [`reorder`].
pub(crate) type Table<R> = Box<dyn Iterator<Item = Result<Timed<R>, TraceError>> + Send>;

/// Check raw rows with `parse`, which pushes the rows a raw row stands for
/// (none for a row the format ignores, several for a Charon job) or says
/// what is wrong with it. A wrong row fails the table or, with `skip`, is
/// counted and passed over; so is a row the raw reader itself could not read.
pub(crate) fn parsed<Raw, R, I, F>(
    raw: I,
    skip: bool,
    counter: &Arc<BadRowCounter>,
    mut parse: F,
) -> Table<R>
where
    Raw: Located,
    R: Send + 'static,
    I: Iterator<Item = Result<Raw, TraceError>> + Send + 'static,
    F: FnMut(&Raw, &mut Vec<Timed<R>>) -> Result<(), String> + Send + 'static,
{
    let counter = counter.clone();
    let mut pending: VecDeque<Timed<R>> = VecDeque::new();
    let mut raw = raw;
    let mut out = Vec::new();
    Box::new(std::iter::from_fn(move || loop {
        if let Some(row) = pending.pop_front() {
            return Some(Ok(row));
        }
        let next = raw.next()?;
        if matches!(next, Ok(_) | Err(TraceError::BadRow { .. })) {
            counter.record_read();
        }
        let err = match next {
            Ok(r) => {
                out.clear();
                match parse(&r, &mut out) {
                    Ok(()) => {
                        pending.extend(out.drain(..));
                        continue;
                    }
                    Err(problem) => {
                        TraceError::BadRow { path: r.path().to_path_buf(), line: r.line(), problem }
                    }
                }
            }
            Err(e) => e,
        };
        if skip && matches!(err, TraceError::BadRow { .. }) {
            counter.record_bad(&err);
            continue;
        }
        return Some(Err(err));
    }))
}

/// A row waiting in the reorder buffer; `seq` keeps rows of equal time in
/// the order they were read.
struct Waiting<R> {
    at: Time,
    seq: u64,
    row: R,
}

impl<R> PartialEq for Waiting<R> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<R> Eq for Waiting<R> {}
impl<R> PartialOrd for Waiting<R> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<R> Ord for Waiting<R> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// Put rows that went back in time by at most `window` in their place: a
/// row is given out only once a row `window` later has been read. A row
/// earlier than one already given out is replayed at that one's time (and
/// counted), so the table never goes back in time. Holds only the rows of
/// one window.
pub(crate) fn reorder<R: Send + 'static>(
    mut table: Table<R>,
    window: Duration,
    counter: &Arc<BadRowCounter>,
) -> Table<R> {
    let counter = counter.clone();
    let mut heap: BinaryHeap<Reverse<Waiting<R>>> = BinaryHeap::new();
    let (mut newest, mut given, mut seq, mut ended) = (Time::ZERO, Time::ZERO, 0u64, false);
    Box::new(std::iter::from_fn(move || {
        loop {
            let ready = heap.peek().is_some_and(|Reverse(w)| ended || w.at + window <= newest);
            if ready || ended {
                break;
            }
            match table.next() {
                None => ended = true,
                Some(Err(e)) => return Some(Err(e)),
                Some(Ok(Timed { at, row })) => {
                    let at = if at < given {
                        counter.record_late();
                        given
                    } else {
                        at
                    };
                    newest = newest.max(at);
                    heap.push(Reverse(Waiting { at, seq, row }));
                    seq += 1;
                }
            }
        }
        let Reverse(w) = heap.pop()?;
        given = w.at;
        Some(Ok(Timed { at: w.at, row: w.row }))
    }))
}

/// The per-task state of a format: turns merged rows into events.
pub(crate) trait Replay: Send {
    type Row: Send;
    /// Apply one row, replayed at `at` (never earlier than the last row's),
    /// pushing the events it causes, all at `at`.
    fn apply(&mut self, at: Time, row: Self::Row, out: &mut VecDeque<WorkloadEvent>);
    /// When `task`'s current attempt started running in the trace, if it
    /// has (a replay window's tasks enter with their remaining work). By
    /// default a task runs from its submission.
    fn started(&self, _task: TaskKey, submitted: Time) -> Option<Time> {
        Some(submitted)
    }
}

/// Merge `tables` by time, ties going to the earlier table (so a task's
/// submission, listed first, precedes its usage at the same instant), and
/// replay the rows. The stream ends after its first error.
pub(crate) fn stream<P: Replay + 'static>(
    tables: Vec<Table<P::Row>>,
    replay: P,
    window: Option<(Duration, Arc<BadRowCounter>)>,
) -> WorkloadStream {
    Box::new(Merged {
        heads: tables.into_iter().map(|t| (t, None, false)).collect(),
        replay,
        out: VecDeque::new(),
        last: Time::ZERO,
        failed: false,
        window: window.map(|(from, counter)| Window::new(from, counter)),
        scratch: VecDeque::new(),
    })
}

/// A task alive before the window, held until it starts.
struct Held {
    seq: u64,
    spec: TaskSpec,
    /// Its last usage sample before the window.
    mem: Option<Bytes>,
}

/// A replay window's state (see the module [`super`]'s Windows).
struct Window {
    from: Duration,
    /// Told where the window is, for the report.
    counter: Arc<BadRowCounter>,
    /// The window's start in trace time, once the first row is read.
    start: Option<Time>,
    /// The last row's time before the window, for its error.
    first: Time,
    last: Time,
    entered: bool,
    held: HashMap<TaskKey, Held>,
    seq: u64,
    /// Tasks that entered running: how long they had run before.
    ran: HashMap<TaskKey, Duration>,
}

impl Window {
    fn new(from: Duration, counter: Arc<BadRowCounter>) -> Window {
        Window {
            from,
            counter,
            start: None,
            first: Time::ZERO,
            last: Time::ZERO,
            entered: false,
            held: HashMap::new(),
            seq: 0,
            ran: HashMap::new(),
        }
    }

    /// Keep track of the tasks alive before the window.
    fn hold(&mut self, ev: WorkloadEvent) {
        match ev {
            WorkloadEvent::Submit(spec) => {
                self.seq += 1;
                self.held.insert(spec.key, Held { seq: self.seq, spec, mem: None });
            }
            WorkloadEvent::Usage { task, mem, .. } => {
                if let Some(h) = self.held.get_mut(&task) {
                    h.mem = Some(mem);
                }
            }
            WorkloadEvent::Finish { task, .. } | WorkloadEvent::Death { task, .. } => {
                self.held.remove(&task);
            }
        }
    }

    /// The window starts at `start`: its alive tasks enter at time zero.
    fn enter<P: Replay>(&mut self, start: Time, replay: &P, out: &mut VecDeque<WorkloadEvent>) {
        self.entered = true;
        let mut held: Vec<Held> = self.held.drain().map(|(_, h)| h).collect();
        held.sort_by_key(|h| h.seq);
        for Held { mut spec, mem, .. } in held {
            let key = spec.key;
            if let Some(began) = replay.started(key, spec.submit) {
                let ran = start.since(began);
                if spec.work.is_some_and(|w| w <= ran) {
                    continue; // over before the window
                }
                spec.work = spec.work.map(|w| w - ran);
                spec.profile = from_point(&spec.profile, ran);
                self.ran.insert(key, ran);
            }
            spec.submit = Time::ZERO;
            out.push_back(WorkloadEvent::Submit(spec));
            if let Some(mem) = mem {
                out.push_back(WorkloadEvent::Usage {
                    task: key,
                    at: Time::ZERO,
                    offset: Duration::ZERO,
                    mem,
                });
            }
        }
    }

    /// An event in the window, in window time, offsets and work of tasks
    /// that entered running counted from the window's start.
    fn shift(&mut self, ev: WorkloadEvent, start: Time) -> WorkloadEvent {
        let at = |t: Time| Time(t.0.saturating_sub(start.0));
        match ev {
            WorkloadEvent::Submit(mut spec) => {
                spec.submit = at(spec.submit);
                WorkloadEvent::Submit(spec)
            }
            WorkloadEvent::Usage { task, at: t, offset, mem } => {
                let ran = self.ran.get(&task).copied().unwrap_or_default();
                WorkloadEvent::Usage { task, at: at(t), offset: offset.saturating_sub(ran), mem }
            }
            WorkloadEvent::Finish { task, at: t, work } => {
                let ran = self.ran.remove(&task).unwrap_or_default();
                WorkloadEvent::Finish { task, at: at(t), work: work.saturating_sub(ran) }
            }
            WorkloadEvent::Death { task, at: t } => {
                self.ran.remove(&task);
                WorkloadEvent::Death { task, at: at(t) }
            }
        }
    }

    fn past_the_trace(&self) -> TraceError {
        TraceError::Window(format!(
            "workload.from (--from) {}: the window starts after the trace's last row, {} after its first",
            humantime::format_duration(self.from),
            humantime::format_duration(Duration::from_secs(self.last.since(self.first).as_secs())),
        ))
    }
}

/// `profile` from `ran` on: the sample in force then at offset zero.
fn from_point(profile: &MemProfile, ran: Duration) -> MemProfile {
    if profile.is_empty() || ran.is_zero() {
        return profile.clone();
    }
    let mut points = vec![(Duration::ZERO, profile.at(ran))];
    points.extend(profile.iter().filter(|p| p.0 > ran).map(|(o, m)| (o - ran, m)));
    MemProfile::from_points(points)
}

type Head<R> = (Table<R>, Option<Timed<R>>, bool);

struct Merged<P: Replay> {
    /// Each table, its next row, and whether it has ended.
    heads: Vec<Head<P::Row>>,
    replay: P,
    out: VecDeque<WorkloadEvent>,
    last: Time,
    failed: bool,
    window: Option<Window>,
    /// Events of one row, before the window sees them.
    scratch: VecDeque<WorkloadEvent>,
}

impl<P: Replay> Merged<P> {
    /// Apply one row, through the window if there is one.
    fn apply(&mut self, at: Time, row: P::Row) {
        let Some(w) = self.window.as_mut() else {
            self.replay.apply(at, row, &mut self.out);
            return;
        };
        let start = *w.start.get_or_insert_with(|| {
            w.first = at;
            w.counter.set_window(at, w.from);
            at + w.from
        });
        w.last = at;
        self.replay.apply(at, row, &mut self.scratch);
        if at < start {
            for ev in self.scratch.drain(..) {
                w.hold(ev);
            }
            return;
        }
        if !w.entered {
            // The alive tasks enter before this row's events.
            let mut now = std::mem::take(&mut self.scratch);
            w.enter(start, &self.replay, &mut self.out);
            for ev in now.drain(..) {
                let ev = w.shift(ev, start);
                self.out.push_back(ev);
            }
            self.scratch = now;
            return;
        }
        for ev in self.scratch.drain(..) {
            let ev = w.shift(ev, start);
            self.out.push_back(ev);
        }
    }

    fn next_row(&mut self) -> Option<Result<Timed<P::Row>, TraceError>> {
        for (table, head, ended) in &mut self.heads {
            if head.is_none() && !*ended {
                match table.next() {
                    None => *ended = true,
                    Some(Err(e)) => return Some(Err(e)),
                    Some(Ok(row)) => *head = Some(row),
                }
            }
        }
        let first = self
            .heads
            .iter()
            .enumerate()
            .filter_map(|(i, (_, head, _))| head.as_ref().map(|h| (h.at, i)))
            .min()?;
        self.heads[first.1].1.take().map(Ok)
    }
}

impl<P: Replay> Iterator for Merged<P> {
    type Item = Result<WorkloadEvent, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(ev) = self.out.pop_front() {
                // Replays emit at the row's time and rows come in order, so
                // this only guards the promise to the engine.
                debug_assert!(ev.at() >= self.last, "trace replay went back in time");
                self.last = self.last.max(ev.at());
                return Some(Ok(ev));
            }
            if self.failed {
                return None;
            }
            let Some(next) = self.next_row() else {
                // The rows are over: a window never reached is an error.
                let w = self.window.as_mut().filter(|w| !w.entered && w.start.is_some())?;
                w.entered = true;
                self.failed = true;
                return Some(Err(w.past_the_trace()));
            };
            match next {
                Ok(Timed { at, row }) => self.apply(at, row),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(times: &[u64]) -> Table<u64> {
        let rows: Vec<_> = times.iter().map(|&t| Ok(Timed { at: Time(t), row: t })).collect();
        Box::new(rows.into_iter())
    }

    fn times(t: Table<u64>) -> Vec<(u64, u64)> {
        t.map(|r| r.map(|r| (r.at.0, r.row)).expect("row")).collect()
    }

    #[test]
    fn rows_within_the_window_are_put_back_in_place() {
        let c = Arc::new(BadRowCounter::default());
        let got = times(reorder(table(&[10, 30, 20, 40]), Duration::from_micros(15), &c));
        assert_eq!(got, [(10, 10), (20, 20), (30, 30), (40, 40)]);
        assert_eq!(c.late_rows(), 0);
    }

    #[test]
    fn rows_later_than_the_window_are_clamped_and_counted() {
        let c = Arc::new(BadRowCounter::default());
        let got = times(reorder(table(&[10, 50, 60, 20]), Duration::from_micros(5), &c));
        assert_eq!(got, [(10, 10), (50, 50), (50, 20), (60, 60)]);
        assert_eq!(c.late_rows(), 1);
    }

    struct Echo;
    impl Replay for Echo {
        type Row = u64;
        fn apply(&mut self, at: Time, row: u64, out: &mut VecDeque<WorkloadEvent>) {
            out.push_back(WorkloadEvent::Finish {
                task: crate::workload::TaskKey(row),
                at,
                work: Duration::ZERO,
            });
        }
    }

    #[test]
    fn tables_merge_by_time_ties_to_the_first_table() {
        let tagged = |times: &[u64], tag: u64| -> Table<u64> {
            let rows: Vec<_> =
                times.iter().map(|&t| Ok(Timed { at: Time(t), row: tag + t })).collect();
            Box::new(rows.into_iter())
        };
        let s = stream(vec![tagged(&[1, 5, 9], 0), tagged(&[0, 5, 7], 100)], Echo, None);
        let got: Vec<u64> = s
            .map(|e| match e.expect("event") {
                WorkloadEvent::Finish { task, .. } => task.0,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(got, [100, 1, 5, 105, 107, 9]);
    }
}
