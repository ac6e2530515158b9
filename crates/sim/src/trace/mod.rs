//! Trace readers: cluster traces replayed as a [`WorkloadStream`].
//!
//! Four formats, one entry point ([`open`]):
//!
//! | format | tables | class |
//! |---|---|---|
//! | `google-2011` | `task_events`, `task_usage` (headerless CSV, plain or gzip, part files) | priority 9..=11 production, 0..=8 best-effort |
//! | `google-2019` | `instance_events`, `instance_usage` (BigQuery export: CSV with a header, or JSON) | priority >= 120 production, below best-effort |
//! | `alibaba-2018` | `batch_task`, `batch_instance`, `container_meta`, `container_usage` (headerless CSV) | containers production, batch instances best-effort |
//! | `charon-sls` | containers (JSON array or JSON lines; schema in [`charon`]) | `container.exetype` |
//!
//! Each format module documents its columns, its units and how its rows
//! become events.
//!
//! # Streaming
//!
//! Files are read one row at a time; the only state kept is per task that is
//! alive (submitted and not yet finished nor dead), plus, for a table out
//! of time order, the rows its sort holds in memory (see below).
//!
//! # Deaths
//!
//! A task the trace ends (Google EVICT, FAIL, KILL, LOST; an Alibaba
//! instance over by status with no usable end) is a
//! [`WorkloadEvent::Death`](crate::workload::WorkloadEvent::Death): the
//! engine ends that attempt wherever it is and its work is lost; a later
//! SUBMIT of the same task is a new attempt.
//! The tables of a format are merged by time, so the events come out in
//! non-decreasing time order.
//!
//! # Rows in any order
//!
//! Files and rows may come in any order (BigQuery exports are sharded in
//! no order; part files may be given out of order): each table is sorted
//! by time before it is replayed, stably, so rows of equal time keep the
//! order they were read in (files in path order, then lines). The sort
//! keeps at most [`TraceOptions::sort_memory`] of rows in memory: a small
//! table (16 MiB of rows) is sorted in memory; a larger one whose rows all
//! come in time order (the published Google traces) is checked in a first
//! pass and then streamed, nothing kept or written, so that memory follows
//! the live tasks and not the trace's length; one out of order is sorted
//! in memory if it fits in the budget; otherwise sorted runs are
//! written to temporary files in [`TraceOptions::spill_dir`] and merged,
//! the files removed when the stream ends or is dropped
//! ([`BadRowCounter::spilled_runs`] counts them). A sort's progress can be
//! followed with [`BadRowCounter::on_sort_progress`]. Sorting reads every
//! row of a table before the first is replayed, even when the run's
//! horizon stops short of the trace's end; [`TraceOptions::assume_sorted`]
//! streams the tables as they come instead.
//!
//! The tables of a format are then merged by time, ties to the table listed
//! first (a task's submission before its usage). Late rows
//! ([`BadRowCounter::late_rows`], replayed at the latest time reached) no
//! longer happen once the tables are sorted; the count stays as a guard.
//!
//! # Windows
//!
//! With [`TraceOptions::window_from`], the replay starts that long after the
//! trace's first row (whatever its time: Google's traces start 600 s in,
//! some exports days in), and that instant is time zero. Rows before it are
//! read to know which tasks are alive then, and those tasks enter at time
//! zero: one running in the trace with its remaining work (its work less
//! what it ran before the window, its memory profile and later usage from
//! that point on, its last usage sample as its memory), one still waiting
//! as it was submitted. Tasks that ended before the window are not
//! replayed. A window that starts after the trace's last row is a
//! [`TraceError::Window`]. Where the window ends is the run's horizon: the
//! engine counts and does not run the tasks submitted after it.
//!
//! # Bad rows
//!
//! A row that cannot be read (wrong column count, a field that is not a
//! number, a negative time, ...) stops the stream with
//! [`TraceError::BadRow`] naming its file and 1-based line, or, with
//! [`TraceOptions::skip_bad_rows`], is skipped and counted in
//! [`BadRowCounter::bad_rows`]. A file that cannot be opened is a
//! [`TraceError::Io`] naming it; neither stream nor row is ever a panic.

mod alibaba2018;
mod borg;
pub mod charon;
mod counter;
mod csvrows;
mod fields;
mod files;
mod google2011;
mod google2019;
mod ids;
mod jsonrows;
mod lines;
mod machines;
mod merge;
mod sort;

pub use counter::{BadRowCounter, SortHook};
pub use machines::{cluster, machine_table, TraceCluster};

use crate::workload::{TraceError, WorkloadStream};
use overbook_core::{Bytes, Time};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Which trace a set of files is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    /// Google clusterdata-2011-2.
    Google2011,
    /// Google clusterdata-2019 (BigQuery export).
    Google2019,
    /// Alibaba cluster-trace-v2018.
    Alibaba2018,
    /// The Charon paper's simulator input (000 §5.5).
    CharonSls,
}

impl TraceFormat {
    pub const ALL: [TraceFormat; 4] = [
        TraceFormat::Google2011,
        TraceFormat::Google2019,
        TraceFormat::Alibaba2018,
        TraceFormat::CharonSls,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TraceFormat::Google2011 => "google-2011",
            TraceFormat::Google2019 => "google-2019",
            TraceFormat::Alibaba2018 => "alibaba-2018",
            TraceFormat::CharonSls => "charon-sls",
        }
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The format name was none of those [`TraceFormat::ALL`] spells.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown trace format {0:?}: expected google-2011, google-2019, alibaba-2018 or charon-sls"
)]
pub struct UnknownFormat(pub String);

impl FromStr for TraceFormat {
    type Err = UnknownFormat;
    fn from_str(s: &str) -> Result<TraceFormat, UnknownFormat> {
        TraceFormat::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| UnknownFormat(s.to_string()))
    }
}

/// How to read a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceOptions {
    /// Bytes a normalized memory of 1.0 stands for (Google: the largest
    /// machine; Alibaba's 100 is scaled to this too). Charon-SLS gives MiB and
    /// ignores it.
    pub memory_scale: Bytes,
    /// Cores a normalized CPU of 1.0 stands for (Google's requests are
    /// normalized to the largest machine). Alibaba (100 = one core) and
    /// Charon-SLS (vcores) ignore it.
    pub cpu_scale: f64,
    /// Skip and count rows that cannot be read instead of stopping.
    pub skip_bad_rows: bool,
    /// Subtracted from every trace time, saturating at zero: Google's traces
    /// start at 600 s, so 600 s here starts the replay at once.
    pub time_offset: Duration,
    /// How far back in time a row may go and still be put in its place.
    pub reorder_window: Duration,
    /// How long a finished Alibaba batch task's request is kept for its
    /// late instances.
    pub forget_after: Duration,
    /// Memory a table's rows may take while it is sorted by time (see
    /// [Rows in any order](self#rows-in-any-order)); beyond it, sorted runs
    /// go to temporary files.
    pub sort_memory: usize,
    /// Where those files go: the system's temporary directory when `None`.
    pub spill_dir: Option<PathBuf>,
    /// Trust that every table is in time order and stream it without a
    /// first pass (a replay of the first hours of a long, ordered trace
    /// then reads only those hours); a row back in time is put in place
    /// within [`TraceOptions::reorder_window`], or replayed late and counted.
    pub assume_sorted: bool,
    /// Replay from this long after the trace's first row, that instant
    /// becoming time zero (see [Windows](self#windows)); `None` keeps the
    /// trace's own times (less [`TraceOptions::time_offset`]).
    pub window_from: Option<Duration>,
}

impl Default for TraceOptions {
    fn default() -> TraceOptions {
        TraceOptions {
            memory_scale: 64 << 30,
            cpu_scale: 32.0,
            skip_bad_rows: false,
            time_offset: Duration::ZERO,
            reorder_window: Duration::from_secs(60),
            forget_after: Duration::from_secs(6 * 3600),
            sort_memory: 512 << 20,
            spill_dir: None,
            assume_sorted: false,
            window_from: None,
        }
    }
}

impl TraceOptions {
    /// A trace time in microseconds as replay time.
    fn time_us(&self, us: u64) -> Time {
        let offset = u64::try_from(self.time_offset.as_micros()).unwrap_or(u64::MAX);
        Time(us.saturating_sub(offset))
    }

    /// The sort's budget: none (`usize::MAX`) when the tables are trusted.
    fn sort_budget(&self) -> usize {
        if self.assume_sorted {
            usize::MAX
        } else {
            self.sort_memory.min(usize::MAX - 1)
        }
    }

    /// A memory normalized to `full` (1.0 for Google, 100 for Alibaba) in bytes.
    fn bytes(&self, normalized: f64, full: f64) -> Bytes {
        fields::to_bytes(normalized / full * self.memory_scale as f64)
    }
}

/// Open a trace: `paths` are files or directories (searched recursively; part
/// files are read in name order). The counter is shared with the stream:
/// read it once the stream is drained to report skipped and late rows.
pub fn open(
    format: TraceFormat,
    paths: &[PathBuf],
    opts: &TraceOptions,
) -> Result<(WorkloadStream, Arc<BadRowCounter>), TraceError> {
    let counter = Arc::new(BadRowCounter::default());
    let found = files::expand(paths)?;
    // `expand` refuses an empty list, so there is a first path to blame
    // when a format finds none of its tables.
    let root = paths.first().map(PathBuf::as_path).unwrap_or(Path::new(""));
    let stream = match format {
        TraceFormat::Google2011 => google2011::open(root, &found, opts, &counter)?,
        TraceFormat::Google2019 => google2019::open(root, &found, opts, &counter)?,
        TraceFormat::Alibaba2018 => alibaba2018::open(root, &found, opts, &counter)?,
        TraceFormat::CharonSls => charon::open(root, &found, opts, &counter)?,
    };
    Ok((stream, counter))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_round_trip_through_their_names() {
        for f in TraceFormat::ALL {
            assert_eq!(f.to_string().parse::<TraceFormat>(), Ok(f));
        }
        assert!("google".parse::<TraceFormat>().is_err());
    }

    #[test]
    fn time_offset_saturates_at_zero() {
        let opts =
            TraceOptions { time_offset: Duration::from_secs(600), ..TraceOptions::default() };
        assert_eq!(opts.time_us(0), Time(0));
        assert_eq!(opts.time_us(601_000_000), Time::from_secs(1));
    }
}
