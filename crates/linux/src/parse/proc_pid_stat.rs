//! `/proc/<pid>/stat`: one process's state and CPU time.
//!
//! Why: what a process (the agent itself, in `bench agent-overhead`) costs
//! in CPU is the difference of two readings of `utime` and `stime`. The
//! command name (field 2) is in parentheses and may hold spaces and
//! parentheses itself, so the fields are counted from the *last* `)`.
//! Times are in clock ticks (`USER_HZ`, 100 a second on every Linux ABI).

use super::{count, snippet, ParseError, Problem};

/// The fields of `/proc/<pid>/stat` overbook uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcessStat {
    /// The command name (`comm`, at most 15 bytes, as the kernel prints it).
    pub comm: String,
    /// The state letter (`R`, `S`, `D`, `Z`, ...).
    pub state: char,
    /// CPU time in user mode, all threads, clock ticks (field 14).
    pub utime: u64,
    /// CPU time in kernel mode, all threads, clock ticks (field 15).
    pub stime: u64,
    /// Threads (field 20).
    pub threads: u64,
}

impl ProcessStat {
    /// The kernel file this type reads (for one pid: `/proc/1234/stat`).
    pub const FILE: &'static str = "/proc/<pid>/stat";

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let file = Self::FILE;
        let text = text.trim_end_matches('\n');
        if text.trim().is_empty() {
            return Err(ParseError::whole(file, Problem::Empty));
        }
        let (Some(open), Some(close)) = (text.find('('), text.rfind(')')) else {
            return Err(ParseError::missing(file, "(comm)"));
        };
        if close < open {
            return Err(ParseError::missing(file, "(comm)"));
        }
        let comm = text[open + 1..close].to_owned();
        // Field 3 (state) is the first word after the command.
        let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
        let field = |n: usize, key: &'static str| -> Result<&str, ParseError> {
            fields.get(n - 3).copied().ok_or_else(|| ParseError::missing(file, key))
        };
        let state_word = field(3, "state")?;
        let mut letters = state_word.chars();
        let state = match (letters.next(), letters.next()) {
            (Some(c), None) if c.is_ascii_alphabetic() => c,
            _ => {
                return Err(ParseError::whole(
                    file,
                    Problem::BadValue { key: "state".into(), value: snippet(state_word) },
                ))
            }
        };
        let number = |n: usize, key: &'static str| -> Result<u64, ParseError> {
            // One line: errors name line 1.
            count(file, 1, key, field(n, key)?)
        };
        Ok(Self {
            comm,
            state,
            utime: number(14, "utime")?,
            stime: number(15, "stime")?,
            threads: number(20, "num_threads")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_captured_stat() {
        let s = ProcessStat::parse(include_str!("../../tests/fixtures/proc/pid-stat"))
            .expect("fixture parses");
        assert_eq!(s.comm, "cat");
        assert_eq!(s.state, 'R');
        assert_eq!((s.utime, s.stime, s.threads), (0, 0, 1));
    }

    #[test]
    fn counts_fields_from_the_last_parenthesis() {
        let text = "42 (a) b) (c) S 1 42 42 0 -1 0 0 0 0 0 17 5 0 0 20 0 3 0 100 0 0\n";
        let s = ProcessStat::parse(text).expect("parses");
        assert_eq!(s.comm, "a) b) (c");
        assert_eq!((s.state, s.utime, s.stime, s.threads), ('S', 17, 5, 3));
    }

    #[test]
    fn odd_input() {
        let e = ProcessStat::parse("").expect_err("empty");
        assert_eq!(e.problem, Problem::Empty);
        let e = ProcessStat::parse("42 cat R 1").expect_err("no comm");
        assert_eq!(e.to_string(), "/proc/<pid>/stat: required key `(comm)` is missing");
        let e = ProcessStat::parse("42 (cat) R 1 2").expect_err("short");
        assert_eq!(e.problem, Problem::Missing { key: "utime" });
        let e = ProcessStat::parse("42 (cat) RR 1").expect_err("bad state");
        assert!(matches!(e.problem, Problem::BadValue { .. }));
        let text = "42 (cat) R 1 42 42 0 -1 0 0 0 0 0 x 5 0 0 20 0 3 0\n";
        let e = ProcessStat::parse(text).expect_err("bad utime");
        assert_eq!(e.to_string(), "/proc/<pid>/stat: line 1: `utime`: `x` is not a valid value");
        let e = ProcessStat::parse(") (").expect_err("reversed");
        assert!(matches!(e.problem, Problem::Missing { .. }));
    }
}
