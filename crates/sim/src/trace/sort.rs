//! Sorting a table's checked rows by time, whatever order its files and
//! rows come in, within a memory budget.
//!
//! A first pass reads the table, keeping its rows while they fit in
//! [`IN_ORDER_KEEP`] (or, once a row comes out of order, in
//! [`TraceOptions::sort_memory`](super::TraceOptions::sort_memory)):
//!
//! * the whole table fits: it is sorted in memory and given out;
//! * it does not fit but every row came in time order: nothing more is kept
//!   or written, and a second pass streams the table as it is (the
//!   published Google traces): a replay's memory is then its live tasks',
//!   however long the trace;
//! * it is out of order: it is sorted in memory if it fits in the budget,
//!   else sorted runs of one budget each are written to temporary files (in
//!   [`TraceOptions::spill_dir`](super::TraceOptions::spill_dir) or the
//!   system's temporary directory), then merged, the files removed once the
//!   merge ends or the stream is dropped.
//!
//! Rows of equal time are put in the order of the task they are about
//! ([`Spill::tie`]), and rows of one task at one time keep the order they
//! were read in (file in path order, then line): a replay is the same
//! whatever the order its files and rows were given in, as long as one
//! task's rows of one instant stay in order.

use super::counter::BadRowCounter;
use super::merge::{Table, Timed};
use crate::workload::TraceError;
use overbook_core::Time;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A row that can be written to a run file and read back exactly.
pub(crate) trait Spill: Serialize + DeserializeOwned + Send + 'static {
    /// Orders rows of equal time by what they say (the task they are
    /// about), so that a table's order does not depend on the order its
    /// files and rows were given in; rows of one task at one time keep the
    /// order they were read in.
    fn tie(&self) -> u64;

    /// Heap bytes the row holds beyond its own size, for the budget.
    fn heap_bytes(&self) -> usize {
        0
    }
}

/// Builds a table afresh (a pass reads it from its first file), reporting
/// its reads, bad rows and machines to the counter given.
pub(crate) type Make<R> = Box<dyn Fn(&Arc<BadRowCounter>) -> Table<R> + Send>;

/// The most a first pass keeps of rows that have all come in time order:
/// past it, the table is streamed in a second pass rather than held. Without
/// it a replay's memory grew with the trace's length up to the whole sort
/// budget (a 29-day trace of 200 tasks took 151 MB where streaming took 14).
pub(crate) const IN_ORDER_KEEP: usize = 16 << 20;

/// How often (in rows) a sort says how far it is.
const PROGRESS_EVERY: u64 = 1 << 16;

/// The table `make` builds, sorted by time (stable). Nothing is read until
/// the first row is asked for.
pub(crate) fn sorted<R: Spill>(
    make: Make<R>,
    counter: &Arc<BadRowCounter>,
    budget: usize,
    spill_dir: Option<PathBuf>,
) -> Table<R> {
    if budget == usize::MAX {
        // Trusted to be in order (`assume_sorted`): streamed as it comes.
        return make(counter);
    }
    let counter = counter.clone();
    let mut state: Option<Table<R>> = None;
    Box::new(std::iter::from_fn(move || {
        if state.is_none() {
            match prepare(&make, &counter, budget, spill_dir.as_deref()) {
                Ok(t) => state = Some(t),
                Err(e) => {
                    state = Some(Box::new(std::iter::empty()));
                    return Some(Err(e));
                }
            }
        }
        state.as_mut()?.next()
    }))
}

/// Push `row`, growing `buf` by hand so that its capacity never holds more
/// than `budget` bytes of rows (a doubling `Vec` could take twice that).
/// Returns the bytes the rows now take, `heap` (their heap bytes) included.
fn push<R: Spill>(
    buf: &mut Vec<Timed<R>>,
    row: Timed<R>,
    heap: &mut usize,
    budget: usize,
) -> usize {
    let size = std::mem::size_of::<Timed<R>>().max(1);
    if buf.len() == buf.capacity() {
        let most = (budget / size).max(1);
        let more = buf.capacity().clamp(1024, 1 << 20).min(most.saturating_sub(buf.len())).max(1);
        buf.reserve_exact(more);
    }
    *heap += row.row.heap_bytes();
    buf.push(row);
    *heap + buf.len() * size
}

fn prepare<R: Spill>(
    make: &Make<R>,
    counter: &Arc<BadRowCounter>,
    budget: usize,
    dir: Option<&Path>,
) -> Result<Table<R>, TraceError> {
    // The first pass counts into a scratch counter: it is added to the
    // real one only when the rows it read are the ones given out.
    let scratch = Arc::new(BadRowCounter::default());
    let mut rows_in = make(&scratch);
    let mut buf: Vec<Timed<R>> = Vec::new();
    let (mut heap, mut last, mut rows) = (0usize, Time::ZERO, 0u64);
    let mut too_big = false;
    while let Some(row) = rows_in.next() {
        let row = match row {
            Ok(r) => r,
            Err(e) => {
                counter.absorb(&scratch);
                return Err(e);
            }
        };
        rows += 1;
        if rows.is_multiple_of(PROGRESS_EVERY) {
            counter.report_sort(rows, 0);
        }
        if row.at < last {
            if too_big {
                // Too big to keep while in order, and out of order: sort it
                // for real, from the start, counting into the real counter.
                drop(rows_in);
                return spill_sort(Vec::new(), 0, make(counter), counter, budget, dir);
            }
            // Out of order, every row so far in `buf`: go on from here.
            push(&mut buf, row, &mut heap, budget);
            let sorted = spill_sort(buf, heap, rows_in, counter, budget, dir);
            counter.absorb(&scratch);
            return sorted;
        }
        last = row.at;
        if too_big {
            continue;
        }
        if push(&mut buf, row, &mut heap, budget) >= budget.min(IN_ORDER_KEEP) {
            // In order so far: keep checking, keep nothing.
            buf = Vec::new();
            too_big = true;
        }
    }
    if too_big {
        // Every row in order: stream the table, only the rows of each
        // instant put in order.
        return Ok(by_ties(make(counter)));
    }
    counter.absorb(&scratch);
    buf.sort_by_key(|r| (r.at, r.row.tie()));
    Ok(Box::new(buf.into_iter().map(Ok)))
}

/// Sort `buf` (rows already read, holding `heap` bytes besides their own
/// size) and the rows of `rest`, writing a sorted run whenever the budget
/// is full.
fn spill_sort<R: Spill>(
    mut buf: Vec<Timed<R>>,
    mut heap: usize,
    rest: impl Iterator<Item = Result<Timed<R>, TraceError>>,
    counter: &Arc<BadRowCounter>,
    budget: usize,
    dir: Option<&Path>,
) -> Result<Table<R>, TraceError> {
    let mut runs: Option<Runs> = None;
    let mut rows = buf.len() as u64;
    for row in rest {
        let row = row?;
        rows += 1;
        if push(&mut buf, row, &mut heap, budget) >= budget {
            let r = match &mut runs {
                Some(r) => r,
                None => runs.insert(Runs::new(dir)?),
            };
            r.spill(&mut buf)?;
            counter.record_spill();
            heap = 0;
            counter.report_sort(rows, r.files.len() as u64);
        } else if rows.is_multiple_of(PROGRESS_EVERY) {
            counter.report_sort(rows, runs.as_ref().map_or(0, |r| r.files.len() as u64));
        }
    }
    buf.sort_by_key(|r| (r.at, r.row.tie()));
    match runs {
        None => Ok(Box::new(buf.into_iter().map(Ok))),
        Some(runs) => runs.merge(buf),
    }
}

/// Sorted runs written to a temporary directory, removed with it.
struct Runs {
    dir: tempfile::TempDir,
    files: Vec<PathBuf>,
}

impl Runs {
    fn new(dir: Option<&Path>) -> Result<Runs, TraceError> {
        let made = match dir {
            Some(d) => tempfile::Builder::new().prefix("overbook-sort-").tempdir_in(d),
            None => tempfile::Builder::new().prefix("overbook-sort-").tempdir(),
        };
        let dir = made.map_err(|source| TraceError::Io {
            path: dir.map_or_else(std::env::temp_dir, Path::to_path_buf),
            source,
        })?;
        Ok(Runs { dir, files: Vec::new() })
    }

    /// Sort `buf` (stable) and write it as the next run, leaving it empty.
    fn spill<R: Spill>(&mut self, buf: &mut Vec<Timed<R>>) -> Result<(), TraceError> {
        buf.sort_by_key(|r| (r.at, r.row.tie()));
        let path = self.dir.path().join(format!("run-{:05}", self.files.len()));
        let io = |source| TraceError::Io { path: path.clone(), source };
        let mut out = BufWriter::new(File::create(&path).map_err(io)?);
        let mut bytes = Vec::new();
        for r in buf.drain(..) {
            bytes.clear();
            ciborium::into_writer(&r.row, &mut bytes).map_err(|e| {
                io(std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))
            })?;
            let len = u32::try_from(bytes.len()).map_err(|_| {
                io(std::io::Error::new(std::io::ErrorKind::InvalidData, "row over 4 GiB"))
            })?;
            out.write_all(&r.at.0.to_le_bytes()).map_err(io)?;
            out.write_all(&len.to_le_bytes()).map_err(io)?;
            out.write_all(&bytes).map_err(io)?;
        }
        out.flush().map_err(io)?;
        self.files.push(path);
        Ok(())
    }

    /// The runs and `tail` (the last rows, sorted, never written) merged.
    fn merge<R: Spill>(self, tail: Vec<Timed<R>>) -> Result<Table<R>, TraceError> {
        let mut sources = Vec::with_capacity(self.files.len() + 1);
        for path in &self.files {
            let file =
                File::open(path).map_err(|source| TraceError::Io { path: path.clone(), source })?;
            sources.push(Source::File {
                path: path.clone(),
                input: BufReader::with_capacity(1 << 16, file),
            });
        }
        sources.push(Source::Memory(tail.into_iter()));
        let mut merge =
            Merge { heads: Vec::new(), heap: BinaryHeap::new(), sources, dir: Some(self.dir) };
        for i in 0..merge.sources.len() {
            let head = merge.sources[i].next()?;
            if let Some(h) = &head {
                merge.heap.push(Reverse((h.at, h.row.tie(), i)));
            }
            merge.heads.push(head);
        }
        Ok(Box::new(merge))
    }
}

enum Source<R> {
    File { path: PathBuf, input: BufReader<File> },
    Memory(std::vec::IntoIter<Timed<R>>),
}

impl<R: Spill> Source<R> {
    fn next(&mut self) -> Result<Option<Timed<R>>, TraceError> {
        let (path, input) = match self {
            Source::Memory(rows) => return Ok(rows.next()),
            Source::File { path, input } => (path, input),
        };
        let io = |source| TraceError::Io { path: path.clone(), source };
        let mut head = [0u8; 12];
        match input.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(io(e)),
        }
        let (at, len) = head.split_at(8);
        let at = u64::from_le_bytes(at.try_into().unwrap_or_default());
        let len = u32::from_le_bytes(len.try_into().unwrap_or_default());
        let mut bytes = vec![0u8; len as usize];
        input.read_exact(&mut bytes).map_err(io)?;
        let row = ciborium::from_reader(&bytes[..])
            .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())))?;
        Ok(Some(Timed { at: Time(at), row }))
    }
}

/// A k-way merge of sorted runs; ties go to the earlier run, which holds
/// the earlier rows.
struct Merge<R> {
    heads: Vec<Option<Timed<R>>>,
    heap: BinaryHeap<Reverse<(Time, u64, usize)>>,
    sources: Vec<Source<R>>,
    /// Removed once the merge ends (or with the merge).
    dir: Option<tempfile::TempDir>,
}

impl<R: Spill> Iterator for Merge<R> {
    type Item = Result<Timed<R>, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        let Some(Reverse((_, _, i))) = self.heap.pop() else {
            self.sources.clear();
            self.dir = None;
            return None;
        };
        let row = self.heads[i].take()?;
        match self.sources[i].next() {
            Ok(Some(next)) => {
                self.heap.push(Reverse((next.at, next.row.tie(), i)));
                self.heads[i] = Some(next);
            }
            Ok(None) => {}
            Err(e) => {
                self.heap.clear();
                return Some(Err(e));
            }
        }
        Some(Ok(row))
    }
}

/// A table in time order with the rows of each instant sorted by
/// [`Spill::tie`] (stable): holds one instant's rows.
fn by_ties<R: Spill>(mut table: Table<R>) -> Table<R> {
    let mut now: Vec<Timed<R>> = Vec::new();
    let mut out = std::collections::VecDeque::new();
    let mut ended = false;
    Box::new(std::iter::from_fn(move || loop {
        if let Some(row) = out.pop_front() {
            return Some(Ok(row));
        }
        if ended {
            return None;
        }
        match table.next() {
            Some(Err(e)) => return Some(Err(e)),
            Some(Ok(row)) if now.last().is_none_or(|l| l.at == row.at) => now.push(row),
            next => {
                now.sort_by_key(|r| r.row.tie());
                out.extend(now.drain(..));
                match next {
                    Some(Ok(row)) => now.push(row),
                    _ => ended = true,
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row: its task (the tie) and its place in the input.
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct R(u64, usize);
    impl Spill for R {
        fn tie(&self) -> u64 {
            self.0
        }
    }

    fn maker(rows: Vec<(u64, u64)>) -> Make<R> {
        Box::new(move |_| {
            let rows: Vec<_> = rows
                .iter()
                .enumerate()
                .map(|(i, &(at, task))| Ok(Timed { at: Time(at), row: R(task, i) }))
                .collect();
            Box::new(rows.into_iter())
        })
    }

    fn run(rows: Vec<(u64, u64)>, budget: usize) -> (Vec<(u64, u64, usize)>, u64, usize) {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = Arc::new(BadRowCounter::default());
        let got = sorted(maker(rows), &c, budget, Some(dir.path().to_path_buf()))
            .map(|r| r.map(|t| (t.at.0, t.row.0, t.row.1)).expect("row"))
            .collect();
        let left = std::fs::read_dir(dir.path()).expect("dir").count();
        (got, c.spilled_runs(), left)
    }

    /// The order a sort must give: time, task, then input order.
    fn want(rows: &[(u64, u64)]) -> Vec<(u64, u64, usize)> {
        let mut w: Vec<_> = rows.iter().enumerate().map(|(i, &(a, t))| (a, t, i)).collect();
        w.sort();
        w
    }

    #[test]
    fn every_path_gives_the_same_stable_order() {
        let row = std::mem::size_of::<Timed<R>>();
        let shuffled: Vec<(u64, u64)> =
            (0..500u64).map(|i| ((i * 7919) % 97, (i * 31) % 5)).collect();
        let ordered = want(&shuffled).iter().map(|&(a, t, _)| (a, t)).collect::<Vec<_>>();
        // In memory.
        assert_eq!(run(shuffled.clone(), 1 << 20), (want(&shuffled), 0, 0));
        // Through files: runs of ten rows.
        let (got, runs, left) = run(shuffled.clone(), 10 * row);
        assert_eq!(got, want(&shuffled));
        assert!(runs >= 40, "{runs} runs");
        assert_eq!(left, 0, "run files removed");
        // In order but over the budget: streamed, nothing written.
        assert_eq!(run(ordered.clone(), 10 * row), (want(&ordered), 0, 0));
        // In order over the budget, then one row back in time: sorted
        // again from the start, through files.
        let mut late = ordered.clone();
        late.push((0, 9));
        let (got, runs, left) = run(late.clone(), 10 * row);
        assert_eq!(got, want(&late));
        assert!(runs > 0);
        assert_eq!(left, 0);
    }

    #[test]
    fn a_long_table_in_order_is_streamed_not_kept_however_large_the_budget() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let n = IN_ORDER_KEEP / std::mem::size_of::<Timed<R>>() + 1000;
        let passes = Arc::new(AtomicUsize::new(0));
        let make = |late: bool| -> Make<R> {
            let passes = passes.clone();
            Box::new(move |_| {
                passes.fetch_add(1, Ordering::Relaxed);
                let rows = (0..n).map(move |i| {
                    let at = if late && i == n - 1 { 0 } else { i as u64 };
                    Ok(Timed { at: Time(at), row: R(0, i) })
                });
                Box::new(rows)
            })
        };
        let c = Arc::new(BadRowCounter::default());
        let budget = 4 * IN_ORDER_KEEP;
        let got = sorted(make(false), &c, budget, None).map(|r| r.expect("row").at.0);
        assert!(got.eq(0..n as u64), "every row, in order");
        assert_eq!(passes.load(Ordering::Relaxed), 2, "checked, then streamed");
        // The last row back in time: sorted, in memory within the budget.
        passes.store(0, Ordering::Relaxed);
        let got: Vec<u64> =
            sorted(make(true), &c, budget, None).map(|r| r.expect("row").at.0).collect();
        assert_eq!((got.len(), got[0], got[1]), (n, 0, 0));
        assert_eq!(passes.load(Ordering::Relaxed), 2, "read again to sort");
        assert_eq!(c.spilled_runs(), 0, "nothing written");
    }

    #[test]
    fn an_error_ends_the_table_and_leaves_no_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let make: Make<R> = Box::new(|_| {
            let mut rows: Vec<Result<Timed<R>, TraceError>> =
                (0..100).map(|i| Ok(Timed { at: Time(100 - i), row: R(0, 0) })).collect();
            rows.push(Err(TraceError::BadRow {
                path: "t.csv".into(),
                line: 101,
                problem: "bad".into(),
            }));
            Box::new(rows.into_iter())
        });
        let c = Arc::new(BadRowCounter::default());
        let got: Vec<_> = sorted(make, &c, 64, Some(dir.path().to_path_buf())).collect();
        assert_eq!(got.len(), 1);
        assert!(matches!(got[0], Err(TraceError::BadRow { line: 101, .. })));
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }
}
