//! Reading and writing cgroupfs files, with the kernel's errors sorted into
//! "the cgroup vanished", "the kernel lacks this file" and real failures.
//!
//! Why: every reader and writer of both versions needs the same sorting, and
//! getting it wrong turns a container exiting into an agent error. A file
//! whose directory is gone, or `ENODEV` from a cgroup being removed, is
//! [`Outcome::Vanished`]; a file missing from a directory that exists is
//! [`CgroupError::NoSuchFile`].

use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::container::Outcome;
use crate::error::CgroupError;
use crate::parse::{CgroupProcs, ParseError};

fn sort_error<T>(op: &'static str, path: &Path, e: io::Error) -> Result<Outcome<T>, CgroupError> {
    match e.raw_os_error() {
        Some(libc::ENOENT) => {
            let dir_exists = op != "list" && path.parent().is_some_and(|d| d.is_dir());
            if dir_exists {
                Err(CgroupError::NoSuchFile { path: path.to_path_buf() })
            } else {
                Ok(Outcome::Vanished)
            }
        }
        Some(libc::ENODEV) => Ok(Outcome::Vanished),
        _ => Err(CgroupError::Io { op, path: path.to_path_buf(), source: e }),
    }
}

/// The text of a cgroup file.
pub(crate) fn read(path: &Path) -> Result<Outcome<String>, CgroupError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Outcome::Done(text)),
        Err(e) => sort_error("read", path, e),
    }
}

/// The text of a cgroup file the kernel may not provide (`None` then).
pub(crate) fn read_optional(path: &Path) -> Result<Outcome<Option<String>>, CgroupError> {
    match read(path) {
        Ok(o) => Ok(o.map(Some)),
        Err(CgroupError::NoSuchFile { .. }) => Ok(Outcome::Done(None)),
        Err(e) => Err(e),
    }
}

/// Reads and parses a cgroup file.
pub(crate) fn read_parsed<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, ParseError>,
) -> Result<Outcome<T>, CgroupError> {
    match read(path)? {
        Outcome::Done(text) => parse_at(path, &text, parse).map(Outcome::Done),
        Outcome::Vanished => Ok(Outcome::Vanished),
    }
}

/// Reads and parses a cgroup file the kernel may not provide.
pub(crate) fn read_parsed_optional<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, ParseError>,
) -> Result<Outcome<Option<T>>, CgroupError> {
    match read_optional(path)? {
        Outcome::Done(Some(text)) => parse_at(path, &text, parse).map(|v| Outcome::Done(Some(v))),
        Outcome::Done(None) => Ok(Outcome::Done(None)),
        Outcome::Vanished => Ok(Outcome::Vanished),
    }
}

pub(crate) fn parse_at<T>(
    path: &Path,
    text: &str,
    parse: impl FnOnce(&str) -> Result<T, ParseError>,
) -> Result<T, CgroupError> {
    parse(text).map_err(|source| CgroupError::Parse { path: path.to_path_buf(), source })
}

/// The members of the cgroup in `dir`.
pub(crate) fn read_procs(dir: &Path) -> Result<Outcome<CgroupProcs>, CgroupError> {
    read_parsed(&dir.join(CgroupProcs::FILE), CgroupProcs::parse)
}

/// The processes in the cgroup at `dir` and in every cgroup below it.
/// Why: `cgroup.procs` lists a cgroup's own members only (v1 and v2), and a
/// container's processes may sit in child cgroups of its own, as a
/// Kubernetes pod's containers do: a kill or a count of the top one alone
/// misses them. A child that vanishes meanwhile counts as empty.
pub(crate) fn read_procs_tree(dir: &Path) -> Result<Outcome<CgroupProcs>, CgroupError> {
    let mut all = match read_procs(dir)? {
        Outcome::Done(p) => p,
        Outcome::Vanished => return Ok(Outcome::Vanished),
    };
    if let Outcome::Done(children) = child_dirs(dir)? {
        for child in children {
            if let Outcome::Done(p) = read_procs_tree(&dir.join(child))? {
                all.pids.extend(p.pids);
                all.invisible += p.invisible;
            }
        }
    }
    Ok(Outcome::Done(all))
}

/// Removes the cgroup at `dir` with every (empty) cgroup below it, deepest
/// first: a cgroup with children cannot be removed.
pub(crate) fn rmdir_tree(dir: &Path) -> Result<Outcome<()>, CgroupError> {
    if let Outcome::Done(children) = child_dirs(dir)? {
        for child in children {
            // A child gone meanwhile is as good as removed.
            let _gone_or_removed = rmdir_tree(&dir.join(child))?;
        }
    }
    rmdir(dir)
}

/// Writes `text` to a cgroup file in one `write(2)`, as cgroupfs wants.
/// The file is never created (cgroupfs refuses that anyway); it is truncated,
/// which cgroupfs ignores and which makes plain files behave the same in tests.
pub(crate) fn write(path: &Path, text: &str) -> Result<Outcome<()>, CgroupError> {
    let result = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    match result {
        Ok(()) => Ok(Outcome::Done(())),
        Err(e) => sort_error("write", path, e),
    }
}

/// The names of the child cgroups of `dir`, sorted; whatever bytes they
/// are (a kill must reach a child whose name is not UTF-8 too).
pub(crate) fn child_dirs(dir: &Path) -> Result<Outcome<Vec<std::ffi::OsString>>, CgroupError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return sort_error("list", dir, e),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => return sort_error("list", dir, e),
        };
        // A child removed between readdir and stat is simply not listed.
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            names.push(entry.file_name());
        }
    }
    names.sort();
    Ok(Outcome::Done(names))
}

/// The containers under `parent` (whose directory is `dir`), and the names
/// of the child directories that are no container name, shown lossily.
pub(crate) fn discover_in(
    dir: &Path,
    parent: &crate::ContainerPath,
) -> Result<Outcome<crate::Discovery>, CgroupError> {
    let names = match child_dirs(dir)? {
        Outcome::Done(names) => names,
        Outcome::Vanished => return Ok(Outcome::Vanished),
    };
    let mut found = crate::Discovery::default();
    for name in names {
        match name.to_str().map(|n| parent.child(n)) {
            Some(Ok(child)) => found.containers.push(child),
            _ => found.skipped.push(name.to_string_lossy().into_owned()),
        }
    }
    Ok(Outcome::Done(found))
}

/// Makes a cgroup directory. `Vanished` means the parent is gone.
pub(crate) fn mkdir(dir: &Path) -> Result<Outcome<()>, CgroupError> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(Outcome::Done(())),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            Err(CgroupError::Exists { path: dir.to_path_buf() })
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Outcome::Vanished),
        Err(e) => Err(CgroupError::Io { op: "mkdir", path: dir.to_path_buf(), source: e }),
    }
}

/// Removes a cgroup directory (cgroupfs removes its files with it).
pub(crate) fn rmdir(dir: &Path) -> Result<Outcome<()>, CgroupError> {
    match fs::remove_dir(dir) {
        Ok(()) => Ok(Outcome::Done(())),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Outcome::Vanished),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            Err(CgroupError::Busy { path: dir.to_path_buf() })
        }
        Err(e) => Err(CgroupError::Io { op: "rmdir", path: dir.to_path_buf(), source: e }),
    }
}

/// Polls `settled` until it says `true` or `within` has passed; `Done(false)`
/// on timeout. The pause between polls grows from 50 µs to 5 ms, so a fast
/// change (a freeze takes a few ms) is seen quickly without spinning.
pub(crate) fn settle(
    within: Duration,
    mut settled: impl FnMut() -> Result<Outcome<bool>, CgroupError>,
) -> Result<Outcome<bool>, CgroupError> {
    let start = Instant::now();
    let mut pause = Duration::from_micros(50);
    loop {
        match settled()? {
            Outcome::Vanished => return Ok(Outcome::Vanished),
            Outcome::Done(true) => return Ok(Outcome::Done(true)),
            Outcome::Done(false) => {}
        }
        let elapsed = start.elapsed();
        if elapsed >= within {
            return Ok(Outcome::Done(false));
        }
        thread::sleep(pause.min(within - elapsed));
        pause = (pause * 2).min(Duration::from_millis(5));
    }
}

/// Reads and parses a procfs file (or any file outside cgroupfs).
pub(crate) fn read_proc<T>(
    path: &str,
    parse: impl FnOnce(&str) -> Result<T, crate::parse::ParseError>,
) -> Result<T, CgroupError> {
    let path = Path::new(path);
    let text = std::fs::read_to_string(path).map_err(|source| CgroupError::Io {
        op: "read",
        path: path.to_path_buf(),
        source,
    })?;
    parse_at(path, &text, parse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_missing_files_from_vanished_cgroups() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("memory.min");
        assert!(matches!(read(&file), Err(CgroupError::NoSuchFile { .. })));
        assert_eq!(read_optional(&file).expect("ok"), Outcome::Done(None));
        let gone = dir.path().join("gone").join("memory.current");
        assert_eq!(read(&gone).expect("vanished"), Outcome::Vanished);
        assert_eq!(write(&gone, "1").expect("vanished"), Outcome::Vanished);
        assert!(matches!(write(&file, "1"), Err(CgroupError::NoSuchFile { .. })));
        assert_eq!(child_dirs(&dir.path().join("gone")).expect("vanished"), Outcome::Vanished);
        assert_eq!(rmdir(&dir.path().join("gone")).expect("vanished"), Outcome::Vanished);
    }

    #[test]
    fn settle_times_out_and_succeeds() {
        let r = settle(Duration::from_millis(5), || Ok(Outcome::Done(false))).expect("ok");
        assert_eq!(r, Outcome::Done(false));
        let mut n = 0;
        let r = settle(Duration::from_secs(5), || {
            n += 1;
            Ok(Outcome::Done(n > 3))
        })
        .expect("ok");
        assert_eq!(r, Outcome::Done(true));
    }
}
