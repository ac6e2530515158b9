//! `/proc/<pid>/cgroup`: which cgroup a process is in, per hierarchy.
//!
//! Why: the agent finds its own memory cgroup here (the root under which it
//! makes containers on v1 hosts), and the probe tells v1 from v2. Each line
//! is `hierarchy-id:controllers:path`; the v2 line is `0::path`. The path is
//! everything after the second colon (cgroup names may contain colons).

use super::{lines, snippet, ParseError, Problem};

/// One line of `/proc/<pid>/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMembership {
    /// The hierarchy's id; 0 is the v2 unified hierarchy.
    pub hierarchy: u32,
    /// The controllers bound to the hierarchy (`memory`, `name=systemd`);
    /// empty for v2.
    pub controllers: Vec<String>,
    /// The cgroup's path from the hierarchy's root, starting with `/`.
    pub path: String,
}

/// `/proc/<pid>/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcCgroup {
    /// The lines, in file order.
    pub memberships: Vec<CgroupMembership>,
}

impl ProcCgroup {
    /// The kernel file this type reads.
    pub const FILE: &'static str = "/proc/self/cgroup";

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut memberships = Vec::new();
        for (number, line) in lines(text) {
            let unexpected =
                || ParseError::at(Self::FILE, number, Problem::Unexpected { text: snippet(line) });
            let mut parts = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(unexpected());
            };
            let hierarchy = super::count(Self::FILE, number, "hierarchy-id", id)?;
            let hierarchy = u32::try_from(hierarchy).map_err(|_| unexpected())?;
            if !path.starts_with('/') {
                return Err(unexpected());
            }
            let controllers =
                controllers.split(',').filter(|c| !c.is_empty()).map(str::to_owned).collect();
            memberships.push(CgroupMembership { hierarchy, controllers, path: path.to_owned() });
        }
        if memberships.is_empty() {
            return Err(ParseError::whole(Self::FILE, Problem::Empty));
        }
        Ok(Self { memberships })
    }

    /// The path in the v1 hierarchy that has `controller` (e.g. `memory`).
    pub fn v1_path(&self, controller: &str) -> Option<&str> {
        self.memberships
            .iter()
            .find(|m| m.hierarchy != 0 && m.controllers.iter().any(|c| c == controller))
            .map(|m| m.path.as_str())
    }

    /// The path in the v2 unified hierarchy.
    pub fn unified_path(&self) -> Option<&str> {
        self.memberships
            .iter()
            .find(|m| m.hierarchy == 0 && m.controllers.is_empty())
            .map(|m| m.path.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_hosts_v1_layout() {
        let p = ProcCgroup::parse(include_str!("../../tests/fixtures/proc/self-cgroup"))
            .expect("fixture parses");
        assert!(p.v1_path("memory").is_some_and(|p| p.starts_with("/process_api/")));
        assert_eq!(p.v1_path("freezer"), Some("/"));
        assert_eq!(p.v1_path("systemd"), None);
        assert_eq!(p.v1_path("name=systemd"), Some("/"));
        assert_eq!(p.unified_path(), Some("/"));
    }

    #[test]
    fn reads_a_v2_layout() {
        let p = ProcCgroup::parse(include_str!("../../tests/fixtures/v2/proc-self-cgroup"))
            .expect("fixture parses");
        assert_eq!(p.unified_path(), Some("/overbook/best-effort/job-17"));
        assert_eq!(p.v1_path("memory"), None);
    }

    #[test]
    fn colons_in_names_and_deleted_cgroups() {
        let p = ProcCgroup::parse("0::/a:b/c (deleted)\n").expect("parses");
        assert_eq!(p.unified_path(), Some("/a:b/c (deleted)"));
    }

    #[test]
    fn odd_input() {
        assert!(ProcCgroup::parse("").is_err());
        assert!(ProcCgroup::parse("4:memory\n").is_err());
        assert!(ProcCgroup::parse("x:memory:/\n").is_err());
        assert!(ProcCgroup::parse("4:memory:relative\n").is_err());
        assert!(ProcCgroup::parse("99999999999:memory:/\n").is_err());
    }
}
