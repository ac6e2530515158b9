//! Checkpoint and restore of a process tree with CRIU.
//!
//! Why through the `criu` binary and not its RPC service or library: the
//! binary is what distributions ship and `criu check` vouches for; one short
//! command per operation is easy to log, to time out and to explain. Every
//! command writes CRIU's own log (`-v4`) into the images directory, and a
//! failure carries the log's last lines and CRIU's error lines, so the agent
//! can say *why* a task could not be checkpointed or restored.
//!
//! The operations, in the terms of preemption:
//!
//! * [`Criu::pre_dump`]: copy the tree's memory while it keeps running, and
//!   start tracking what it dirties (`--track-mem`, soft-dirty bits);
//! * [`Criu::dump`]: freeze the tree, write what a restore needs (only the
//!   pages dirtied since `prev`, when given) and kill it;
//! * [`Criu::restore`]: rebuild the tree, detached, in a cgroup chosen by the
//!   caller, and return its root's pid.
//!
//! Cgroups are left to overbook (`--manage-cgroups=ignore`): a restored tree
//! goes where the agent puts it (a fresh container, maybe on another node),
//! never back into a cgroup path recorded at dump time.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::container::Outcome;
use crate::error::CgroupError;
use crate::parse::Pid;
use crate::probe;
use crate::spawn;

/// How long a CRIU command may run before it is killed, unless told.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Lines of CRIU's log kept in an error.
const LOG_TAIL_LINES: usize = 40;
/// Bytes read from the end of a log for its tail (`-v4` lines are short).
const LOG_TAIL_BYTES: u64 = 64 * 1024;
/// Bytes of a failed command's log searched for error lines (a `-v4` log of
/// a large tree runs to megabytes; the cause is usually near its end).
const LOG_SCAN_BYTES: u64 = 8 << 20;
/// CRIU's error lines quoted in an error's message.
const REASON_LINES: usize = 3;

/// The restored root's pid, written by `criu restore --pidfile`.
const RESTORE_PIDFILE: &str = "restore.pid";

/// What CRIU can do on this host, for `overbook check` and for choosing a
/// preemptor. A plain struct: absent features are data, with reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriuSupport {
    /// The `criu` binary, if one was found.
    pub binary: Option<PathBuf>,
    /// Its version (`3.17.1`), if it answered `--version`.
    pub version: Option<String>,
    /// `criu check`: `Ok` if it passed ("Looks good."), else why not.
    pub check: Result<(), String>,
    /// `criu check --feature mem_dirty_track`: whether the kernel tracks
    /// soft-dirty pages, which incremental dumps (`pre-dump --track-mem`)
    /// need; else why not.
    pub mem_dirty_track: Result<(), String>,
}

impl CriuSupport {
    /// Whether checkpoint and restore can be used at all.
    pub fn usable(&self) -> bool {
        self.check.is_ok()
    }

    /// Whether incremental dumps can be used.
    pub fn incremental(&self) -> bool {
        self.usable() && self.mem_dirty_track.is_ok()
    }

    /// Why checkpointing cannot be used here, if it cannot.
    pub fn why_not(&self) -> Option<&str> {
        self.check.as_ref().err().map(String::as_str)
    }
}

/// What the tree to checkpoint holds beyond plain processes, memory and
/// regular files; CRIU refuses such trees unless told, and a restore must be
/// told the same as its dump.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeOptions {
    /// `--shell-job`: the tree's session or process group leader is outside
    /// it (a program started from a shell without `setsid`); it may also
    /// hold a terminal.
    pub shell_job: bool,
    /// `--tcp-established`: it has established TCP connections (restored
    /// only where the same addresses exist).
    pub tcp_established: bool,
    /// `--file-locks`: it holds file locks.
    pub file_locks: bool,
    /// `--ext-unix-sk`: it has unix sockets connected outside the tree.
    pub ext_unix_sk: bool,
    /// `--freeze-cgroup DIR` (dumps only): stop the tree with this cgroup's
    /// freezer instead of one task at a time, so no member forks away while
    /// the tree is collected. The cgroup must hold exactly the tree.
    pub freeze_cgroup: Option<PathBuf>,
}

/// Sizes of one images directory (not counting its `parent` chain).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageSizes {
    /// Bytes of memory pages (`pages-*.img`): what a full dump scales with,
    /// and what an incremental dump saves.
    pub pages: u64,
    /// Bytes of every image (`*.img`), pages included.
    pub total: u64,
}

/// What a dump or pre-dump wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpReport {
    /// The images directory.
    pub images_dir: PathBuf,
    /// The directory it is incremental on (`--prev-images-dir`), as given.
    pub prev: Option<PathBuf>,
    /// Its size.
    pub sizes: ImageSizes,
    /// How long CRIU took, from spawn to exit.
    pub elapsed: Duration,
}

/// A restored tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// The pid of its root (the same as at dump time: CRIU restores pids).
    pub pid: Pid,
    /// How long CRIU took, from spawn to exit.
    pub elapsed: Duration,
}

/// What went wrong running CRIU.
#[derive(Debug, thiserror::Error)]
pub enum CriuError {
    /// The binary could not be started.
    #[error("{command}: cannot start: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why.
        source: io::Error,
    },
    /// CRIU ran and failed.
    #[error("{command}: {status}; CRIU says: {reason} (log: {})", log.display())]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: ExitStatus,
        /// CRIU's last error lines (or its last words if it logged none).
        reason: String,
        /// Its log file.
        log: PathBuf,
        /// The log's last lines, for an event or a bug report.
        log_tail: Vec<String>,
    },
    /// CRIU did not finish in time and was killed.
    #[error("{command}: no answer within {waited:?}, killed; CRIU's last words: {reason}")]
    Timeout {
        /// The command line.
        command: String,
        /// How long it was given.
        waited: Duration,
        /// Its last error lines or words.
        reason: String,
        /// Its log file.
        log: PathBuf,
        /// The log's last lines.
        log_tail: Vec<String>,
    },
    /// Preparing or reading the images directory failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// CRIU succeeded but its pidfile holds no pid.
    #[error("{}: not a pid: {text:?}", path.display())]
    BadPidFile {
        /// The pidfile.
        path: PathBuf,
        /// What it held.
        text: String,
    },
    /// The restore's cgroup could not be opened for joining.
    #[error("restore: {0}")]
    Join(#[from] CgroupError),
}

impl CriuError {
    /// CRIU's log tail, when CRIU ran.
    pub fn log_tail(&self) -> Option<&[String]> {
        match self {
            Self::Failed { log_tail, .. } | Self::Timeout { log_tail, .. } => Some(log_tail),
            _ => None,
        }
    }
}

/// The `criu` binary, and how long its commands may take.
#[derive(Debug, Clone)]
pub struct Criu {
    binary: PathBuf,
    timeout: Duration,
}

impl Criu {
    /// The binary at `binary`.
    pub fn new(binary: PathBuf) -> Self {
        Self { binary, timeout: DEFAULT_TIMEOUT }
    }

    /// The binary on `PATH` or in `/usr/sbin`, `/sbin`, if any.
    pub fn find() -> Option<Self> {
        probe::find_criu().map(Self::new)
    }

    /// The same, with commands killed after `timeout`.
    pub fn with_timeout(self, timeout: Duration) -> Self {
        Self { timeout, ..self }
    }

    /// The binary.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// What CRIU can do here, with the binary found by [`Criu::find`].
    /// Never fails: what does not work is reported with its reason.
    pub fn probe() -> CriuSupport {
        match Self::find() {
            Some(criu) => criu.support(),
            None => {
                let why = "no criu binary on PATH, in /usr/sbin or /sbin".to_owned();
                CriuSupport {
                    binary: None,
                    version: None,
                    check: Err(why.clone()),
                    mem_dirty_track: Err(why),
                }
            }
        }
    }

    /// What this binary can do here.
    pub fn support(&self) -> CriuSupport {
        let version = self.quick(&["--version"]).ok().and_then(|out| {
            out.lines().find_map(|l| l.trim().strip_prefix("Version:").map(|v| v.trim().to_owned()))
        });
        let check = self.quick(&["check"]).map(|_| ());
        let mem_dirty_track = match &check {
            Ok(()) => self.quick(&["check", "--feature", "mem_dirty_track"]).map(|_| ()),
            Err(_) => Err("criu check failed".to_owned()),
        };
        CriuSupport { binary: Some(self.binary.clone()), version, check, mem_dirty_track }
    }

    /// Runs a short CRIU command that logs to its standard streams; its
    /// output if it succeeded, else its last words.
    fn quick(&self, args: &[&str]) -> Result<String, String> {
        let command = self.command_line(args.iter().map(OsStr::new));
        let out = Command::new(&self.binary)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{command}: cannot start: {e}"))?;
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        if out.status.success() {
            return Ok(text);
        }
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let errors = lines.iter().filter(|l| l.contains("Error")).cloned().collect();
        Err(format!("{command}: {}: {}", out.status, reason(&LastWords { errors, tail: lines })))
    }

    /// Copies the memory of the tree rooted at `root` into `images_dir`
    /// while it keeps running, and makes the kernel track what it writes
    /// from now on (`--track-mem`), so a later dump or pre-dump with this
    /// directory as `prev` writes only the pages dirtied since. With `prev`,
    /// only what changed since that pre-dump is copied.
    ///
    /// `prev` is relative to `images_dir` (as CRIU takes it) or absolute
    /// (made relative here, so that a chain of directories can be moved or
    /// shared as a whole). [`Outcome::Vanished`] if the tree's root is gone.
    pub fn pre_dump(
        &self,
        root: Pid,
        images_dir: &Path,
        prev: Option<&Path>,
        tree: &TreeOptions,
    ) -> Result<Outcome<DumpReport>, CriuError> {
        self.dump_like("pre-dump", root, images_dir, prev, tree)
    }

    /// Checkpoints the tree rooted at `root` into `images_dir` and kills it
    /// once the images are complete (CRIU's default; a failed dump leaves the
    /// tree running). With `prev` (a pre-dump, see [`Criu::pre_dump`] for
    /// how it is given), only the pages dirtied since it are written, and a
    /// restore needs the whole chain.
    ///
    /// The dumped tree's ids must be free again before a restore on this
    /// node: the root's parent must reap it, and whoever inherits the other
    /// members (the nearest child subreaper, else init) must reap them too,
    /// since a zombie member still holds the root's pid as its session and
    /// process group id, and CRIU then fails with "Can't fork for PID: File
    /// exists". [`Outcome::Vanished`] if the root is gone.
    pub fn dump(
        &self,
        root: Pid,
        images_dir: &Path,
        prev: Option<&Path>,
        tree: &TreeOptions,
    ) -> Result<Outcome<DumpReport>, CriuError> {
        self.dump_like("dump", root, images_dir, prev, tree)
    }

    fn dump_like(
        &self,
        action: &'static str,
        root: Pid,
        images_dir: &Path,
        prev: Option<&Path>,
        tree: &TreeOptions,
    ) -> Result<Outcome<DumpReport>, CriuError> {
        fs::create_dir_all(images_dir).map_err(|source| CriuError::Io {
            op: "create images directory",
            path: images_dir.to_path_buf(),
            source,
        })?;
        let mut args: Vec<OsString> = vec!["--tree".into(), root.to_string().into()];
        if action == "pre-dump" || prev.is_some() {
            args.push("--track-mem".into());
        }
        if let Some(prev) = prev {
            args.push("--prev-images-dir".into());
            args.push(relative_prev(images_dir, prev)?.into());
        }
        if let Some(cgroup) = &tree.freeze_cgroup {
            args.push("--freeze-cgroup".into());
            args.push(cgroup.into());
        }
        tree_args(tree, &mut args);
        let elapsed = match self.run(action, images_dir, args, &[]) {
            Ok(elapsed) => elapsed,
            // CRIU says "No such process" in many ways; the kernel's answer
            // is the one to trust.
            Err(CriuError::Failed { .. }) if !Path::new(&format!("/proc/{root}")).exists() => {
                return Ok(Outcome::Vanished)
            }
            Err(e) => return Err(e),
        };
        Ok(Outcome::Done(DumpReport {
            images_dir: images_dir.to_path_buf(),
            prev: prev.map(Path::to_path_buf),
            sizes: image_sizes(images_dir)?,
            elapsed,
        }))
    }

    /// Restores the tree checkpointed in `images_dir` (following its
    /// `parent` chain, for an incremental dump) and leaves it running,
    /// detached from CRIU; returns its root's pid.
    ///
    /// The tree is placed in a cgroup of the caller's choosing: CRIU itself
    /// is started inside the cgroups whose `cgroup.procs` (or v1 `tasks`)
    /// files are `join_files` (a container's
    /// [`crate::ContainerCgroups::join_files`]) and told to leave cgroups
    /// alone, so every restored process is born there and its memory is
    /// charged there from the first page. With no `join_files`, the tree
    /// lands in the caller's cgroup.
    ///
    /// Once CRIU exits, the restored root is reparented to the nearest child
    /// subreaper (else init): a caller that wants its exit status must be a
    /// subreaper. `tree` must say what the dump was told.
    ///
    /// On failure CRIU kills what it had restored; on [`CriuError::Timeout`]
    /// CRIU itself is killed and can kill nothing: what it had begun to
    /// restore is left, stopped, in the cgroup it was given, for the caller
    /// to kill there. (CRIU 3.17 loops for ever on a truncated pages image:
    /// the timeout is what ends it.)
    pub fn restore(
        &self,
        images_dir: &Path,
        join_files: &[PathBuf],
        tree: &TreeOptions,
    ) -> Result<Restored, CriuError> {
        let pidfile = images_dir.join(RESTORE_PIDFILE);
        remove_if_present(&pidfile)?;
        let mut args: Vec<OsString> =
            vec!["--restore-detached".into(), "--pidfile".into(), pidfile.clone().into()];
        tree_args(&TreeOptions { freeze_cgroup: None, ..tree.clone() }, &mut args);
        let elapsed = self.run("restore", images_dir, args, join_files)?;
        let text = fs::read_to_string(&pidfile).map_err(|source| CriuError::Io {
            op: "read",
            path: pidfile.clone(),
            source,
        })?;
        let pid = text.trim().parse().ok().and_then(Pid::new);
        let pid = pid.ok_or(CriuError::BadPidFile { path: pidfile, text })?;
        Ok(Restored { pid, elapsed })
    }

    /// Runs `criu ACTION` on `images_dir` with its log there, inside
    /// `join_files`' cgroups if any; how long it took if it succeeded.
    fn run(
        &self,
        action: &'static str,
        images_dir: &Path,
        args: Vec<OsString>,
        join_files: &[PathBuf],
    ) -> Result<Duration, CriuError> {
        let log = images_dir.join(format!("{action}.log"));
        // CRIU's own stdout and stderr: what it says before its log is open
        // (a bad option, a missing directory). A file and not a pipe, so a
        // chatty CRIU can never block on us.
        let out_path = images_dir.join(format!("{action}.out"));
        remove_if_present(&log)?;
        let out = File::create(&out_path).map_err(|source| CriuError::Io {
            op: "create",
            path: out_path.clone(),
            source,
        })?;
        let err = out.try_clone().map_err(|source| CriuError::Io {
            op: "duplicate",
            path: out_path.clone(),
            source,
        })?;
        let mut full: Vec<OsString> = vec![
            action.into(),
            "--images-dir".into(),
            images_dir.into(),
            "--log-file".into(),
            log.clone().into(),
            "-v4".into(),
            // Cgroups are the agent's business, on dump and on restore alike.
            "--manage-cgroups=ignore".into(),
        ];
        full.extend(args);
        let command = self.command_line(full.iter().map(OsString::as_os_str));
        let mut cmd = Command::new(&self.binary);
        cmd.args(&full).stdin(Stdio::null()).stdout(out).stderr(err);
        if !join_files.is_empty() {
            spawn::join_before_exec(&mut cmd, join_files, false)?;
        }
        let started = Instant::now();
        let mut child =
            cmd.spawn().map_err(|source| CriuError::Spawn { command: command.clone(), source })?;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() < self.timeout => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let words = last_words(&log, &out_path);
                    return Err(CriuError::Timeout {
                        command,
                        waited: self.timeout,
                        reason: reason(&words),
                        log,
                        log_tail: words.tail,
                    });
                }
                Err(source) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(CriuError::Io {
                        op: "wait for criu",
                        path: self.binary.clone(),
                        source,
                    });
                }
            }
        };
        let elapsed = started.elapsed();
        if status.success() {
            return Ok(elapsed);
        }
        let words = last_words(&log, &out_path);
        Err(CriuError::Failed {
            command,
            status,
            reason: reason(&words),
            log,
            log_tail: words.tail,
        })
    }

    fn command_line<'a>(&self, args: impl Iterator<Item = &'a OsStr>) -> String {
        let mut line = self.binary.display().to_string();
        for a in args {
            line.push(' ');
            line.push_str(&a.to_string_lossy());
        }
        line
    }
}

fn tree_args(tree: &TreeOptions, args: &mut Vec<OsString>) {
    for (on, flag) in [
        (tree.shell_job, "--shell-job"),
        (tree.tcp_established, "--tcp-established"),
        (tree.file_locks, "--file-locks"),
        (tree.ext_unix_sk, "--ext-unix-sk"),
    ] {
        if on {
            args.push(flag.into());
        }
    }
}

fn remove_if_present(path: &Path) -> Result<(), CriuError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(CriuError::Io { op: "remove", path: path.to_path_buf(), source: e })
        }
        _ => Ok(()),
    }
}

/// The sizes of the images in `dir` (its `parent` chain not followed).
pub fn image_sizes(dir: &Path) -> Result<ImageSizes, CriuError> {
    let io_err = |source| CriuError::Io { op: "list images", path: dir.to_path_buf(), source };
    let mut sizes = ImageSizes::default();
    for entry in fs::read_dir(dir).map_err(io_err)? {
        let entry = entry.map_err(io_err)?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !name.ends_with(".img") {
            continue;
        }
        // `symlink_metadata`: `parent` is a link to the previous directory,
        // and nothing here should be counted through a link.
        let meta = entry.path().symlink_metadata().map_err(io_err)?;
        if !meta.is_file() {
            continue;
        }
        sizes.total += meta.len();
        if name.starts_with("pages-") {
            sizes.pages += meta.len();
        }
    }
    Ok(sizes)
}

/// `prev` as CRIU wants it: relative to the images directory.
fn relative_prev(images_dir: &Path, prev: &Path) -> Result<PathBuf, CriuError> {
    if prev.is_relative() {
        return Ok(prev.to_path_buf());
    }
    let canon = |p: &Path| {
        p.canonicalize().map_err(|source| CriuError::Io {
            op: "resolve",
            path: p.to_path_buf(),
            source,
        })
    };
    Ok(relative_path(&canon(images_dir)?, &canon(prev)?))
}

/// The path from directory `from` to `to`, both absolute and normalised.
fn relative_path(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<Component<'_>> = from.components().collect();
    let to: Vec<Component<'_>> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut rel = PathBuf::new();
    for _ in common..from.len() {
        rel.push("..");
    }
    for c in &to[common..] {
        rel.push(c);
    }
    if rel.as_os_str().is_empty() {
        rel.push(".");
    }
    rel
}

/// What CRIU said when it failed: its error lines (anywhere in the log,
/// as the one that matters often comes long before the end) and its last
/// lines; from its standard streams as well, where it writes before its log
/// is open (a bad option) and after.
struct LastWords {
    errors: Vec<String>,
    tail: Vec<String>,
}

fn last_words(log: &Path, out: &Path) -> LastWords {
    let mut errors = error_lines(log);
    errors.extend(error_lines(out));
    let mut tail = tail(log);
    tail.extend(self::tail(out));
    LastWords { errors, tail }
}

/// CRIU's error lines (`Error (file:line): ...`) in a file, from its last
/// [`LOG_SCAN_BYTES`].
fn error_lines(path: &Path) -> Vec<String> {
    read_end(path, LOG_SCAN_BYTES)
        .lines()
        .filter(|l| l.contains("Error (") || l.starts_with("Error"))
        .map(|l| l.trim().to_owned())
        .collect()
}

/// The last [`LOG_TAIL_LINES`] non-empty lines of a file.
fn tail(path: &Path) -> Vec<String> {
    let text = read_end(path, LOG_TAIL_BYTES);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let skip = lines.len().saturating_sub(LOG_TAIL_LINES);
    lines[skip..].iter().map(|l| (*l).to_owned()).collect()
}

/// The last `max` bytes of a file as text, from a line's start; empty if
/// it cannot be read (CRIU's words are a bonus, never a second error).
fn read_end(path: &Path, max: u64) -> String {
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let start = len.saturating_sub(max);
    if file.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    if file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if start == 0 {
        return text;
    }
    // The read began mid-line: drop the partial line.
    text.split_once('\n').map(|(_, rest)| rest.to_owned()).unwrap_or_default()
}

/// CRIU's reason for failing: its first error lines (the cause; later ones
/// are consequences such as "Dumping FAILED."), the last one, else its
/// last words.
fn reason(words: &LastWords) -> String {
    // Consequences, not causes: the summary at the end, and the exit of a
    // helper CRIU ran (an iptables probe) that says nothing of its own.
    let generic = |l: &&String| l.contains("FAILED.") || l.contains("exited, status=");
    let specific: Vec<&String> = words.errors.iter().filter(|l| !generic(l)).collect();
    let mut picked: Vec<&str> = specific.iter().take(REASON_LINES).map(|l| l.as_str()).collect();
    if specific.len() > REASON_LINES {
        picked.push("...");
        picked.extend(specific.last().map(|l| l.as_str()));
    }
    if picked.is_empty() {
        picked.extend(words.errors.last().or(words.tail.last()).map(|l| l.trim()));
    }
    if picked.is_empty() {
        "(it said nothing)".to_owned()
    } else {
        picked.join(" | ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_between_sibling_and_nested_dirs() {
        let rel = |a: &str, b: &str| relative_path(Path::new(a), Path::new(b));
        assert_eq!(rel("/img/t1/2", "/img/t1/1"), PathBuf::from("../1"));
        assert_eq!(rel("/img/t1/2", "/img/t0/1"), PathBuf::from("../../t0/1"));
        assert_eq!(rel("/img/a", "/img/a"), PathBuf::from("."));
        assert_eq!(rel("/img", "/img/a/b"), PathBuf::from("a/b"));
    }

    #[test]
    fn reason_prefers_criu_error_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("restore.log");
        let mut text = String::from("(00.001) Will restore in 4242 task\n");
        text.push_str("(00.002) Error (criu/pagemap.c:100): Can't read mapping page 0\n");
        text.push_str(&"(00.003) pie: noise\n".repeat(1000));
        text.push_str("(00.004) Error (criu/cr-restore.c:2400): Restoring FAILED.\n");
        text.push_str("(00.005) Unlock network\n");
        fs::write(&log, text).expect("write");
        let out = dir.path().join("restore.out");
        let words = last_words(&log, &out);
        assert_eq!(words.tail.len(), LOG_TAIL_LINES);
        let r = reason(&words);
        assert_eq!(r, "(00.002) Error (criu/pagemap.c:100): Can't read mapping page 0");
        let only_generic = LastWords {
            errors: vec!["Error (x.c:1): Dumping FAILED.".into()],
            tail: vec!["last".into()],
        };
        assert_eq!(reason(&only_generic), "Error (x.c:1): Dumping FAILED.");
        let silent = LastWords { errors: vec![], tail: vec!["  last words ".into()] };
        assert_eq!(reason(&silent), "last words");
        assert_eq!(reason(&LastWords { errors: vec![], tail: vec![] }), "(it said nothing)");
    }

    #[test]
    fn image_sizes_count_pages_and_images_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, len: usize| {
            fs::write(dir.path().join(name), vec![7u8; len]).expect("write");
        };
        write("pages-1.img", 4096 * 3);
        write("pages-2.img", 4096);
        write("pagemap-42.img", 100);
        write("core-42.img", 50);
        write("dump.log", 999);
        std::os::unix::fs::symlink("/nonexistent", dir.path().join("parent")).expect("symlink");
        let sizes = image_sizes(dir.path()).expect("sizes");
        assert_eq!(sizes, ImageSizes { pages: 4096 * 4, total: 4096 * 4 + 150 });
    }

    #[test]
    fn tail_keeps_the_last_lines_of_a_long_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("x.log");
        let text: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        fs::write(&log, text).expect("write");
        let t = tail(&log);
        assert_eq!(t.len(), LOG_TAIL_LINES);
        assert_eq!(t.last().map(String::as_str), Some("line 19999"));
        assert!(tail(&dir.path().join("missing")).is_empty());
    }

    #[test]
    fn the_probe_of_this_host_says_why_when_criu_cannot_run() {
        let support = Criu::probe();
        // Straight to stderr: what `overbook check` would say, seen in logs.
        let mut err = std::io::stderr().lock();
        let _ = std::io::Write::write_fmt(&mut err, format_args!("criu here: {support:?}\n"));
        if let Some(why) = support.why_not() {
            assert!(!why.is_empty() && !why.contains("(it said nothing)"), "{why}");
            assert!(!support.incremental());
        }
    }

    #[test]
    fn a_missing_binary_is_a_reason_not_a_panic() {
        let criu = Criu::new(PathBuf::from("/nonexistent/criu"));
        let support = criu.support();
        assert!(!support.usable());
        assert!(support.why_not().is_some_and(|w| w.contains("cannot start")), "{support:?}");
        assert!(!support.incremental());
    }
}
