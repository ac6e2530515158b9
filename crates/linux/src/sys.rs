//! The crate's only `unsafe` code: the one syscall no well-kept crate wraps
//! yet (`process_mrelease(2)`), and a hook run between `fork` and `exec`.
//!
//! Why a module of its own: the workspace denies `unsafe_code`; this is the
//! only place the crate allows it, for one raw `syscall(2)` whose arguments
//! are plain integers and for `CommandExt::pre_exec`, whose closure must be
//! async-signal-safe. `pidfd_open` and `pidfd_send_signal` come safe from
//! rustix.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Reaps the memory of a process that is dying (SIGKILL pending or
/// exiting) right now, in the caller's context, instead of waiting for the
/// victim to exit. Linux 5.15+; `ENOSYS` before. `EINVAL` if the process is
/// not dying; `ESRCH` if it has already exited.
pub(crate) fn process_mrelease(pidfd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: process_mrelease takes an int file descriptor and an unsigned
    // int of flags (must be 0) and touches no memory of ours; the descriptor
    // is borrowed, so it stays open for the duration of the call.
    let ret = unsafe { libc::syscall(libc::SYS_process_mrelease, pidfd.as_raw_fd(), 0u32) };
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether the kernel has `process_mrelease`: probed with an invalid
/// descriptor, which a kernel with the syscall answers `EBADF`.
pub(crate) fn has_process_mrelease() -> bool {
    // SAFETY: as above; -1 is never a valid descriptor, so the kernel only
    // validates the arguments and returns an error.
    let ret = unsafe { libc::syscall(libc::SYS_process_mrelease, -1i32, 0u32) };
    ret == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS)
}

/// Makes the child of `cmd`, between `fork` and `exec`, mark every
/// descriptor above stderr close-on-exec, start a new session (if
/// `new_session`), and then join the cgroups whose `cgroup.procs` (or v1
/// `tasks`) files are `join` (opened for writing by the caller), so the
/// program runs its first instruction there, holding only its stdio. A
/// failure to join or to start a session fails the spawn with the kernel's
/// error and the program never runs.
pub(crate) fn join_before_exec(cmd: &mut Command, join: Vec<OwnedFd>, new_session: bool) {
    let parent = rustix::process::getpid();
    let hook = move || -> io::Result<()> {
        // A child whose starter dies before it has joined must not run:
        // the next agent finds no member, takes the start for undone and
        // starts the task again. Until the join is done, the starter's
        // death kills it (and a starter already dead fails the spawn);
        // joined, it is a member the next agent adopts, and lives on.
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
        if rustix::process::getppid() != Some(parent) {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // Descriptors the parent leaked (inherited without O_CLOEXEC, like
        // a VM console's) would follow the program, and CRIU refuses to
        // dump a tree holding what it cannot restore. CLOEXEC rather than
        // close: std's own error pipe must live until the exec. Before
        // Linux 5.11 this fails and the program keeps what it inherited.
        close_range_cloexec(3);
        if new_session {
            rustix::process::setsid()?;
        }
        for fd in &join {
            // "0" is the writing process itself, in v1 and v2 alike.
            let written = rustix::io::write(fd, b"0")?;
            if written != 1 {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
        }
        rustix::process::set_parent_process_death_signal(None)?;
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec, where only
    // async-signal-safe work is allowed: it makes raw syscalls (prctl,
    // getppid, setsid, write) through rustix's linux_raw backend, on descriptors that were
    // opened before the fork and are owned by the closure, and allocates
    // nothing (io::Error from a raw errno does not allocate).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Makes the child of `cmd` create `mark` (`O_CREAT | O_EXCL`, 0600) just
/// before its `exec`: see `spawn::mark_before_exec`.
pub(crate) fn mark_before_exec(cmd: &mut Command, mark: std::ffi::CString) {
    let hook = move || -> io::Result<()> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(mark.as_c_str(), flags, Mode::RUSR | Mode::WUSR)?;
        drop(fd);
        Ok(())
    };
    // SAFETY: as in `join_before_exec`: the hook makes two raw syscalls
    // (open, close) through rustix on a path made before the fork, and
    // allocates nothing (a `&CStr` path is passed as it is).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Makes `cmd`'s child set its `oom_score_adj` to 0 before its `exec`:
/// see `spawn::default_oom_score_before_exec`.
pub(crate) fn default_oom_score_before_exec(cmd: &mut Command) {
    let hook = || -> io::Result<()> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(
            c"/proc/self/oom_score_adj",
            OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        rustix::io::write(&fd, b"0")?;
        Ok(())
    };
    // SAFETY: as in `mark_before_exec`: three raw syscalls (open, write,
    // close) through rustix on a static path, allocating nothing.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// `close_range(first, ~0, CLOSE_RANGE_CLOEXEC)`, best effort.
fn close_range_cloexec(first: u32) {
    // SAFETY: close_range takes three integers and touches no memory; with
    // CLOSE_RANGE_CLOEXEC it closes nothing, it only sets a flag on each
    // descriptor, so no descriptor owned elsewhere in this process goes away.
    unsafe {
        libc::syscall(libc::SYS_close_range, first, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
    }
}

/// Gives SIGPIPE back its default action (the process ends, silently),
/// which Rust's runtime replaces with "ignore" so that a write to a closed
/// pipe fails with `EPIPE` instead, and `println!` panics on that.
pub(crate) fn default_sigpipe() -> io::Result<()> {
    // SAFETY: SIG_DFL installs no handler (no code of ours runs when the
    // signal comes); the call changes only this process's disposition of
    // one signal and touches no memory of ours.
    let old = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    if old == libc::SIG_ERR {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
