//! Processes, by pid: whether one exists, what runs, reaping children,
//! becoming their reaper, the OOM killer's view of one, and its CPU and
//! memory from procfs.
//!
//! Why here: this crate is the only one that touches procfs and makes
//! syscalls; the agent and the benches ask these questions in their own
//! terms (a pid, a typed exit) and never spell a `/proc` path or call
//! `waitpid` themselves.

use std::fmt;
use std::path::{Path, PathBuf};

use rustix::io::Errno;
use rustix::process::{waitpid, WaitOptions};

use crate::error::CgroupError;
use crate::fsio;
use crate::parse::{Pid, ProcessStat, ProcessStatus, SchedStat};

/// Where procfs lists the processes.
const PROC: &str = "/proc";

/// A process's directory in procfs.
fn dir(pid: Pid) -> PathBuf {
    Path::new(PROC).join(pid.to_string())
}

/// Whether a process with this pid exists (a zombie does, until reaped).
/// A pid reused since by another process counts: pids say nothing more.
pub fn exists(pid: Pid) -> bool {
    dir(pid).exists()
}

/// Whether some process's command line (its arguments, split at the NULs
/// the kernel keeps between them) satisfies `matches`. Processes that exit
/// while being looked at, and kernel threads (no command line), are
/// skipped. An error only when `/proc` itself cannot be listed.
pub fn any_running(mut matches: impl FnMut(&[&[u8]]) -> bool) -> Result<bool, CgroupError> {
    let entries = std::fs::read_dir(PROC).map_err(|source| CgroupError::Io {
        op: "list",
        path: PROC.into(),
        source,
    })?;
    for entry in entries.filter_map(Result::ok) {
        // Non-pid entries (`self`, `meminfo`) have no cmdline, or not ours.
        let is_pid =
            entry.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        if !is_pid {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args = argv(&cmdline);
        if !args.is_empty() && matches(&args) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The arguments in a `/proc/<pid>/cmdline`: NUL-terminated, one after the
/// other (a process that rewrote its arguments may leave out the last NUL).
fn argv(cmdline: &[u8]) -> Vec<&[u8]> {
    let body = cmdline.strip_suffix(b"\0").unwrap_or(cmdline);
    if body.is_empty() {
        return Vec::new();
    }
    body.split(|b| *b == 0).collect()
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this status.
    Code(i32),
    /// A signal with this number ended it.
    Signal(i32),
    /// A status that is neither (not seen without `WUNTRACED`; the raw
    /// `wait` status).
    Other(i32),
}

impl Exit {
    /// The exit status, when it exited.
    pub fn code(self) -> Option<i32> {
        match self {
            Self::Code(c) => Some(c),
            _ => None,
        }
    }
}

/// As `std::process::ExitStatus` prints: `exit status: 0`, `signal: 9`.
impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Code(c) => write!(f, "exit status: {c}"),
            Self::Signal(s) => write!(f, "signal: {s}"),
            Self::Other(raw) => write!(f, "wait status {raw:#x}"),
        }
    }
}

/// Reaps the child `pid` if it has ended, without waiting: `None` while it
/// runs. `NotAChild` if it is not a child of this process (nor, for a
/// child subreaper, reparented to it), or was reaped already.
pub fn reap_if_exited(pid: Pid) -> Result<Option<Exit>, CgroupError> {
    let raw = i32::try_from(pid.get())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or(CgroupError::NoSuchProcess { pid })?;
    match waitpid(Some(raw), WaitOptions::NOHANG) {
        Ok(None) => Ok(None),
        Ok(Some((_, status))) => {
            Ok(Some(match (status.exit_status(), status.terminating_signal()) {
                (Some(code), _) => Exit::Code(code),
                (None, Some(signal)) => Exit::Signal(signal),
                (None, None) => Exit::Other(status.as_raw()),
            }))
        }
        Err(Errno::CHILD) => Err(CgroupError::NotAChild { pid }),
        Err(e) => Err(CgroupError::Io { op: "waitpid", path: dir(pid), source: e.into() }),
    }
}

/// Sends SIGKILL to a process. `NoSuchProcess` if it has exited (and been
/// reaped); a pid reused since is signalled, so callers pass only pids
/// they know are theirs (a child not yet reaped, a member just listed).
pub fn kill(pid: Pid) -> Result<(), CgroupError> {
    signal(pid, rustix::process::Signal::KILL)
}

/// Sends SIGTERM to a process, asking it to stop (see [`kill`]).
pub fn terminate(pid: Pid) -> Result<(), CgroupError> {
    signal(pid, rustix::process::Signal::TERM)
}

fn signal(pid: Pid, signal: rustix::process::Signal) -> Result<(), CgroupError> {
    let raw = i32::try_from(pid.get())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or(CgroupError::NoSuchProcess { pid })?;
    match rustix::process::kill_process(raw, signal) {
        Ok(()) => Ok(()),
        Err(Errno::SRCH) => Err(CgroupError::NoSuchProcess { pid }),
        Err(e) => Err(CgroupError::Io { op: "kill", path: dir(pid), source: e.into() }),
    }
}

/// Whether this process runs as root (effective uid 0): making cgroups
/// and adding swap need it.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Sets the nice value of the calling *thread* (Linux nice is per thread):
/// a benchmark's instrument runs at -10 so it is not starved by the
/// workloads it measures. Going below 0 needs `CAP_SYS_NICE`.
pub fn set_thread_nice(nice: i32) -> Result<(), CgroupError> {
    rustix::process::setpriority_process(None, nice)
        .map_err(|e| CgroupError::Syscall { call: "setpriority", source: e.into() })
}

/// Makes this process the reaper of its orphaned descendants
/// (`PR_SET_CHILD_SUBREAPER`): a process tree CRIU restores is reparented
/// to it when CRIU exits, so it can be reaped and its exit seen.
pub fn become_child_subreaper() -> Result<(), CgroupError> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).map_err(|e| {
        CgroupError::Syscall { call: "prctl(PR_SET_CHILD_SUBREAPER)", source: e.into() }
    })
}

/// Sets how the kernel's OOM killer ranks a process: from -1000 (never
/// chosen) to 1000 (chosen first). Lowering it needs `CAP_SYS_RESOURCE`.
pub fn set_oom_score_adj(pid: Pid, adj: i32) -> Result<(), CgroupError> {
    let path = dir(pid).join("oom_score_adj");
    std::fs::write(&path, adj.to_string()).map_err(|source| CgroupError::Io {
        op: "write",
        path,
        source,
    })
}

/// A process's state and CPU time (`/proc/<pid>/stat`).
pub fn stat(pid: Pid) -> Result<ProcessStat, CgroupError> {
    read(&dir(pid).join("stat"), ProcessStat::parse)
}

/// A process's scheduler times, summed over its threads
/// (`/proc/<pid>/task/*/schedstat`). A thread that exits while they are
/// read is left out; a process that is gone is `NoSuchProcess`.
pub fn schedstat(pid: Pid) -> Result<SchedStat, CgroupError> {
    let tasks = dir(pid).join("task");
    let entries = std::fs::read_dir(&tasks).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => CgroupError::NoSuchProcess { pid },
        _ => CgroupError::Io { op: "list", path: tasks.clone(), source },
    })?;
    let mut sum = SchedStat::default();
    for entry in entries.filter_map(Result::ok) {
        let file = entry.path().join("schedstat");
        let one = match std::fs::read_to_string(&file) {
            Ok(text) => SchedStat::parse(&text)
                .map_err(|source| CgroupError::Parse { path: file.clone(), source })?,
            Err(_) => continue,
        };
        sum.on_cpu += one.on_cpu;
        sum.run_delay += one.run_delay;
        sum.timeslices += one.timeslices;
    }
    Ok(sum)
}

/// A process's memory and threads (`/proc/<pid>/status`).
pub fn status(pid: Pid) -> Result<ProcessStatus, CgroupError> {
    read(&dir(pid).join("status"), ProcessStatus::parse)
}

/// This process's memory and threads (`/proc/self/status`).
pub fn own_status() -> Result<ProcessStatus, CgroupError> {
    read(Path::new("/proc/self/status"), ProcessStatus::parse)
}

fn read<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, crate::parse::ParseError>,
) -> Result<T, CgroupError> {
    let text = std::fs::read_to_string(path).map_err(|source| CgroupError::Io {
        op: "read",
        path: path.to_path_buf(),
        source,
    })?;
    fsio::parse_at(path, &text, parse)
}

/// For a command whose output may be piped into `head`: once the reader
/// has gone, the process ends quietly, as Unix tools do, instead of
/// failing (or panicking) on its next write. Not for a daemon, whose
/// sockets' readers may go at any time.
pub fn end_quietly_on_closed_pipe() -> Result<(), CgroupError> {
    crate::sys::default_sigpipe()
        .map_err(|e| CgroupError::Syscall { call: "signal(SIGPIPE, SIG_DFL)", source: e })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn own_pid() -> Pid {
        Pid::new(std::process::id()).expect("a pid")
    }

    #[test]
    fn a_process_s_scheduler_times_sum_its_threads_and_a_gone_one_is_said() {
        let spun: u64 = (0..2_000_000u64).fold(0, |a, x| a.wrapping_add(x * x));
        let own = schedstat(own_pid()).expect("readable");
        assert!(own.on_cpu > std::time::Duration::ZERO && own.timeslices > 0, "{own:?} {spun}");
        let gone = schedstat(Pid::new(Pid::MAX).expect("a pid"));
        assert!(matches!(gone, Err(CgroupError::NoSuchProcess { .. })), "{gone:?}");
    }

    #[test]
    fn this_process_exists_and_a_free_pid_does_not() {
        assert!(exists(own_pid()));
        assert!(!exists(Pid::new(Pid::MAX).expect("a pid")));
    }

    #[test]
    fn finds_this_process_by_its_command_line() {
        let own = std::fs::read(format!("/proc/{}/cmdline", std::process::id())).expect("cmdline");
        let me = argv(&own)[0].to_vec();
        assert!(any_running(|args| args[0] == me.as_slice()).expect("lists /proc"));
        assert!(!any_running(|args| args[0] == b"no such program\x01").expect("lists /proc"));
    }

    #[test]
    fn splits_command_lines() {
        assert_eq!(argv(b"criu\0dump\0-D\0/a b\0"), vec![&b"criu"[..], b"dump", b"-D", b"/a b"]);
        assert_eq!(argv(b"rewritten args"), vec![&b"rewritten args"[..]]);
        assert_eq!(argv(b"a\0\0b\0"), vec![&b"a"[..], b"", b"b"]);
        assert!(argv(b"").is_empty());
    }

    #[test]
    #[allow(clippy::zombie_processes)] // reaped by `reap_if_exited`, the function tested
    fn reaps_a_child_and_tells_how_it_ended() {
        let child = Command::new("sh").args(["-c", "exit 3"]).spawn().expect("sh runs");
        let pid = Pid::new(child.id()).expect("a pid");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let exit = loop {
            if let Some(exit) = reap_if_exited(pid).expect("our child") {
                break exit;
            }
            assert!(std::time::Instant::now() < deadline, "sh did not exit");
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert_eq!(exit, Exit::Code(3));
        assert_eq!(exit.to_string(), "exit status: 3");
        assert!(matches!(reap_if_exited(pid), Err(CgroupError::NotAChild { .. })));
        assert_eq!(Exit::Signal(9).to_string(), "signal: 9");
        assert_eq!(Exit::Signal(9).code(), None);
    }

    #[test]
    fn a_running_child_is_not_reaped() {
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep runs");
        let pid = Pid::new(child.id()).expect("a pid");
        assert_eq!(reap_if_exited(pid).expect("our child"), None);
        child.kill().expect("kill");
        child.wait().expect("reaped");
    }

    #[test]
    fn reads_own_stat_and_status() {
        let s = stat(own_pid()).expect("own stat");
        assert!(s.threads >= 1);
        assert!(matches!(s.state, 'R' | 'S' | 'D'));
        let st = own_status().expect("own status");
        assert!(st.vm_rss.is_some_and(|r| r > 0));
        assert!(st.vm_hwm >= st.vm_rss);
        assert!(status(own_pid()).expect("status").threads >= 1);
        let gone = Pid::new(Pid::MAX).expect("a pid");
        let e = stat(gone).expect_err("no such process");
        assert!(e.to_string().contains(&format!("/proc/{}/stat", Pid::MAX)), "{e}");
    }

    #[test]
    fn oom_score_adj_of_a_child() {
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep runs");
        let pid = Pid::new(child.id()).expect("a pid");
        set_oom_score_adj(pid, 500).expect("raising needs no privilege");
        let text = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).expect("read");
        assert_eq!(text.trim(), "500");
        child.kill().expect("kill");
        child.wait().expect("reaped");
        let e = set_oom_score_adj(pid, 0).expect_err("gone");
        assert!(e.to_string().contains("oom_score_adj"), "{e}");
    }

    #[test]
    fn signals_a_child() {
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep runs");
        let pid = Pid::new(child.id()).expect("a pid");
        terminate(pid).expect("signalled");
        let status = child.wait().expect("reaped");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(15));
        assert!(matches!(kill(pid), Err(CgroupError::NoSuchProcess { .. })));
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep runs");
        kill(Pid::new(child.id()).expect("a pid")).expect("signalled");
        let status = child.wait().expect("reaped");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
    }

    #[test]
    fn root_and_nice() {
        assert_eq!(is_root(), rustix::process::geteuid().as_raw() == 0);
        // Raising one's own nice value needs no privilege; on a thread of
        // its own, so the other tests keep theirs.
        std::thread::spawn(|| set_thread_nice(5).expect("renice")).join().expect("thread ran");
    }

    #[test]
    fn becomes_a_subreaper() {
        // Harmless for the test process: it only adopts orphans.
        become_child_subreaper().expect("prctl");
    }
}
