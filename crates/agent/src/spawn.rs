//! Starting a command inside a container.
//!
//! Why between `fork` and `exec` (overbook-linux's `join_before_exec`): the
//! process must be in its container before it runs a single instruction of
//! the command, or its first allocations would be charged elsewhere; and it
//! leads a session of its own, inheriting no descriptor but stdio, so that
//! CRIU can checkpoint its tree (CRIU refuses a tree whose session leader is
//! outside it, and files it cannot restore).

use overbook_linux::{CgroupError, ContainerCgroups, ContainerPath};
use std::ffi::OsStr;
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
    Ok(cmd)
}
