//! Start marks: the durable proof that a task's command got as far as its
//! `exec`.
//!
//! Why: the agent records `starting` before it forks and `running` (with the
//! pid) after `spawn` returns. An agent that dies between the two leaves
//! `starting`, and the next agent must tell a command that never ran from
//! one that ran, maybe to its end, while no agent watched. An empty
//! container cannot tell them apart (the fault-injection suite caught a
//! short task that ran to its end and was then run again). So the child,
//! once in its container and just before its `exec`, creates the task's
//! mark (`overbook_linux::spawn::mark_before_exec`): `starting` with a mark
//! ran, without one it never did. The earlier agent's children held its
//! node lock until their `exec`, and the next agent holds it, so no child
//! is still on its way to making a mark.
//!
//! The marks live beside the state database (`<state_db>.starts/<task>`):
//! without a database nothing outlives the agent and no mark is made.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// The directory of start marks of the tasks of one state database.
#[derive(Debug, Clone)]
pub struct StartMarks {
    dir: PathBuf,
}

impl StartMarks {
    /// The marks of the tasks stored in `state_db`.
    pub fn beside(state_db: &Path) -> StartMarks {
        let mut dir = state_db.as_os_str().to_os_string();
        dir.push(".starts");
        StartMarks { dir: PathBuf::from(dir) }
    }

    /// Where task `name`'s mark is (a task name is a valid container
    /// name: no `/`, not `.` or `..`).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Makes ready for a start of task `name`: the directory exists and no
    /// mark of an earlier start is left. Returns where the child is to make
    /// its mark.
    pub fn prepare(&self, name: &str) -> io::Result<PathBuf> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.dir.display())))?;
        let path = self.path(name);
        remove(&path)?;
        Ok(path)
    }

    /// Whether task `name`'s command reached its `exec`. A mark that cannot
    /// be looked at (not missing: unreadable) counts as made, so a task is
    /// never run twice on a doubt; the agent says it ended unobserved.
    pub fn made(&self, name: &str) -> bool {
        match std::fs::symlink_metadata(self.path(name)) {
            Ok(_) => true,
            Err(e) => e.kind() != io::ErrorKind::NotFound,
        }
    }

    /// Removes task `name`'s mark, if any: its start is recorded otherwise.
    pub fn clear(&self, name: &str) -> io::Result<()> {
        remove(&self.path(name))
    }

    /// Removes the marks of tasks not in `keep` (tasks the database no
    /// longer holds). Returns the paths it removed.
    pub fn sweep(&self, keep: &[&str]) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_str().is_none_or(|n| !keep.contains(&n)))
            .map(|e| e.path())
            .filter(|p| remove(p).is_ok())
            .collect()
    }
}

fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_made_cleared_and_swept_beside_its_database() {
        let dir = tempfile::tempdir().expect("temp dir");
        let marks = StartMarks::beside(&dir.path().join("state.db"));
        assert!(!marks.made("be-a"), "no directory yet: no mark");
        let path = marks.prepare("be-a").expect("prepared");
        assert_eq!(path, dir.path().join("state.db.starts/be-a"));
        assert!(!marks.made("be-a"));
        std::fs::write(&path, "").expect("mark");
        assert!(marks.made("be-a"));
        marks.prepare("be-a").expect("prepared again");
        assert!(!marks.made("be-a"), "a new start clears an old mark");
        for name in ["be-a", "be-b", "be-c"] {
            std::fs::write(marks.path(name), "").expect("mark");
        }
        marks.clear("be-c").expect("cleared");
        marks.clear("be-c").expect("clearing nothing is fine");
        assert_eq!(marks.sweep(&["be-a"]), vec![marks.path("be-b")]);
        assert!(marks.made("be-a") && !marks.made("be-b"));
    }
}
