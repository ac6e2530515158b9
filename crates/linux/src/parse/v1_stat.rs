//! cgroup v1 `memory.stat`: its own type, because v1 prints other keys in
//! other units than v2 and splits local from hierarchical counters.
//!
//! Why: on v1 nodes this is the only source of fault and refault counts. A
//! plain key (`pgmajfault`) counts this cgroup alone; its `total_` twin counts
//! the cgroup and all descendants, the meaning v2's `memory.stat` has. `swap`
//! is printed only when swap accounting is on (`swapaccount=1`); the refault
//! pair arrived in 5.9, replacing `workingset_refault`.

use super::counter_file;

counter_file! {
    /// cgroup v1 `memory.stat`; sizes in bytes, events as counts.
    pub struct V1MemoryStat in "memory.stat (v1)" {
        required {
            /// Page cache, bytes (local).
            cache = "cache",
            /// Anonymous and swap cache memory, bytes (local).
            rss = "rss",
            /// Mapped page cache, bytes (local).
            mapped_file = "mapped_file",
            /// Pages charged, count (local).
            pgpgin = "pgpgin",
            /// Pages uncharged, count (local).
            pgpgout = "pgpgout",
            /// Page faults, count (local).
            pgfault = "pgfault",
            /// Major page faults, count (local).
            pgmajfault = "pgmajfault",
            /// Inactive anonymous LRU, bytes (local).
            inactive_anon = "inactive_anon",
            /// Active anonymous LRU, bytes (local).
            active_anon = "active_anon",
            /// Inactive file LRU, bytes (local).
            inactive_file = "inactive_file",
            /// Active file LRU, bytes (local).
            active_file = "active_file",
            /// Unevictable memory, bytes (local).
            unevictable = "unevictable",
            /// The tightest `memory.limit_in_bytes` on the way to the root, bytes.
            hierarchical_memory_limit = "hierarchical_memory_limit",
            /// Page cache, bytes (hierarchical).
            total_cache = "total_cache",
            /// Anonymous memory, bytes (hierarchical).
            total_rss = "total_rss",
            /// Mapped page cache, bytes (hierarchical).
            total_mapped_file = "total_mapped_file",
            /// Page faults, count (hierarchical).
            total_pgfault = "total_pgfault",
            /// Major page faults, count (hierarchical).
            total_pgmajfault = "total_pgmajfault",
            /// Inactive anonymous LRU, bytes (hierarchical).
            total_inactive_anon = "total_inactive_anon",
            /// Active anonymous LRU, bytes (hierarchical).
            total_active_anon = "total_active_anon",
            /// Inactive file LRU, bytes (hierarchical).
            total_inactive_file = "total_inactive_file",
            /// Active file LRU, bytes (hierarchical).
            total_active_file = "total_active_file",
        }
        optional {
            /// Anonymous transparent huge pages, bytes (local).
            rss_huge = "rss_huge",
            /// Shared memory, bytes (local).
            shmem = "shmem",
            /// Dirty page cache, bytes (local).
            dirty = "dirty",
            /// Page cache under writeback, bytes (local).
            writeback = "writeback",
            /// Swap used, bytes (local; only with swap accounting).
            swap = "swap",
            /// Refaults of file pages, count (local; before 5.9).
            workingset_refault = "workingset_refault",
            /// Refaults of anonymous pages, count (local; 5.9+).
            workingset_refault_anon = "workingset_refault_anon",
            /// Refaults of file pages, count (local; 5.9+).
            workingset_refault_file = "workingset_refault_file",
            /// The tightest memory+swap limit on the way to the root, bytes.
            hierarchical_memsw_limit = "hierarchical_memsw_limit",
            /// Shared memory, bytes (hierarchical).
            total_shmem = "total_shmem",
            /// Swap used, bytes (hierarchical; only with swap accounting).
            total_swap = "total_swap",
            /// Refaults of file pages, count (hierarchical; before 5.9).
            total_workingset_refault = "total_workingset_refault",
            /// Refaults of anonymous pages, count (hierarchical; 5.9+).
            total_workingset_refault_anon = "total_workingset_refault_anon",
            /// Refaults of file pages, count (hierarchical; 5.9+).
            total_workingset_refault_file = "total_workingset_refault_file",
            /// Unevictable memory, bytes (hierarchical).
            total_unevictable = "total_unevictable",
        }
    }
}

impl V1MemoryStat {
    /// Hierarchical file-page refaults on any kernel.
    pub fn total_refault_file_any(&self) -> Option<u64> {
        self.total_workingset_refault_file.or(self.total_workingset_refault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::Problem;

    #[test]
    fn reads_the_hosts_root_memory_stat() {
        let s = V1MemoryStat::parse(include_str!("../../tests/fixtures/v1/root/memory.stat"))
            .expect("fixture parses");
        assert_eq!(s.hierarchical_memory_limit, 9223372036854771712);
        assert!(s.total_pgfault >= s.pgfault);
        assert!(s.total_workingset_refault_anon.is_some());
        assert!(s.total_refault_file_any().is_some());
        assert_eq!(s.workingset_refault, None);
    }

    #[test]
    fn reads_a_leaf_under_load() {
        let s = V1MemoryStat::parse(include_str!("../../tests/fixtures/v1/leaf/memory.stat"))
            .expect("fixture parses");
        assert!(s.total_rss > 0);
        assert_eq!(s.total_swap, Some(0));
    }

    #[test]
    fn pre_5_9_and_no_swap_accounting() {
        let text = include_str!("../../tests/fixtures/v1/root/memory.stat")
            .lines()
            .filter(|l| !l.contains("swap") && !l.contains("workingset_refault"))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
            + "workingset_refault 3\ntotal_workingset_refault 9\n";
        let s = V1MemoryStat::parse(&text).expect("parses");
        assert_eq!(s.total_swap, None);
        assert_eq!(s.total_workingset_refault_anon, None);
        assert_eq!(s.total_refault_file_any(), Some(9));
    }

    #[test]
    fn names_the_file_as_v1() {
        let e = V1MemoryStat::parse("cache 1\n").expect_err("missing");
        assert_eq!(e.to_string(), "memory.stat (v1): required key `rss` is missing");
        assert_eq!(e.problem, Problem::Missing { key: "rss" });
    }
}
