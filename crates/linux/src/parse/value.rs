//! Single-value cgroup files: counters such as `memory.current`,
//! `memory.swap.current` and v1 `memory.usage_in_bytes`, and limits such as
//! `memory.max`, `memory.high`, `memory.low`, `memory.min`, `memory.swap.max`.
//!
//! Why: these are read on every sample and written by every protection
//! action, so a limit is a type (`max` or bytes), never a magic number.

use std::fmt;

use super::{count, single_line, ParseError};

/// A byte count in a file of its own (`memory.current`,
/// `memory.usage_in_bytes`, `memory.swap.current`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteCount(pub u64);

impl ByteCount {
    /// Parses the file's text; `file` names it in errors.
    pub fn parse(file: &'static str, text: &str) -> Result<Self, ParseError> {
        let (number, value) = single_line(file, text)?;
        count(file, number, file, value).map(Self)
    }
}

/// A v2 memory limit or protection value: the word `max` or bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// No limit (`max`).
    Unlimited,
    /// This many bytes.
    Bytes(u64),
}

impl Limit {
    /// Parses the file's text; `file` names it in errors.
    pub fn parse(file: &'static str, text: &str) -> Result<Self, ParseError> {
        let (number, value) = single_line(file, text)?;
        if value == "max" {
            return Ok(Self::Unlimited);
        }
        count(file, number, file, value).map(Self::Bytes)
    }

    /// The bytes, or `None` when unlimited.
    pub fn bytes(self) -> Option<u64> {
        match self {
            Self::Unlimited => None,
            Self::Bytes(b) => Some(b),
        }
    }

    /// The text cgroup v1 accepts for this limit (`-1` is unlimited there).
    pub fn v1_text(self) -> String {
        match self {
            Self::Unlimited => "-1".to_owned(),
            Self::Bytes(b) => b.to_string(),
        }
    }
}

/// As cgroup v2 writes and reads it: `max` or a decimal byte count.
impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unlimited => f.write_str("max"),
            Self::Bytes(b) => write!(f, "{b}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::Problem;

    #[test]
    fn reads_counters() {
        let text = include_str!("../../tests/fixtures/v2/memory.current");
        assert_eq!(ByteCount::parse("memory.current", text), Ok(ByteCount(66715648)));
        let text = include_str!("../../tests/fixtures/v1/memory.usage_in_bytes");
        assert!(ByteCount::parse("memory.usage_in_bytes", text).is_ok());
    }

    #[test]
    fn reads_limits() {
        let text = include_str!("../../tests/fixtures/v2/memory.max");
        assert_eq!(Limit::parse("memory.max", text), Ok(Limit::Unlimited));
        assert_eq!(Limit::parse("memory.high", "268435456\n"), Ok(Limit::Bytes(268435456)));
        let text = include_str!("../../tests/fixtures/v1/memory.limit_in_bytes");
        assert_eq!(
            Limit::parse("memory.limit_in_bytes", text),
            Ok(Limit::Bytes(9223372036854771712))
        );
    }

    #[test]
    fn round_trips_through_display() {
        for l in [Limit::Unlimited, Limit::Bytes(0), Limit::Bytes(u64::MAX)] {
            assert_eq!(Limit::parse("memory.max", &l.to_string()), Ok(l));
        }
        assert_eq!(Limit::Unlimited.v1_text(), "-1");
    }

    #[test]
    fn rejects_odd_values() {
        assert!(Limit::parse("memory.max", "Max\n").is_err());
        assert!(Limit::parse("memory.max", "-1\n").is_err());
        let e = ByteCount::parse("memory.current", "1\n2\n").expect_err("two lines");
        assert_eq!(e.line, Some(2));
        assert_eq!(
            ByteCount::parse("memory.current", "").map_err(|e| e.problem),
            Err(Problem::Empty)
        );
        assert!(ByteCount::parse("memory.current", "1 2").is_err());
    }
}
