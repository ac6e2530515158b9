//! `/proc/self/mounts`: where the cgroup hierarchies are mounted.
//!
//! Why: the memory controller may be on v1 (`cgroup` with option `memory`)
//! or on v2 (`cgroup2`), mounted anywhere; the probe and the implementations
//! find it here instead of assuming `/sys/fs/cgroup`. Each line is
//! `source target fstype options dump pass`, with spaces, tabs, newlines and
//! backslashes in paths written as octal escapes (`\040`).

use std::path::{Path, PathBuf};

use super::{lines, snippet, ParseError, Problem};

/// One mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted.
    pub target: PathBuf,
    /// The filesystem type (`cgroup`, `cgroup2`, `tmpfs`, ...).
    pub fstype: String,
    /// Mount options, split at commas (`rw`, `memory`, ...).
    pub options: Vec<String>,
}

/// `/proc/self/mounts`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mounts {
    /// The mounts, in file order.
    pub mounts: Vec<Mount>,
}

impl Mounts {
    /// The kernel file this type reads.
    pub const FILE: &'static str = "/proc/self/mounts";

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut mounts = Vec::new();
        for (number, line) in lines(text) {
            let mut words = line.split_whitespace();
            let (Some(_source), Some(target), Some(fstype), Some(options)) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                return Err(ParseError::at(
                    Self::FILE,
                    number,
                    Problem::Unexpected { text: snippet(line) },
                ));
            };
            mounts.push(Mount {
                target: PathBuf::from(unescape(target)),
                fstype: fstype.to_owned(),
                options: options.split(',').map(str::to_owned).collect(),
            });
        }
        Ok(Self { mounts })
    }

    /// Where the v1 hierarchy holding `controller` is mounted.
    pub fn v1_controller(&self, controller: &str) -> Option<&Path> {
        self.mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == controller))
            .map(|m| m.target.as_path())
    }

    /// Where the v2 unified hierarchy is mounted (the first one).
    pub fn v2(&self) -> Option<&Path> {
        self.mounts.iter().find(|m| m.fstype == "cgroup2").map(|m| m.target.as_path())
    }
}

/// Decodes the kernel's `\ooo` escapes; anything else is kept as it is.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| {
            bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)) && d[0] <= b'3'
        });
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_hosts_hierarchies() {
        let m = Mounts::parse(include_str!("../../tests/fixtures/proc/mounts"))
            .expect("fixture parses");
        assert_eq!(m.v1_controller("memory"), Some(Path::new("/sys/fs/cgroup/memory")));
        assert_eq!(m.v1_controller("freezer"), Some(Path::new("/sys/fs/cgroup/freezer")));
        assert_eq!(m.v2(), Some(Path::new("/sys/fs/cgroup/unified")));
    }

    #[test]
    fn decodes_escapes() {
        let m = Mounts::parse("cgroup2 /mnt/my\\040cg cgroup2 rw 0 0\n").expect("parses");
        assert_eq!(m.v2(), Some(Path::new("/mnt/my cg")));
        assert_eq!(unescape("a\\b\\9"), "a\\b\\9");
        assert_eq!(unescape("\\"), "\\");
        assert_eq!(unescape("\\134"), "\\");
    }

    #[test]
    fn short_lines_are_errors() {
        let e = Mounts::parse("cgroup2 /x\n").expect_err("short");
        assert_eq!(e.line, Some(1));
    }
}
