//! `/proc/<pid>/task/<tid>/schedstat`: one thread's time on a CPU and
//! waiting for one.
//!
//! Why: a production service that slows next to best-effort work may be
//! short of memory or of CPU. Its time waiting on a run queue (`run_delay`)
//! says the second, apart from its memory stalls (PSI), so `bench
//! colocation` can split the one from the other. Three numbers on one
//! line: nanoseconds on a CPU, nanoseconds runnable but waiting, and the
//! time slices run.

use super::{count, ParseError, Problem};
use std::time::Duration;

/// One thread's scheduler times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedStat {
    /// Time on a CPU.
    pub on_cpu: Duration,
    /// Time runnable, waiting on a run queue.
    pub run_delay: Duration,
    /// Time slices run.
    pub timeslices: u64,
}

impl SchedStat {
    /// The kernel file this type reads.
    pub const FILE: &'static str = "/proc/<pid>/schedstat";

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let file = Self::FILE;
        let mut words = text.split_whitespace();
        if text.trim().is_empty() {
            return Err(ParseError::whole(file, Problem::Empty));
        }
        let mut next = |key: &'static str| -> Result<u64, ParseError> {
            count(file, 1, key, words.next().ok_or_else(|| ParseError::missing(file, key))?)
        };
        let stat = Self {
            on_cpu: Duration::from_nanos(next("on_cpu")?),
            run_delay: Duration::from_nanos(next("run_delay")?),
            timeslices: next("timeslices")?,
        };
        if let Some(extra) = words.next() {
            return Err(ParseError::at(
                file,
                1,
                Problem::Unexpected { text: super::snippet(extra) },
            ));
        }
        Ok(stat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_numbers_or_a_clear_error() {
        let s = SchedStat::parse("73062034 509814 3\n").expect("parses");
        assert_eq!(s.on_cpu, Duration::from_nanos(73_062_034));
        assert_eq!(s.run_delay, Duration::from_nanos(509_814));
        assert_eq!(s.timeslices, 3);
        let e = SchedStat::parse("1 2\n").expect_err("short");
        assert_eq!(e.to_string(), "/proc/<pid>/schedstat: required key `timeslices` is missing");
        assert!(SchedStat::parse("").is_err());
        assert!(SchedStat::parse("1 x 3").expect_err("bad").to_string().contains("run_delay"));
        assert!(SchedStat::parse("1 2 3 4").is_err());
    }
}
