//! The node's checkpoint machinery: CRIU and the directory its images go
//! to (local, or shared with other nodes), with the store's bandwidths that
//! the adaptive preemptor weighs (004 Algorithm 1).
//!
//! Layout: one directory per task, `IMAGES/NAME/`, holding its chain:
//! `N-pre` (a pre-dump, taken while it ran) and `N-dump` (the checkpoint,
//! incremental on the newest pre-dump when there is one). A restore reads
//! the newest dump and, through CRIU's `parent` link, its pre-dump. The
//! task's directory goes as soon as it is restored, restarted or over, so
//! nothing is left behind; at start the agent removes every task directory
//! of its own no stored task names.
//!
//! On a shared store, another node's agent may restore a checkpointed task
//! (`overbook adopt`): each task directory holds `task.json` (what the task
//! is, and which node dumped it), and `claim`, made with `O_EXCL` by the
//! one node that restores it, so two nodes never both run it.

use overbook_core::preempt::StoreBandwidth;
use overbook_linux::criu::{Criu, CriuError, CriuSupport, DumpReport, Restored, TreeOptions};
use overbook_linux::{Outcome, Pid};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `[checkpoint]` in the agent's config.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointConfig {
    /// Where images go.
    pub images_dir: PathBuf,
    /// Whether `images_dir` is a store other nodes read (restore elsewhere).
    pub shared: bool,
    /// How long one CRIU command may take before it is killed.
    pub timeout: Duration,
    /// The store's bandwidths, bytes per second; `None`: measured at start.
    pub bandwidth: Option<StoreBandwidth>,
    /// How often a running best-effort task gets a pre-dump, so that its
    /// checkpoint writes only what it dirtied since; `None`: never.
    pub pre_dump_interval: Option<Duration>,
}

impl Default for CheckpointConfig {
    fn default() -> CheckpointConfig {
        CheckpointConfig {
            images_dir: PathBuf::from("/var/lib/overbook/images"),
            shared: false,
            timeout: Duration::from_secs(300),
            bandwidth: None,
            pre_dump_interval: Some(Duration::from_secs(60)),
        }
    }
}

/// Bytes written and read to measure the store at start.
const PROBE_BYTES: usize = 32 << 20;

/// The line CRIU ends a successful dump's log with.
const DUMP_DONE: &str = "Dumping finished successfully";
/// The line that ends CRIU's log of a restore that finished.
const RESTORE_DONE: &str = "Restore finished successfully";

/// CRIU on this node, and its image store.
#[derive(Debug)]
pub struct ImageStore {
    criu: Option<Criu>,
    support: CriuSupport,
    dir: PathBuf,
    shared: bool,
    bandwidth: StoreBandwidth,
    measured: bool,
    /// This node, as written in manifests and claims.
    node: String,
}

/// What a task directory says of its task, for whoever restores it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub request: crate::tasks::RunRequest,
    pub restarts: u32,
    /// Seconds of work it had done.
    pub progress_s: f64,
    /// Its memory when dumped.
    pub usage: u64,
    /// The images directory to restore from.
    pub dump: PathBuf,
    /// The node that dumped it.
    pub node: String,
}

/// Who restores a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// This node: it may restore it.
    Ours,
    /// Another node got there first.
    Theirs(String),
}

/// CRIU's dumps, apart from the store so that a dump can run on a thread
/// of its own while the agent keeps watching the node.
#[derive(Clone, Debug)]
pub struct Dumper {
    criu: Criu,
}

impl Dumper {
    /// Dumps the tree rooted at `root` into `dir` (from
    /// [`ImageStore::dump_dir`]), incremental on `prev`; CRIU kills the tree
    /// when the image is complete. A failed dump leaves the tree running
    /// and removes what it wrote.
    pub fn dump(
        &self,
        root: Pid,
        dir: &Path,
        prev: Option<&Path>,
    ) -> Result<Outcome<DumpReport>, CriuError> {
        let out = self.criu.dump(root, dir, prev, &TreeOptions::default());
        if !matches!(out, Ok(Outcome::Done(_))) {
            let _ = fs::remove_dir_all(dir);
        }
        out
    }
}

/// Which kind of image a chain member is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    PreDump,
    Dump,
}

impl ImageStore {
    /// Probes CRIU and, if it works and no bandwidth is configured,
    /// measures the store. A store that cannot be written makes
    /// checkpoints unusable here, with the reason.
    pub fn open(cfg: &CheckpointConfig) -> ImageStore {
        let criu = Criu::find().map(|c| c.with_timeout(cfg.timeout));
        let mut support = match &criu {
            Some(c) => c.support(),
            None => Criu::probe(),
        };
        let mut bandwidth =
            cfg.bandwidth.unwrap_or(StoreBandwidth { write: 0.0, read: 0.0, net: 0.0 });
        let mut measured = false;
        if support.usable() {
            match fs::create_dir_all(&cfg.images_dir) {
                Err(e) => {
                    support.check =
                        Err(format!("images directory {}: {e}", cfg.images_dir.display()));
                }
                Ok(()) if cfg.bandwidth.is_none() => match measure(&cfg.images_dir) {
                    Ok((write, read)) => {
                        bandwidth = StoreBandwidth { write, read, net: read };
                        measured = true;
                    }
                    Err(e) => {
                        support.check = Err(format!(
                            "images directory {}: cannot measure it: {e}",
                            cfg.images_dir.display()
                        ));
                    }
                },
                Ok(()) => {}
            }
        }
        ImageStore {
            criu,
            support,
            dir: cfg.images_dir.clone(),
            shared: cfg.shared,
            bandwidth,
            measured,
            node: String::new(),
        }
    }

    /// Names this node (`HOST:ROOT`) in manifests and claims.
    pub fn set_node(&mut self, node: String) {
        self.node = node;
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// Writes task `name`'s manifest (atomically: written aside, renamed).
    pub fn write_manifest(&self, name: &str, m: &Manifest) -> io::Result<()> {
        let dir = self.task_dir(name);
        fs::create_dir_all(&dir)?;
        let text = serde_json::to_string_pretty(m).map_err(io::Error::other)?;
        let tmp = dir.join(".task.json.tmp");
        fs::write(&tmp, text)?;
        fs::rename(&tmp, dir.join("task.json"))
    }

    /// Task `name`'s manifest.
    pub fn read_manifest(&self, name: &str) -> io::Result<Manifest> {
        let path = self.task_dir(name).join("task.json");
        let text = fs::read_to_string(&path)?;
        serde_json::from_str(&text).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))
        })
    }

    /// Claims task `name` for this node, unless another node has.
    pub fn claim(&self, name: &str) -> io::Result<Claim> {
        let path = self.task_dir(name).join("claim");
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut f) => {
                f.write_all(self.node.as_bytes())?;
                f.sync_all()?;
                Ok(Claim::Ours)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let by = fs::read_to_string(&path)?;
                Ok(if by == self.node { Claim::Ours } else { Claim::Theirs(by) })
            }
            Err(e) => Err(e),
        }
    }

    pub fn support(&self) -> &CriuSupport {
        &self.support
    }

    pub fn usable(&self) -> bool {
        self.criu.is_some() && self.support.usable()
    }

    pub fn incremental(&self) -> bool {
        self.usable() && self.support.incremental()
    }

    pub fn bandwidth(&self) -> StoreBandwidth {
        self.bandwidth
    }

    /// Whether the bandwidths were measured here (not configured).
    pub fn measured(&self) -> bool {
        self.measured
    }

    pub fn shared(&self) -> bool {
        self.shared
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory of task `name`'s chain.
    pub fn task_dir(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A new member of task `name`'s chain, after `prev` (if any).
    fn next_dir(&self, name: &str, prev: Option<&Path>, kind: ImageKind) -> PathBuf {
        let n = prev
            .and_then(|p| p.file_name()?.to_str()?.split('-').next()?.parse::<u32>().ok())
            .map_or(1, |n| n + 1);
        let suffix = match kind {
            ImageKind::PreDump => "pre",
            ImageKind::Dump => "dump",
        };
        self.task_dir(name).join(format!("{n}-{suffix}"))
    }

    fn criu(&self) -> Result<&Criu, CriuError> {
        self.criu.as_ref().ok_or_else(|| CriuError::Io {
            op: "find criu",
            path: PathBuf::from("criu"),
            source: io::Error::new(io::ErrorKind::NotFound, "no criu binary on PATH"),
        })
    }

    /// Pre-dumps the whole tree rooted at `root` of task `name`, numbered
    /// after `after` (it keeps running; the kernel tracks what it writes
    /// from now on, so a dump on this pre-dump writes only that).
    pub fn pre_dump(
        &self,
        name: &str,
        root: Pid,
        after: Option<&Path>,
    ) -> Result<Outcome<DumpReport>, CriuError> {
        let dir = self.next_dir(name, after, ImageKind::PreDump);
        let out = self.criu()?.pre_dump(root, &dir, None, &TreeOptions::default());
        if !matches!(out, Ok(Outcome::Done(_))) {
            let _ = fs::remove_dir_all(&dir);
        }
        out
    }

    /// The images directory a dump of task `name` after `prev` will use
    /// (recorded before the dump starts, so a restarted agent finds it).
    pub fn dump_dir(&self, name: &str, prev: Option<&Path>) -> PathBuf {
        self.next_dir(name, prev, ImageKind::Dump)
    }

    /// What dumps a tree on another thread than the agent's loop (see
    /// [`Dumper::dump`]).
    pub fn dumper(&self) -> Result<Dumper, CriuError> {
        Ok(Dumper { criu: self.criu()?.clone() })
    }

    /// Restores the tree dumped in `dir` into the cgroups of `join_files`.
    pub fn restore(&self, dir: &Path, join_files: &[PathBuf]) -> Result<Restored, CriuError> {
        self.criu()?.restore(dir, join_files, &TreeOptions::default())
    }

    /// Removes task `name`'s whole chain; the error says what is left.
    pub fn discard(&self, name: &str) -> io::Result<()> {
        match fs::remove_dir_all(self.task_dir(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Task directories in the store that `keep` does not name: images an
    /// agent that died left behind. On a shared store, only this node's
    /// (by their manifests): the others' belong to other agents.
    pub fn strays(&self, keep: &[&str]) -> Vec<PathBuf> {
        let Ok(entries) = fs::read_dir(&self.dir) else { return Vec::new() };
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter(|e| !e.file_name().to_str().is_some_and(|n| keep.contains(&n)))
            .filter(|e| {
                !self.shared
                    || e.file_name()
                        .to_str()
                        .and_then(|n| self.read_manifest(n).ok())
                        .is_some_and(|m| m.node == self.node)
            })
            .map(|e| e.path())
            .collect()
    }
}

/// Whether the dump in `dir` finished (its log ends with CRIU's words for
/// it): what a restarted agent trusts after dying mid-dump.
pub fn dump_complete(dir: &Path) -> bool {
    let Ok(text) = fs::read_to_string(dir.join("dump.log")) else { return false };
    text.lines().rev().take(5).any(|l| l.contains(DUMP_DONE))
}

/// Whether a restore from `dir` finished (its log ends with CRIU's words
/// for it): the restored tree ran, whatever became of it after. What a
/// restarted agent trusts after dying mid-restore.
pub fn restore_complete(dir: &Path) -> bool {
    let Ok(text) = fs::read_to_string(dir.join("restore.log")) else { return false };
    text.lines().rev().take(5).any(|l| l.contains(RESTORE_DONE))
}

/// Writes and reads [`PROBE_BYTES`] in `dir`, synced and uncached, and
/// returns the (write, read) bandwidths in bytes per second.
pub fn measure(dir: &Path) -> io::Result<(f64, f64)> {
    let path = dir.join(format!(".overbook-probe-{}", std::process::id()));
    let result = measure_at(&path);
    let _ = fs::remove_file(&path);
    result
}

fn measure_at(path: &Path) -> io::Result<(f64, f64)> {
    // Not zeros: a store that compresses or dedups would flatter itself.
    let mut block = vec![0u8; 1 << 20];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in block.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
    }
    let started = Instant::now();
    let mut f =
        OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    for i in 0..PROBE_BYTES / block.len() {
        block[0] = i.to_le_bytes()[0];
        f.write_all(&block)?;
    }
    f.sync_all()?;
    let write = PROBE_BYTES as f64 / started.elapsed().as_secs_f64();
    drop_cache(&f);
    drop(f);
    let started = Instant::now();
    let mut f = File::open(path)?;
    let mut n = 0;
    loop {
        let got = f.read(&mut block)?;
        if got == 0 {
            break;
        }
        n += got;
    }
    let read = n as f64 / started.elapsed().as_secs_f64();
    Ok((write, read))
}

/// Asks the kernel to forget the file's cached pages, so the read that
/// follows measures the store and not memory (advice: may be ignored).
fn drop_cache(f: &File) {
    let _ = rustix::fs::fadvise(f, 0, None, rustix::fs::Advice::DontNeed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_members_count_up_and_strays_are_found() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cfg = CheckpointConfig {
            images_dir: dir.path().to_path_buf(),
            bandwidth: Some(StoreBandwidth { write: 1.0, read: 1.0, net: 1.0 }),
            ..CheckpointConfig::default()
        };
        let store = ImageStore::open(&cfg);
        let first = store.dump_dir("a", None);
        assert_eq!(first, dir.path().join("a/1-dump"));
        let pre = store.next_dir("a", Some(&first), ImageKind::PreDump);
        assert_eq!(pre, dir.path().join("a/2-pre"));
        assert_eq!(store.dump_dir("a", Some(&pre)), dir.path().join("a/3-dump"));
        for name in ["a", "b", "c"] {
            fs::create_dir_all(dir.path().join(name)).expect("mkdir");
        }
        assert_eq!(store.strays(&["a", "c"]), vec![dir.path().join("b")]);
        store.discard("b").expect("discard");
        store.discard("b").expect("discarding nothing is fine");
        assert!(store.strays(&["a", "c"]).is_empty());
    }

    #[test]
    fn one_node_claims_a_task_and_shared_strays_are_only_ours() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cfg = CheckpointConfig {
            images_dir: dir.path().to_path_buf(),
            shared: true,
            bandwidth: Some(StoreBandwidth { write: 1.0, read: 1.0, net: 1.0 }),
            ..CheckpointConfig::default()
        };
        let (mut a, mut b) = (ImageStore::open(&cfg), ImageStore::open(&cfg));
        a.set_node("host:a".into());
        b.set_node("host:b".into());
        let manifest = |node: &str| Manifest {
            request: serde_json::from_str(r#"{"name":"t","class":"best-effort","command":["x"]}"#)
                .expect("request"),
            restarts: 1,
            progress_s: 2.5,
            usage: 1 << 20,
            dump: dir.path().join("t/1-dump"),
            node: node.into(),
        };
        a.write_manifest("t", &manifest("host:a")).expect("write");
        assert_eq!(b.read_manifest("t").expect("read"), manifest("host:a"));
        assert_eq!(b.claim("t").expect("claim"), Claim::Ours);
        assert_eq!(a.claim("t").expect("claim"), Claim::Theirs("host:b".into()));
        assert_eq!(b.claim("t").expect("claim again"), Claim::Ours);
        fs::create_dir_all(dir.path().join("u")).expect("mkdir");
        assert_eq!(b.strays(&[]), Vec::<PathBuf>::new(), "t is a's, u no one's");
        assert_eq!(a.strays(&[]), vec![dir.path().join("t")]);
        fs::write(dir.path().join("t/task.json"), "{").expect("break it");
        let err = a.read_manifest("t").unwrap_err().to_string();
        assert!(err.contains("task.json"), "{err}");
    }

    #[test]
    fn a_dump_is_complete_only_when_criu_said_so() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(!dump_complete(dir.path()), "no log");
        fs::write(dir.path().join("dump.log"), "(00.1) Dumping path for 1\n").expect("write");
        assert!(!dump_complete(dir.path()), "cut short");
        fs::write(
            dir.path().join("dump.log"),
            "(00.1) Writing stats\n(00.2) Dumping finished successfully\n",
        )
        .expect("write");
        assert!(dump_complete(dir.path()));
    }

    #[test]
    fn the_store_is_measured_in_bytes_per_second() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (write, read) = measure(dir.path()).expect("measures");
        assert!(write > 1e6 && read > 1e6, "write {write} read {read}");
        assert_eq!(fs::read_dir(dir.path()).expect("list").count(), 0, "probe file removed");
    }
}
