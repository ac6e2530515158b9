//! The agent's durable state: every task `overbook run` gave it, with its
//! state, in an embedded SQLite database (WAL, synchronous commits), so a
//! restarted agent — after a crash or `kill -9` too — loses no task.
//!
//! Each change is one transaction that updates the task's row and appends
//! the transition to a log, so the row is never ahead of or behind its
//! history. A task's row goes when the task is over (finished, rejected,
//! given up).

use crate::tasks::RunRequest;
use rusqlite::types::Value;
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
    /// CRIU was restoring it from its image (an agent that died meanwhile
    /// left it restored and running, restored and run to its end, or not
    /// restored: CRIU's restore log in the image says which).
    Restoring,
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
            StoredState::Restoring => "restoring",
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
            "restoring" => Some(StoredState::Restoring),
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

/// Why the state database cannot be used as it is.
///
/// Each message says its cause once and chains no source (the CLI prints
/// the whole chain).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database {path}: {error}")]
    Sql { path: PathBuf, error: rusqlite::Error },
    #[error("state database {path}: cannot make its directory: {error}")]
    Dir { path: PathBuf, error: std::io::Error },
    #[error("state database {path}: task {name:?}: {problem}")]
    Row { path: PathBuf, name: String, problem: String },
    /// Not a database this agent can use (not SQLite, damaged, or tables
    /// it cannot migrate).
    #[error("state database {path} is not usable: {why}")]
    Unusable { path: PathBuf, why: String },
    /// It opened, but a write fails (a read-only file, directory or
    /// mount).
    #[error("state database {path} cannot be written: {why}")]
    ReadOnly { path: PathBuf, why: String },
    /// Not usable, and it could not be moved out of the way.
    #[error("state database {path} is not usable ({why}) and cannot be moved to {aside}: {error}")]
    NotMoved { path: PathBuf, aside: PathBuf, why: String, error: std::io::Error },
}

impl StoreError {
    /// Whether the file itself is the problem (not a database, damaged,
    /// tables that cannot work), so moving it aside and starting afresh
    /// helps; not so for a file that cannot be written or is busy, whose
    /// contents are fine and wait for the operator.
    fn file_is_bad(&self) -> bool {
        use rusqlite::ErrorCode as C;
        match self {
            StoreError::Unusable { .. } => true,
            StoreError::Sql { error: rusqlite::Error::SqliteFailure(e, _), .. } => {
                matches!(e.code, C::NotADatabase | C::DatabaseCorrupt)
            }
            _ => false,
        }
    }
}

/// A stored row that could not be taken back: moved to the `set_aside`
/// table with the reason (never deleted: the operator decides), and
/// reported.
#[derive(Clone, Debug, PartialEq)]
pub struct SetAside {
    /// The table it was in: `tasks`, `profiles` or `cluster_writes`.
    pub table: &'static str,
    /// Its task's (or, for a profile, its job's) name, when readable.
    pub name: Option<String>,
    pub reason: String,
}

/// What a read took back: the good rows, and those it set aside.
#[derive(Clone, Debug, PartialEq)]
pub struct Adopted<T> {
    pub good: Vec<T>,
    pub set_aside: Vec<SetAside>,
}

/// A row in the `set_aside` table.
#[derive(Clone, Debug, PartialEq)]
pub struct KeptRow {
    pub table: String,
    pub name: Option<String>,
    pub reason: String,
    /// The row's values as a JSON array, in the order the agent reads them.
    pub row: String,
}

/// A profile entry: job, peak, run time.
pub type Profile = (String, u64, std::time::Duration);

/// What the agent found when it opened its state database, each reported
/// as one event (`kind`, `detail`) and one line on stderr (`Display`).
#[derive(Debug)]
pub enum StoreNotice {
    /// The file was not a usable database: moved to `aside`, a fresh one
    /// made in its place.
    MovedAside { path: PathBuf, aside: PathBuf, why: String },
    /// No durability: tasks are kept in memory only, the file left as it is.
    Unavailable(StoreError),
    /// A row that could not be taken back.
    SetAside { path: PathBuf, row: SetAside },
}

impl StoreNotice {
    pub fn kind(&self) -> crate::events::EventKind {
        use crate::events::EventKind;
        match self {
            StoreNotice::MovedAside { .. } => EventKind::StateMovedAside,
            StoreNotice::Unavailable(_) => EventKind::StateUnavailable,
            StoreNotice::SetAside { .. } => EventKind::StateRowSetAside,
        }
    }

    /// The event's detail; `message` is the stderr line's text.
    pub fn detail(&self) -> serde_json::Value {
        let message = self.to_string();
        match self {
            StoreNotice::MovedAside { path, aside, why } => serde_json::json!({
                "path": path.display().to_string(),
                "moved_to": aside.display().to_string(),
                "why": why,
                "message": message,
            }),
            StoreNotice::Unavailable(e) => serde_json::json!({
                "error": e.to_string(),
                "message": message,
            }),
            StoreNotice::SetAside { path, row } => serde_json::json!({
                "path": path.display().to_string(),
                "table": row.table,
                "task": row.name,
                "reason": row.reason,
                "message": message,
            }),
        }
    }
}

impl std::fmt::Display for StoreNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreNotice::MovedAside { path, aside, why } => write!(
                f,
                "state database {} was not usable ({why}): moved to {} and a fresh one made; \
                 tasks it held are not taken back",
                path.display(),
                aside.display()
            ),
            StoreNotice::Unavailable(e) => write!(
                f,
                "{e}; running WITHOUT durability: tasks are kept in memory only and lost if \
                 the agent stops, and the file is left as it is"
            ),
            StoreNotice::SetAside { path, row } => {
                let what = match row.table {
                    "profiles" => "profile of job",
                    "cluster_writes" => "write to the API server for pod uid",
                    _ => "task",
                };
                let name =
                    row.name.as_deref().map_or("(unreadable name)".into(), |n| format!("{n:?}"));
                write!(
                    f,
                    "state database {}: {what} {name} set aside (table set_aside): {}",
                    path.display(),
                    row.reason
                )
            }
        }
    }
}

/// What the agent starts with.
#[derive(Debug, Default)]
pub struct StartUp {
    /// `None`: no durability (a notice says why).
    pub store: Option<TaskStore>,
    pub tasks: Vec<StoredTask>,
    pub profiles: Vec<Profile>,
    pub notices: Vec<StoreNotice>,
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
CREATE TABLE IF NOT EXISTS set_aside (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    from_table TEXT NOT NULL,
    name TEXT,
    reason TEXT NOT NULL,
    at REAL NOT NULL,
    row TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value
);
CREATE TABLE IF NOT EXISTS cluster_writes (
    id INTEGER PRIMARY KEY,
    pod_uid TEXT NOT NULL,
    write TEXT NOT NULL,
    asked REAL NOT NULL
);
";

/// The columns each table must have (beyond these, a table may have only
/// columns the agent need not fill: nullable or with a default).
const COLUMNS: [(&str, &[&str]); 6] = [
    (
        "tasks",
        &["name", "request", "state", "restarts", "pid", "updated", "image", "progress", "usage"],
    ),
    ("profiles", &["seq", "job", "peak", "runtime"]),
    ("transitions", &["seq", "name", "state", "at", "detail"]),
    ("set_aside", &["seq", "from_table", "name", "reason", "at", "row"]),
    ("meta", &["key", "value"]),
    ("cluster_writes", &["id", "pod_uid", "write", "asked"]),
];

const SELECT_TASKS: &str =
    "SELECT rowid, name, request, state, restarts, pid, image, progress, usage FROM tasks
     ORDER BY rowid";
const SELECT_PROFILES: &str = "SELECT seq, job, peak, runtime FROM profiles ORDER BY seq";
const PUT_TASK: &str = "INSERT INTO tasks (name, request, state, restarts, pid, updated, image,
         progress, usage)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
     ON CONFLICT(name) DO UPDATE SET request = ?2, state = ?3, restarts = ?4,
         pid = ?5, updated = ?6, image = ?7, progress = ?8, usage = ?9";
const ADD_TRANSITION: &str =
    "INSERT INTO transitions (name, state, at, detail) VALUES (?1, ?2, ?3, ?4)";
const SELECT_CLUSTER_WRITES: &str =
    "SELECT id, pod_uid, write, asked FROM cluster_writes ORDER BY id";
const PUT_CLUSTER_WRITE: &str = "INSERT OR REPLACE INTO cluster_writes (id, pod_uid, write, asked)
     VALUES (?1, ?2, ?3, ?4)";
const ADD_PROFILE: &str = "INSERT INTO profiles (job, peak, runtime) VALUES (?1, ?2, ?3)";
const ADD_SET_ASIDE: &str =
    "INSERT INTO set_aside (from_table, name, reason, at, row) VALUES (?1, ?2, ?3, ?4, ?5)";

fn wall() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Unix seconds now, as the database keeps times.
pub fn wall_now() -> f64 {
    wall()
}

impl TaskStore {
    /// Opens (or makes) the database at `path`, as it is: an `Err` for a
    /// file that is not a usable database, changing nothing. The agent
    /// starts with [`TaskStore::open_for_agent`] instead.
    pub fn open(path: &Path) -> Result<TaskStore, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|error| StoreError::Dir { path: path.to_path_buf(), error })?;
        }
        let sql = |error| StoreError::Sql { path: path.to_path_buf(), error };
        let db = Connection::open(path).map_err(sql)?;
        db.busy_timeout(std::time::Duration::from_secs(5)).map_err(sql)?;
        // Before anything is written: a file that is not ours is left
        // exactly as it was found, for the operator.
        check_existing(&db, path)?;
        // WAL: a crash mid-write leaves the last committed state; FULL: a
        // commit is on disk before the agent acts on it.
        db.pragma_update(None, "journal_mode", "WAL").map_err(sql)?;
        db.pragma_update(None, "synchronous", "FULL").map_err(sql)?;
        db.execute_batch(SCHEMA).map_err(sql)?;
        // A database from before checkpoints: its rows get empty images.
        // Only that one: a table that is something else is left as it is,
        // for `check_tables` to refuse and the operator to read.
        let column_count = |names: &str| {
            db.query_row(
                &format!("SELECT COUNT(*) FROM pragma_table_info('tasks') WHERE name IN ({names})"),
                [],
                |r| r.get::<_, i64>(0),
            )
        };
        let old = column_count("'name', 'request', 'state', 'restarts', 'pid', 'updated'")
            .map_err(sql)?
            == 6;
        let new = column_count("'image', 'progress', 'usage'").map_err(sql)?;
        if old && new == 0 {
            db.execute_batch(
                "ALTER TABLE tasks ADD COLUMN image TEXT;
                 ALTER TABLE tasks ADD COLUMN progress REAL NOT NULL DEFAULT 0;
                 ALTER TABLE tasks ADD COLUMN usage INTEGER NOT NULL DEFAULT 0;",
            )
            .map_err(sql)?;
        }
        let store = TaskStore { path: path.to_path_buf(), db };
        store.check_statements()?;
        Ok(store)
    }

    /// Whether the tables take every statement the agent runs (preparing
    /// checks them: columns, types, `ON CONFLICT(name)` needing `name`
    /// unique), found at start rather than at the first task's commit.
    fn check_statements(&self) -> Result<(), StoreError> {
        for stmt in [
            SELECT_TASKS,
            SELECT_PROFILES,
            PUT_TASK,
            ADD_TRANSITION,
            ADD_PROFILE,
            ADD_SET_ASIDE,
            SELECT_CLUSTER_WRITES,
            PUT_CLUSTER_WRITE,
        ] {
            if let Err(e) = self.db.prepare(stmt) {
                return Err(StoreError::Unusable {
                    path: self.path.clone(),
                    why: format!("its tables do not take the agent's statements: {e}"),
                });
            }
        }
        Ok(())
    }

    /// Opens the database for a starting agent, never failing: a file that
    /// is not a usable database is moved aside (to `<path>.corrupt-<unix
    /// seconds>`) and a fresh one made; a database that cannot be written
    /// leaves the agent without durability; rows that cannot be taken
    /// back are set aside. Each of those is a notice to report: a node's
    /// protection does not wait for its disk.
    pub fn open_for_agent(path: &Path) -> StartUp {
        let mut start = StartUp::default();
        let mut moved = false;
        loop {
            let opened = TaskStore::open(path).and_then(|store| {
                store.check_writable()?;
                let tasks = store.tasks()?;
                let profiles = store.profiles()?;
                Ok((store, tasks, profiles))
            });
            match opened {
                Ok((store, tasks, profiles)) => {
                    for row in tasks.set_aside.into_iter().chain(profiles.set_aside) {
                        start.notices.push(StoreNotice::SetAside { path: path.to_path_buf(), row });
                    }
                    start.tasks = tasks.good;
                    start.profiles = profiles.good;
                    start.store = Some(store);
                    return start;
                }
                Err(e) if e.file_is_bad() && !moved => {
                    // The cause alone: the notice names the path.
                    let why = match &e {
                        StoreError::Unusable { why, .. } => why.clone(),
                        StoreError::Sql { error, .. } => error.to_string(),
                        other => other.to_string(),
                    };
                    match move_aside(path) {
                        Ok(aside) => {
                            moved = true;
                            start.notices.push(StoreNotice::MovedAside {
                                path: path.to_path_buf(),
                                aside,
                                why,
                            });
                        }
                        Err((aside, error)) => {
                            let path = path.to_path_buf();
                            let e = StoreError::NotMoved { path, aside, why, error };
                            start.notices.push(StoreNotice::Unavailable(e));
                            return start;
                        }
                    }
                }
                Err(e) => {
                    start.notices.push(StoreNotice::Unavailable(e));
                    return start;
                }
            }
        }
    }

    /// A real write (when an agent last opened the database): a read-only
    /// file, directory or mount fails here, at start, and not at the first
    /// task's commit. (SQLite opens an unwritable file read-only without
    /// a word.)
    fn check_writable(&self) -> Result<(), StoreError> {
        let read_only = |why: String| StoreError::ReadOnly { path: self.path.clone(), why };
        if self.db.is_readonly(rusqlite::DatabaseName::Main).map_err(|e| self.sql(e))? {
            return Err(read_only("the file opened read-only".into()));
        }
        self.db
            .execute(
                "INSERT INTO meta (key, value) VALUES ('opened', ?1)
                 ON CONFLICT(key) DO UPDATE SET value = ?1",
                params![wall()],
            )
            .map(drop)
            .map_err(|e| match e {
                rusqlite::Error::SqliteFailure(f, _)
                    if !matches!(
                        f.code,
                        rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt
                    ) =>
                {
                    read_only(e.to_string())
                }
                e => self.sql(e),
            })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self, error: rusqlite::Error) -> StoreError {
        StoreError::Sql { path: self.path.clone(), error }
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
            .map_err(|error| StoreError::Sql { path: self.path.clone(), error })?;
        let state = task.state.as_str();
        let done = tx
            .execute(
                PUT_TASK,
                params![
                    task.request.name,
                    request,
                    state,
                    task.restarts,
                    task.pid,
                    at,
                    image,
                    task.progress.as_secs_f64(),
                    overbook_core::convert::u64_to_i64(task.usage)
                ],
            )
            .and_then(|_| tx.execute(ADD_TRANSITION, params![task.request.name, state, at, detail]))
            .and_then(|_| tx.commit());
        done.map_err(|e| self.sql(e))
    }

    /// The task is over: its row goes, the transition stays.
    pub fn remove(&mut self, name: &str, how: &str, detail: &str) -> Result<(), StoreError> {
        let at = wall();
        let tx = self
            .db
            .transaction()
            .map_err(|error| StoreError::Sql { path: self.path.clone(), error })?;
        let done = tx
            .execute("DELETE FROM tasks WHERE name = ?1", params![name])
            .and_then(|_| tx.execute(ADD_TRANSITION, params![name, how, at, detail]))
            .and_then(|_| tx.commit());
        done.map_err(|e| self.sql(e))
    }

    /// Every stored task, oldest change first (the order they came in,
    /// for first-come-first-served). A row that cannot be taken back (a
    /// value out of range or of the wrong type, an unknown state or class,
    /// an empty command, an invalid name) is moved to `set_aside` and
    /// returned as such; the rest are taken back. `Err` only when the
    /// table cannot be read at all.
    pub fn tasks(&self) -> Result<Adopted<StoredTask>, StoreError> {
        let rows = self.rows(SELECT_TASKS, 9)?;
        let mut out = Adopted { good: Vec::new(), set_aside: Vec::new() };
        for row in rows {
            let name = match &row[1] {
                Value::Text(s) => Some(s.clone()),
                _ => None,
            };
            match task_from_row(&row) {
                Ok(task) => out.good.push(task),
                Err(reason) => out.set_aside.push(self.set_aside("tasks", &row, name, reason)),
            }
        }
        Ok(out)
    }

    /// Every row of `query` (its first column the rowid), values as stored.
    fn rows(&self, query: &str, columns: usize) -> Result<Vec<Vec<Value>>, StoreError> {
        let mut stmt = self.db.prepare(query).map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| (0..columns).map(|i| r.get::<_, Value>(i)).collect())
            .and_then(|rows| rows.collect::<Result<Vec<Vec<Value>>, _>>());
        rows.map_err(|e| self.sql(e))
    }

    /// Moves a row (its first value the rowid, the rest as `query` read
    /// them) from `table` to `set_aside`, with the reason, in one
    /// transaction. A row that cannot be moved stays where it is, and the
    /// reason says so: it is skipped either way, never deleted unkept.
    fn set_aside(
        &self,
        table: &'static str,
        row: &[Value],
        name: Option<String>,
        mut reason: String,
    ) -> SetAside {
        let kept = serde_json::Value::Array(row[1..].iter().map(value_json).collect()).to_string();
        let rowid = match row[0] {
            Value::Integer(id) => id,
            _ => -1,
        };
        let delete = format!("DELETE FROM {table} WHERE rowid = ?1");
        let moved = self.db.unchecked_transaction().and_then(|tx| {
            tx.execute(ADD_SET_ASIDE, params![table, name, reason, wall(), kept])?;
            tx.execute(&delete, params![rowid])?;
            if let (Some(name), "tasks") = (&name, table) {
                tx.execute(ADD_TRANSITION, params![name, "set-aside", wall(), reason])?;
            }
            tx.commit()
        });
        if let Err(e) = moved {
            reason =
                format!("{reason} (it could not be moved to set_aside, {e}, and stays in {table})");
        }
        SetAside { table, name, reason }
    }

    /// Rows set aside so far, oldest first, as kept for the operator.
    pub fn set_aside_rows(&self) -> Result<Vec<KeptRow>, StoreError> {
        let mut stmt = self
            .db
            .prepare("SELECT from_table, name, reason, row FROM set_aside ORDER BY seq")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(KeptRow { table: r.get(0)?, name: r.get(1)?, reason: r.get(2)?, row: r.get(3)? })
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
        rows.map_err(|e| self.sql(e))
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
            .map_err(|error| StoreError::Sql { path: self.path.clone(), error })?;
        let done = tx
            .execute(
                ADD_PROFILE,
                params![job, overbook_core::convert::u64_to_i64(peak), runtime.as_secs_f64()],
            )
            .and_then(|_| {
                tx.execute(
                    "DELETE FROM profiles WHERE job = ?1 AND seq NOT IN
                     (SELECT seq FROM profiles WHERE job = ?1 ORDER BY seq DESC LIMIT ?2)",
                    params![job, i64::try_from(keep).unwrap_or(i64::MAX)],
                )
            })
            .and_then(|_| tx.commit());
        done.map_err(|e| self.sql(e))
    }

    /// Every kept profile entry, oldest first: (job, peak, run time); an
    /// entry that cannot be read is set aside, as in [`TaskStore::tasks`].
    pub fn profiles(&self) -> Result<Adopted<Profile>, StoreError> {
        let rows = self.rows(SELECT_PROFILES, 4)?;
        let mut out = Adopted { good: Vec::new(), set_aside: Vec::new() };
        for row in rows {
            let job = match &row[1] {
                Value::Text(s) => Some(s.clone()),
                _ => None,
            };
            let profile = job
                .clone()
                .ok_or_else(|| format!("job {} is not text", show(&row[1])))
                .and_then(|job| {
                    let peak = match row[2] {
                        Value::Integer(p) => u64::try_from(p).ok(),
                        _ => None,
                    }
                    .ok_or_else(|| format!("peak {} is not a size in bytes", show(&row[2])))?;
                    let runtime = duration(&row[3])
                        .ok_or_else(|| format!("run time {} is not a duration", show(&row[3])))?;
                    Ok((job, peak, runtime))
                });
            match profile {
                Ok(p) => out.good.push(p),
                Err(reason) => out.set_aside.push(self.set_aside("profiles", &row, job, reason)),
            }
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

    /// Keeps a write to the API server about a pod until it is done
    /// ([`TaskStore::remove_cluster_write`]): the next agent carries it.
    pub fn put_cluster_write(
        &mut self,
        w: &crate::kubernetes::writes::PodWrite,
    ) -> Result<(), StoreError> {
        let text = serde_json::to_string(w).map_err(|e| StoreError::Row {
            path: self.path.clone(),
            name: w.pod.key(),
            problem: e.to_string(),
        })?;
        let id = i64::try_from(w.id).unwrap_or(i64::MAX);
        self.db
            .execute(PUT_CLUSTER_WRITE, params![id, w.pod.uid, text, w.asked_unix])
            .map(drop)
            .map_err(|e| self.sql(e))
    }

    /// A write to the API server is done (written or given up).
    pub fn remove_cluster_write(&mut self, id: u64) -> Result<(), StoreError> {
        let id = i64::try_from(id).unwrap_or(i64::MAX);
        self.db
            .execute("DELETE FROM cluster_writes WHERE id = ?1", params![id])
            .map(drop)
            .map_err(|e| self.sql(e))
    }

    /// The writes to the API server an earlier agent left, in the order
    /// asked. A row that cannot be read back is set aside (table
    /// `set_aside`) with why.
    pub fn cluster_writes(
        &self,
    ) -> Result<Adopted<crate::kubernetes::writes::PodWrite>, StoreError> {
        let rows = self.rows(SELECT_CLUSTER_WRITES, 4)?;
        let mut out = Adopted { good: Vec::new(), set_aside: Vec::new() };
        for row in rows {
            let uid = match &row[1] {
                Value::Text(s) => Some(s.clone()),
                _ => None,
            };
            let read = match (&row[0], &row[2]) {
                (Value::Integer(id), Value::Text(text)) => {
                    serde_json::from_str::<crate::kubernetes::writes::PodWrite>(text)
                        .map_err(|e| format!("its write is not valid: {e}"))
                        .and_then(|w| match u64::try_from(*id) {
                            Ok(id) if id == w.id => Ok(w),
                            _ => Err(format!("its id {id} is not its write's ({})", w.id)),
                        })
                }
                (id, text) => {
                    Err(format!("its id {} or write {} is not usable", show(id), show(text)))
                }
            };
            match read {
                Ok(w) => out.good.push(w),
                Err(reason) => {
                    out.set_aside.push(self.set_aside("cluster_writes", &row, uid, reason))
                }
            }
        }
        Ok(out)
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

/// Whether the tables already in the file are ones the agent can use (or
/// migrate): each has the columns the agent reads and writes (`tasks` at
/// least those from before checkpoints), no column the agent would have to
/// fill but does not know, and `tasks.name` unique. Reads only: a file that
/// fails is moved aside as it was. (A table made by someone else under one
/// of our names, or damaged past `CREATE TABLE IF NOT EXISTS` noticing.)
fn check_existing(db: &Connection, path: &Path) -> Result<(), StoreError> {
    let sql = |error| StoreError::Sql { path: path.to_path_buf(), error };
    let unusable = |why: String| StoreError::Unusable { path: path.to_path_buf(), why };
    for (table, wanted) in COLUMNS {
        let kind: Option<String> = db
            .query_row("SELECT type FROM sqlite_master WHERE name = ?1", params![table], |r| {
                r.get(0)
            })
            .optional()
            .map_err(sql)?;
        match kind.as_deref() {
            None => continue,
            Some("table") => {}
            Some(other) => return Err(unusable(format!("{table} is a {other}, not a table"))),
        }
        let mut stmt = db
            .prepare("SELECT name, \"notnull\", dflt_value, pk FROM pragma_table_info(?1)")
            .map_err(sql)?;
        let columns = stmt
            .query_map(params![table], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, bool>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(sql)?;
        let has = |c: &str| columns.iter().any(|(name, ..)| name == c);
        // The columns checkpoints added are migrated in when all are absent.
        let added = ["image", "progress", "usage"];
        let migrates = table == "tasks" && !added.iter().any(|c| has(c));
        for w in wanted.iter().filter(|w| !(migrates && added.contains(w))) {
            if !has(w) {
                return Err(unusable(format!("table {table} has no column {w}")));
            }
        }
        let unknown = columns.iter().find(|(name, notnull, dflt, pk)| {
            !wanted.contains(&name.as_str()) && *notnull && dflt.is_none() && *pk == 0
        });
        if let Some((name, ..)) = unknown {
            return Err(unusable(format!(
                "table {table} has a column {name} that must be filled and that the agent does \
                 not know"
            )));
        }
        if table == "tasks" {
            let name_is_key = columns.iter().any(|(n, _, _, pk)| n == "name" && *pk == 1)
                && columns.iter().filter(|c| c.3 > 0).count() == 1;
            let unique_index: i64 = db
                .query_row(
                    "SELECT COUNT(*) FROM pragma_index_list('tasks') AS l
                     WHERE l.\"unique\" = 1
                       AND (SELECT group_concat(name) FROM pragma_index_info(l.name)) = 'name'",
                    [],
                    |r| r.get(0),
                )
                .map_err(sql)?;
            if !name_is_key && unique_index == 0 {
                return Err(unusable("table tasks does not keep one row per name".into()));
            }
        }
    }
    Ok(())
}

/// A task from its row (rowid, name, request, state, restarts, pid,
/// image, progress, usage), or why it cannot be taken back. Every value is
/// read as stored (SQLite keeps any type in any column) and checked, so no
/// value a file can hold reaches the agent unchecked: a negative pid would
/// be signalled as a process group, an empty command would be run.
fn task_from_row(row: &[Value]) -> Result<StoredTask, String> {
    let Value::Text(name) = &row[1] else {
        return Err(format!("its name {} is not text", show(&row[1])));
    };
    crate::tasks::check_name(name).map_err(|e| format!("its name is not valid: {e}"))?;
    let Value::Text(request) = &row[2] else {
        return Err(format!("its request {} is not text", show(&row[2])));
    };
    let request: RunRequest =
        serde_json::from_str(request).map_err(|e| format!("its request is not valid: {e}"))?;
    if &request.name != name {
        return Err(format!("its request is for another task, {:?}", request.name));
    }
    if request.command.first().is_none_or(String::is_empty) {
        return Err("its command is empty".into());
    }
    if let Some(w) = request.weight.filter(|w| !(1..=10_000).contains(w)) {
        return Err(format!("its weight {w} is not from 1 to 10000"));
    }
    let state = match &row[3] {
        Value::Text(s) => StoredState::parse(s),
        _ => None,
    }
    .ok_or_else(|| format!("{} is not a task state", show(&row[3])))?;
    let restarts = match row[4] {
        Value::Integer(n) => u32::try_from(n).ok(),
        _ => None,
    }
    .ok_or_else(|| format!("restarts {} is not a count", show(&row[4])))?;
    let pid = match row[5] {
        Value::Null => None,
        // A pid is a positive pid_t.
        Value::Integer(p) if (1..=i64::from(i32::MAX)).contains(&p) => u32::try_from(p).ok(),
        _ => return Err(format!("pid {} is not a process id", show(&row[5]))),
    };
    let image = match &row[6] {
        Value::Null => None,
        Value::Text(s) if s.is_empty() => None,
        Value::Text(s) => Some(PathBuf::from(s)),
        other => return Err(format!("image {} is not a path", show(other))),
    };
    let progress =
        duration(&row[7]).ok_or_else(|| format!("progress {} is not a duration", show(&row[7])))?;
    let usage = match row[8] {
        Value::Integer(u) => u64::try_from(u).ok(),
        _ => None,
    }
    .ok_or_else(|| format!("usage {} is not a size in bytes", show(&row[8])))?;
    let needs_image =
        matches!(state, StoredState::Dumping | StoredState::Checkpointed | StoredState::Restoring);
    if needs_image && image.is_none() {
        return Err(format!("{} without an image", state.as_str()));
    }
    Ok(StoredTask { request, state, restarts, pid, image, progress, usage })
}

/// Seconds as stored (a real or an integer), if a duration.
fn duration(v: &Value) -> Option<std::time::Duration> {
    let secs = match *v {
        Value::Real(r) => r,
        Value::Integer(i) => i as f64,
        _ => return None,
    };
    std::time::Duration::try_from_secs_f64(secs).ok()
}

/// A stored value as a reason shows it.
fn show(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Integer(i) => i.to_string(),
        Value::Real(r) => r.to_string(),
        Value::Text(s) if s.chars().count() > 60 => {
            format!("{:?}…", s.chars().take(60).collect::<String>())
        }
        Value::Text(s) => format!("{s:?}"),
        Value::Blob(b) => format!("a {}-byte blob", b.len()),
    }
}

/// A stored value as JSON, for the set-aside copy of its row.
fn value_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Integer(i) => (*i).into(),
        Value::Real(r) => (*r).into(),
        Value::Text(s) => s.as_str().into(),
        Value::Blob(b) => {
            serde_json::json!({ "blob_hex": b.iter().map(|x| format!("{x:02x}")).collect::<String>() })
        }
    }
}

/// Moves the database file, and its WAL and shared-memory files with it
/// (a fresh database beside a stale WAL would replay it), to
/// `<path>.corrupt-<unix seconds>` (`-2`, `-3`… if taken). `Err` has the
/// name it tried.
fn move_aside(path: &Path) -> Result<PathBuf, (PathBuf, std::io::Error)> {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let with = |suffix: &str| {
        let mut p = path.as_os_str().to_os_string();
        p.push(suffix);
        PathBuf::from(p)
    };
    let mut aside = with(&format!(".corrupt-{secs}"));
    let mut n = 2;
    while aside.symlink_metadata().is_ok() {
        aside = with(&format!(".corrupt-{secs}-{n}"));
        n += 1;
    }
    std::fs::rename(path, &aside).map_err(|e| (aside.clone(), e))?;
    for side in ["-wal", "-shm", "-journal"] {
        let from = with(side);
        if from.symlink_metadata().is_ok() {
            let mut to = aside.as_os_str().to_os_string();
            to.push(side);
            std::fs::rename(&from, &to).map_err(|e| (PathBuf::from(to), e))?;
        }
    }
    Ok(aside)
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
        let tasks = s.tasks().expect("read").good;
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
        assert_eq!(TaskStore::open(&path).expect("reopens").tasks().expect("read").good, vec![t]);
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
        let tasks = TaskStore::open(&path).expect("migrates").tasks().expect("read").good;
        assert_eq!(tasks, vec![StoredTask::new(request("old"), StoredState::Queued, 3, None)]);
    }

    #[test]
    fn cluster_writes_survive_a_reopen_until_done_and_bad_ones_are_set_aside() {
        use crate::kubernetes::writes::{PodRef, PodWrite, PodWriteKind};
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.db");
        let write = |id: u64, kind| PodWrite {
            id,
            pod: PodRef { uid: "u1".into(), namespace: "ns".into(), name: "be-1".into() },
            kind,
            asked_unix: 1e9,
        };
        let event =
            PodWriteKind::Event { reason: "Killed".into(), warning: true, message: "m".into() };
        {
            let mut s = TaskStore::open(&path).expect("open");
            s.put_cluster_write(&write(1, event.clone())).expect("put");
            s.put_cluster_write(&write(2, PodWriteKind::Eviction)).expect("put");
            s.put_cluster_write(&write(3, PodWriteKind::Eviction)).expect("put");
            s.remove_cluster_write(3).expect("removed");
            raw_cluster_write(&s, "9, 'u2', 'not json', 0");
        }
        let start = TaskStore::open_for_agent(&path);
        let s = start.store.expect("usable");
        let carried = s.cluster_writes().expect("read");
        assert_eq!(carried.good, vec![write(1, event), write(2, PodWriteKind::Eviction)]);
        assert_eq!(carried.set_aside.len(), 1);
        assert_eq!(carried.set_aside[0].name.as_deref(), Some("u2"));
        assert!(carried.set_aside[0].reason.contains("not valid"), "{:?}", carried.set_aside);
        assert_eq!(s.cluster_writes().expect("read").set_aside.len(), 0, "moved once");
    }

    fn raw_cluster_write(s: &TaskStore, values: &str) {
        s.db.execute_batch(&format!(
            "INSERT INTO cluster_writes (id, pod_uid, write, asked) VALUES ({values})"
        ))
        .expect("inserted");
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
        let p = TaskStore::open(&path).expect("reopens").profiles().expect("read").good;
        let peaks: Vec<(&str, u64)> = p.iter().map(|(j, peak, _)| (j.as_str(), *peak)).collect();
        assert_eq!(peaks, vec![("j", 2 << 20), ("j", 3 << 20), ("j", 4 << 20), ("k", 7)]);
        assert_eq!(p[3].2, std::time::Duration::from_millis(1500));
    }

    #[test]
    fn a_file_that_is_not_a_database_is_refused_with_its_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.db");
        std::fs::write(&path, vec![7u8; 8192]).expect("write");
        let err = TaskStore::open(&path).unwrap_err().to_string();
        assert!(err.contains("state.db"), "{err}");
    }

    /// Inserts a row as given, bypassing every check (SQLite takes any
    /// value in any column, as a damaged or hand-edited file would hold).
    fn raw_row(s: &TaskStore, name: &str, values: &str) {
        s.db.execute_batch(&format!(
            "INSERT INTO tasks (name, request, state, restarts, pid, updated, image, progress,
                 usage) VALUES ({name}, {values})"
        ))
        .expect("raw insert");
    }

    fn req_json(name: &str) -> String {
        serde_json::to_string(&request(name)).expect("json").replace('\'', "''")
    }

    /// Each bad row beside good ones: the good are taken back, in order;
    /// each bad one is moved to `set_aside` with its reason and its values,
    /// its history says so, and it is not in `tasks` any more.
    #[test]
    fn bad_rows_are_set_aside_with_their_reason_and_the_rest_adopted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.db");
        let mut s = TaskStore::open(&path).expect("opens");
        s.put(&StoredTask::new(request("good-1"), StoredState::Queued, 0, None), "q").expect("put");
        let r = |n: &str| format!("'{}'", req_json(n));
        let empty_command = req_json("nocmd").replace(r#"["sleep","1"]"#, "[]");
        let gold = req_json("gold").replace("best-effort", "gold");
        let other = req_json("someone-else");
        let bad: Vec<(&str, String, &str)> = vec![
            (
                "'neg-restarts'",
                format!("{}, 'queued', -1, NULL, 0, NULL, 0, 0", r("neg-restarts")),
                "restarts -1",
            ),
            (
                "'huge-pid'",
                format!("{}, 'running', 0, 99999999999, 0, NULL, 0, 0", r("huge-pid")),
                "pid 99999999999",
            ),
            ("'neg-pid'", format!("{}, 'running', 0, -1, 0, NULL, 0, 0", r("neg-pid")), "pid -1"),
            (
                "'neg-usage'",
                format!("{}, 'queued', 0, NULL, 0, NULL, 0, -5", r("neg-usage")),
                "usage -5",
            ),
            (
                "'neg-progress'",
                format!("{}, 'queued', 0, NULL, 0, NULL, -1.5, 0", r("neg-progress")),
                "progress -1.5",
            ),
            (
                "'text-restarts'",
                format!("{}, 'queued', 'many', NULL, 0, NULL, 0, 0", r("text-restarts")),
                "restarts \"many\"",
            ),
            (
                "'odd-state'",
                format!("{}, 'sleeping', 0, NULL, 0, NULL, 0, 0", r("odd-state")),
                "\"sleeping\" is not a task state",
            ),
            (
                "'nocmd'",
                format!("'{empty_command}', 'queued', 0, NULL, 0, NULL, 0, 0"),
                "command is empty",
            ),
            (
                "'gold'",
                format!("'{gold}', 'queued', 0, NULL, 0, NULL, 0, 0"),
                "unknown variant `gold`",
            ),
            (
                "'../x'",
                format!("{}, 'queued', 0, NULL, 0, NULL, 0, 0", r("../x")),
                "name is not valid",
            ),
            ("'mismatch'", format!("'{other}', 'queued', 0, NULL, 0, NULL, 0, 0"), "another task"),
            (
                "'no-image'",
                format!("{}, 'checkpointed', 0, NULL, 0, NULL, 0, 0", r("no-image")),
                "checkpointed without an image",
            ),
            (
                "'not-json'",
                "'{', 'queued', 0, NULL, 0, NULL, 0, 0".to_string(),
                "request is not valid",
            ),
            (
                "x'00ff'",
                format!("{}, 'queued', 0, NULL, 0, NULL, 0, 0", r("blob")),
                "name a 2-byte blob is not text",
            ),
        ];
        for (name, values, _) in &bad {
            raw_row(&s, name, values);
        }
        s.put(&StoredTask::new(request("good-2"), StoredState::Running, 2, Some(7)), "r")
            .expect("put");
        drop(s);

        let start = TaskStore::open_for_agent(&path);
        assert!(start.store.is_some(), "{:?}", start.notices);
        let names: Vec<&str> = start.tasks.iter().map(|t| t.request.name.as_str()).collect();
        assert_eq!(names, vec!["good-1", "good-2"]);
        assert_eq!(start.notices.len(), bad.len(), "{:?}", start.notices);
        for (notice, (name, _, why)) in start.notices.iter().zip(&bad) {
            assert_eq!(notice.kind().as_str(), "state-row-set-aside");
            let StoreNotice::SetAside { row, .. } = notice else { panic!("{notice:?}") };
            assert_eq!(row.table, "tasks");
            assert!(row.reason.contains(why), "{name}: {} lacks {why}", row.reason);
            assert_eq!(row.name.is_some(), !name.starts_with('x'), "{row:?}");
            assert_eq!(notice.detail()["task"], serde_json::json!(row.name));
        }
        let store = start.store.expect("store");
        let kept = store.set_aside_rows().expect("set aside");
        assert_eq!(kept.len(), bad.len());
        assert_eq!(kept[0].table, "tasks");
        assert_eq!(kept[0].name.as_deref(), Some("neg-restarts"));
        assert!(kept[0].reason.contains("restarts -1"), "{}", kept[0].reason);
        assert!(
            kept[0].row.contains("-1") && kept[0].row.contains("neg-restarts"),
            "{}",
            kept[0].row
        );
        assert_eq!(
            store.history("nocmd").expect("history").last().map(|h| h.0.as_str()),
            Some("set-aside")
        );
        // Set aside once: the next start finds only the good rows.
        drop(store);
        let again = TaskStore::open_for_agent(&path);
        assert!(again.notices.is_empty(), "{:?}", again.notices);
        assert_eq!(again.tasks.len(), 2);
    }

    #[test]
    fn a_bad_profile_row_is_set_aside() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.db");
        let mut s = TaskStore::open(&path).expect("opens");
        s.add_profile("j", 5 << 20, std::time::Duration::from_secs(3), 20).expect("add");
        s.db.execute_batch("INSERT INTO profiles (job, peak, runtime) VALUES ('k', -3, 1.0)")
            .expect("raw");
        drop(s);
        let start = TaskStore::open_for_agent(&path);
        assert_eq!(start.profiles.len(), 1);
        assert_eq!(start.profiles[0].0, "j");
        let [notice] = &start.notices[..] else { panic!("{:?}", start.notices) };
        assert!(
            notice.to_string().contains("profile of job \"k\"")
                && notice.to_string().contains("peak -3"),
            "{notice}"
        );
    }

    fn assert_moved_aside(start: &StartUp, path: &Path, why: &str) -> PathBuf {
        let [notice] = &start.notices[..] else { panic!("{:?}", start.notices) };
        let StoreNotice::MovedAside { path: from, aside, why: said } = notice else {
            panic!("{notice:?}")
        };
        assert_eq!(from, path);
        assert!(said.contains(why), "{said}");
        let name = aside.file_name().and_then(|n| n.to_str()).expect("utf-8");
        let secs = name.strip_prefix("state.db.corrupt-").expect("named after the file");
        assert!(secs.parse::<u64>().is_ok_and(|s| s > 1_600_000_000), "{name}");
        let line = notice.to_string();
        assert!(line.contains(&path.display().to_string()), "{line}");
        assert!(line.contains(&aside.display().to_string()), "{line}");
        assert_eq!(notice.kind().as_str(), "state-moved-aside");
        // And a fresh database in its place, one that works.
        let mut fresh = TaskStore::open(path).expect("fresh");
        assert!(fresh.tasks().expect("read").good.is_empty());
        fresh.put(&StoredTask::new(request("n"), StoredState::Queued, 0, None), "q").expect("put");
        assert!(start.store.is_some());
        aside.clone()
    }

    #[test]
    fn a_file_that_is_not_a_database_is_moved_aside_and_a_fresh_one_made() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.db");
        let garbage = vec![7u8; 8192];
        std::fs::write(&path, &garbage).expect("write");
        let start = TaskStore::open_for_agent(&path);
        let aside = assert_moved_aside(&start, &path, "not a database");
        assert!(std::fs::read(&aside).expect("kept") == garbage, "kept as it was");
    }

    #[test]
    fn moving_aside_takes_the_side_files_and_takes_no_name_twice() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.db");
        let side = |p: &Path, s: &str| {
            let mut o = p.as_os_str().to_os_string();
            o.push(s);
            PathBuf::from(o)
        };
        std::fs::write(&path, b"one").expect("write");
        // A stale WAL must go with its file: a fresh database beside it
        // would replay it.
        std::fs::write(side(&path, "-wal"), b"wal").expect("write");
        let first = move_aside(&path).expect("moved");
        std::fs::write(&path, b"two").expect("write");
        let second = move_aside(&path).expect("moved");
        assert_ne!(first, second);
        assert!(!path.exists() && !side(&path, "-wal").exists());
        assert_eq!(std::fs::read(&first).expect("kept"), b"one");
        assert_eq!(std::fs::read(side(&first, "-wal")).expect("kept"), b"wal");
        assert_eq!(std::fs::read(&second).expect("kept"), b"two");
    }

    #[test]
    fn tables_of_the_wrong_shape_are_moved_aside_untouched() {
        for (schema, why) in [
            ("CREATE TABLE tasks (id INTEGER, payload BLOB);", "table tasks has no column name"),
            (
                "CREATE TABLE profiles (seq INTEGER PRIMARY KEY, job TEXT, peak INTEGER,
                     runtime REAL, owner TEXT NOT NULL);",
                "column owner that must be filled",
            ),
            // `name` not unique: the upsert cannot work.
            (
                "CREATE TABLE tasks (name TEXT, request TEXT, state TEXT, restarts INTEGER,
                     pid INTEGER, updated REAL, image TEXT, progress REAL, usage INTEGER);",
                "one row per name",
            ),
        ] {
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("state.db");
            Connection::open(&path).expect("db").execute_batch(schema).expect("schema");
            let before = std::fs::read(&path).expect("read");
            let start = TaskStore::open_for_agent(&path);
            let aside = assert_moved_aside(&start, &path, why);
            assert!(std::fs::read(&aside).expect("kept") == before, "touched: {schema}");
        }
    }

    /// A tmpfs mounted for one test and unmounted when it ends (however it
    /// ends); `None` where this process may not mount (not root).
    struct Mount(tempfile::TempDir);

    impl Mount {
        fn tmpfs() -> Option<Mount> {
            let dir = tempfile::tempdir().expect("temp dir");
            let ok = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=4m", "overbook-test"])
                .arg(dir.path())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                eprintln!("skipped: cannot mount a tmpfs here (needs root)");
            }
            ok.then_some(Mount(dir))
        }

        fn read_only(&self) {
            let ok = std::process::Command::new("mount")
                .args(["-o", "remount,ro"])
                .arg(self.0.path())
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "remount read-only");
        }
    }

    impl Drop for Mount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0.path()).status();
        }
    }

    /// Read-only for root too: permission bits do not stop root, a
    /// read-only mount does.
    #[test]
    fn a_database_that_cannot_be_written_leaves_the_agent_without_durability() {
        let Some(mount) = Mount::tmpfs() else { return };
        let path = mount.0.path().join("state.db");
        let missing = mount.0.path().join("sub/state.db");
        {
            let mut s = TaskStore::open(&path).expect("opens");
            s.put(&StoredTask::new(request("a"), StoredState::Queued, 0, None), "q").expect("put");
        }
        let before = std::fs::read(&path).expect("read");
        mount.read_only();
        for db in [&path, &missing] {
            let start = TaskStore::open_for_agent(db);
            assert!(start.store.is_none() && start.tasks.is_empty());
            let [notice] = &start.notices[..] else { panic!("{:?}", start.notices) };
            assert_eq!(notice.kind().as_str(), "state-unavailable");
            let line = notice.to_string();
            assert!(line.contains(&db.display().to_string()), "{line}");
            assert!(line.contains("WITHOUT durability"), "{line}");
        }
        assert!(std::fs::read(&path).expect("read") == before, "not left as it was");
        let names: Vec<_> = std::fs::read_dir(mount.0.path())
            .expect("dir")
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.db")], "nothing moved or made");
    }

    /// A writable file in a directory where nothing can be made (WAL needs
    /// its side files): `chattr +i` on the directory, which stops root.
    #[test]
    fn a_database_in_a_directory_that_cannot_be_written_is_not_a_start_failure() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.db");
        {
            let mut s = TaskStore::open(&path).expect("opens");
            s.put(&StoredTask::new(request("a"), StoredState::Queued, 0, None), "q").expect("put");
        }
        let chattr = |flag: &str| {
            std::process::Command::new("chattr")
                .arg(flag)
                .arg(dir.path())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !chattr("+i") {
            eprintln!("skipped: chattr +i does not work here");
            return;
        }
        let start = TaskStore::open_for_agent(&path);
        let undone = chattr("-i");
        assert!(undone, "chattr -i (the temp dir cannot be removed otherwise)");
        assert!(start.store.is_none(), "{:?}", start.notices);
        let [notice] = &start.notices[..] else { panic!("{:?}", start.notices) };
        assert_eq!(notice.kind().as_str(), "state-unavailable", "{notice}");
        assert!(path.exists(), "left in place");
    }
}
