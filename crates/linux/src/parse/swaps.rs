//! `/proc/swaps`: the swap areas in use, one a line under a header.
//!
//! Why: a benchmark that compares policies under memory pressure needs a
//! machine with swap, and says which. Sizes are converted from the file's
//! KiB to bytes; a priority may be negative (the kernel's default areas
//! count down from -2).

use super::{count, lines, snippet, ParseError, Problem};

/// One swap area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapArea {
    /// The device or file, as the kernel prints it (spaces escaped `\040`).
    pub filename: String,
    /// `partition` or `file`.
    pub kind: String,
    /// Its size, bytes.
    pub size: u64,
    /// How much of it is used, bytes.
    pub used: u64,
    /// Its priority (higher is used first).
    pub priority: i64,
}

/// `/proc/swaps`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Swaps {
    /// The areas in use, in file order; empty when the machine has no swap.
    pub areas: Vec<SwapArea>,
}

impl Swaps {
    /// The kernel file this type reads.
    pub const FILE: &'static str = "/proc/swaps";

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let file = Self::FILE;
        let mut it = lines(text);
        match it.next() {
            Some((_, header)) if header.starts_with("Filename") => {}
            Some((number, other)) => {
                return Err(ParseError::at(
                    file,
                    number,
                    Problem::Unexpected { text: snippet(other) },
                ))
            }
            None => return Err(ParseError::whole(file, Problem::Empty)),
        }
        let mut areas = Vec::new();
        for (number, line) in it {
            let words: Vec<&str> = line.split_whitespace().collect();
            let [filename, kind, size, used, priority] = words[..] else {
                return Err(ParseError::at(
                    file,
                    number,
                    Problem::Unexpected { text: snippet(line) },
                ));
            };
            let kib = |key: &str, value: &str| -> Result<u64, ParseError> {
                count(file, number, key, value)?.checked_mul(1024).ok_or_else(|| {
                    ParseError::at(file, number, Problem::Overflow { key: key.into() })
                })
            };
            let digits = priority.strip_prefix('-').unwrap_or(priority);
            let priority: i64 = if digits.bytes().all(|b| b.is_ascii_digit()) {
                priority.parse().ok()
            } else {
                None
            }
            .ok_or_else(|| super::bad_value(file, number, "Priority", priority))?;
            areas.push(SwapArea {
                filename: filename.to_owned(),
                kind: kind.to_owned(),
                size: kib("Size", size)?,
                used: kib("Used", used)?,
                priority,
            });
        }
        Ok(Self { areas })
    }

    /// The total size of the areas, bytes.
    pub fn total(&self) -> u64 {
        self.areas.iter().fold(0u64, |sum, a| sum.saturating_add(a.size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_without_swap() {
        // Captured on the test host, which has none.
        let s = Swaps::parse(include_str!("../../tests/fixtures/proc/swaps")).expect("parses");
        assert!(s.areas.is_empty());
        assert_eq!(s.total(), 0);
    }

    #[test]
    fn areas() {
        // As the test VM's zram and a swap file print (mm/swapfile.c).
        let text = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                    /dev/zram0                              partition\t2097148\t\t1024\t\t100\n\
                    /var/tmp/my\\040swap                     file\t\t1048572\t\t0\t\t-2\n";
        let s = Swaps::parse(text).expect("parses");
        assert_eq!(s.areas.len(), 2);
        assert_eq!(s.areas[0].filename, "/dev/zram0");
        assert_eq!(s.areas[0].kind, "partition");
        assert_eq!((s.areas[0].size, s.areas[0].used), (2097148 * 1024, 1024 * 1024));
        assert_eq!(s.areas[0].priority, 100);
        assert_eq!(s.areas[1].filename, "/var/tmp/my\\040swap");
        assert_eq!(s.areas[1].priority, -2);
        assert_eq!(s.total(), (2097148 + 1048572) * 1024);
    }

    #[test]
    fn odd_input() {
        assert_eq!(Swaps::parse("").map_err(|e| e.problem), Err(Problem::Empty));
        let e = Swaps::parse("/dev/zram0 partition 1 0 100\n").expect_err("no header");
        assert_eq!(e.line, Some(1));
        let e = Swaps::parse("Filename Type\n/dev/zram0 partition 1 0\n").expect_err("short");
        assert_eq!(e.line, Some(2));
        let e = Swaps::parse("Filename\n/dev/zram0 partition x 0 1\n").expect_err("size");
        assert_eq!(e.to_string(), "/proc/swaps: line 2: `Size`: `x` is not a valid value");
        let e = Swaps::parse("Filename\n/dev/zram0 partition 1 0 +1\n").expect_err("priority");
        assert!(matches!(e.problem, Problem::BadValue { .. }));
        let e = Swaps::parse("Filename\n/dev/zram0 partition 18446744073709551615 0 1\n")
            .expect_err("overflow");
        assert!(matches!(e.problem, Problem::Overflow { .. }));
    }
}
