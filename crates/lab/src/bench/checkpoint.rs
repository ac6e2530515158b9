//! `overbook bench checkpoint`: what a CRIU checkpoint costs on this node's
//! kernel and image store, full against incremental (004 Table 3: a 5 GB
//! program dumped twice, 10% of its memory rewritten in between; the second
//! dump an order of magnitude faster on HDD, SSD and NVM alike).
//!
//! For each size, a worker process holds that much anonymous memory, every
//! page written with non-zero data that no two pages share (CRIU skips zero
//! pages, a compressing or deduplicating store would shrink repeated ones).
//! Each repeat measures, in one run on one store directory:
//!
//! * the store's raw bandwidth: the same number of bytes written with
//!   `fsync`, then read back after dropping the file's cached pages
//!   (`posix_fadvise(DONTNEED)`), so dumps are compared with what this very
//!   store does, not with a number from elsewhere;
//! * a full dump (`criu dump`) of a fresh worker, its restore into a new
//!   cgroup, and the restored worker's checksum of its memory;
//! * an incremental one: `criu pre-dump` of a fresh worker (the first
//!   checkpoint, with soft-dirty tracking), the worker rewrites a share of
//!   its memory (`--dirty`), `criu dump --prev-images-dir` (the second,
//!   timed against the full dump), restore from the chain, checksum.
//!
//! A dump's time is CRIU's plus the `fsync` of the images it wrote (the raw
//! write is timed with its `fsync` too: a dump is done when its images are
//! on the store). Before a restore the images' cached pages are dropped, so
//! the restore reads them from the store. On tmpfs (the VM's `/var/tmp`)
//! neither means anything: the store is memory, which the report says.
//!
//! Workers are `overbook bench checkpoint-worker` ([`worker`]): one process
//! in its own session, in a fresh cgroup, stdio on `/dev/null`, talking
//! through small files it writes and renames, so it holds no descriptor a
//! restore would have to recreate. Every cgroup, process and file the bench
//! makes is removed by [`Lab`]'s `Drop`, on error paths too; the store
//! directory is kept only with `--keep`.

use super::{BenchNode, MIB};
use overbook_linux::criu::{Criu, CriuError, DumpReport, ImageSizes, TreeOptions};
use overbook_linux::{host, process, ContainerPath, Outcome, Pid};
use serde::Serialize;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PAGE: u64 = 4096;
/// Chunk of the raw write and read (CRIU writes pages in runs of this order).
const CHUNK: usize = 1 << 20;
/// The seed of every worker's memory (the data only has to be non-zero and
/// different page to page).
const SEED: u64 = 0x0BAD_5EED;
/// How long a worker may take to fill or checksum its memory (the emulated
/// VM does a few hundred MiB/s at best).
const PATIENCE: Duration = Duration::from_secs(600);
/// The worker of the untimed first round.
const WARMUP_SIZE: u64 = 4 * MIB;
/// How long a killed process or an emptied cgroup may take to go.
const SETTLE: Duration = Duration::from_secs(20);

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointBenchError {
    /// The bench cannot run on this host (no root, no CRIU, no soft-dirty).
    #[error("cannot run here: {0}")]
    Unsupported(String),
    /// A CRIU command failed.
    #[error("{what}: {source}")]
    Criu {
        /// What was being done.
        what: String,
        /// CRIU's failure, with its reason (boxed: it carries CRIU's log tail).
        source: Box<CriuError>,
    },
    /// A file of the store, or a process, could not be handled.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or program.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The node cgroup or a container could not be made or used.
    #[error("cgroups: {0}")]
    Cgroup(String),
    /// A worker did not do what it was told in time, or died.
    #[error("worker {tag}: {what}")]
    Worker {
        /// Which worker.
        tag: String,
        /// What it failed to do.
        what: String,
    },
    /// A restored worker's memory is not what it wrote: the checkpoint is
    /// wrong, and its timings mean nothing.
    #[error("worker {tag}: restored memory checksum {got:#018x}, expected {expected:#018x}")]
    WrongAnswer {
        /// Which worker.
        tag: String,
        /// Its answer.
        got: u64,
        /// What it wrote before the checkpoint.
        expected: u64,
    },
}

type Result<T> = std::result::Result<T, CheckpointBenchError>;

fn io_err<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> CheckpointBenchError + 'a {
    move |source| CheckpointBenchError::Io { op, path: path.to_path_buf(), source }
}

/// How the benchmark runs.
#[derive(Clone, Debug)]
pub struct CheckpointPlan {
    /// The program that runs workers and the arguments before the worker's
    /// (`overbook bench checkpoint-worker`).
    pub worker_program: PathBuf,
    pub worker_prefix: Vec<String>,
    /// The store: a fresh directory is made in it for the run.
    pub store: PathBuf,
    /// Keep that directory (images of the last repeat, raw files removed).
    pub keep: bool,
    /// Workers' memory sizes, bytes (multiples of a page).
    pub sizes: Vec<u64>,
    /// Share of a worker's memory rewritten between pre-dump and dump.
    pub dirty: f64,
    pub repeats: usize,
    /// The command line, for the report.
    pub command: String,
}

/// Median and range of one measure over the repeats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Spread {
    pub fn of(samples: &[f64]) -> Spread {
        let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        if n == 0 {
            return Spread { median: f64::NAN, min: f64::NAN, max: f64::NAN, n };
        }
        let median = if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 };
        Spread { median, min: s[0], max: s[n - 1], n }
    }
}

/// One repeat at one size: every measure, as measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckpointRun {
    pub repeat: usize,
    /// Raw write (with `fsync`) and cold read of `size` bytes, seconds.
    pub raw_write_s: f64,
    pub raw_read_s: f64,
    /// Full dump: CRIU's time, the `fsync` of its images, and their sizes.
    pub full_dump_criu_s: f64,
    pub full_dump_sync_s: f64,
    pub full_pages: u64,
    pub full_images: u64,
    pub full_restore_s: f64,
    /// The restored worker's checksum of its memory, and what it wrote.
    pub full_answer: u64,
    pub full_expected: u64,
    /// Incremental: the pre-dump (the first checkpoint) ...
    pub pre_dump_criu_s: f64,
    pub pre_dump_sync_s: f64,
    pub pre_pages: u64,
    /// ... and the dump on top of it (the second).
    pub inc_dump_criu_s: f64,
    pub inc_dump_sync_s: f64,
    pub inc_pages: u64,
    pub inc_images: u64,
    /// Bytes the worker rewrote in between.
    pub dirtied: u64,
    pub inc_restore_s: f64,
    pub inc_answer: u64,
    pub inc_expected: u64,
}

impl CheckpointRun {
    pub fn full_dump_s(&self) -> f64 {
        self.full_dump_criu_s + self.full_dump_sync_s
    }

    pub fn inc_dump_s(&self) -> f64 {
        self.inc_dump_criu_s + self.inc_dump_sync_s
    }
}

/// One size: the runs and their medians and ranges.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SizeReport {
    /// The worker's memory, bytes.
    pub size: u64,
    /// MB/s (10⁶ bytes per second) of the raw write and read.
    pub raw_write_mbps: Spread,
    pub raw_read_mbps: Spread,
    /// Full dump time (CRIU + `fsync`), seconds, and its bandwidth: pages
    /// bytes over that time, MB/s.
    pub full_dump_s: Spread,
    pub full_dump_mbps: Spread,
    /// Full dump bandwidth over the same repeat's raw write bandwidth.
    pub dump_vs_raw_write: Spread,
    pub full_pages_mib: Spread,
    pub full_restore_s: Spread,
    pub pre_dump_s: Spread,
    /// Incremental dump time (CRIU + `fsync`), seconds.
    pub inc_dump_s: Spread,
    pub inc_pages_mib: Spread,
    /// Incremental pages over full pages.
    pub inc_pages_share: Spread,
    /// Full dump time over incremental dump time, repeat by repeat.
    pub speedup: Spread,
    pub inc_restore_s: Spread,
    pub runs: Vec<CheckpointRun>,
}

/// A straight line `seconds = fixed + bytes / bandwidth` through runs.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Fit {
    /// The intercept: what a dump costs whatever its size, seconds.
    pub fixed_s: f64,
    /// The slope's inverse, MB/s.
    pub mbps: f64,
}

impl Fit {
    /// Least squares through `(bytes, seconds)`; `None` with fewer than two
    /// distinct sizes or a slope that is not positive.
    pub fn of(points: &[(f64, f64)]) -> Option<Fit> {
        let n = points.len() as f64;
        if points.len() < 2 {
            return None;
        }
        let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        if sxx <= 0.0 {
            return None;
        }
        let slope = sxy / sxx;
        (slope > 0.0).then(|| Fit { fixed_s: my - slope * mx, mbps: 1e-6 / slope })
    }

    fn seconds(&self, bytes: f64) -> f64 {
        self.fixed_s + bytes / (self.mbps * 1e6)
    }
}

/// The goals the issue sets, as measured (never assumed).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Goals {
    /// Full dumps reach at least 80% of the store's raw write bandwidth
    /// (median of each size): sizes where they do, and the worst share.
    pub dump_bandwidth_sizes_met: Vec<u64>,
    pub dump_bandwidth_worst: f64,
    /// A `dirty`-share incremental dump at least 8x faster than a full one
    /// (median of each size): sizes where it is, and the best speedup.
    pub speedup_sizes_met: Vec<u64>,
    pub speedup_best: f64,
    /// From straight-line fits of dump time against pages written: the
    /// fixed cost of each kind of dump, and the size from which the
    /// speedup would reach 8x (`None`: never, as the fits stand).
    pub full_fit: Option<Fit>,
    pub inc_fit: Option<Fit>,
    pub speedup_8x_from_bytes: Option<f64>,
    /// The speedup the fits tend to for very large sizes.
    pub speedup_limit: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckpointReport {
    pub version: String,
    pub command: String,
    pub kernel: String,
    pub criu: String,
    /// The store directory measured, and its filesystem.
    pub store: PathBuf,
    pub store_fs: String,
    /// Whether the store is memory (tmpfs, ramfs): its `fsync` and cache
    /// drops do nothing, and its bandwidth is memory's.
    pub store_in_memory: bool,
    pub dirty: f64,
    pub repeats: usize,
    pub sizes: Vec<SizeReport>,
    pub goals: Goals,
    /// The store directory, if kept (`--keep`).
    pub kept: Option<PathBuf>,
    /// The untimed first round (a 4 MiB worker through every step), not in
    /// any size's numbers: the first CRIU commands of a boot pay for
    /// loading CRIU and probing the kernel (seen in the VM: a 64 MiB full
    /// dump took 3.7 s first, then 1.3 s).
    pub warmup: Option<CheckpointRun>,
}

// ------------------------------------------------------------- the worker

/// The worker's arguments.
#[derive(Clone, Debug)]
pub struct WorkerArgs {
    /// Its directory: `filled`, `dirtied`, `answer` are written there;
    /// `go-dirty`, `go-sum` are read.
    pub dir: PathBuf,
    /// Bytes of anonymous memory.
    pub size: u64,
    /// Bytes rewritten on `go-dirty` (from the start, in one run).
    pub dirty: u64,
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Word `i` of a worker's memory, before or after its rewrite. `| 1`: never
/// zero, so no page is all zeros.
fn word(i: u64, rewritten: bool) -> u64 {
    let w = mix(i ^ SEED) | 1;
    if rewritten {
        w.wrapping_add(2)
    } else {
        w
    }
}

/// A checksum that depends on every word and its place: a page lost, moved
/// or taken from the wrong checkpoint changes it.
fn checksum(words: impl Iterator<Item = u64>) -> u64 {
    words.zip(0u64..).fold(0u64, |acc, (w, i)| acc.wrapping_add(w.wrapping_mul(2 * i + 1)))
}

/// What a worker of `size` bytes answers, with its first `dirty` bytes as
/// written first and as rewritten. One pass over the memory, plus one over
/// the rewritten share (the sum is a plain sum: only those terms change).
pub fn expected_checksums(size: u64, dirty: u64) -> (u64, u64) {
    let first = checksum((0..size / 8).map(|i| word(i, false)));
    let dirty_words = (dirty / 8).min(size / 8);
    let delta = (0..dirty_words).fold(0u64, |acc, i| {
        let m = 2 * i + 1;
        acc.wrapping_add(word(i, true).wrapping_mul(m)).wrapping_sub(word(i, false).wrapping_mul(m))
    });
    (first, first.wrapping_add(delta))
}

/// Writes `dir/name` atomically and keeps nothing open (a restore would
/// have to find an open file as it was).
fn publish(dir: &Path, name: &str, text: &str) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    fs::write(&tmp, text)?;
    fs::rename(&tmp, dir.join(name))
}

/// The worker: fills its memory, says `filled`; on `go-dirty` rewrites its
/// first `dirty` bytes and says `dirtied`; on `go-sum` writes the checksum
/// of its memory to `answer` and exits. It polls for the files: it may be
/// frozen, dumped, killed and restored at any moment in between.
pub fn worker(args: &WorkerArgs) -> io::Result<()> {
    let words = usize::try_from(args.size / 8).map_err(|_| io::Error::other("size too large"))?;
    let dirty_words = usize::try_from(args.dirty / 8).unwrap_or(words).min(words);
    let mut memory: Vec<u64> = (0..words as u64).map(|i| word(i, false)).collect();
    publish(&args.dir, "filled", "")?;
    let mut dirtied = false;
    loop {
        if !dirtied && args.dir.join("go-dirty").exists() {
            // One run from the start: transparent huge pages then turn the
            // share into about the same share of huge pages, not all of them.
            for w in &mut memory[..dirty_words] {
                *w = w.wrapping_add(2);
            }
            dirtied = true;
            publish(&args.dir, "dirtied", "")?;
        }
        if args.dir.join("go-sum").exists() {
            let sum = checksum(memory.iter().copied());
            return publish(&args.dir, "answer", &sum.to_string());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ------------------------------------------------------------- the lab

/// The node cgroup, the workers and restored trees in it, and the store
/// directory, all removed on drop.
struct Lab {
    criu: Criu,
    node: BenchNode,
    /// Workers we started: our children until a dump kills them.
    children: Vec<(Pid, Child)>,
    /// Restored roots: our children through the subreaper.
    restored: Vec<Pid>,
    /// Last: the store directory goes once nothing uses it.
    store: Option<tempfile::TempDir>,
}

/// A worker: its container, root pid and directory.
struct Running {
    tag: String,
    container: ContainerPath,
    pid: Pid,
    dir: PathBuf,
}

impl Lab {
    fn store(&self) -> &Path {
        self.store.as_ref().map_or(Path::new("/nonexistent"), |d| d.path())
    }

    fn container(&mut self, name: &str) -> Result<ContainerPath> {
        self.node.container(name).map_err(CheckpointBenchError::Cgroup)
    }

    /// Removes a container whose processes are gone (or kills them).
    fn drop_container(&mut self, c: &ContainerPath) {
        self.node.drop_container(c);
    }

    /// Starts a worker of `size` bytes in a fresh container, in its own
    /// session (CRIU dumps a tree that leads its session on its own), and
    /// waits until its memory is filled.
    fn start_worker(&mut self, plan: &CheckpointPlan, tag: &str, size: u64) -> Result<Running> {
        let container = self.container(tag)?;
        let dir = self.store().join(format!("worker-{tag}"));
        fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
        let dirty = dirty_bytes(size, plan.dirty);
        let mut cmd = Command::new(&plan.worker_program);
        cmd.args(&plan.worker_prefix)
            .arg("--dir")
            .arg(&dir)
            .arg("--size")
            .arg(size.to_string())
            .arg("--dirty")
            .arg(dirty.to_string())
            // Nothing of the store open or current: its directories come and go.
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        overbook_linux::spawn::join_before_exec(
            &mut cmd,
            &self.node.cg.join_files(&container),
            true,
        )
        .map_err(|e| CheckpointBenchError::Cgroup(e.to_string()))?;
        let child = cmd.spawn().map_err(io_err("start", &plan.worker_program))?;
        let pid = Pid::new(child.id()).ok_or_else(|| CheckpointBenchError::Worker {
            tag: tag.into(),
            what: "no pid".into(),
        })?;
        self.children.push((pid, child));
        let w = Running { tag: tag.to_string(), container, pid, dir };
        self.await_file(&w, "filled")?;
        Ok(w)
    }

    /// Waits for a worker's file; fails if the worker died first.
    fn await_file(&mut self, w: &Running, name: &str) -> Result<String> {
        let path = w.dir.join(name);
        let start = Instant::now();
        loop {
            if let Ok(text) = fs::read_to_string(&path) {
                return Ok(text);
            }
            if !process::exists(w.pid) || self.exited(w.pid) {
                return Err(CheckpointBenchError::Worker {
                    tag: w.tag.clone(),
                    what: format!("died before writing {name}"),
                });
            }
            if start.elapsed() > PATIENCE {
                return Err(CheckpointBenchError::Worker {
                    tag: w.tag.clone(),
                    what: format!("no {name} within {PATIENCE:?}"),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether our child `pid` has exited (a zombie still has `/proc/PID`).
    fn exited(&mut self, pid: Pid) -> bool {
        self.children
            .iter_mut()
            .find(|(p, _)| *p == pid)
            .is_some_and(|(_, c)| !matches!(c.try_wait(), Ok(None)))
    }

    fn tell(&self, w: &Running, name: &str) -> Result<()> {
        let path = w.dir.join(name);
        fs::write(&path, "").map_err(io_err("write", &path))
    }

    /// Reaps a worker the dump killed, so its pid is free for the restore.
    fn reap_dumped(&mut self, w: &Running) -> Result<()> {
        let Some(at) = self.children.iter().position(|(p, _)| *p == w.pid) else {
            return Ok(());
        };
        let (_, mut child) = self.children.remove(at);
        let start = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if start.elapsed() < SETTLE => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(CheckpointBenchError::Worker {
                        tag: w.tag.clone(),
                        what: format!("still running {SETTLE:?} after its dump"),
                    });
                }
                Err(e) => {
                    return Err(CheckpointBenchError::Io {
                        op: "wait for",
                        path: format!("pid {}", w.pid).into(),
                        source: e,
                    })
                }
            }
        }
    }

    /// Dumps (or pre-dumps) a worker; the report with `fsync` time.
    fn dump(
        &mut self,
        w: &Running,
        images: &Path,
        prev: Option<&Path>,
        pre: bool,
    ) -> Result<(DumpReport, Duration)> {
        let what = format!(
            "{} of worker {} into {}",
            if pre { "pre-dump" } else { "dump" },
            w.tag,
            images.display()
        );
        let tree = TreeOptions::default();
        let outcome = if pre {
            self.criu.pre_dump(w.pid, images, prev, &tree)
        } else {
            self.criu.dump(w.pid, images, prev, &tree)
        };
        let report = match outcome {
            Ok(Outcome::Done(r)) => r,
            Ok(Outcome::Vanished) => {
                return Err(CheckpointBenchError::Worker {
                    tag: w.tag.clone(),
                    what: format!("vanished during the {what}"),
                })
            }
            Err(e) => return Err(CheckpointBenchError::Criu { what, source: Box::new(e) }),
        };
        let sync = sync_dir(images)?;
        Ok((report, sync))
    }

    /// Restores `images` into a fresh container `tag`; the restore's time.
    fn restore(&mut self, tag: &str, images: &Path) -> Result<(ContainerPath, Pid, Duration)> {
        let c = self.container(tag)?;
        let join = self.node.cg.join_files(&c);
        let r = self.criu.restore(images, &join, &TreeOptions::default()).map_err(|e| {
            CheckpointBenchError::Criu {
                what: format!("restore of {}", images.display()),
                source: Box::new(e),
            }
        })?;
        self.restored.push(r.pid);
        Ok((c, r.pid, r.elapsed))
    }

    /// Tells a restored worker to checksum its memory, waits for its answer
    /// and its exit; the answer.
    fn answer(&mut self, w: &Running) -> Result<u64> {
        self.tell(w, "go-sum")?;
        let text = self.await_restored_file(w, "answer")?;
        let answer = text.trim().parse().map_err(|_| CheckpointBenchError::Worker {
            tag: w.tag.clone(),
            what: format!("answer {text:?} is not a number"),
        })?;
        let code = self.reap_restored(w)?;
        if code != 0 {
            return Err(CheckpointBenchError::Worker {
                tag: w.tag.clone(),
                what: format!("restored, it exited with status {code}"),
            });
        }
        Ok(answer)
    }

    /// Like `await_file`, for a restored worker (not our `Child`).
    fn await_restored_file(&mut self, w: &Running, name: &str) -> Result<String> {
        let path = w.dir.join(name);
        let start = Instant::now();
        loop {
            if let Ok(text) = fs::read_to_string(&path) {
                return Ok(text);
            }
            if !process::exists(w.pid) {
                return Err(CheckpointBenchError::Worker {
                    tag: w.tag.clone(),
                    what: format!("restored, it died before writing {name}"),
                });
            }
            if start.elapsed() > PATIENCE {
                return Err(CheckpointBenchError::Worker {
                    tag: w.tag.clone(),
                    what: format!("restored, no {name} within {PATIENCE:?}"),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for a restored root to exit and reaps it; its exit code.
    fn reap_restored(&mut self, w: &Running) -> Result<i32> {
        let start = Instant::now();
        loop {
            match process::reap_if_exited(w.pid) {
                Ok(Some(exit)) => {
                    self.restored.retain(|p| *p != w.pid);
                    return exit.code().ok_or_else(|| CheckpointBenchError::Worker {
                        tag: w.tag.clone(),
                        what: format!("restored, it ended by {exit}"),
                    });
                }
                Ok(None) if start.elapsed() < PATIENCE => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => {
                    return Err(CheckpointBenchError::Worker {
                        tag: w.tag.clone(),
                        what: format!("restored, it did not exit within {PATIENCE:?}"),
                    })
                }
                Err(e) => {
                    return Err(CheckpointBenchError::Worker {
                        tag: w.tag.clone(),
                        what: format!("restored, it could not be waited for: {e}"),
                    })
                }
            }
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Everything in the node's containers dies first: workers, restored
        // trees, half-restored ones a timed-out CRIU left stopped.
        if let Ok(Outcome::Done(all)) = self.node.cg.discover(&self.node.root) {
            for c in &all {
                let _ = self.node.cg.kill(c);
            }
        }
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Killed with their cgroups; reaped here, or they would stay zombies.
        for pid in &self.restored {
            let start = Instant::now();
            while matches!(process::reap_if_exited(*pid), Ok(None)) && start.elapsed() < SETTLE {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        // Then `node` (removes the cgroups) and `store` drop, in that order.
    }
}

/// The bytes a worker rewrites: whole pages, at least one.
fn dirty_bytes(size: u64, share: f64) -> u64 {
    let pages = overbook_core::convert::to_u64(((size / PAGE) as f64 * share).ceil());
    pages.clamp(1, size / PAGE) * PAGE
}

// ------------------------------------------------------------- the store

/// `fsync`s every file of `dir` and `dir` itself; how long it took.
fn sync_dir(dir: &Path) -> Result<Duration> {
    let start = Instant::now();
    for entry in fs::read_dir(dir).map_err(io_err("list", dir))? {
        let entry = entry.map_err(io_err("list", dir))?;
        let path = entry.path();
        if path.symlink_metadata().map_err(io_err("stat", &path))?.is_file() {
            File::open(&path).and_then(|f| f.sync_all()).map_err(io_err("fsync", &path))?;
        }
    }
    File::open(dir).and_then(|f| f.sync_all()).map_err(io_err("fsync", dir))?;
    Ok(start.elapsed())
}

/// Drops the cached pages of every file in `dirs` (synced before), so a
/// restore reads them from the store.
fn drop_cache(dirs: &[&Path]) -> Result<()> {
    for dir in dirs {
        for entry in fs::read_dir(dir).map_err(io_err("list", dir))? {
            let path = entry.map_err(io_err("list", dir))?.path();
            if path.symlink_metadata().map_err(io_err("stat", &path))?.is_file() {
                let f = File::open(&path).map_err(io_err("open", &path))?;
                rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)
                    .map_err(|e| io_err("fadvise", &path)(e.into()))?;
            }
        }
    }
    Ok(())
}

/// Writes `size` bytes to a file of the store with `fsync`, drops its
/// cached pages, reads it back; both times. The data differs page to page.
fn raw_bandwidth(dir: &Path, size: u64) -> Result<(Duration, Duration)> {
    let path = dir.join("raw.bin");
    let mut buf: Vec<u8> =
        (0..CHUNK as u64 / 8).flat_map(|i| word(i, false).to_le_bytes()).collect();
    let write = {
        let start = Instant::now();
        let mut f = File::create(&path).map_err(io_err("create", &path))?;
        let mut left = size;
        let mut chunk = 0u64;
        while left > 0 {
            // A new first word in every page of every chunk: no two pages alike.
            for page in buf.chunks_mut(overbook_core::convert::u64_to_usize(PAGE)) {
                page[..8].copy_from_slice(&mix(chunk).to_le_bytes());
                chunk += 1;
            }
            let n = overbook_core::convert::u64_to_usize(left).min(CHUNK);
            f.write_all(&buf[..n]).map_err(io_err("write", &path))?;
            left -= n as u64;
        }
        f.sync_all().map_err(io_err("fsync", &path))?;
        let t = start.elapsed();
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)
            .map_err(|e| io_err("fadvise", &path)(e.into()))?;
        t
    };
    let read = {
        let start = Instant::now();
        let mut f = File::open(&path).map_err(io_err("open", &path))?;
        let mut total = 0u64;
        loop {
            let n = f.read(&mut buf).map_err(io_err("read", &path))?;
            if n == 0 {
                break;
            }
            total += n as u64;
        }
        let t = start.elapsed();
        if total != size {
            return Err(io_err("read", &path)(io::Error::other(format!(
                "read {total} bytes back, wrote {size}"
            ))));
        }
        t
    };
    fs::remove_file(&path).map_err(io_err("remove", &path))?;
    Ok((write, read))
}

/// The filesystem of `dir` and whether it is memory: the type of the mount
/// it is on, from `/proc/self/mounts` (a 9p or NFS mount reports its
/// server's filesystem magic to `statfs`: the VM's shared host directory
/// says ext4), else `statfs`'s magic number.
fn filesystem(dir: &Path) -> (String, bool) {
    let from_mounts = || -> Option<String> {
        let dir = dir.canonicalize().ok()?;
        let text = fs::read_to_string(overbook_linux::parse::Mounts::FILE).ok()?;
        let mounts = overbook_linux::parse::Mounts::parse(&text).ok()?;
        // The deepest mount over `dir`; of equals, the last (it is on top).
        let on = mounts
            .mounts
            .iter()
            .filter(|m| dir.starts_with(&m.target))
            .max_by_key(|m| m.target.components().count())?;
        Some(on.fstype.clone())
    };
    let name = from_mounts().or_else(|| {
        let st = rustix::fs::statfs(dir).ok()?;
        // `f_type`'s type differs by libc (signed on glibc): a magic
        // number, its bits are what count.
        #[allow(clippy::unnecessary_cast, clippy::cast_sign_loss)]
        let magic = st.f_type as u64;
        Some(
            match magic {
                0x0102_1994 => "tmpfs",
                0x8584_58f6 => "ramfs",
                0xEF53 => "ext4",
                0x5846_5342 => "xfs",
                0x9123_683E => "btrfs",
                0x0102_1997 => "9p",
                0x6969 => "nfs",
                _ => return Some(format!("magic {magic:#x}")),
            }
            .to_string(),
        )
    });
    let name = name.unwrap_or_else(|| "unknown".into());
    let memory = matches!(name.as_str(), "tmpfs" | "ramfs");
    (name, memory)
}

// ------------------------------------------------------------- the run

/// Checks that CRIU can run here, with incremental dumps; the binary and
/// its version.
fn criu_here() -> Result<(Criu, String)> {
    let support = Criu::probe();
    if let Some(why) = support.why_not() {
        return Err(CheckpointBenchError::Unsupported(format!(
            "CRIU cannot run on this host: {why} (on the development host the packaged CRIU \
             fails `criu check` on kernels 6.13+; the bench runs in scripts/vm's guest)"
        )));
    }
    if let Err(why) = &support.mem_dirty_track {
        return Err(CheckpointBenchError::Unsupported(format!(
            "this kernel does not track soft-dirty pages, which incremental dumps need: {why}"
        )));
    }
    let criu = Criu::find()
        .ok_or_else(|| CheckpointBenchError::Unsupported("the criu binary vanished".into()))?;
    Ok((criu, support.version.unwrap_or_else(|| "(version unknown)".into())))
}

fn mb(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9)
}

/// Runs what the plan asks, telling `say` what happens.
pub fn run(plan: &CheckpointPlan, mut say: impl FnMut(&str)) -> Result<CheckpointReport> {
    if !overbook_linux::process::is_root() {
        return Err(CheckpointBenchError::Unsupported(
            "needs root (CRIU, and cgroups for the workers)".into(),
        ));
    }
    let (criu, criu_version) = criu_here()?;
    // Restored roots are reparented to us when CRIU exits: we reap them and
    // see how they ended.
    process::become_child_subreaper().map_err(|e| {
        CheckpointBenchError::Unsupported(format!("cannot become a child subreaper: {e}"))
    })?;
    let store = tempfile::Builder::new()
        .prefix("overbook-bench-checkpoint-")
        .tempdir_in(&plan.store)
        .map_err(io_err("make a directory in", &plan.store))?;
    let node = BenchNode::new(&format!("overbook-bench-checkpoint-{}", std::process::id()), None)
        .map_err(CheckpointBenchError::Cgroup)?;
    let (store_fs, store_in_memory) = filesystem(store.path());
    let mut report = CheckpointReport {
        version: env!("CARGO_PKG_VERSION").to_string(),
        command: plan.command.clone(),
        kernel: host::kernel_release().unwrap_or_default(),
        criu: format!("{criu_version} ({})", criu.binary().display()),
        store: store.path().to_path_buf(),
        store_fs,
        store_in_memory,
        dirty: plan.dirty,
        repeats: plan.repeats,
        ..CheckpointReport::default()
    };
    say(&format!(
        "store {} ({}{}); CRIU {}; Linux {}",
        report.store.display(),
        report.store_fs,
        if store_in_memory { ": memory, so fsync and cache drops do nothing" } else { "" },
        report.criu,
        report.kernel
    ));
    let mut lab =
        Lab { criu, node, children: Vec::new(), restored: Vec::new(), store: Some(store) };
    let warm = WARMUP_SIZE;
    let w = one_run(
        &mut lab,
        plan,
        warm,
        0,
        expected_checksums(warm, dirty_bytes(warm, plan.dirty)),
        false,
    )?;
    say(&format!(
        "  warm-up ({} MiB, not counted): full dump {:.2} s, restore {:.2} s, incremental dump \
         {:.2} s, restore {:.2} s",
        warm / MIB,
        w.full_dump_s(),
        w.full_restore_s,
        w.inc_dump_s(),
        w.inc_restore_s
    ));
    report.warmup = Some(w);
    for &size in &plan.sizes {
        let dirty = dirty_bytes(size, plan.dirty);
        let (expected_full, expected_inc) = expected_checksums(size, dirty);
        let mut runs = Vec::new();
        for repeat in 1..=plan.repeats {
            // Images are removed once restored (a tmpfs store holds them in
            // memory), except the last repeat's with `--keep`.
            let keep = plan.keep && repeat == plan.repeats;
            let r = one_run(&mut lab, plan, size, repeat, (expected_full, expected_inc), keep)?;
            say(&format!(
                "  {} MiB #{repeat}: raw write {:.0} MB/s; full dump {:.2} s ({:.0} MiB of \
                 pages), restore {:.2} s; pre-dump {:.2} s, incremental dump {:.2} s ({:.1} MiB), \
                 restore {:.2} s; checksums right",
                size / MIB,
                mb(size, Duration::from_secs_f64(r.raw_write_s)),
                r.full_dump_s(),
                r.full_pages as f64 / MIB as f64,
                r.full_restore_s,
                r.pre_dump_criu_s + r.pre_dump_sync_s,
                r.inc_dump_s(),
                r.inc_pages as f64 / MIB as f64,
                r.inc_restore_s,
            ));
            runs.push(r);
        }
        report.sizes.push(summarize(size, runs));
    }
    report.goals = goals(&report.sizes, plan.dirty);
    if plan.keep {
        report.kept = lab.store.take().map(tempfile::TempDir::keep);
    }
    drop(lab);
    Ok(report)
}

/// One repeat at one size: raw bandwidth, full dump and restore,
/// incremental dump and restore; its images are removed once restored
/// unless `keep`.
fn one_run(
    lab: &mut Lab,
    plan: &CheckpointPlan,
    size: u64,
    repeat: usize,
    (expected_full, expected_inc): (u64, u64),
    keep: bool,
) -> Result<CheckpointRun> {
    let store = lab.store().to_path_buf();
    let (raw_write, raw_read) = raw_bandwidth(&store, size)?;
    let mut r = CheckpointRun {
        repeat,
        raw_write_s: raw_write.as_secs_f64(),
        raw_read_s: raw_read.as_secs_f64(),
        full_expected: expected_full,
        inc_expected: expected_inc,
        dirtied: dirty_bytes(size, plan.dirty),
        ..CheckpointRun::default()
    };
    let mib = size / MIB;

    // Full: dump, restore, checksum.
    let tag = format!("full-{mib}m-{repeat}");
    let w = lab.start_worker(plan, &tag, size)?;
    let images = store.join(format!("images-{tag}"));
    let (dump, sync) = lab.dump(&w, &images, None, false)?;
    lab.reap_dumped(&w)?;
    lab.drop_container(&w.container);
    r.full_dump_criu_s = dump.elapsed.as_secs_f64();
    r.full_dump_sync_s = sync.as_secs_f64();
    (r.full_pages, r.full_images) = pages_and_total(dump.sizes);
    drop_cache(&[&images])?;
    let (c, pid, took) = lab.restore(&format!("{tag}-restored"), &images)?;
    r.full_restore_s = took.as_secs_f64();
    let restored = Running { pid, container: c, ..w };
    r.full_answer = lab.answer(&restored)?;
    lab.drop_container(&restored.container);
    if r.full_answer != expected_full {
        return Err(CheckpointBenchError::WrongAnswer {
            tag,
            got: r.full_answer,
            expected: expected_full,
        });
    }
    remove_dir(&restored.dir)?;
    if !keep {
        remove_dir(&images)?;
    }

    // Incremental: pre-dump, rewrite a share, dump on top, restore the chain.
    let tag = format!("inc-{mib}m-{repeat}");
    let w = lab.start_worker(plan, &tag, size)?;
    let pre_dir = store.join(format!("images-{tag}-pre"));
    let (pre, pre_sync) = lab.dump(&w, &pre_dir, None, true)?;
    r.pre_dump_criu_s = pre.elapsed.as_secs_f64();
    r.pre_dump_sync_s = pre_sync.as_secs_f64();
    r.pre_pages = pre.sizes.pages;
    lab.tell(&w, "go-dirty")?;
    lab.await_file(&w, "dirtied")?;
    let inc_dir = store.join(format!("images-{tag}"));
    let (inc, sync) = lab.dump(&w, &inc_dir, Some(&pre_dir), false)?;
    lab.reap_dumped(&w)?;
    lab.drop_container(&w.container);
    r.inc_dump_criu_s = inc.elapsed.as_secs_f64();
    r.inc_dump_sync_s = sync.as_secs_f64();
    (r.inc_pages, r.inc_images) = pages_and_total(inc.sizes);
    drop_cache(&[&pre_dir, &inc_dir])?;
    let (c, pid, took) = lab.restore(&format!("{tag}-restored"), &inc_dir)?;
    r.inc_restore_s = took.as_secs_f64();
    let restored = Running { pid, container: c, ..w };
    r.inc_answer = lab.answer(&restored)?;
    lab.drop_container(&restored.container);
    if r.inc_answer != expected_inc {
        return Err(CheckpointBenchError::WrongAnswer {
            tag,
            got: r.inc_answer,
            expected: expected_inc,
        });
    }
    remove_dir(&restored.dir)?;
    if !keep {
        remove_dir(&inc_dir)?;
        remove_dir(&pre_dir)?;
    }
    Ok(r)
}

fn pages_and_total(s: ImageSizes) -> (u64, u64) {
    (s.pages, s.total)
}

fn remove_dir(dir: &Path) -> Result<()> {
    fs::remove_dir_all(dir).map_err(io_err("remove", dir))
}

fn summarize(size: u64, runs: Vec<CheckpointRun>) -> SizeReport {
    let of =
        |f: &dyn Fn(&CheckpointRun) -> f64| Spread::of(&runs.iter().map(f).collect::<Vec<_>>());
    let mibf = |b: u64| b as f64 / MIB as f64;
    let write_mbps = |r: &CheckpointRun| size as f64 / 1e6 / r.raw_write_s.max(1e-9);
    let dump_mbps = |r: &CheckpointRun| r.full_pages as f64 / 1e6 / r.full_dump_s().max(1e-9);
    SizeReport {
        size,
        raw_write_mbps: of(&write_mbps),
        raw_read_mbps: of(&|r| size as f64 / 1e6 / r.raw_read_s.max(1e-9)),
        full_dump_s: of(&|r| r.full_dump_s()),
        full_dump_mbps: of(&dump_mbps),
        dump_vs_raw_write: of(&|r| dump_mbps(r) / write_mbps(r).max(1e-9)),
        full_pages_mib: of(&|r| mibf(r.full_pages)),
        full_restore_s: of(&|r| r.full_restore_s),
        pre_dump_s: of(&|r| r.pre_dump_criu_s + r.pre_dump_sync_s),
        inc_dump_s: of(&|r| r.inc_dump_s()),
        inc_pages_mib: of(&|r| mibf(r.inc_pages)),
        inc_pages_share: of(&|r| r.inc_pages as f64 / r.full_pages.max(1) as f64),
        speedup: of(&|r| r.full_dump_s() / r.inc_dump_s().max(1e-9)),
        inc_restore_s: of(&|r| r.inc_restore_s),
        runs,
    }
}

fn goals(sizes: &[SizeReport], dirty: f64) -> Goals {
    let runs = || sizes.iter().flat_map(|s| s.runs.iter());
    let full_fit =
        Fit::of(&runs().map(|r| (r.full_pages as f64, r.full_dump_s())).collect::<Vec<_>>());
    let inc_fit =
        Fit::of(&runs().map(|r| (r.inc_pages as f64, r.inc_dump_s())).collect::<Vec<_>>());
    // Speedup at S bytes: (a + S/B) / (c + dirty·S/D), which reaches 8 at
    // S = (8c − a) / (1/B − 8·dirty/D), if the denominator is positive.
    let (from, limit) = match (full_fit, inc_fit) {
        (Some(f), Some(i)) => {
            let per_full = 1.0 / (f.mbps * 1e6);
            let per_inc = dirty / (i.mbps * 1e6);
            let limit = per_full / per_inc;
            let from = (per_full > 8.0 * per_inc)
                .then(|| (8.0 * i.fixed_s - f.fixed_s) / (per_full - 8.0 * per_inc))
                .map(|s| s.max(0.0));
            // Checked against the fits themselves (a negative intercept
            // can make the closed form meaningless).
            let from = from.filter(|&s| f.seconds(s) / i.seconds(dirty * s) >= 7.99 || s == 0.0);
            (from, Some(limit))
        }
        _ => (None, None),
    };
    Goals {
        dump_bandwidth_sizes_met: sizes
            .iter()
            .filter(|s| s.dump_vs_raw_write.median >= 0.8)
            .map(|s| s.size)
            .collect(),
        dump_bandwidth_worst: sizes
            .iter()
            .map(|s| s.dump_vs_raw_write.median)
            .fold(f64::INFINITY, f64::min),
        speedup_sizes_met: sizes
            .iter()
            .filter(|s| s.speedup.median >= 8.0)
            .map(|s| s.size)
            .collect(),
        speedup_best: sizes.iter().map(|s| s.speedup.median).fold(0.0, f64::max),
        full_fit,
        inc_fit,
        speedup_8x_from_bytes: from,
        speedup_limit: limit,
    }
}

// ------------------------------------------------------------- the table

fn spread(s: &Spread, digits: usize) -> String {
    if s.n > 1 && (s.max - s.min) > 0.0 {
        format!("{:.*} ({:.*}–{:.*})", digits, s.median, digits, s.min, digits, s.max)
    } else {
        format!("{:.*}", digits, s.median)
    }
}

/// The report as the README shows it: the 004 Table 3 analogue, then the
/// goals.
pub fn table(r: &CheckpointReport) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\ncheckpoint costs on Linux {}, CRIU {}, store {} ({}{}); {:.0}% rewritten between \
         pre-dump and incremental dump; median (range) of {} repeat(s); dump = CRIU + fsync of \
         its images; MB/s = 10^6 B/s",
        r.kernel,
        r.criu,
        r.store.display(),
        r.store_fs,
        if r.store_in_memory { ", in memory" } else { "" },
        100.0 * r.dirty,
        r.repeats
    );
    let _ = writeln!(
        t,
        "| size MiB | raw write MB/s | full dump s | full dump MB/s | dump / raw write | \
         incremental dump s | speedup full/incr. | pages full → incr. MiB | restore s full / chain |"
    );
    let _ = writeln!(t, "|---|---|---|---|---|---|---|---|---|");
    for s in &r.sizes {
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {} | {} → {} | {} / {} |",
            s.size / MIB,
            spread(&s.raw_write_mbps, 0),
            spread(&s.full_dump_s, 2),
            spread(&s.full_dump_mbps, 0),
            format_args!("{:.0}%", 100.0 * s.dump_vs_raw_write.median),
            spread(&s.inc_dump_s, 2),
            spread(&s.speedup, 1),
            format_args!("{:.0}", s.full_pages_mib.median),
            format_args!("{:.1}", s.inc_pages_mib.median),
            spread(&s.full_restore_s, 2),
            spread(&s.inc_restore_s, 2),
        );
    }
    let _ = writeln!(t, "\n| size MiB | raw read MB/s | pre-dump s | restore MB/s (full) |");
    let _ = writeln!(t, "|---|---|---|---|");
    for s in &r.sizes {
        let _ = writeln!(
            t,
            "| {} | {} | {} | {:.0} |",
            s.size / MIB,
            spread(&s.raw_read_mbps, 0),
            spread(&s.pre_dump_s, 2),
            s.full_pages_mib.median * MIB as f64 / 1e6 / s.full_restore_s.median.max(1e-9)
        );
    }
    let g = &r.goals;
    let sizes = |v: &[u64]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.iter().map(|s| format!("{} MiB", s / MIB)).collect::<Vec<_>>().join(", ")
        }
    };
    let _ = writeln!(
        t,
        "\ngoal: dump bandwidth ≥ 80% of raw write: {} (met at {}; worst {:.0}%)",
        if g.dump_bandwidth_sizes_met.len() == r.sizes.len() { "MET" } else { "NOT MET" },
        sizes(&g.dump_bandwidth_sizes_met),
        100.0 * g.dump_bandwidth_worst
    );
    let _ = writeln!(
        t,
        "goal: {:.0}%-dirty incremental dump ≥ 8x faster than full: {} (met at {}; best {:.1}x)",
        100.0 * r.dirty,
        if g.speedup_sizes_met.is_empty() {
            "NOT MET"
        } else if g.speedup_sizes_met.len() == r.sizes.len() {
            "MET"
        } else {
            "MET at some sizes"
        },
        sizes(&g.speedup_sizes_met),
        g.speedup_best
    );
    if let (Some(f), Some(i)) = (g.full_fit, g.inc_fit) {
        let _ = writeln!(
            t,
            "fits: full dump {:.2} s + pages at {:.0} MB/s; incremental dump {:.2} s + pages at \
             {:.0} MB/s; speedup tends to {:.1}x; 8x {}",
            f.fixed_s,
            f.mbps,
            i.fixed_s,
            i.mbps,
            g.speedup_limit.unwrap_or(f64::NAN),
            match g.speedup_8x_from_bytes {
                Some(b) => format!("from about {:.0} MiB (extrapolated)", b / MIB as f64),
                None => "never, as the fits stand".to_string(),
            }
        );
    }
    if let Some(k) = &r.kept {
        let _ = writeln!(t, "kept: {}", k.display());
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_take_the_middle_and_the_ends() {
        let s = Spread::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(Spread::of(&[1.0, 4.0]).median, 2.5);
        assert!(Spread::of(&[]).median.is_nan());
    }

    #[test]
    fn a_fit_recovers_a_line_and_refuses_one_size() {
        let pts: Vec<(f64, f64)> = [1e8, 2e8, 4e8].iter().map(|&b| (b, 0.5 + b / 2e8)).collect();
        let f = Fit::of(&pts).expect("a fit");
        assert!((f.fixed_s - 0.5).abs() < 1e-9 && (f.mbps - 200.0).abs() < 1e-6, "{f:?}");
        assert!(Fit::of(&[(1e8, 1.0), (1e8, 2.0)]).is_none());
    }

    #[test]
    fn the_8x_size_follows_from_the_fits() {
        // Full: 0.2 s + 100 MB/s. Incremental: 0.2 s + 100 MB/s on a tenth.
        let mk = |b: f64, s: f64| CheckpointRun {
            full_pages: overbook_core::convert::to_u64(b),
            full_dump_criu_s: 0.2 + b / 1e8,
            inc_pages: overbook_core::convert::to_u64(b * s),
            inc_dump_criu_s: 0.2 + b * s / 1e8,
            ..CheckpointRun::default()
        };
        let sizes: Vec<SizeReport> = [1e8, 4e8]
            .iter()
            .map(|&b| summarize(overbook_core::convert::to_u64(b), vec![mk(b, 0.1)]))
            .collect();
        let g = goals(&sizes, 0.1);
        // 0.2 + S/1e8 = 8 (0.2 + 0.1 S/1e8) → 0.2 S/1e8 = 1.4 → S = 7e8.
        let from = g.speedup_8x_from_bytes.expect("reachable");
        assert!((from - 7e8).abs() < 1e3, "{from}");
        assert!((g.speedup_limit.expect("limit") - 10.0).abs() < 1e-6);
        assert!(g.speedup_sizes_met.is_empty());
    }

    #[test]
    fn dirty_shares_are_whole_pages() {
        assert_eq!(dirty_bytes(64 * MIB, 0.1), 1639 * PAGE);
        assert_eq!(dirty_bytes(64 * MIB, 0.0), PAGE);
        assert_eq!(dirty_bytes(64 * MIB, 1.0), 64 * MIB);
    }

    #[test]
    fn the_worker_answers_what_the_bench_expects() {
        let dir = tempfile::tempdir().expect("tempdir");
        let args = WorkerArgs { dir: dir.path().to_path_buf(), size: 1 << 20, dirty: 8 * PAGE };
        fs::write(dir.path().join("go-dirty"), "").expect("write");
        fs::write(dir.path().join("go-sum"), "").expect("write");
        worker(&args).expect("the worker runs");
        let answer: u64 = fs::read_to_string(dir.path().join("answer"))
            .expect("an answer")
            .trim()
            .parse()
            .expect("a number");
        let (first, rewritten) = expected_checksums(1 << 20, 8 * PAGE);
        assert_eq!(answer, rewritten);
        assert_ne!(answer, first);
        // The shortcut agrees with the whole sum.
        let dirty_words = 8 * PAGE / 8;
        let whole = checksum((0..(1u64 << 20) / 8).map(|i| word(i, i < dirty_words)));
        assert_eq!(rewritten, whole);
        assert!(dir.path().join("dirtied").exists() && dir.path().join("filled").exists());
    }

    #[test]
    fn the_checksum_sees_a_moved_page() {
        let words: Vec<u64> = (0..2048).map(|i| word(i, false)).collect();
        let mut moved = words.clone();
        moved[..512].copy_from_slice(&words[512..1024]);
        moved[512..1024].copy_from_slice(&words[..512]);
        assert_ne!(checksum(words.iter().copied()), checksum(moved.iter().copied()));
        assert!(words.iter().all(|w| *w != 0));
    }

    #[test]
    fn raw_bandwidth_writes_reads_and_removes_its_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (w, r) = raw_bandwidth(dir.path(), 3 * MIB + PAGE).expect("measures");
        assert!(w > Duration::ZERO && r > Duration::ZERO);
        assert_eq!(fs::read_dir(dir.path()).expect("list").count(), 0, "the file is removed");
        let (name, _) = filesystem(dir.path());
        assert!(!name.is_empty());
        assert_eq!(filesystem(Path::new("/proc")), ("proc".to_string(), false));
        assert!(filesystem(Path::new("/dev/shm")).1, "/dev/shm is memory");
    }

    #[test]
    fn the_table_has_a_row_per_size_and_the_goals_as_measured() {
        let run = |b: u64, s: f64| CheckpointRun {
            repeat: 1,
            raw_write_s: b as f64 / 1e9,
            raw_read_s: b as f64 / 2e9,
            full_pages: b,
            full_dump_criu_s: 0.2 + b as f64 / 5e8,
            full_restore_s: 0.3,
            pre_dump_criu_s: 0.25 + b as f64 / 5e8,
            inc_pages: overbook_core::convert::to_u64(b as f64 * s),
            inc_dump_criu_s: 0.2 + b as f64 * s / 5e8,
            inc_restore_s: 0.4,
            ..CheckpointRun::default()
        };
        let sizes: Vec<SizeReport> = [64 * MIB, 256 * MIB]
            .iter()
            .map(|&b| summarize(b, vec![run(b, 0.1), run(b, 0.12)]))
            .collect();
        let report = CheckpointReport {
            kernel: "6.1".into(),
            criu: "3.17.1".into(),
            store: "/var/tmp/x".into(),
            store_fs: "tmpfs".into(),
            store_in_memory: true,
            dirty: 0.1,
            repeats: 2,
            goals: goals(&sizes, 0.1),
            sizes,
            ..CheckpointReport::default()
        };
        let t = table(&report);
        eprintln!("{t}");
        assert!(t.contains("| 64 |") && t.contains("| 256 |"), "{t}");
        assert!(t.contains("goal: dump bandwidth ≥ 80% of raw write: NOT MET"), "{t}");
        assert!(t.contains("fits: full dump 0.20 s"), "{t}");
    }
}
