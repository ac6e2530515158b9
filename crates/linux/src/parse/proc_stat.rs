//! `/proc/stat`'s `cpu` line: the machine's CPU time since boot.
//!
//! Why: how busy a benchmark kept the machine, and how much of its time the
//! CPUs waited on I/O, is the difference of two readings. Times are in
//! clock ticks (`USER_HZ`); only shares of them are meaningful here.

use super::{lines, snippet, ParseError, Problem};

/// The all-CPU line of `/proc/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    /// user + nice + system + idle + iowait + irq + softirq + steal (guest
    /// time is counted in user already).
    pub total: u64,
    /// Idle, not waiting on I/O.
    pub idle: u64,
    /// Idle while I/O was outstanding.
    pub iowait: u64,
    /// Time a virtual machine's CPUs were ready but the hypervisor ran
    /// something else (0 on bare metal and kernels that do not say).
    pub steal: u64,
    /// The CPUs the times are summed over (the `cpuN` lines; at least 1).
    pub cpus: usize,
}

impl CpuTimes {
    /// The kernel file this type reads.
    pub const FILE: &'static str = "/proc/stat";

    /// Parses the file's text (only its `cpu` line).
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let file = Self::FILE;
        let Some((number, line)) =
            lines(text).find(|(_, l)| l.split_whitespace().next() == Some("cpu"))
        else {
            return Err(ParseError::missing(file, "cpu"));
        };
        const NAMES: [&str; 8] =
            ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"];
        let mut ticks = [0u64; 8];
        let mut words = line.split_whitespace().skip(1);
        for (i, name) in NAMES.iter().enumerate() {
            match words.next() {
                Some(value) => ticks[i] = super::count(file, number, name, value)?,
                // Every kernel prints user to idle; older ones stop there.
                None if i < 4 => {
                    return Err(ParseError::at(
                        file,
                        number,
                        Problem::NoValue { key: (*name).into() },
                    ))
                }
                None => break,
            }
        }
        let total = ticks.iter().try_fold(0u64, |sum, &t| sum.checked_add(t)).ok_or_else(|| {
            ParseError::at(file, number, Problem::Overflow { key: snippet("cpu") })
        })?;
        let cpus = lines(text)
            .filter(|(_, l)| {
                l.strip_prefix("cpu")
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
            })
            .count()
            .max(1);
        Ok(Self { total, idle: ticks[3], iowait: ticks[4], steal: ticks[7], cpus })
    }

    /// The share of the time from `earlier` to `self` the CPUs were busy,
    /// and the share they waited on I/O (0 and 0 when no tick passed).
    pub fn shares_since(&self, earlier: &CpuTimes) -> (f64, f64) {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return (0.0, 0.0);
        }
        let idle = self.idle.saturating_sub(earlier.idle);
        let iowait = self.iowait.saturating_sub(earlier.iowait);
        let busy = total.saturating_sub(idle).saturating_sub(iowait);
        (busy as f64 / total as f64, iowait as f64 / total as f64)
    }

    /// The share of the time from `earlier` to `self` the hypervisor took
    /// from this machine's CPUs (counted in the busy share too): a
    /// benchmark's noise on a shared host, not its own work.
    pub fn steal_since(&self, earlier: &CpuTimes) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return 0.0;
        }
        self.steal.saturating_sub(earlier.steal) as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_hosts_stat() {
        let c = CpuTimes::parse(include_str!("../../tests/fixtures/proc/stat"))
            .expect("fixture parses");
        assert_eq!(c.idle, 5742490);
        assert_eq!(c.iowait, 104725);
        assert_eq!(c.steal, 36640);
        assert_eq!(c.cpus, 2, "cpu0 and cpu1");
        assert_eq!(c.total, 3954187 + 424151 + 920449 + 5742490 + 104725 + 24174 + 36640);
    }

    #[test]
    fn shares_of_the_time_between_two_readings() {
        let a = CpuTimes { total: 100, idle: 50, iowait: 10, steal: 5, cpus: 1 };
        let b = CpuTimes { total: 200, idle: 100, iowait: 30, steal: 15, cpus: 1 };
        assert_eq!(b.shares_since(&a), (0.3, 0.2));
        assert_eq!(a.shares_since(&a), (0.0, 0.0));
        assert_eq!(b.steal_since(&a), 0.1);
        assert_eq!(a.steal_since(&a), 0.0);
    }

    #[test]
    fn odd_input() {
        let e = CpuTimes::parse("cpu0 1 2 3 4\n").expect_err("no cpu line");
        assert_eq!(e.to_string(), "/proc/stat: required key `cpu` is missing");
        let e = CpuTimes::parse("cpu 1 2 x 4 5\n").expect_err("bad");
        assert_eq!(e.to_string(), "/proc/stat: line 1: `system`: `x` is not a valid value");
        let e = CpuTimes::parse("cpu\n").expect_err("empty line");
        assert_eq!(e.line, Some(1));
        let e = CpuTimes::parse("cpu 18446744073709551615 1 0 0\n").expect_err("overflow");
        assert_eq!(e.problem, Problem::Overflow { key: "cpu".into() });
    }
}
