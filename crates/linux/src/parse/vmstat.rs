//! `/proc/vmstat`: the machine's memory event counters since boot.
//!
//! Why: a node that is the whole machine has no limit of its own to hit,
//! so whether its memory was full in an interval is whether the kernel
//! scanned pages to reclaim (`pgscan_*`): without that, a container reading
//! its evicted files back into free memory looks like thrashing. And a
//! benchmark's account of a machine (the kernel's OOM kills) is the
//! difference of two readings.

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
            /// Pages scanned for reclaim by kswapd (4.8+).
            pgscan_kswapd = "pgscan_kswapd",
            /// Pages scanned for reclaim by allocating tasks (4.8+).
            pgscan_direct = "pgscan_direct",
            /// Anonymous pages scanned for reclaim, by anyone (5.8+).
            pgscan_anon = "pgscan_anon",
            /// File pages scanned for reclaim, by anyone (5.8+).
            pgscan_file = "pgscan_file",
        }
    }
}

impl VmStat {
    /// Pages scanned for reclaim anywhere on the machine since boot: by
    /// type where the kernel counts it (every reclaimer, cgroup limits
    /// included), else kswapd's and direct reclaim's; `None` where neither
    /// is printed.
    pub fn pages_scanned(&self) -> Option<u64> {
        match (self.pgscan_anon, self.pgscan_file, self.pgscan_kswapd, self.pgscan_direct) {
            (Some(a), Some(f), _, _) => Some(a.saturating_add(f)),
            (_, _, Some(k), Some(d)) => Some(k.saturating_add(d)),
            _ => None,
        }
    }
}

impl VmStat {
    /// Pages scanned by allocators that had to reclaim themselves because
    /// the machine ran short (direct reclaim; the kernel leaves a cgroup's
    /// reclaim of its own limit out of it): `None` where it is not printed.
    /// kswapd's background reclaim is left out: it keeps the watermarks on
    /// any machine whose page cache fills it, and counted as the machine
    /// being full it made a limited node's trickle of refaults look like
    /// thrashing (a test's 7 refaults/s, in a 1 GiB VM).
    pub fn direct_reclaim_scans(&self) -> Option<u64> {
        self.pgscan_direct
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
        // This kernel counts its reclaim by type only (kswapd's is 0).
        assert_eq!(v.pgscan_kswapd, Some(0));
        assert_eq!(v.pages_scanned(), Some(4264206 + 37750294));
        assert_eq!(v.direct_reclaim_scans(), Some(0), "never short on this machine");
    }

    #[test]
    fn old_kernels_and_odd_input() {
        let v = VmStat::parse("pgmajfault 3\npswpin 0\npswpout 0\n").expect("parses");
        assert_eq!((v.oom_kill, v.pages_scanned()), (None, None));
        let old = "pgmajfault 3\npswpin 0\npswpout 0\npgscan_kswapd 5\npgscan_direct 2\n";
        assert_eq!(VmStat::parse(old).expect("parses").pages_scanned(), Some(7));
        assert_eq!(VmStat::parse(old).expect("parses").direct_reclaim_scans(), Some(2));
        let e = VmStat::parse("pgmajfault 3\npswpin 0\n").expect_err("missing");
        assert_eq!(e.to_string(), "/proc/vmstat: required key `pswpout` is missing");
        let e = VmStat::parse("pgmajfault -3\npswpin 0\npswpout 0\n").expect_err("bad");
        assert_eq!(e.line, Some(1));
    }
}
