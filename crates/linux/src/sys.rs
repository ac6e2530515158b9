//! The one syscall no well-kept crate wraps yet: `process_mrelease(2)`.
//!
//! Why a module of its own: the workspace denies `unsafe_code`; this is the
//! only place the crate allows it, for one raw `syscall(2)` whose arguments
//! are plain integers. `pidfd_open` and `pidfd_send_signal` come safe from
//! rustix.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

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
