//! The agent's durable state: every task `overbook run` gave it, with its
//! state, in an embedded SQLite database (WAL, synchronous commits), so a
//! restarted agent — after a crash or `kill -9` too — loses no task.
//!
//! Each change is one transaction that updates the task's row and appends
//! the transition to a log, so the row is never ahead of or behind its
//! history. A task's row goes when the task is over (finished, rejected,
//! given up).

use crate::tasks::RunRequest;
use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where a task stands, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredState {
    /// Waiting for the launcher.
    Queued,
    /// About to be started: recorded before the process is made, so an
    /// agent that dies before the start is recorded as `Running` leaves
    /// this; the next one starts it again only if it never ran.
    Starting,
    /// Its command was started (with this pid).
    Running,
    /// A preemption killed it; it is to be queued again.
    Killed,
    /// CRIU was dumping it into its image (an agent that died meanwhile
    /// left either a complete image, the task still running, or neither).
    Dumping,
    /// Dumped to its image and removed; it waits to be restored.
    Checkpointed,
}

impl StoredState {
    pub fn as_str(self) -> &'static str {
        match self {
            StoredState::Queued => "queued",
            StoredState::Starting => "starting",
            StoredState::Running => "running",
            StoredState::Killed => "killed",
            StoredState::Dumping => "dumping",
            StoredState::Checkpointed => "checkpointed",
        }
    }

    fn parse(s: &str) -> Option<StoredState> {
        match s {
            "queued" => Some(StoredState::Queued),
            "starting" => Some(StoredState::Starting),
            "running" => Some(StoredState::Running),
            "killed" => Some(StoredState::Killed),
            "dumping" => Some(StoredState::Dumping),
            "checkpointed" => Some(StoredState::Checkpointed),
            _ => None,
        }
    }
}

/// One stored task.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredTask {
    pub request: RunRequest,
    pub state: StoredState,
    pub restarts: u32,
    pub pid: Option<u32>,
    /// Its checkpoint image directory (the last of its chain), while it
    /// is dumping or checkpointed.
    pub image: Option<PathBuf>,
    /// Work done before its current incarnation (kept across checkpoints).
    pub progress: std::time::Duration,
    /// Memory it held when checkpointed (what a restore brings back).
    pub usage: u64,
}

impl StoredTask {
    /// A task with no image, no earlier work and no memory recorded.
    pub fn new(request: RunRequest, state: StoredState, restarts: u32, pid: Option<u32>) -> Self {
        StoredTask {
            request,
            state,
            restarts,
            pid,
            image: None,
            progress: std::time::Duration::ZERO,
            usage: 0,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database {path}: {source}")]
    Sql { path: PathBuf, source: rusqlite::Error },
    #[error("state database {path}: cannot make its directory: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("state database {path}: task {name:?}: {problem}")]
    Row { path: PathBuf, name: String, problem: String },
}

/// The open database.
#[derive(Debug)]
pub struct TaskStore {
    path: PathBuf,
    db: Connection,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tasks (
    name TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    state TEXT NOT NULL,
    restarts INTEGER NOT NULL,
    pid INTEGER,
    updated REAL NOT NULL,
    image TEXT,
    progress REAL NOT NULL DEFAULT 0,
    usage INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS profiles (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    peak INTEGER NOT NULL,
    runtime REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS transitions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    at REAL NOT NULL,
    detail TEXT NOT NULL
);
";

fn wall() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl TaskStore {
    /// Opens (or makes) the database at `path`.
    pub fn open(path: &Path) -> Result<TaskStore, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|source| StoreError::Dir { path: path.to_path_buf(), source })?;
        }
        let sql = |source| StoreError::Sql { path: path.to_path_buf(), source };
        let db = Connection::open(path).map_err(sql)?;
        // WAL: a crash mid-write leaves the last committed state; FULL: a
        // commit is on disk before the agent acts on it.
        db.pragma_update(None, "journal_mode", "WAL").map_err(sql)?;
        db.pragma_update(None, "synchronous", "FULL").map_err(sql)?;
        db.busy_timeout(std::time::Duration::from_secs(5)).map_err(sql)?;
        db.execute_batch(SCHEMA).map_err(sql)?;
        // A database from before checkpoints: its rows get empty images.
        let has_image: bool = db
            .query_row(
                "SELECT COUNT(*) FROM pragma_table_info('tasks') WHERE name = 'image'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map_err(sql)?
            > 0;
        if !has_image {
            db.execute_batch(
                "ALTER TABLE tasks ADD COLUMN image TEXT;
                 ALTER TABLE tasks ADD COLUMN progress REAL NOT NULL DEFAULT 0;
                 ALTER TABLE tasks ADD COLUMN usage INTEGER NOT NULL DEFAULT 0;",
            )
            .map_err(sql)?;
        }
        Ok(TaskStore { path: path.to_path_buf(), db })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql { path: self.path.clone(), source }
    }

    /// Records a task's new state (and the transition, with `detail`).
    pub fn put(&mut self, task: &StoredTask, detail: &str) -> Result<(), StoreError> {
        let request = serde_json::to_string(&task.request).map_err(|e| StoreError::Row {
            path: self.path.clone(),
            name: task.request.name.clone(),
            problem: e.to_string(),
        })?;
        let image = match &task.image {
            None => None,
            Some(p) => Some(p.to_str().ok_or_else(|| StoreError::Row {
                path: self.path.clone(),
                name: task.request.name.clone(),
                problem: format!("image path {} is not UTF-8", p.display()),
            })?),
        };
        let at = wall();
        let tx = self
            .db
            .transaction()
            .map_err(|e| StoreError::Sql { path: self.path.clone(), source: e })?;
        let state = task.state.as_str();
        let done = tx
            .execute(
                "INSERT INTO tasks (name, request, state, restarts, pid, updated, image,
                     progress, usage)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT(name) DO UPDATE SET request = ?2, state = ?3, restarts = ?4,
                     pid = ?5, updated = ?6, image = ?7, progress = ?8, usage = ?9",
                params![
                    task.request.name,
                    request,
                    state,
                    task.restarts,
                    task.pid,
                    at,
                    image,
                    task.progress.as_secs_f64(),
                    task.usage as i64
                ],
            )
            .and_then(|_| {
                tx.execute(
                    "INSERT INTO transitions (name, state, at, detail) VALUES (?1, ?2, ?3, ?4)",
                    params![task.request.name, state, at, detail],
                )
            })
            .and_then(|_| tx.commit());
        done.map_err(|e| self.sql(e))
    }

    /// The task is over: its row goes, the transition stays.
    pub fn remove(&mut self, name: &str, how: &str, detail: &str) -> Result<(), StoreError> {
        let at = wall();
        let tx = self
            .db
            .transaction()
            .map_err(|e| StoreError::Sql { path: self.path.clone(), source: e })?;
        let done = tx
            .execute("DELETE FROM tasks WHERE name = ?1", params![name])
            .and_then(|_| {
                tx.execute(
                    "INSERT INTO transitions (name, state, at, detail) VALUES (?1, ?2, ?3, ?4)",
                    params![name, how, at, detail],
                )
            })
            .and_then(|_| tx.commit());
        done.map_err(|e| self.sql(e))
    }

    /// Every stored task, oldest change first (the order they came in,
    /// for first-come-first-served).
    pub fn tasks(&self) -> Result<Vec<StoredTask>, StoreError> {
        let mut stmt = self
            .db
            .prepare(
                "SELECT name, request, state, restarts, pid, image, progress, usage
                 FROM tasks ORDER BY rowid",
            )
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, u32>(3)?,
                    r.get::<_, Option<u32>>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, f64>(6)?,
                    r.get::<_, i64>(7)?,
                ))
            })
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (name, request, state, restarts, pid, image, progress, usage) =
                row.map_err(|e| self.sql(e))?;
            let bad = |problem: String| StoreError::Row {
                path: self.path.clone(),
                name: name.clone(),
                problem,
            };
            let request: RunRequest = serde_json::from_str(&request)
                .map_err(|e| bad(format!("its request is not valid: {e}")))?;
            let state = StoredState::parse(&state)
                .ok_or_else(|| bad(format!("{state:?} is not a task state")))?;
            let progress = std::time::Duration::try_from_secs_f64(progress)
                .map_err(|_| bad(format!("progress {progress} is not a duration")))?;
            let usage =
                u64::try_from(usage).map_err(|_| bad(format!("usage {usage} is negative")))?;
            let image = image.map(PathBuf::from);
            if matches!(state, StoredState::Dumping | StoredState::Checkpointed) && image.is_none()
            {
                return Err(bad(format!("{} without an image", state.as_str())));
            }
            out.push(StoredTask { request, state, restarts, pid, image, progress, usage });
        }
        Ok(out)
    }

    /// A finished task's memory peak and run time, for its job's profile
    /// (000 §4.2); only the newest `keep` of a job are kept.
    pub fn add_profile(
        &mut self,
        job: &str,
        peak: u64,
        runtime: std::time::Duration,
        keep: usize,
    ) -> Result<(), StoreError> {
        let tx = self
            .db
            .transaction()
            .map_err(|e| StoreError::Sql { path: self.path.clone(), source: e })?;
        let done = tx
            .execute(
                "INSERT INTO profiles (job, peak, runtime) VALUES (?1, ?2, ?3)",
                params![job, peak as i64, runtime.as_secs_f64()],
            )
            .and_then(|_| {
                tx.execute(
                    "DELETE FROM profiles WHERE job = ?1 AND seq NOT IN
                     (SELECT seq FROM profiles WHERE job = ?1 ORDER BY seq DESC LIMIT ?2)",
                    params![job, keep as i64],
                )
            })
            .and_then(|_| tx.commit());
        done.map_err(|e| self.sql(e))
    }

    /// Every kept profile entry, oldest first: (job, peak, run time).
    pub fn profiles(&self) -> Result<Vec<(String, u64, std::time::Duration)>, StoreError> {
        let mut stmt = self
            .db
            .prepare("SELECT job, peak, runtime FROM profiles ORDER BY seq")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, f64>(2)?))
            })
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (job, peak, runtime) = row.map_err(|e| self.sql(e))?;
            let bad = |problem: String| StoreError::Row {
                path: self.path.clone(),
                name: job.clone(),
                problem,
            };
            let peak =
                u64::try_from(peak).map_err(|_| bad(format!("profile peak {peak} is negative")))?;
            let runtime = std::time::Duration::try_from_secs_f64(runtime)
                .map_err(|_| bad(format!("profile run time {runtime} is not a duration")))?;
            out.push((job, peak, runtime));
        }
        Ok(out)
    }

    /// Transitions recorded for `name`, oldest first: (state, detail).
    pub fn history(&self, name: &str) -> Result<Vec<(String, String)>, StoreError> {
        let mut stmt = self
            .db
            .prepare("SELECT state, detail FROM transitions WHERE name = ?1 ORDER BY seq")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(params![name], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.sql(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.sql(e))
    }

    /// The stored task named `name`, if any.
    pub fn get(&self, name: &str) -> Result<Option<StoredState>, StoreError> {
        let state: Option<String> = self
            .db
            .query_row("SELECT state FROM tasks WHERE name = ?1", params![name], |r| r.get(0))
            .optional()
            .map_err(|e| self.sql(e))?;
        Ok(state.and_then(|s| StoredState::parse(&s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overbook_core::Class;

    fn request(name: &str) -> RunRequest {
        RunRequest {
            name: name.into(),
            class: Class::BestEffort,
            mem_peak: Some(1 << 20),
            job: None,
            weight: Some(2),
            command: vec!["sleep".into(), "1".into()],
            cwd: None,
        }
    }

    #[test]
    fn tasks_survive_a_reopen_in_order_and_leave_when_over() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sub/state.db");
        {
            let mut s = TaskStore::open(&path).expect("opens");
            for name in ["b", "a", "c"] {
                let t = StoredTask::new(request(name), StoredState::Queued, 0, None);
                s.put(&t, "submitted").expect("put");
            }
            let running = StoredTask::new(request("a"), StoredState::Running, 1, Some(42));
            s.put(&running, "started").expect("put");
            s.remove("c", "finished", "status 0").expect("remove");
            // Dropped without any shutdown, as by kill -9.
        }
        let s = TaskStore::open(&path).expect("reopens");
        let tasks = s.tasks().expect("read");
        assert_eq!(
            tasks.iter().map(|t| (t.request.name.as_str(), t.state)).collect::<Vec<_>>(),
            vec![("b", StoredState::Queued), ("a", StoredState::Running)]
        );
        assert_eq!(tasks[1].pid, Some(42));
        assert_eq!(tasks[1].restarts, 1);
        assert_eq!(tasks[1].request, request("a"));
        assert_eq!(s.get("c").expect("read"), None);
        let h = s.history("a").expect("history");
        assert_eq!(h[0].0, "queued");
        assert_eq!(h[1], ("running".to_string(), "started".to_string()));
        assert_eq!(s.history("c").expect("history").last().map(|x| x.0.as_str()), Some("finished"));
    }

    #[test]
    fn a_checkpointed_task_keeps_its_image_work_and_memory() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.db");
        let t = StoredTask {
            image: Some(dir.path().join("images/a/2")),
            progress: std::time::Duration::from_millis(12_500),
            usage: 64 << 20,
            ..StoredTask::new(request("a"), StoredState::Checkpointed, 0, None)
        };
        TaskStore::open(&path).expect("opens").put(&t, "checkpointed").expect("put");
        assert_eq!(TaskStore::open(&path).expect("reopens").tasks().expect("read"), vec![t]);
    }

    #[test]
    fn a_database_from_before_checkpoints_is_taken_as_it_is() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.db");
        {
            let db = Connection::open(&path).expect("opens");
            db.execute_batch(
                "CREATE TABLE tasks (name TEXT PRIMARY KEY, request TEXT NOT NULL,
                     state TEXT NOT NULL, restarts INTEGER NOT NULL, pid INTEGER,
                     updated REAL NOT NULL);",
            )
            .expect("old schema");
            let req = serde_json::to_string(&request("old")).expect("json");
            db.execute("INSERT INTO tasks VALUES ('old', ?1, 'queued', 3, NULL, 0)", params![req])
                .expect("old row");
        }
        let tasks = TaskStore::open(&path).expect("migrates").tasks().expect("read");
        assert_eq!(tasks, vec![StoredTask::new(request("old"), StoredState::Queued, 3, None)]);
    }

    #[test]
    fn a_checkpoint_without_an_image_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let s = TaskStore::open(&dir.path().join("state.db")).expect("opens");
        let req = serde_json::to_string(&request("x")).expect("json");
        s.db.execute(
            "INSERT INTO tasks (name, request, state, restarts, pid, updated)
             VALUES ('x', ?1, 'checkpointed', 0, NULL, 0)",
            params![req],
        )
        .expect("insert");
        let err = s.tasks().unwrap_err().to_string();
        assert!(err.contains("\"x\"") && err.contains("without an image"), "{err}");
    }

    #[test]
    fn profiles_survive_a_reopen_newest_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.db");
        {
            let mut s = TaskStore::open(&path).expect("opens");
            for i in 0..5u64 {
                s.add_profile("j", i << 20, std::time::Duration::from_secs(i), 3).expect("add");
            }
            s.add_profile("k", 7, std::time::Duration::from_millis(1500), 3).expect("add");
        }
        let p = TaskStore::open(&path).expect("reopens").profiles().expect("read");
        let peaks: Vec<(&str, u64)> = p.iter().map(|(j, peak, _)| (j.as_str(), *peak)).collect();
        assert_eq!(peaks, vec![("j", 2 << 20), ("j", 3 << 20), ("j", 4 << 20), ("k", 7)]);
        assert_eq!(p[3].2, std::time::Duration::from_millis(1500));
    }

    #[test]
    fn a_damaged_row_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.db");
        let s = TaskStore::open(&path).expect("opens");
        s.db.execute(
            "INSERT INTO tasks (name, request, state, restarts, pid, updated)
             VALUES ('x', '{}', 'queued', 0, NULL, 0)",
            [],
        )
        .expect("insert");
        let err = s.tasks().unwrap_err().to_string();
        assert!(
            err.contains("state.db") && err.contains("\"x\"") && err.contains("request"),
            "{err}"
        );
    }

    #[test]
    fn a_file_that_is_not_a_database_is_refused_with_its_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.db");
        std::fs::write(&path, vec![7u8; 8192]).expect("write");
        let err = TaskStore::open(&path).unwrap_err().to_string();
        assert!(err.contains("state.db"), "{err}");
    }
}
