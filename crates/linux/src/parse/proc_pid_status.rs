//! `/proc/<pid>/status`: one process's memory and threads, as `Key: value`
//! lines.
//!
//! Why: what a process costs in memory (the agent's own, in `bench
//! agent-overhead`; the simulator's peak, in `bench sim`) is read here.
//! Sizes are converted from the file's `kB` (KiB) to bytes. The `Vm*`
//! lines are absent for kernel threads, so they are `Option`.

use super::{count, duplicate, lines, snippet, ParseError, Problem};

/// The fields of `/proc/<pid>/status` overbook uses; sizes in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcessStatus {
    /// The most resident memory the process ever held (`VmHWM`).
    pub vm_hwm: Option<u64>,
    /// Resident memory now (`VmRSS`).
    pub vm_rss: Option<u64>,
    /// Memory locked in RAM (`VmLck`).
    pub vm_lck: Option<u64>,
    /// Threads (`Threads`).
    pub threads: u64,
}

impl ProcessStatus {
    /// The kernel file this type reads (for one pid: `/proc/1234/status`).
    pub const FILE: &'static str = "/proc/<pid>/status";

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let file = Self::FILE;
        let (mut hwm, mut rss, mut lck, mut threads) = (None, None, None, None);
        for (number, line) in lines(text) {
            let Some((key, rest)) = line.split_once(':') else {
                return Err(ParseError::at(
                    file,
                    number,
                    Problem::Unexpected { text: snippet(line) },
                ));
            };
            let (slot, in_kib) = match key {
                "VmHWM" => (&mut hwm, true),
                "VmRSS" => (&mut rss, true),
                "VmLck" => (&mut lck, true),
                "Threads" => (&mut threads, false),
                _ => continue,
            };
            if slot.is_some() {
                return Err(duplicate(file, number, key));
            }
            *slot = Some(value(number, key, rest, in_kib)?);
        }
        if text.trim().is_empty() {
            return Err(ParseError::whole(file, Problem::Empty));
        }
        Ok(Self {
            vm_hwm: hwm,
            vm_rss: rss,
            vm_lck: lck,
            threads: threads.ok_or_else(|| ParseError::missing(file, "Threads"))?,
        })
    }
}

/// `    1752 kB` as bytes (`in_kib`), or `3` as it is.
fn value(number: usize, key: &str, rest: &str, in_kib: bool) -> Result<u64, ParseError> {
    let file = ProcessStatus::FILE;
    let mut words = rest.split_whitespace();
    let Some(value) = words.next() else {
        return Err(ParseError::at(file, number, Problem::NoValue { key: snippet(key) }));
    };
    let unit = words.next();
    if let Some(extra) = words.next() {
        return Err(ParseError::at(file, number, Problem::Unexpected { text: snippet(extra) }));
    }
    let n = count(file, number, key, value)?;
    match (in_kib, unit) {
        (true, Some("kB")) => n
            .checked_mul(1024)
            .ok_or_else(|| ParseError::at(file, number, Problem::Overflow { key: snippet(key) })),
        (false, None) => Ok(n),
        (_, Some(other)) => {
            Err(ParseError::at(file, number, Problem::Unexpected { text: snippet(other) }))
        }
        (true, None) => Err(ParseError::at(file, number, Problem::NoValue { key: snippet(key) })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_captured_status() {
        let s = ProcessStatus::parse(include_str!("../../tests/fixtures/proc/pid-status"))
            .expect("fixture parses");
        assert_eq!(s.vm_hwm, Some(1768 * 1024));
        assert_eq!(s.vm_rss, Some(1768 * 1024));
        assert_eq!(s.vm_lck, Some(0));
        assert_eq!(s.threads, 1);
    }

    #[test]
    fn a_kernel_thread_has_no_memory_lines() {
        let s = ProcessStatus::parse("Name:\tkthreadd\nState:\tS (sleeping)\nThreads:\t1\n")
            .expect("parses");
        assert_eq!((s.vm_hwm, s.vm_rss, s.vm_lck, s.threads), (None, None, None, 1));
    }

    #[test]
    fn odd_input() {
        let e = ProcessStatus::parse("").expect_err("empty");
        assert_eq!(e.problem, Problem::Empty);
        let e = ProcessStatus::parse("Name:\tcat\n").expect_err("no threads");
        assert_eq!(e.to_string(), "/proc/<pid>/status: required key `Threads` is missing");
        let e = ProcessStatus::parse("Threads:\t1\nThreads:\t2\n").expect_err("twice");
        assert_eq!(e.line, Some(2));
        let e = ProcessStatus::parse("VmRSS:\t12 MB\nThreads:\t1\n").expect_err("unit");
        assert!(matches!(e.problem, Problem::Unexpected { .. }));
        let e = ProcessStatus::parse("VmRSS:\t12\nThreads:\t1\n").expect_err("no unit");
        assert!(matches!(e.problem, Problem::NoValue { .. }));
        let e = ProcessStatus::parse("Threads:\t1 kB\n").expect_err("unit on a count");
        assert!(matches!(e.problem, Problem::Unexpected { .. }));
        let e = ProcessStatus::parse("VmHWM:\t18446744073709551615 kB\nThreads:\t1\n")
            .expect_err("overflow");
        assert!(matches!(e.problem, Problem::Overflow { .. }));
        let e = ProcessStatus::parse("no colon here\n").expect_err("no colon");
        assert_eq!(e.line, Some(1));
    }
}
