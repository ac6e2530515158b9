//! cgroup v2 `memory.events`: how often the cgroup hit each memory boundary.
//!
//! Why: `high` and `max` counts tell the agent a container is squeezed by its
//! own limits rather than by the node, and `oom_kill` tells it the kernel has
//! already killed inside a container. Counts are hierarchical (the local
//! variant is `memory.events.local`, same format).

use super::counter_file;

counter_file! {
    /// cgroup v2 `memory.events`.
    pub struct MemoryEvents in "memory.events" {
        required {
            /// Times usage was below `memory.low` yet reclaimed under pressure.
            low = "low",
            /// Times usage went over `memory.high` and the cgroup was throttled.
            high = "high",
            /// Times usage was about to go over `memory.max`.
            max = "max",
            /// Times the cgroup's limit made an allocation fail.
            oom = "oom",
        }
        optional {
            /// Processes the kernel's OOM killer killed here (4.13+).
            oom_kill = "oom_kill",
            /// Whole-group OOM kills (5.17+, with `memory.oom.group`).
            oom_group_kill = "oom_group_kill",
            /// Times network sockets were throttled (6.x).
            sock_throttled = "sock_throttled",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_6_1_kernel() {
        let e = MemoryEvents::parse(include_str!("../../tests/fixtures/v2/memory.events"))
            .expect("fixture parses");
        assert_eq!(
            e,
            MemoryEvents {
                low: 0,
                high: 12,
                max: 3,
                oom: 1,
                oom_kill: Some(1),
                oom_group_kill: Some(0),
                sock_throttled: None
            }
        );
    }

    #[test]
    fn old_kernels_lack_oom_kill() {
        let e = MemoryEvents::parse("low 0\nhigh 0\nmax 0\noom 0\n").expect("parses");
        assert_eq!(e.oom_kill, None);
    }

    #[test]
    fn rejects_a_missing_value() {
        let e = MemoryEvents::parse("low 0\nhigh\n").expect_err("no value");
        assert_eq!(e.line, Some(2));
        assert_eq!(e.to_string(), "memory.events: line 2: `high` has no value");
    }
}
