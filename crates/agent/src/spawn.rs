//! Starting a command inside a container.
//!
//! Why through `sh`: the process must be in its container before it runs a
//! single instruction of the command, or its first allocations would be
//! charged elsewhere. A shell that writes its own pid (`$$`) to the
//! container's `cgroup.procs` files and then `exec`s the command does that
//! with no `unsafe` code between `fork` and `exec`; if joining fails the
//! shell exits 126 and the command never runs.

use overbook_linux::{ContainerCgroups, ContainerPath};
use std::ffi::OsStr;
use std::process::Command;

const JOIN_THEN_EXEC: &str = r#"n=$1; shift
while [ "$n" -gt 0 ]; do
  echo $$ > "$1" || { echo "overbook: cannot join $1" >&2; exit 126; }
  shift; n=$((n - 1))
done
exec "$@""#;

/// A command that runs `program args...` inside `container`.
pub fn command_in<C: ContainerCgroups + ?Sized, S: AsRef<OsStr>>(
    cgroups: &C,
    container: &ContainerPath,
    program: impl AsRef<OsStr>,
    args: impl IntoIterator<Item = S>,
) -> Command {
    let files = cgroups.join_files(container);
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(JOIN_THEN_EXEC).arg("sh").arg(files.len().to_string());
    cmd.args(files).arg(program).args(args);
    cmd
}
