//! What a trace reader skipped or bent, for the caller to report.

use crate::workload::TraceError;
use overbook_core::Time;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Counts shared between a trace stream and its caller. The stream runs on
/// whatever thread drains it, hence atomics rather than a `&mut`.
#[derive(Default)]
pub struct BadRowCounter {
    bad: AtomicU64,
    late: AtomicU64,
    unmatched: AtomicU64,
    read: AtomicU64,
    first_bad: Mutex<Option<String>>,
    /// The machines the trace's rows name (hashed), as many as the cluster had.
    machines: Mutex<HashSet<u64>>,
    /// Runs written by sorts of out-of-order tables.
    spilled_runs: AtomicU64,
    sort_hook: Mutex<Option<SortHook>>,
    /// The trace's first row's time and how long after it the window began.
    window: Mutex<Option<(Time, Duration)>>,
}

/// Told how far a sort of an out-of-order table is: rows read, runs written.
pub type SortHook = Box<dyn Fn(u64, u64) + Send + Sync>;

impl BadRowCounter {
    /// Rows that could not be read and were skipped (`skip_bad_rows`).
    pub fn bad_rows(&self) -> u64 {
        self.bad.load(Ordering::Relaxed)
    }

    /// Rows further back in time than the reorder window, replayed at the
    /// latest time already reached instead of their own.
    pub fn late_rows(&self) -> u64 {
        self.late.load(Ordering::Relaxed)
    }

    /// Well-formed rows about a task the stream does not know (usage of a
    /// task never submitted, or forgotten; an instance whose batch task is
    /// missing). They are not errors: traces cut at both ends have them.
    pub fn unmatched_rows(&self) -> u64 {
        self.unmatched.load(Ordering::Relaxed)
    }

    /// Rows read from the trace's files, good or bad.
    pub fn rows_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// The distinct machines the trace's tasks ran on, as its rows name
    /// them (0 when the format names none).
    pub fn machines(&self) -> u64 {
        self.machines.lock().map_or(0, |m| m.len() as u64)
    }

    /// Where the replay's window is: the time of the trace's first row (in
    /// the trace's own clock) and how long after it the window starts;
    /// `None` until the first row is read.
    pub fn window(&self) -> Option<(Time, Duration)> {
        self.window.lock().ok().and_then(|g| *g)
    }

    pub(crate) fn set_window(&self, first_row: Time, from: Duration) {
        if let Ok(mut w) = self.window.lock() {
            *w = Some((first_row, from));
        }
    }

    /// The first skipped row's error, as an example for the report.
    pub fn first_bad_row(&self) -> Option<String> {
        self.first_bad.lock().ok().and_then(|g| g.clone())
    }

    /// Sorted runs written to temporary files to sort tables given out of
    /// time order (0 when every table was in order or fit in memory).
    pub fn spilled_runs(&self) -> u64 {
        self.spilled_runs.load(Ordering::Relaxed)
    }

    /// Call `hook` as a table's sort goes on (the first rows of a stream
    /// may take a while when its tables are large and out of order).
    pub fn on_sort_progress(&self, hook: SortHook) {
        if let Ok(mut h) = self.sort_hook.lock() {
            *h = Some(hook);
        }
    }

    pub(crate) fn report_sort(&self, rows: u64, runs: u64) {
        if let Ok(h) = self.sort_hook.lock() {
            if let Some(hook) = h.as_ref() {
                hook(rows, runs);
            }
        }
    }

    pub(crate) fn record_spill(&self) {
        self.spilled_runs.fetch_add(1, Ordering::Relaxed);
    }

    /// Add what a scratch counter counted (a pass whose rows are kept).
    pub(crate) fn absorb(&self, other: &BadRowCounter) {
        self.read.fetch_add(other.rows_read(), Ordering::Relaxed);
        self.late.fetch_add(other.late_rows(), Ordering::Relaxed);
        self.unmatched.fetch_add(other.unmatched_rows(), Ordering::Relaxed);
        self.spilled_runs.fetch_add(other.spilled_runs(), Ordering::Relaxed);
        let bad = other.bad_rows();
        if bad > 0 && self.bad.fetch_add(bad, Ordering::Relaxed) == 0 {
            if let (Ok(mut first), Some(theirs)) = (self.first_bad.lock(), other.first_bad_row()) {
                *first = Some(theirs);
            }
        }
        if let (Ok(mut mine), Ok(theirs)) = (self.machines.lock(), other.machines.lock()) {
            mine.extend(theirs.iter().copied());
        }
    }

    pub(crate) fn record_bad(&self, err: &TraceError) {
        if self.bad.fetch_add(1, Ordering::Relaxed) == 0 {
            // A poisoned lock only loses the example, never the count.
            if let Ok(mut first) = self.first_bad.lock() {
                *first = Some(err.to_string());
            }
        }
    }

    pub(crate) fn record_late(&self) {
        self.late.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_read(&self) {
        self.read.fetch_add(1, Ordering::Relaxed);
    }

    /// A row names machine `id` (a number, or a name hashed by the caller).
    pub(crate) fn record_machine(&self, id: u64) {
        if let Ok(mut m) = self.machines.lock() {
            m.insert(id);
        }
    }

    pub(crate) fn record_unmatched(&self) {
        self.unmatched.fetch_add(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for BadRowCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BadRowCounter")
            .field("bad", &self.bad_rows())
            .field("late", &self.late_rows())
            .field("unmatched", &self.unmatched_rows())
            .field("read", &self.rows_read())
            .field("machines", &self.machines())
            .field("spilled_runs", &self.spilled_runs())
            .finish_non_exhaustive()
    }
}
