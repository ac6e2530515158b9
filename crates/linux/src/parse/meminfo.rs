//! `/proc/meminfo`: the node's memory and swap.
//!
//! Why: the node's capacity and available memory feed the launcher's memory
//! snapshot and the `threshold` baseline detector. Values are converted from
//! the file's `kB` (KiB) to bytes. `MemAvailable` appeared in 3.14.

use super::{duplicate, lines, snippet, ParseError, Problem};

/// `/proc/meminfo`, the fields overbook uses, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemInfo {
    /// Usable RAM.
    pub total: u64,
    /// RAM not used at all.
    pub free: u64,
    /// The kernel's estimate of memory available without swapping (3.14+).
    pub available: Option<u64>,
    /// Swap space.
    pub swap_total: u64,
    /// Swap space unused.
    pub swap_free: u64,
}

impl MemInfo {
    /// The kernel file this type reads.
    pub const FILE: &'static str = "/proc/meminfo";

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let file = Self::FILE;
        let (mut total, mut free, mut available, mut swap_total, mut swap_free) =
            (None, None, None, None, None);
        for (number, line) in lines(text) {
            let Some((key, rest)) = line.split_once(':') else {
                return Err(ParseError::at(
                    file,
                    number,
                    Problem::Unexpected { text: snippet(line) },
                ));
            };
            let slot = match key {
                "MemTotal" => &mut total,
                "MemFree" => &mut free,
                "MemAvailable" => &mut available,
                "SwapTotal" => &mut swap_total,
                "SwapFree" => &mut swap_free,
                _ => continue,
            };
            if slot.is_some() {
                return Err(duplicate(file, number, key));
            }
            *slot = Some(kib(number, key, rest)?);
        }
        let need = |v: Option<u64>, key| v.ok_or_else(|| ParseError::missing(file, key));
        Ok(Self {
            total: need(total, "MemTotal")?,
            free: need(free, "MemFree")?,
            available,
            swap_total: need(swap_total, "SwapTotal")?,
            swap_free: need(swap_free, "SwapFree")?,
        })
    }

    /// Available memory: `MemAvailable`, or `MemFree` on kernels without it.
    pub fn available_or_free(&self) -> u64 {
        self.available.unwrap_or(self.free)
    }
}

/// `   24684092 kB` as bytes.
fn kib(number: usize, key: &str, rest: &str) -> Result<u64, ParseError> {
    let file = MemInfo::FILE;
    let mut words = rest.split_whitespace();
    let Some(value) = words.next() else {
        return Err(ParseError::at(file, number, Problem::NoValue { key: snippet(key) }));
    };
    match (words.next(), words.next()) {
        (Some("kB"), None) => {}
        (Some(other), _) | (None, Some(other)) => {
            return Err(ParseError::at(file, number, Problem::Unexpected { text: snippet(other) }))
        }
        (None, None) => {
            return Err(ParseError::at(
                file,
                number,
                Problem::NoValue { key: format!("{key} unit") },
            ))
        }
    }
    let kib = super::count(file, number, key, value)?;
    kib.checked_mul(1024)
        .ok_or_else(|| ParseError::at(file, number, Problem::Overflow { key: snippet(key) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_hosts_meminfo() {
        let m = MemInfo::parse(include_str!("../../tests/fixtures/proc/meminfo"))
            .expect("fixture parses");
        assert_eq!(m.total, 24684092 * 1024);
        assert!(m.available.is_some());
        assert_eq!(m.swap_total, 0);
        assert!(m.available_or_free() <= m.total);
    }

    #[test]
    fn old_kernels_lack_mem_available() {
        let text = "MemTotal: 100 kB\nMemFree: 50 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n";
        let m = MemInfo::parse(text).expect("parses");
        assert_eq!(m.available, None);
        assert_eq!(m.available_or_free(), 50 * 1024);
    }

    #[test]
    fn odd_input() {
        let e = MemInfo::parse("MemTotal: 100 MB\n").expect_err("unit");
        assert_eq!(e.to_string(), "/proc/meminfo: line 1: unexpected text `MB`");
        let e = MemInfo::parse("MemTotal: 100\n").expect_err("no unit");
        assert_eq!(e.line, Some(1));
        let e = MemInfo::parse("MemTotal: 18446744073709551615 kB\n").expect_err("overflow");
        assert_eq!(e.problem, Problem::Overflow { key: "MemTotal".into() });
        let e = MemInfo::parse("MemTotal: 1 kB\n").expect_err("missing");
        assert_eq!(e.problem, Problem::Missing { key: "MemFree" });
        assert!(MemInfo::parse("garbage\n").is_err());
        // Lines overbook does not read may have no unit at all.
        let text =
            "MemTotal: 1 kB\nHugePages_Total: 0\nMemFree: 1 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n";
        assert!(MemInfo::parse(text).is_ok());
    }
}
