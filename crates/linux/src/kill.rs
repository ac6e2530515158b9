//! Killing every member of a container and reaping its memory at once.
//!
//! Why: a victim's memory is what production is waiting for. Members are
//! pinned with pidfds before anything is signalled, so a pid reused by an
//! unrelated process after a member exits is never signalled; each pidfd is
//! then handed to `process_mrelease`, which frees the victim's anonymous
//! memory in our context rather than when the victim gets scheduled to exit.
//! Callers freeze the container first where they can, so no member can fork
//! away between listing and signalling.

use std::collections::BTreeSet;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::io::Errno;
use rustix::process::{pidfd_open, pidfd_send_signal, PidfdFlags, Signal};

use crate::container::{done_or_return, KillMethod, KillReport, Outcome};
use crate::error::CgroupError;
use crate::fsio;
use crate::parse::Pid;
use crate::sys;

/// Rounds of re-listing the members after signalling, for members forked
/// while the first round was signalled (only when the container could not be
/// frozen and has no `cgroup.kill`).
const MAX_ROUNDS: usize = 32;

struct Victim {
    pid: Pid,
    fd: OwnedFd,
}

/// Kills every member of the cgroup whose directory is `dir`: with
/// `cgroup_kill` (the v2 file) when given, else with pidfds.
pub(crate) fn kill_members(
    dir: &Path,
    cgroup_kill: Option<&Path>,
) -> Result<Outcome<KillReport>, CgroupError> {
    let listed = done_or_return!(fsio::read_procs_tree(dir)?);
    let mut victims = open_all(&listed.pids)?;
    let (method, signalled) = match cgroup_kill {
        Some(file) => {
            done_or_return!(fsio::write(file, "1")?);
            (KillMethod::CgroupKill, victims.len())
        }
        None => (KillMethod::Pidfd, signal_rounds(dir, &mut victims)?),
    };
    let (mut reaped, mut not_reaped) = (0, 0);
    for victim in &victims {
        match sys::process_mrelease(victim.fd.as_fd()) {
            Ok(()) => reaped += 1,
            Err(_) => not_reaped += 1,
        }
    }
    Ok(Outcome::Done(KillReport { method, signalled, reaped, not_reaped }))
}

/// Signals the victims, then re-lists the members until none is left
/// unsignalled. Returns how many were signalled. Victims whose pid is no
/// longer a member once pinned are dropped unsignalled (the pid was reused).
fn signal_rounds(dir: &Path, victims: &mut Vec<Victim>) -> Result<usize, CgroupError> {
    let mut signalled = 0;
    let mut seen: BTreeSet<Pid> = BTreeSet::new();
    let mut pending = std::mem::take(victims);
    for _ in 0..MAX_ROUNDS {
        let Outcome::Done(members) = fsio::read_procs_tree(dir)? else {
            break;
        };
        let members: BTreeSet<Pid> = members.pids.into_iter().collect();
        for victim in pending.drain(..) {
            seen.insert(victim.pid);
            if !members.contains(&victim.pid) {
                continue;
            }
            match pidfd_send_signal(&victim.fd, Signal::KILL) {
                Ok(()) => signalled += 1,
                Err(Errno::SRCH) => {}
                Err(e) => return Err(pidfd_error("pidfd_send_signal", victim.pid, e)),
            }
            victims.push(victim);
        }
        let fresh: Vec<Pid> = members.difference(&seen).copied().collect();
        if fresh.is_empty() {
            break;
        }
        pending = open_all(&fresh)?;
    }
    Ok(signalled)
}

/// Pins each pid with a pidfd; pids already gone are skipped.
fn open_all(pids: &[Pid]) -> Result<Vec<Victim>, CgroupError> {
    let mut victims = Vec::with_capacity(pids.len());
    for &pid in pids {
        let Some(raw) = i32::try_from(pid.get()).ok().and_then(rustix::process::Pid::from_raw)
        else {
            continue;
        };
        match pidfd_open(raw, PidfdFlags::empty()) {
            Ok(fd) => victims.push(Victim { pid, fd }),
            Err(Errno::SRCH) => {}
            Err(Errno::NOSYS) => {
                return Err(CgroupError::Unsupported {
                    what: "pidfd_open (needs Linux 5.3 or later)".into(),
                })
            }
            Err(e) => return Err(pidfd_error("pidfd_open", pid, e)),
        }
    }
    Ok(victims)
}

fn pidfd_error(op: &'static str, pid: Pid, e: Errno) -> CgroupError {
    CgroupError::Io { op, path: format!("/proc/{pid}").into(), source: e.into() }
}
