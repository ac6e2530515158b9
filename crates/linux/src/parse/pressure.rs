//! Pressure stall information: cgroup v2 `memory.pressure` and the
//! system-wide `/proc/pressure/memory`.
//!
//! Why: PSI is the kernel's own measure of time lost to memory shortage; the
//! detector uses it as evidence beside the fault rates. `some` is the share of
//! time at least one task stalled, `full` the share all non-idle tasks did.
//! Averages are percentages over 10, 60 and 300 seconds; `total` is the
//! cumulative stall time. `/proc/pressure/cpu` lacked `full` before 5.13, so
//! `full` is optional.

use std::time::Duration;

use super::{duplicate, lines, snippet, ParseError, Problem};

/// One PSI line (`some` or `full`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PsiLine {
    /// Percent of the last 10 s stalled.
    pub avg10: f64,
    /// Percent of the last 60 s stalled.
    pub avg60: f64,
    /// Percent of the last 300 s stalled.
    pub avg300: f64,
    /// Total stall time since boot (or since the cgroup was created).
    pub total: Duration,
}

/// A PSI file: `memory.pressure` or `/proc/pressure/memory`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pressure {
    /// Some tasks stalled.
    pub some: PsiLine,
    /// All non-idle tasks stalled at once.
    pub full: Option<PsiLine>,
}

impl Pressure {
    /// The per-cgroup file.
    pub const CGROUP_FILE: &'static str = "memory.pressure";
    /// The system-wide file.
    pub const SYSTEM_FILE: &'static str = "/proc/pressure/memory";

    /// Parses PSI text; `file` names it in errors (one of the constants above).
    pub fn parse_file(file: &'static str, text: &str) -> Result<Self, ParseError> {
        let mut some = None;
        let mut full = None;
        for (number, line) in lines(text) {
            let mut words = line.split_whitespace();
            let kind = words.next().unwrap_or_default();
            let slot = match kind {
                "some" => &mut some,
                "full" => &mut full,
                other => {
                    return Err(ParseError::at(
                        file,
                        number,
                        Problem::Unexpected { text: snippet(other) },
                    ))
                }
            };
            if slot.is_some() {
                return Err(duplicate(file, number, kind));
            }
            *slot = Some(psi_line(file, number, words)?);
        }
        let Some(some) = some else {
            return Err(if full.is_some() {
                ParseError::missing(file, "some")
            } else {
                ParseError::whole(file, Problem::Empty)
            });
        };
        Ok(Self { some, full })
    }

    /// Parses a cgroup's `memory.pressure`.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        Self::parse_file(Self::CGROUP_FILE, text)
    }
}

fn psi_line<'a>(
    file: &'static str,
    number: usize,
    words: impl Iterator<Item = &'a str>,
) -> Result<PsiLine, ParseError> {
    let (mut avg10, mut avg60, mut avg300, mut total) = (None, None, None, None);
    for word in words {
        let Some((key, value)) = word.split_once('=') else {
            return Err(ParseError::at(file, number, Problem::Unexpected { text: snippet(word) }));
        };
        let slot = match key {
            "avg10" => &mut avg10,
            "avg60" => &mut avg60,
            "avg300" => &mut avg300,
            "total" => {
                if total.is_some() {
                    return Err(duplicate(file, number, key));
                }
                total = Some(super::count(file, number, key, value)?);
                continue;
            }
            _ => continue,
        };
        if slot.is_some() {
            return Err(duplicate(file, number, key));
        }
        *slot = Some(percent(file, number, key, value)?);
    }
    let need = |v: Option<f64>, key| v.ok_or_else(|| ParseError::at(file, number, missing(key)));
    Ok(PsiLine {
        avg10: need(avg10, "avg10")?,
        avg60: need(avg60, "avg60")?,
        avg300: need(avg300, "avg300")?,
        total: Duration::from_micros(
            total.ok_or_else(|| ParseError::at(file, number, missing("total")))?,
        ),
    })
}

fn missing(key: &'static str) -> Problem {
    Problem::Missing { key }
}

/// A percentage as the kernel prints it (`12.34`): digits and one dot only.
fn percent(file: &'static str, number: usize, key: &str, value: &str) -> Result<f64, ParseError> {
    let plain = !value.is_empty()
        && value.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && value.bytes().filter(|&b| b == b'.').count() <= 1;
    match value.parse::<f64>() {
        Ok(v) if plain && v.is_finite() => Ok(v),
        _ => Err(super::bad_value(file, number, key, value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cgroup_pressure() {
        let p = Pressure::parse(include_str!("../../tests/fixtures/v2/memory.pressure"))
            .expect("fixture parses");
        assert_eq!(p.some.avg10, 1.53);
        assert_eq!(p.some.total, Duration::from_micros(1835401));
        let full = p.full.expect("full line");
        assert_eq!(full.avg300, 0.09);
        assert_eq!(full.total, Duration::from_micros(904113));
    }

    #[test]
    fn reads_the_hosts_system_pressure() {
        let p = Pressure::parse_file(
            Pressure::SYSTEM_FILE,
            include_str!("../../tests/fixtures/proc/pressure-memory"),
        )
        .expect("fixture parses");
        assert!(p.full.is_some());
    }

    #[test]
    fn full_is_optional() {
        let p = Pressure::parse_file(
            "/proc/pressure/cpu",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=12\n",
        )
        .expect("parses");
        assert_eq!(p.full, None);
    }

    #[test]
    fn odd_input_is_an_error_naming_the_key() {
        let e = Pressure::parse("some avg10=x avg60=0.00 avg300=0.00 total=1\n").expect_err("bad");
        assert_eq!(e.to_string(), "memory.pressure: line 1: `avg10`: `x` is not a valid value");
        let e = Pressure::parse("some avg10=NaN avg60=0.00 avg300=0.00 total=1\n");
        assert!(e.is_err());
        let e = Pressure::parse("some avg10=1.0 avg60=0.00 total=1\n").expect_err("missing");
        assert_eq!(e.problem, Problem::Missing { key: "avg300" });
        let e = Pressure::parse("full avg10=1.0 avg60=0.00 avg300=0.00 total=1\n");
        assert_eq!(e.map_err(|e| e.problem), Err(Problem::Missing { key: "some" }));
        assert!(Pressure::parse("middle avg10=0.00\n").is_err());
        assert_eq!(Pressure::parse("").map_err(|e| e.problem), Err(Problem::Empty));
    }
}
