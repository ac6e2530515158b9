//! Starting a command inside a container.
//!
//! Why between `fork` and `exec` (overbook-linux's `join_before_exec`): the
//! process must be in its container before it runs a single instruction of
//! the command, or its first allocations would be charged elsewhere; and it
//! leads a session of its own, inheriting no descriptor but stdio, so that
//! CRIU can checkpoint its tree (CRIU refuses a tree whose session leader is
//! outside it, and files it cannot restore). It starts at the kernel's
//! default OOM score, not the agent's own -1000.

use overbook_linux::{CgroupError, ContainerCgroups, ContainerPath};
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A command that runs `program args...` inside `container`, in a new
/// session. Fails if the container's cgroup files cannot be opened.
pub fn command_in<C: ContainerCgroups + ?Sized, S: AsRef<OsStr>>(
    cgroups: &C,
    container: &ContainerPath,
    program: impl AsRef<OsStr>,
    args: impl IntoIterator<Item = S>,
) -> Result<Command, CgroupError> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    overbook_linux::spawn::join_before_exec(&mut cmd, &cgroups.join_files(container), true)?;
    overbook_linux::spawn::default_oom_score_before_exec(&mut cmd);
    Ok(cmd)
}

/// Where `program` is, as the task's `exec` will look for it: a name with a
/// `/` relative to `cwd` (default `/`), else the first executable file of
/// that name on this process's `PATH`. Why here: a run request for a
/// program that is not there is refused when it is made, not queued to
/// fail at its start.
pub fn find_program(program: &str, cwd: Option<&Path>) -> Result<PathBuf, String> {
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = cwd.unwrap_or(Path::new("/")).join(program);
        return match std::fs::metadata(&path) {
            Err(e) => Err(format!("{}: {e}", path.display())),
            Ok(_) if !executable(&path) => {
                Err(format!("{} is not an executable file", path.display()))
            }
            Ok(_) => Ok(path),
        };
    }
    let dirs = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&dirs)
        .map(|dir| cwd.unwrap_or(Path::new("/")).join(dir).join(program))
        .find(|p| executable(p))
        .ok_or_else(|| "not found on the agent's PATH".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_as_exec_would_find_it_or_refused_saying_why() {
        assert!(find_program("sh", None).is_ok_and(|p| p.ends_with("sh")));
        let missing = find_program("no-such-program-overbook", None).unwrap_err();
        assert!(missing.contains("not found"), "{missing}");
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("data.txt");
        std::fs::write(&file, "x").expect("write");
        let plain = find_program("./data.txt", Some(dir.path())).unwrap_err();
        assert!(plain.contains("not an executable file"), "{plain}");
        let gone = find_program("./gone", Some(dir.path())).unwrap_err();
        assert!(gone.contains("No such file"), "{gone}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(find_program("./data.txt", Some(dir.path())), Ok(dir.path().join("./data.txt")));
    }
}
