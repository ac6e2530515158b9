//! `/proc/cpuinfo`: the CPU model, for the record of where a benchmark ran.
//!
//! Why only that: the file's keys differ by architecture (x86 prints
//! `model name` for every processor, arm64 prints none), and overbook only
//! writes the model into calibration files. `Key\t: value` lines.

use super::{lines, snippet, ParseError, Problem};

/// What overbook takes from `/proc/cpuinfo`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuInfo {
    /// The first processor's `model name`; `None` where the architecture
    /// prints none.
    pub model_name: Option<String>,
    /// How many `processor` entries the file lists.
    pub processors: usize,
}

impl CpuInfo {
    /// The kernel file this type reads.
    pub const FILE: &'static str = "/proc/cpuinfo";

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut info = Self::default();
        let mut any = false;
        for (number, line) in lines(text) {
            any = true;
            let Some((key, value)) = line.split_once(':') else {
                return Err(ParseError::at(
                    Self::FILE,
                    number,
                    Problem::Unexpected { text: snippet(line) },
                ));
            };
            match key.trim() {
                "processor" => info.processors += 1,
                "model name" if info.model_name.is_none() => {
                    info.model_name = Some(value.trim().to_owned());
                }
                _ => {}
            }
        }
        if !any {
            return Err(ParseError::whole(Self::FILE, Problem::Empty));
        }
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_hosts_cpuinfo() {
        let c = CpuInfo::parse(include_str!("../../tests/fixtures/proc/cpuinfo"))
            .expect("fixture parses");
        assert_eq!(c.model_name.as_deref(), Some("Intel(R) Xeon(R) Processor"));
        assert_eq!(c.processors, 2);
    }

    #[test]
    fn arm_prints_no_model_name() {
        let text = "processor\t: 0\nBogoMIPS\t: 48.00\nCPU implementer\t: 0x41\n\n\
                    processor\t: 1\nBogoMIPS\t: 48.00\n";
        let c = CpuInfo::parse(text).expect("parses");
        assert_eq!((c.model_name, c.processors), (None, 2));
    }

    #[test]
    fn odd_input() {
        assert_eq!(CpuInfo::parse(" \n").map_err(|e| e.problem), Err(Problem::Empty));
        let e = CpuInfo::parse("processor\t: 0\nno colon\n").expect_err("no colon");
        assert_eq!(e.line, Some(2));
    }
}
