//! `cgroup.procs` (v1 and v2): the processes in a cgroup, one pid a line.
//!
//! Why: the kill path and the freezer act on these pids. A pid printed as
//! `0` belongs to a process outside the reader's pid namespace; it is counted
//! apart, because nothing can be done to it from here.

use std::fmt;

use super::{lines, snippet, ParseError, Problem};

/// A process id: positive and within the kernel's `pid_t` range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pid(u32);

impl Pid {
    /// The largest pid the kernel can hand out (`PID_MAX_LIMIT`, 2^22).
    pub const MAX: u32 = 1 << 22;

    /// A pid, if `raw` is one the kernel could hand out.
    pub fn new(raw: u32) -> Option<Self> {
        (raw > 0 && raw <= Self::MAX).then_some(Self(raw))
    }

    /// The number.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A cgroup's `cgroup.procs`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgroupProcs {
    /// The member processes visible from this pid namespace, in file order.
    pub pids: Vec<Pid>,
    /// Members printed as `0`: in the cgroup but outside this pid namespace.
    pub invisible: usize,
}

impl CgroupProcs {
    /// The kernel file this type reads.
    pub const FILE: &'static str = "cgroup.procs";

    /// Parses the file's text. An empty file is an empty cgroup.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut procs = Self::default();
        for (number, line) in lines(text) {
            let bad = || {
                ParseError::at(
                    Self::FILE,
                    number,
                    Problem::BadValue { key: "pid".into(), value: snippet(line) },
                )
            };
            let raw = super::count(Self::FILE, number, "pid", line).map_err(|_| bad())?;
            if raw == 0 {
                procs.invisible += 1;
                continue;
            }
            let pid = u32::try_from(raw).ok().and_then(Pid::new).ok_or_else(bad)?;
            procs.pids.push(pid);
        }
        Ok(procs)
    }

    /// Whether no process is in the cgroup.
    pub fn is_empty(&self) -> bool {
        self.pids.is_empty() && self.invisible == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_hosts_procs() {
        let p = CgroupProcs::parse(include_str!("../../tests/fixtures/v1/cgroup.procs"))
            .expect("fixture parses");
        assert!(!p.pids.is_empty());
        assert_eq!(p.invisible, 0);
    }

    #[test]
    fn empty_is_empty() {
        assert!(CgroupProcs::parse("").expect("parses").is_empty());
    }

    #[test]
    fn zero_is_invisible_not_a_pid() {
        let p = CgroupProcs::parse("12\n0\n13\n").expect("parses");
        assert_eq!(p.pids, vec![Pid(12), Pid(13)]);
        assert_eq!(p.invisible, 1);
    }

    #[test]
    fn rejects_junk_and_impossible_pids() {
        let e = CgroupProcs::parse("12\nabc\n").expect_err("junk");
        assert_eq!(e.to_string(), "cgroup.procs: line 2: `pid`: `abc` is not a valid value");
        assert!(CgroupProcs::parse("4194305\n").is_err());
        assert!(CgroupProcs::parse("1 2\n").is_err());
    }
}
