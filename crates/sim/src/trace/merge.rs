//! From raw rows to one time-ordered event stream: check each row (bad rows
//! fail or are counted), put rows that went back in time in their place,
//! merge a format's tables by time, and replay the merged rows through the
//! format's per-task state.

use super::counter::BadRowCounter;
use crate::workload::{TraceError, WorkloadEvent, WorkloadStream};
use overbook_core::Time;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
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
}

/// Merge `tables` by time, ties going to the earlier table (so a task's
/// submission, listed first, precedes its usage at the same instant), and
/// replay the rows. The stream ends after its first error.
pub(crate) fn stream<P: Replay + 'static>(tables: Vec<Table<P::Row>>, replay: P) -> WorkloadStream {
    Box::new(Merged {
        heads: tables.into_iter().map(|t| (t, None, false)).collect(),
        replay,
        out: VecDeque::new(),
        last: Time::ZERO,
        failed: false,
    })
}

type Head<R> = (Table<R>, Option<Timed<R>>, bool);

struct Merged<P: Replay> {
    /// Each table, its next row, and whether it has ended.
    heads: Vec<Head<P::Row>>,
    replay: P,
    out: VecDeque<WorkloadEvent>,
    last: Time,
    failed: bool,
}

impl<P: Replay> Merged<P> {
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
            match self.next_row()? {
                Ok(Timed { at, row }) => self.replay.apply(at, row, &mut self.out),
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
        let s = stream(vec![tagged(&[1, 5, 9], 0), tagged(&[0, 5, 7], 100)], Echo);
        let got: Vec<u64> = s
            .map(|e| match e.expect("event") {
                WorkloadEvent::Finish { task, .. } => task.0,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(got, [100, 1, 5, 105, 107, 9]);
    }
}
