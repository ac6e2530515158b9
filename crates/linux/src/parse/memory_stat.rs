//! cgroup v2 `memory.stat`: the memory breakdown and reclaim events of a
//! cgroup and all its descendants.
//!
//! Why: the thrashing detector's inputs (`pgmajfault`,
//! `workingset_refault_anon`, `workingset_refault_file`) live here. Sizes are
//! in bytes, events are counts since the cgroup was created. Kernels before
//! 5.9 print one `workingset_refault` (file pages only) instead of the
//! anon/file pair, so all three are optional.

use super::counter_file;

counter_file! {
    /// cgroup v2 `memory.stat`, the fields overbook uses.
    pub struct MemoryStat in "memory.stat" {
        required {
            /// Anonymous memory, bytes.
            anon = "anon",
            /// Page cache, bytes.
            file = "file",
            /// Kernel stacks, bytes.
            kernel_stack = "kernel_stack",
            /// Network buffers, bytes.
            sock = "sock",
            /// Mapped page cache, bytes.
            file_mapped = "file_mapped",
            /// Dirty page cache, bytes.
            file_dirty = "file_dirty",
            /// Page cache under writeback, bytes.
            file_writeback = "file_writeback",
            /// Inactive anonymous LRU, bytes.
            inactive_anon = "inactive_anon",
            /// Active anonymous LRU, bytes.
            active_anon = "active_anon",
            /// Inactive file LRU, bytes.
            inactive_file = "inactive_file",
            /// Active file LRU, bytes.
            active_file = "active_file",
            /// Unevictable memory, bytes.
            unevictable = "unevictable",
            /// Reclaimable slab, bytes.
            slab_reclaimable = "slab_reclaimable",
            /// Unreclaimable slab, bytes.
            slab_unreclaimable = "slab_unreclaimable",
            /// Page faults, count.
            pgfault = "pgfault",
            /// Major page faults (the page had to be read in), count.
            pgmajfault = "pgmajfault",
        }
        optional {
            /// Shared memory (tmpfs, shm), bytes.
            shmem = "shmem",
            /// Pages in the swap cache, bytes (6.1+).
            swapcached = "swapcached",
            /// Compressed swap pool, bytes (5.19+).
            zswap = "zswap",
            /// Transparent huge pages of anonymous memory, bytes.
            anon_thp = "anon_thp",
            /// Refaults of file pages, count (before 5.9: the only refault counter).
            workingset_refault = "workingset_refault",
            /// Refaults of anonymous pages, count (5.9+).
            workingset_refault_anon = "workingset_refault_anon",
            /// Refaults of file pages, count (5.9+).
            workingset_refault_file = "workingset_refault_file",
            /// Refaulted anonymous pages that were activated at once, count (5.9+).
            workingset_activate_anon = "workingset_activate_anon",
            /// Refaulted file pages that were activated at once, count (5.9+).
            workingset_activate_file = "workingset_activate_file",
            /// Pages scanned by reclaim, count.
            pgscan = "pgscan",
            /// Pages reclaimed, count.
            pgsteal = "pgsteal",
        }
    }
}

impl MemoryStat {
    /// File-page refaults on any kernel: the 5.9+ counter, else the older one.
    pub fn refault_file_any(&self) -> Option<u64> {
        self.workingset_refault_file.or(self.workingset_refault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::Problem;

    const V6_1: &str = include_str!("../../tests/fixtures/v2/memory.stat");

    #[test]
    fn reads_a_6_1_kernel() {
        let s = MemoryStat::parse(V6_1).expect("fixture parses");
        assert_eq!(s.anon, 10817536);
        assert_eq!(s.file, 53248000);
        assert_eq!(s.pgmajfault, 1342);
        assert_eq!(s.workingset_refault_anon, Some(2048));
        assert_eq!(s.workingset_refault_file, Some(4711));
        assert_eq!(s.workingset_refault, None);
        assert_eq!(s.refault_file_any(), Some(4711));
        assert_eq!(s.swapcached, Some(0));
    }

    #[test]
    fn reads_a_pre_5_9_kernel() {
        let text = "anon 4096\nfile 8192\nkernel_stack 0\nslab 0\nsock 0\nshmem 0\n\
            file_mapped 0\nfile_dirty 0\nfile_writeback 0\ninactive_anon 0\nactive_anon 4096\n\
            inactive_file 8192\nactive_file 0\nunevictable 0\nslab_reclaimable 0\n\
            slab_unreclaimable 0\npgfault 10\npgmajfault 2\nworkingset_refault 7\n\
            workingset_activate 1\nworkingset_nodereclaim 0\n";
        let s = MemoryStat::parse(text).expect("parses");
        assert_eq!(s.workingset_refault_anon, None);
        assert_eq!(s.refault_file_any(), Some(7));
        assert_eq!(s.swapcached, None);
    }

    #[test]
    fn names_the_line_at_fault() {
        let text = V6_1.replacen("pgmajfault 1342", "pgmajfault lots", 1);
        let e = MemoryStat::parse(&text).expect_err("bad value");
        assert_eq!(e.file, "memory.stat");
        assert!(matches!(e.problem, Problem::BadValue { ref key, .. } if key == "pgmajfault"));
        let line = V6_1.lines().position(|l| l.starts_with("pgmajfault")).map(|i| i + 1);
        assert_eq!(e.line, line);
    }

    #[test]
    fn missing_and_duplicate_keys() {
        let e = MemoryStat::parse("anon 1\n").expect_err("missing");
        assert_eq!(e.problem, Problem::Missing { key: "file" });
        let text = format!("{V6_1}anon 5\n");
        assert!(matches!(
            MemoryStat::parse(&text).map_err(|e| e.problem),
            Err(Problem::Duplicate { .. })
        ));
        assert_eq!(MemoryStat::parse(" \n\n").map_err(|e| e.problem), Err(Problem::Empty));
    }

    #[test]
    fn unknown_keys_are_skipped_even_with_odd_values() {
        let text = format!("{V6_1}some_future_key -5\n");
        assert!(MemoryStat::parse(&text).is_ok());
    }
}
