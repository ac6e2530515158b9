//! `/proc/vmstat`: the machine's memory event counters since boot.
//!
//! Why: a benchmark's account of a whole machine (the kernel's OOM kills,
//! major faults, refaults) is the difference of two readings; the cgroup
//! files carry the same counters per container.

use super::counter_file;

counter_file! {
    /// `/proc/vmstat`, the counters overbook reads.
    pub struct VmStat in "/proc/vmstat" {
        required {
            /// Page faults that read from disk or swap.
            pgmajfault = "pgmajfault",
            /// Pages swapped in.
            pswpin = "pswpin",
            /// Pages swapped out.
            pswpout = "pswpout",
        }
        optional {
            /// Processes the kernel's OOM killer killed (4.13+).
            oom_kill = "oom_kill",
            /// Anonymous pages faulted back soon after eviction (5.9+).
            workingset_refault_anon = "workingset_refault_anon",
            /// File pages faulted back soon after eviction (5.9+).
            workingset_refault_file = "workingset_refault_file",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_hosts_vmstat() {
        let v = VmStat::parse(include_str!("../../tests/fixtures/proc/vmstat"))
            .expect("fixture parses");
        assert_eq!(v.pgmajfault, 718019);
        assert_eq!(v.oom_kill, Some(141));
        assert_eq!(v.workingset_refault_file, Some(34812279));
    }

    #[test]
    fn old_kernels_and_odd_input() {
        let v = VmStat::parse("pgmajfault 3\npswpin 0\npswpout 0\n").expect("parses");
        assert_eq!(v.oom_kill, None);
        let e = VmStat::parse("pgmajfault 3\npswpin 0\n").expect_err("missing");
        assert_eq!(e.to_string(), "/proc/vmstat: required key `pswpout` is missing");
        let e = VmStat::parse("pgmajfault -3\npswpin 0\npswpout 0\n").expect_err("bad");
        assert_eq!(e.line, Some(1));
    }
}
