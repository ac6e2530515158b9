//! One agent per node: an exclusive `flock` on a lock file per node root
//! (and one beside the state database), taken before the agent touches the
//! node, its database or its socket.
//!
//! Why: two agents on one node adopt the same tasks and preempt for the
//! same pressure, twice. And why the lock files are opened close-on-exec
//! (the standard library's default): a child the agent forks holds the
//! lock until it execs, so a new agent that holds it knows no child of an
//! earlier one is still between fork and exec, on its way into a
//! container (the exactly-once start in `agent/durable.rs` rests on this),
//! nor still holding the earlier agent's listening socket.

use rustix::fs::{flock, FlockOperation};
use rustix::io::Errno;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the per-node lock files are, unless `OVERBOOK_LOCK_DIR` says.
pub const DEFAULT_LOCK_DIR: &str = "/run/overbook/locks";

/// How long a starting agent waits for an earlier one to go.
pub const LOCK_WAIT: Duration = Duration::from_secs(30);

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("lock file {path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error(
        "lock file {path}: another overbook agent (or a child it is starting) still holds it \
         after {waited:?}: one agent per node root and per state database"
    )]
    Held { path: PathBuf, waited: Duration },
}

/// Held locks; dropping them releases them.
#[derive(Debug)]
pub struct NodeLock {
    _files: Vec<File>,
}

/// The lock file of node root `root` in `dir`: the root with `/` as `%2F`
/// (and `%` as `%25`), so distinct roots never share a file.
pub fn root_lock_path(dir: &Path, root: &str) -> PathBuf {
    let name = root.trim_matches('/').replace('%', "%25").replace('/', "%2F");
    dir.join(format!("{name}.lock"))
}

/// Takes the node's locks, waiting up to `wait` for an earlier agent;
/// `waiting` is called once if it must wait.
pub fn lock_node(
    root: &str,
    state_db: Option<&Path>,
    wait: Duration,
    mut waiting: impl FnMut(&Path),
) -> Result<NodeLock, LockError> {
    let dir = std::env::var_os("OVERBOOK_LOCK_DIR")
        .map_or(PathBuf::from(DEFAULT_LOCK_DIR), PathBuf::from);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|error| LockError::Io { path: dir.clone(), error })?;
    let mut paths = vec![root_lock_path(&dir, root)];
    if let Some(db) = state_db {
        let mut name = db.as_os_str().to_os_string();
        name.push(".lock");
        paths.push(PathBuf::from(name));
    }
    let deadline = Instant::now() + wait;
    let mut files = Vec::new();
    let mut said = false;
    for path in paths {
        let io = |error| LockError::Io { path: path.clone(), error };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        loop {
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(Errno::WOULDBLOCK) | Err(Errno::INTR) => {
                    if Instant::now() >= deadline {
                        return Err(LockError::Held { path, waited: wait });
                    }
                    if !said {
                        said = true;
                        waiting(&path);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(io(e.into())),
            }
        }
        files.push(file);
    }
    Ok(NodeLock { _files: files })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_waits_then_is_refused_naming_the_file_and_gets_it_once_free() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::env::set_var("OVERBOOK_LOCK_DIR", dir.path());
        let db = dir.path().join("state.db");
        let first = lock_node("/overbook/node", Some(&db), Duration::ZERO, |_| {}).expect("free");
        let mut waited_on = Vec::new();
        let second = lock_node("overbook/node", None, Duration::from_millis(200), |p| {
            waited_on.push(p.to_path_buf())
        });
        let path = root_lock_path(dir.path(), "overbook/node");
        assert!(
            matches!(&second, Err(LockError::Held { path: p, .. }) if *p == path),
            "{second:?}"
        );
        assert_eq!(waited_on, vec![path.clone()], "said once that it waits");
        assert!(second.unwrap_err().to_string().contains("overbook%2Fnode.lock"));
        // Another root is another node; the same database is not.
        lock_node("overbook/other", None, Duration::ZERO, |_| {}).expect("another node");
        let same_db = lock_node("overbook/third", Some(&db), Duration::ZERO, |_| {});
        assert!(matches!(same_db, Err(LockError::Held { .. })), "{same_db:?}");
        drop(first);
        lock_node("overbook/node", Some(&db), Duration::ZERO, |_| {}).expect("free again");
        assert_ne!(root_lock_path(dir.path(), "a/b"), root_lock_path(dir.path(), "a%2Fb"));
    }
}
