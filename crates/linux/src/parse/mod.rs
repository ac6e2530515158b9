//! Parsers for the kernel's text files, one type per file.
//!
//! Why a module of its own: parsing never touches a real system, so every
//! parser is tested on literal kernel text and fuzzed with arbitrary input,
//! and the readers in [`crate::v1`] / [`crate::v2`] stay thin. A parser takes
//! `&str`, never panics, and on odd input returns a [`ParseError`] naming the
//! file and the line or key at fault. Keys a parser does not know are
//! skipped, because newer kernels keep adding them; fields only some kernels
//! print are `Option`.

mod cpu_usage;
mod cpuinfo;
mod freezer;
mod meminfo;
mod memory_events;
mod memory_stat;
mod mounts;
mod oom_control;
mod pressure;
mod proc_cgroup;
mod proc_pid_schedstat;
mod proc_pid_stat;
mod proc_pid_status;
mod proc_stat;
mod procs;
mod swaps;
mod v1_stat;
mod value;
mod vmstat;

pub use cpu_usage::{CpuAcctUsage, CpuStat};
pub use cpuinfo::CpuInfo;
pub use freezer::{CgroupEvents, FreezerState};
pub use meminfo::MemInfo;
pub use memory_events::MemoryEvents;
pub use memory_stat::MemoryStat;
pub use mounts::{Mount, Mounts};
pub use oom_control::V1OomControl;
pub use pressure::{Pressure, PsiLine};
pub use proc_cgroup::{CgroupMembership, ProcCgroup};
pub use proc_pid_schedstat::SchedStat;
pub use proc_pid_stat::ProcessStat;
pub use proc_pid_status::ProcessStatus;
pub use proc_stat::CpuTimes;
pub use procs::{CgroupProcs, Pid};
pub use swaps::{SwapArea, Swaps};
pub use v1_stat::V1MemoryStat;
pub use value::{ByteCount, Limit};
pub use vmstat::VmStat;

use std::fmt;

/// A kernel file whose text could not be read as that file's format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {problem}", At(.line))]
pub struct ParseError {
    /// The kernel file, as the kernel names it (`memory.stat`, `/proc/meminfo`).
    pub file: &'static str,
    /// The 1-based line at fault, when one line is.
    pub line: Option<usize>,
    /// What is wrong.
    pub problem: Problem,
}

/// What is wrong with a kernel file's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// A key is there but its value is not.
    #[error("`{key}` has no value")]
    NoValue { key: String },
    /// A value is not the non-negative integer (or the fixed word) expected.
    #[error("`{key}`: `{value}` is not a valid value")]
    BadValue { key: String, value: String },
    /// A value does not fit in 64 bits once scaled to bytes.
    #[error("`{key}`: value overflows 64 bits")]
    Overflow { key: String },
    /// A key appears twice; the kernel never prints one twice.
    #[error("`{key}` appears twice")]
    Duplicate { key: String },
    /// A key every kernel prints is missing.
    #[error("required key `{key}` is missing")]
    Missing { key: &'static str },
    /// Text where none or other text is expected.
    #[error("unexpected text `{text}`")]
    Unexpected { text: String },
    /// The file holds nothing but whitespace.
    #[error("the file is empty")]
    Empty,
}

/// Formats ": line N" when a line is known.
struct At<'a>(&'a Option<usize>);

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(line) => write!(f, ": line {line}"),
            None => Ok(()),
        }
    }
}

impl ParseError {
    pub(crate) fn at(file: &'static str, line: usize, problem: Problem) -> Self {
        Self { file, line: Some(line), problem }
    }

    pub(crate) fn whole(file: &'static str, problem: Problem) -> Self {
        Self { file, line: None, problem }
    }

    pub(crate) fn missing(file: &'static str, key: &'static str) -> Self {
        Self::whole(file, Problem::Missing { key })
    }
}

/// At most this many characters of offending text are kept in an error, so
/// that a garbage file cannot make a huge error message.
const SNIPPET: usize = 64;

/// The offending text, cut short on a character boundary.
pub(crate) fn snippet(text: &str) -> String {
    match text.char_indices().nth(SNIPPET) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The non-blank lines of `text`, trimmed, with their 1-based numbers.
pub(crate) fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split('\n')
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty())
}

/// A `key value` line: exactly two whitespace-separated words.
pub(crate) fn key_value<'a>(
    file: &'static str,
    number: usize,
    line: &'a str,
) -> Result<(&'a str, &'a str), ParseError> {
    let mut words = line.split_whitespace();
    let key = words.next().unwrap_or_default();
    let Some(value) = words.next() else {
        return Err(ParseError::at(file, number, Problem::NoValue { key: snippet(key) }));
    };
    if let Some(extra) = words.next() {
        return Err(ParseError::at(file, number, Problem::Unexpected { text: snippet(extra) }));
    }
    Ok((key, value))
}

/// A non-negative decimal integer.
pub(crate) fn count(
    file: &'static str,
    number: usize,
    key: &str,
    value: &str,
) -> Result<u64, ParseError> {
    // `u64::from_str` accepts a leading `+`; the kernel never prints one.
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad_value(file, number, key, value));
    }
    value.parse().map_err(|_| bad_value(file, number, key, value))
}

pub(crate) fn bad_value(file: &'static str, number: usize, key: &str, value: &str) -> ParseError {
    ParseError::at(file, number, Problem::BadValue { key: snippet(key), value: snippet(value) })
}

pub(crate) fn duplicate(file: &'static str, number: usize, key: &str) -> ParseError {
    ParseError::at(file, number, Problem::Duplicate { key: snippet(key) })
}

/// The only non-blank line of a single-value file.
pub(crate) fn single_line<'a>(
    file: &'static str,
    text: &'a str,
) -> Result<(usize, &'a str), ParseError> {
    let mut it = lines(text);
    let Some(first) = it.next() else {
        return Err(ParseError::whole(file, Problem::Empty));
    };
    if let Some((number, extra)) = it.next() {
        return Err(ParseError::at(file, number, Problem::Unexpected { text: snippet(extra) }));
    }
    Ok(first)
}

/// Defines a struct for a flat `key count` file (`memory.stat`,
/// `memory.events`) and its parser. Required keys are those every kernel with
/// the file prints; optional keys become `Option<u64>`. Unknown keys are
/// skipped; a known key twice, or with a value that is not a count, is an
/// error.
macro_rules! counter_file {
    (
        $(#[$meta:meta])*
        pub struct $name:ident in $file:literal {
            required {
                $( $(#[$rdoc:meta])* $rfield:ident = $rkey:literal, )*
            }
            optional {
                $( $(#[$odoc:meta])* $ofield:ident = $okey:literal, )*
            }
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name {
            $( $(#[$rdoc])* pub $rfield: u64, )*
            $( $(#[$odoc])* pub $ofield: Option<u64>, )*
        }

        impl $name {
            /// The kernel file this type reads.
            pub const FILE: &'static str = $file;

            /// Parses the file's text.
            pub fn parse(text: &str) -> Result<Self, $crate::parse::ParseError> {
                $( let mut $rfield: Option<u64> = None; )*
                $( let mut $ofield: Option<u64> = None; )*
                let mut any = false;
                for (number, line) in $crate::parse::lines(text) {
                    any = true;
                    let (key, value) = $crate::parse::key_value($file, number, line)?;
                    let slot = match key {
                        $( $rkey => &mut $rfield, )*
                        $( $okey => &mut $ofield, )*
                        _ => continue,
                    };
                    if slot.is_some() {
                        return Err($crate::parse::duplicate($file, number, key));
                    }
                    *slot = Some($crate::parse::count($file, number, key, value)?);
                }
                if !any {
                    return Err($crate::parse::ParseError::whole(
                        $file,
                        $crate::parse::Problem::Empty,
                    ));
                }
                Ok(Self {
                    $( $rfield: $rfield
                        .ok_or_else(|| $crate::parse::ParseError::missing($file, $rkey))?, )*
                    $( $ofield, )*
                })
            }
        }
    };
}

pub(crate) use counter_file;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_file_and_line() {
        let e = ParseError::at("memory.stat", 3, Problem::Duplicate { key: "anon".into() });
        assert_eq!(e.to_string(), "memory.stat: line 3: `anon` appears twice");
        let e = ParseError::missing("memory.stat", "anon");
        assert_eq!(e.to_string(), "memory.stat: required key `anon` is missing");
    }

    #[test]
    fn snippets_are_cut_on_char_boundaries() {
        let long = "é".repeat(100);
        let s = snippet(&long);
        assert_eq!(s.chars().count(), SNIPPET + 1);
        assert_eq!(snippet("short"), "short");
    }

    #[test]
    fn counts_reject_signs_and_junk() {
        assert_eq!(count("f", 1, "k", "42"), Ok(42));
        assert!(count("f", 1, "k", "+42").is_err());
        assert!(count("f", 1, "k", "-1").is_err());
        assert!(count("f", 1, "k", "").is_err());
        assert!(count("f", 1, "k", "18446744073709551616").is_err());
    }
}
