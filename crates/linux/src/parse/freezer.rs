//! The freezer's state: v1 `freezer.state` and v2 `cgroup.events`.
//!
//! Why: freezing is asynchronous. A write asks for it; these files say when
//! every task has actually stopped (v1 `FREEZING` → `FROZEN`, v2 `frozen 1`),
//! which is when a preemption by freezing has taken effect.

use super::{count, duplicate, key_value, lines, single_line, snippet, ParseError, Problem};

/// v1 `freezer.state`, and the common freezer state of both versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FreezerState {
    /// Running.
    Thawed,
    /// Asked to freeze; some tasks still run.
    Freezing,
    /// Every task stopped.
    Frozen,
}

impl FreezerState {
    /// The kernel file this type reads.
    pub const FILE: &'static str = "freezer.state";

    /// Parses v1 `freezer.state`.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let (number, word) = single_line(Self::FILE, text)?;
        match word {
            "THAWED" => Ok(Self::Thawed),
            "FREEZING" => Ok(Self::Freezing),
            "FROZEN" => Ok(Self::Frozen),
            other => Err(super::bad_value(Self::FILE, number, "state", other)),
        }
    }

    /// The word v1 `freezer.state` takes to request this state.
    pub fn v1_word(self) -> &'static str {
        match self {
            Self::Thawed => "THAWED",
            Self::Freezing | Self::Frozen => "FROZEN",
        }
    }
}

/// v2 `cgroup.events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CgroupEvents {
    /// The cgroup or a descendant has live processes.
    pub populated: bool,
    /// The cgroup is frozen: every task stopped (5.2+).
    pub frozen: Option<bool>,
}

impl CgroupEvents {
    /// The kernel file this type reads.
    pub const FILE: &'static str = "cgroup.events";

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let file = Self::FILE;
        let (mut populated, mut frozen) = (None, None);
        for (number, line) in lines(text) {
            let (key, value) = key_value(file, number, line)?;
            let slot = match key {
                "populated" => &mut populated,
                "frozen" => &mut frozen,
                _ => continue,
            };
            if slot.is_some() {
                return Err(duplicate(file, number, key));
            }
            *slot = Some(match count(file, number, key, value)? {
                0 => false,
                1 => true,
                _ => {
                    return Err(ParseError::at(
                        file,
                        number,
                        Problem::BadValue { key: key.to_owned(), value: snippet(value) },
                    ))
                }
            });
        }
        Ok(Self { populated: populated.ok_or(ParseError::missing(file, "populated"))?, frozen })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_v1_states() {
        let text = include_str!("../../tests/fixtures/v1/freezer.state");
        assert_eq!(FreezerState::parse(text), Ok(FreezerState::Thawed));
        assert_eq!(FreezerState::parse("FREEZING\n"), Ok(FreezerState::Freezing));
        assert_eq!(FreezerState::parse("FROZEN"), Ok(FreezerState::Frozen));
        let e = FreezerState::parse("frozen\n").expect_err("case matters");
        assert_eq!(e.to_string(), "freezer.state: line 1: `state`: `frozen` is not a valid value");
        assert!(FreezerState::parse("").is_err());
    }

    #[test]
    fn reads_v2_events() {
        let e = CgroupEvents::parse(include_str!("../../tests/fixtures/v2/cgroup.events"))
            .expect("fixture parses");
        assert_eq!(e, CgroupEvents { populated: true, frozen: Some(false) });
        let e = CgroupEvents::parse("populated 0\n").expect("pre-5.2");
        assert_eq!(e.frozen, None);
        assert!(CgroupEvents::parse("populated 2\n").is_err());
        assert!(CgroupEvents::parse("frozen 1\n").is_err());
    }
}
