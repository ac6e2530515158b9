//! A cgroup's CPU time: cgroup v2 `cpu.stat` and v1 `cpuacct.usage`.
//!
//! Why: the best-effort CPU budget is what the node leaves once everything
//! but best-effort work has what it used, and best-effort work's part is
//! the sum of its containers' own CPU time. v2 prints `usage_usec` in every
//! cgroup's `cpu.stat`, whether or not the cpu controller is enabled there;
//! v1 counts it in the cpuacct hierarchy, in nanoseconds.

use super::{count, counter_file, single_line};
use std::time::Duration;

counter_file! {
    /// cgroup v2 `cpu.stat`: the first three keys are always there; the
    /// bandwidth ones only with the cpu controller enabled.
    pub struct CpuStat in "cpu.stat" {
        required {
            /// CPU time of the cgroup's processes, in microseconds.
            usage_usec = "usage_usec",
            /// Of which in user mode.
            user_usec = "user_usec",
            /// Of which in the kernel.
            system_usec = "system_usec",
        }
        optional {
            /// Enforcement periods that have elapsed (with a `cpu.max`).
            nr_periods = "nr_periods",
            /// Periods in which the cgroup ran out of quota.
            nr_throttled = "nr_throttled",
            /// Time the cgroup's processes waited for the next period.
            throttled_usec = "throttled_usec",
        }
    }
}

impl CpuStat {
    /// The cgroup's CPU time.
    pub fn used(&self) -> Duration {
        Duration::from_micros(self.usage_usec)
    }
}

/// cgroup v1 `cpuacct.usage`: a cgroup's CPU time, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuAcctUsage(pub Duration);

impl CpuAcctUsage {
    /// The kernel file this type reads.
    pub const FILE: &'static str = "cpuacct.usage";

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, super::ParseError> {
        let (number, value) = single_line(Self::FILE, text)?;
        Ok(Self(Duration::from_nanos(count(Self::FILE, number, "usage", value)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_v2_cpu_stat_with_and_without_the_controller() {
        // The hybrid host's unified root (no controller there).
        let s = CpuStat::parse(include_str!("../../tests/fixtures/v2/cpu.stat")).expect("parses");
        assert_eq!(s.used(), Duration::from_micros(13_275_917_150));
        assert_eq!(s.nr_throttled, None);
        let s = CpuStat::parse(
            "usage_usec 10\nuser_usec 6\nsystem_usec 4\nnr_periods 7\nnr_throttled 3\n\
             throttled_usec 99\nnr_bursts 0\nburst_usec 0\n",
        )
        .expect("parses");
        assert_eq!((s.usage_usec, s.nr_throttled), (10, Some(3)));
        let e = CpuStat::parse("user_usec 6\nsystem_usec 4\n").expect_err("no usage");
        assert!(e.to_string().contains("usage_usec"), "{e}");
    }

    #[test]
    fn reads_v1_cpuacct_usage_in_nanoseconds() {
        let u = CpuAcctUsage::parse("13599112780454\n").expect("parses");
        assert_eq!(u.0, Duration::from_nanos(13_599_112_780_454));
        let e = CpuAcctUsage::parse("-1\n").expect_err("not a count");
        assert!(e.to_string().starts_with("cpuacct.usage"), "{e}");
        assert!(CpuAcctUsage::parse("").is_err());
    }
}
