//! Starting a program inside a cgroup, and in a session of its own.
//!
//! Why here and not through a shell: a program must be in its cgroup before
//! it runs a single instruction (or its first allocations are charged
//! elsewhere), and a program that is to be checkpointed must lead its own
//! session (CRIU refuses a tree whose session leader is outside it, unless
//! told it is a shell job). Both happen between `fork` and `exec`, which
//! needs `pre_exec` and so lives in `sys`; this is its safe face.

use std::ffi::CString;
use std::fs::OpenOptions;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::CgroupError;
use crate::sys;

/// Makes `cmd`'s child join the cgroups whose `cgroup.procs` (v2) or
/// `cgroup.procs`/`tasks` (v1) files are `join_files` before it executes its
/// program (for a container: [`crate::ContainerCgroups::join_files`]), and,
/// if `new_session`, start a new session first (`setsid`), so it has no
/// controlling terminal and leads its own process group. The program
/// inherits no descriptor but its stdin, stdout and stderr, whatever this
/// process leaked (Linux 5.11+; before, it inherits what it would anyway).
///
/// The files are opened now, so a cgroup that does not exist is an error
/// here rather than a failed spawn; a join that fails at spawn time (the
/// cgroup removed meanwhile, a v2 cgroup with children of its own) makes
/// `spawn` return the kernel's error and the program never runs.
pub fn join_before_exec(
    cmd: &mut Command,
    join_files: &[PathBuf],
    new_session: bool,
) -> Result<(), CgroupError> {
    let mut fds: Vec<OwnedFd> = Vec::with_capacity(join_files.len());
    for file in join_files {
        // Standard library opens with O_CLOEXEC: the program inherits none.
        let opened = OpenOptions::new().write(true).open(file).map_err(|source| {
            CgroupError::Io { op: "open for joining", path: file.clone(), source }
        })?;
        fds.push(opened.into());
    }
    sys::join_before_exec(cmd, fds, new_session);
    Ok(())
}

/// Makes `cmd`'s child create the empty file `mark` (mode 0600, failing if
/// it exists) as the last thing before its `exec`, after any hook set
/// before this one (after [`join_before_exec`]'s join, when that was set
/// first). A mark that cannot be made fails the spawn and the program never
/// runs. Why: so that whoever finds the mark knows the program was started
/// in its cgroup, and whoever finds none knows it never ran (the agent's
/// start marks, for a start it died in).
pub fn mark_before_exec(cmd: &mut Command, mark: &Path) -> Result<(), CgroupError> {
    let path = CString::new(mark.as_os_str().as_bytes()).map_err(|_| CgroupError::Io {
        op: "name a start mark",
        path: mark.to_path_buf(),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })?;
    sys::mark_before_exec(cmd, path);
    Ok(())
}

/// Makes `cmd`'s child start at the kernel's default `oom_score_adj` (0)
/// instead of inheriting this process's. Why: the agent shields itself
/// with -1000, and a task it starts must stay a candidate for the
/// kernel's OOM killer, the last line below the agent's own policy. A
/// child that cannot write it fails its spawn and never runs.
pub fn default_oom_score_before_exec(cmd: &mut Command) {
    sys::default_oom_score_before_exec(cmd);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_starts_at_the_default_oom_score_whatever_its_parent_has() {
        let own = std::fs::read_to_string("/proc/self/oom_score_adj").expect("reads its own");
        // Raising needs no privilege; the old value is put back below
        // (as root, or if it was not lower than 0).
        std::fs::write("/proc/self/oom_score_adj", "500").expect("raises its own");
        let score = |reset: bool| {
            let mut cmd = Command::new("cat");
            cmd.arg("/proc/self/oom_score_adj");
            if reset {
                default_oom_score_before_exec(&mut cmd);
            }
            let out = cmd.output().expect("runs cat");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let (inherited, reset) = (score(false), score(true));
        let _ = std::fs::write("/proc/self/oom_score_adj", own.trim());
        assert_eq!(inherited, "500", "a plain child inherits");
        assert_eq!(reset, "0");
    }

    #[test]
    fn a_mark_is_there_before_the_program_runs_and_a_left_one_fails_the_spawn() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mark = dir.path().join("started");
        let spawn = || {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "test -e \"$0\"", mark.to_str().expect("utf-8")]);
            mark_before_exec(&mut cmd, &mark).expect("a path without NUL");
            cmd.status()
        };
        assert!(spawn().expect("spawns").success(), "the program saw its mark");
        let left = spawn().expect_err("a mark already there fails the spawn");
        assert_eq!(left.kind(), std::io::ErrorKind::AlreadyExists, "{left}");
        let nul = mark_before_exec(&mut Command::new("true"), Path::new("a\0b"));
        assert!(nul.is_err());
    }
}
