//! cgroup v1 `memory.oom_control`: whether the kernel's OOM killer is on for
//! the cgroup, whether it is under OOM now, and how many it has killed.
//!
//! Why: the v1 counterpart of v2 `memory.events`' `oom_kill`, so the agent
//! can tell when the kernel got there first.

use super::counter_file;

counter_file! {
    /// cgroup v1 `memory.oom_control`.
    pub struct V1OomControl in "memory.oom_control" {
        required {
            /// 1 when the OOM killer is disabled for the cgroup.
            oom_kill_disable = "oom_kill_disable",
            /// 1 while tasks are waiting on OOM in the cgroup.
            under_oom = "under_oom",
        }
        optional {
            /// Processes the kernel's OOM killer killed here (4.13+).
            oom_kill = "oom_kill",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_file_and_refuses_odd_text() {
        let o =
            V1OomControl::parse("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n").expect("valid");
        assert_eq!(o.oom_kill, Some(3));
        assert_eq!(o.under_oom, 0);
        let older = V1OomControl::parse("oom_kill_disable 0\nunder_oom 1\n").expect("valid");
        assert_eq!(older.oom_kill, None);
        let e = V1OomControl::parse("under_oom 0\n").unwrap_err().to_string();
        assert!(e.contains("memory.oom_control") && e.contains("oom_kill_disable"), "{e}");
        assert!(V1OomControl::parse("oom_kill_disable x\nunder_oom 0\n").is_err());
    }
}
