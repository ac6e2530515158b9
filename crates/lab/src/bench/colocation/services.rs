//! The production services of `bench colocation`: Debian's Redis and
//! PostgreSQL, each in its own container under the node, and their load
//! drivers (`redis-benchmark`, `pgbench`), which run outside the node as a
//! client machine would.
//!
//! Both services start from a template made once per run (a Redis RDB file,
//! a PostgreSQL data directory after `pgbench -i`), so every scene starts
//! from the same data without paying for the load again.

use super::super::{BenchNode, MIB};
use super::latency::Histogram;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The Debian programs the benchmark runs, found at start.
#[derive(Clone, Debug)]
pub struct Programs {
    pub redis_server: PathBuf,
    pub redis_cli: PathBuf,
    pub redis_benchmark: PathBuf,
    pub pg_bin: PathBuf,
    pub pgbench: PathBuf,
    pub pg_isready: PathBuf,
    pub earlyoom: PathBuf,
    pub setpriv: PathBuf,
    pub choom: PathBuf,
    pub chrt: PathBuf,
    pub taskset: PathBuf,
    /// The services' `oom_score_adj`: a kubelet's -997 for guaranteed
    /// pods, or 0 where this process may not lower it (no
    /// `CAP_SYS_RESOURCE`; native mode only).
    pub prod_oom_score_adj: i32,
}

impl Programs {
    /// Finds every program, or says which package brings the missing ones.
    pub fn find() -> Result<Programs, String> {
        let mut missing = Vec::new();
        let mut at = |path: &str, package: &str| {
            let p = PathBuf::from(path);
            if !p.exists() {
                missing.push(format!("{path} (Debian package {package})"));
            }
            p
        };
        let pg_bin =
            newest_postgres().unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"));
        let programs = Programs {
            redis_server: at("/usr/bin/redis-server", "redis-server"),
            redis_cli: at("/usr/bin/redis-cli", "redis-tools"),
            redis_benchmark: at("/usr/bin/redis-benchmark", "redis-tools"),
            // PostgreSQL's own, not /usr/bin's pg_wrapper (it wants a
            // cluster configured in /etc).
            pgbench: at(&pg_bin.join("pgbench").display().to_string(), "postgresql"),
            pg_isready: at(&pg_bin.join("pg_isready").display().to_string(), "postgresql"),
            earlyoom: at("/usr/bin/earlyoom", "earlyoom"),
            setpriv: at("/usr/bin/setpriv", "util-linux"),
            choom: at("/usr/bin/choom", "util-linux"),
            chrt: at("/usr/bin/chrt", "util-linux"),
            taskset: at("/usr/bin/taskset", "util-linux"),
            pg_bin: at(&pg_bin.display().to_string(), "postgresql"),
            prod_oom_score_adj: -997,
        };
        for tool in ["postgres", "initdb", "pg_ctl"] {
            at(&programs.pg_bin.join(tool).display().to_string(), "postgresql");
        }
        if missing.is_empty() {
            Ok(programs)
        } else {
            Err(format!("missing: {} (`scripts/vm install` installs them)", missing.join(", ")))
        }
    }
}

fn newest_postgres() -> Option<PathBuf> {
    let mut versions: Vec<u32> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    versions.sort_unstable();
    Some(PathBuf::from(format!("/usr/lib/postgresql/{}/bin", versions.last()?)))
}

/// Runs a command to its end; its stdout, or an error with its stderr.
pub fn output(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out =
        cmd.stdin(Stdio::null()).output().map_err(|e| format!("{what}: cannot start: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        return Err(format!("{what}: {} ({})", out.status, tail.join(" / ")));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Waits until `ready` holds (a service answering), at most `within`.
fn until(within: Duration, what: &str, mut ready: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + within;
    while !ready() {
        if Instant::now() > deadline {
            return Err(format!("{what}: not ready within {within:?}"));
        }
        // Polling a server that is starting: there is nothing to wait on.
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The `postgres` account's uid and gid, from /etc/passwd.
fn postgres_ids() -> Result<(u32, u32), String> {
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| format!("/etc/passwd: {e}"))?;
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"postgres") && f.len() > 3)
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
        })
        .ok_or_else(|| {
            "no `postgres` account in /etc/passwd (Debian package postgresql makes it)".into()
        })
}

fn chown_tree(dir: &Path, uid: u32, gid: u32) -> Result<(), String> {
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))
        .map_err(|e| format!("chown {}: {e}", dir.display()))?;
    if dir.is_dir() {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for e in entries {
            let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
            chown_tree(&e.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// How big the services are.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct ServiceSizes {
    /// Redis's always-present data set (what the GET load reads).
    pub redis_base: u64,
    /// The cache fill Redis takes in and drops again mid-scene.
    pub redis_burst: u64,
    /// `pgbench -i` scale (about 15 MiB of tables and indexes each).
    pub pg_scale: u32,
}

/// Size of one object of Redis's cache fill.
const FILL_OBJECT: u64 = 4 * MIB;

/// Reads Redis's `+OK` reply, or says what came instead.
fn expect_ok(conn: &mut std::os::unix::net::UnixStream) -> Result<(), String> {
    use std::io::Read;
    let mut reply = [0u8; 5];
    conn.read_exact(&mut reply).map_err(|e| format!("Redis cache fill: no reply: {e}"))?;
    if &reply != b"+OK\r\n" {
        let mut rest = [0u8; 200];
        let n = conn.read(&mut rest).unwrap_or(0);
        return Err(format!(
            "Redis cache fill: {}{}",
            String::from_utf8_lossy(&reply),
            String::from_utf8_lossy(&rest[..n])
        ));
    }
    Ok(())
}
const BASE_VALUE: u64 = 1024;

/// The data both services start each scene from.
#[derive(Debug)]
pub struct Templates {
    dir: PathBuf,
    pub sizes: ServiceSizes,
    /// The node's base keys (`key:000000000000` ..).
    pub redis_keys: u64,
    /// The PostgreSQL data directory's size, bytes.
    pub pg_bytes: u64,
}

impl Templates {
    /// Makes them in `dir` (a fresh directory), with services started in
    /// `node` and stopped again.
    pub fn make(
        programs: &Programs,
        node: &mut BenchNode,
        dir: &Path,
        sizes: ServiceSizes,
        say: &mut dyn FnMut(&str),
    ) -> Result<Templates, String> {
        let redis_keys = (sizes.redis_base / BASE_VALUE).max(1000);
        say(&format!("template: Redis with {redis_keys} keys of {BASE_VALUE} bytes"));
        let rdir = dir.join("redis");
        std::fs::create_dir_all(&rdir).map_err(|e| format!("{}: {e}", rdir.display()))?;
        let redis = Redis::start(programs, node, &rdir, None)?;
        // Random keys over the key space: three times as many SETs leave
        // 95% of the keys present, in redis-benchmark's own key format.
        output(
            Command::new(&programs.redis_benchmark)
                .arg("-s")
                .arg(&redis.socket)
                .args(["-q", "-P", "32", "-c", "2", "-t", "set", "-d", &BASE_VALUE.to_string()])
                .args(["-r", &redis_keys.to_string(), "-n", &(3 * redis_keys).to_string()]),
            "redis-benchmark (template fill)",
        )?;
        redis.cli(programs, &["SAVE"])?;
        node.drop_container(&redis.container);
        say(&format!("template: PostgreSQL, pgbench scale {}", sizes.pg_scale));
        let (uid, gid) = postgres_ids()?;
        let pdir = dir.join("pg");
        std::fs::create_dir_all(&pdir).map_err(|e| format!("{}: {e}", pdir.display()))?;
        chown_tree(&pdir, uid, gid)?;
        output(
            Command::new(&programs.setpriv)
                .args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
                .arg(programs.pg_bin.join("initdb"))
                .args(["-D"])
                .arg(pdir.join("data"))
                .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"]),
            "initdb",
        )?;
        let pg = Postgres::start(programs, node, &pdir, &pdir.join("data"))?;
        output(
            Command::new(&programs.pgbench)
                .args(["-i", "-q", "-s", &sizes.pg_scale.to_string()])
                .args(pg.connection())
                .arg("postgres"),
            "pgbench -i",
        )?;
        pg.stop(programs)?;
        node.drop_container(&pg.container);
        let pg_bytes = dir_size(&pdir.join("data"));
        say(&format!("template: PostgreSQL data {} MiB", pg_bytes / MIB));
        Ok(Templates { dir: dir.to_path_buf(), sizes, redis_keys, pg_bytes })
    }

    /// Starts both services for a scene in `scene` (a fresh directory).
    pub fn start(
        &self,
        programs: &Programs,
        node: &mut BenchNode,
        scene: &Path,
    ) -> Result<(Redis, Postgres), String> {
        let rdir = scene.join("redis");
        std::fs::create_dir_all(&rdir).map_err(|e| format!("{}: {e}", rdir.display()))?;
        let redis = Redis::start(programs, node, &rdir, Some(&self.dir.join("redis")))?;
        let pdir = scene.join("pg");
        let (uid, gid) = postgres_ids()?;
        // Copied from inside production's container: the page cache the
        // copy leaves is charged to it, as a database's own reads would be.
        let container = node.container("prod-pg")?;
        let mut cp = overbook_agent::spawn::command_in(
            &*node.cg,
            &container,
            "cp",
            [OsStr::new("-a"), self.dir.join("pg").as_os_str(), pdir.as_os_str()],
        )
        .map_err(|e| e.to_string())?;
        output(&mut cp, "copying the PostgreSQL template")?;
        chown_tree(&pdir, uid, gid)?;
        let pg = Postgres::start(programs, node, &pdir, &pdir.join("data"))?;
        Ok((redis, pg))
    }
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

/// A Redis server in container `prod-redis`, on a unix socket.
#[derive(Debug)]
pub struct Redis {
    pub socket: PathBuf,
    pub container: overbook_linux::ContainerPath,
}

impl Redis {
    /// Starts it in `dir`, loading `rdb_dir/dump.rdb` when given.
    fn start(
        programs: &Programs,
        node: &mut BenchNode,
        dir: &Path,
        rdb_dir: Option<&Path>,
    ) -> Result<Redis, String> {
        let socket = dir.join("redis.sock");
        let data_dir = rdb_dir.unwrap_or(dir);
        let args: Vec<String> = vec![
            "-n".into(),
            programs.prod_oom_score_adj.to_string(),
            "--".into(),
            programs.redis_server.display().to_string(),
            "--port".into(),
            "0".into(),
            "--unixsocket".into(),
            socket.display().to_string(),
            "--unixsocketperm".into(),
            "700".into(),
            // Reads the template's dump at start, never writes one.
            "--dir".into(),
            data_dir.display().to_string(),
            "--save".into(),
            "".into(),
            "--appendonly".into(),
            "no".into(),
            "--databases".into(),
            "2".into(),
        ];
        node.spawn_quiet("prod-redis", &programs.choom.display().to_string(), &args)?;
        let container = node.container("prod-redis")?;
        let r = Redis { socket, container };
        until(Duration::from_secs(120), "redis-server", || {
            r.cli(programs, &["PING"]).is_ok_and(|o| o.trim() == "PONG")
        })?;
        Ok(r)
    }

    pub fn cli(&self, programs: &Programs, args: &[&str]) -> Result<String, String> {
        output(
            Command::new(&programs.redis_cli).arg("-s").arg(&self.socket).args(args),
            &format!("redis-cli {}", args.join(" ")),
        )
    }

    /// The cache fill: `bytes` of new objects in database 1, sent as `SET`s
    /// over one connection (a cache being warmed by its client). Under
    /// emulation a redis-cli per object took ~1 s to start, and
    /// redis-benchmark's values are one byte repeated, which zram stores
    /// for nothing; these bytes are pseudo-random, so swapping them costs
    /// what it would. The fill is paced to take `pace` (it runs faster than
    /// that only if it was behind): at full speed it keeps a CPU busy, and
    /// on a small machine its CPU would make production's latency vary
    /// from scene to scene for reasons that are not memory. The thread's
    /// answer is the fill's time, seconds.
    pub fn fill(&self, bytes: u64, pace: Duration) -> JoinHandle<Result<f64, String>> {
        let socket = self.socket.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let started = Instant::now();
            let what = |e: std::io::Error| format!("Redis cache fill ({}): {e}", socket.display());
            let mut conn = std::os::unix::net::UnixStream::connect(&socket).map_err(what)?;
            conn.write_all(b"*2\r\n$6\r\nSELECT\r\n$1\r\n1\r\n").map_err(what)?;
            expect_ok(&mut conn)?;
            let mut value = vec![0u8; overbook_core::convert::u64_to_usize(FILL_OBJECT)];
            let mut rng = crate::workload::XorShift(0x9e37_79b9_7f4a_7c15);
            let objects = (bytes / FILL_OBJECT).max(1);
            for i in 0..objects {
                // The pace of the fill, not a wait for an event.
                let due = pace.mul_f64(i as f64 / objects as f64);
                std::thread::sleep(due.saturating_sub(started.elapsed()));
                for chunk in value.chunks_exact_mut(8) {
                    chunk.copy_from_slice(&rng.next().to_le_bytes());
                }
                let key = format!("fill:{i}");
                let head =
                    format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n", key.len(), value.len());
                conn.write_all(head.as_bytes()).map_err(what)?;
                conn.write_all(&value).map_err(what)?;
                conn.write_all(b"\r\n").map_err(what)?;
                expect_ok(&mut conn)?;
            }
            Ok(started.elapsed().as_secs_f64())
        })
    }

    /// Drops the fill and gives its memory back to the kernel.
    pub fn drop_fill(&self, programs: &Programs) -> Result<(), String> {
        self.cli(programs, &["-n", "1", "FLUSHDB"])?;
        self.cli(programs, &["MEMORY", "PURGE"])?;
        Ok(())
    }
}

/// A PostgreSQL server in container `prod-pg`, on a unix socket directory.
#[derive(Debug)]
pub struct Postgres {
    socket_dir: PathBuf,
    data: PathBuf,
    pub container: overbook_linux::ContainerPath,
}

impl Postgres {
    fn start(
        programs: &Programs,
        node: &mut BenchNode,
        socket_dir: &Path,
        data: &Path,
    ) -> Result<Postgres, String> {
        let adj = programs.prod_oom_score_adj.to_string();
        let args: Vec<String> = [
            "-n",
            &adj,
            "--",
            &programs.setpriv.display().to_string(),
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            &programs.pg_bin.join("postgres").display().to_string(),
            "-D",
            &data.display().to_string(),
            "-k",
            &socket_dir.display().to_string(),
            "-c",
            "listen_addresses=",
            // Small shared buffers: the working set lives in the page
            // cache, where the kernel can take it (000 §5.4).
            "-c",
            "shared_buffers=16MB",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "max_connections=20",
            // Little WAL: the load reads; the tables are the data.
            "-c",
            "wal_level=minimal",
            "-c",
            "max_wal_senders=0",
            "-c",
            "max_wal_size=64MB",
            "-c",
            "min_wal_size=32MB",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        node.spawn_quiet("prod-pg", &programs.choom.display().to_string(), &args)?;
        let container = node.container("prod-pg")?;
        let pg =
            Postgres { socket_dir: socket_dir.to_path_buf(), data: data.to_path_buf(), container };
        until(Duration::from_secs(180), "postgres", || {
            Command::new(&programs.pg_isready)
                .args(pg.connection())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })?;
        Ok(pg)
    }

    /// `pgbench`/`psql` arguments that reach it.
    pub fn connection(&self) -> Vec<String> {
        vec!["-h".into(), self.socket_dir.display().to_string(), "-U".into(), "postgres".into()]
    }

    fn stop(&self, programs: &Programs) -> Result<(), String> {
        output(
            Command::new(&programs.setpriv)
                .args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
                .arg(programs.pg_bin.join("pg_ctl"))
                .arg("-D")
                .arg(&self.data)
                .args(["-m", "fast", "-w", "stop"]),
            "pg_ctl stop",
        )
        .map(drop)
    }
}

/// What a load driver measured.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub requests: u64,
    /// Seconds the driver was sending requests (Redis: the rounds' own
    /// times, as redis-benchmark reports them; PostgreSQL: pgbench's run).
    pub busy_s: f64,
    /// Latencies by the scene's phases ([`super::Phase`]): before the cache
    /// fill, during it, after it. The whole scene's is their merge.
    pub phases: [Histogram; 3],
    /// Transactions and slow ones by window from the driver's start
    /// (PostgreSQL's; Redis's driver reports only its rounds' histograms).
    pub windows: super::latency::Windows,
    /// Rounds (or runs) the driver could not complete: the service died or
    /// stopped answering. The scene goes on; the report shows them.
    pub failures: Vec<String>,
}

/// Rounds of Redis's load a second.
pub const REDIS_ROUNDS: u32 = 10;
const REDIS_ROUND: Duration = Duration::from_millis(1000 / REDIS_ROUNDS as u64);

/// Redis's load: `redis-benchmark` GETs over the base keys in rounds of
/// `per_round` requests, [`REDIS_ROUNDS`] rounds a second (a service with
/// idle time, so best-effort work has CPU to run on), until stopped. Short
/// rounds, often: one long round a second held both CPUs of a small
/// machine for a fifth of a second, and PostgreSQL's tail was then that
/// round's length.
pub fn redis_load(
    programs: &Programs,
    redis: &Redis,
    keys: u64,
    per_round: u64,
    seconds: u64,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Result<Measured, String>> {
    let (bench, socket) = (programs.redis_benchmark.clone(), redis.socket.clone());
    std::thread::spawn(move || {
        let mut m = Measured::default();
        let started = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let round = Instant::now();
            let phase = super::Phase::at(started.elapsed().as_secs_f64(), seconds);
            let measured = output(
                Command::new(&bench)
                    .arg("-s")
                    .arg(&socket)
                    .args(["-t", "get", "-c", "4", "-r", &keys.to_string()])
                    .args(["-n", &per_round.to_string()]),
                "redis-benchmark (GET load)",
            )
            .and_then(|out| super::latency::redis_benchmark_histogram(&out));
            match measured {
                Ok((h, n, seconds)) => {
                    m.busy_s += seconds;
                    m.requests += n;
                    m.phases[phase as usize].merge(&h);
                }
                Err(e) => m.failures.push(e),
            }
            // The pace of the load, not a wait for an event.
            std::thread::sleep(REDIS_ROUND.saturating_sub(round.elapsed()));
        }
        Ok(m)
    })
}

/// PostgreSQL's load: `pgbench -S` (read-only) throttled to `rate`
/// transactions a second for `seconds`, every transaction's latency logged
/// (from its scheduled start, so a stall counts in full).
pub fn pg_load(
    programs: &Programs,
    pg: &Postgres,
    rate: f64,
    seconds: u64,
    logs: &Path,
) -> JoinHandle<Result<Measured, String>> {
    let mut cmd = Command::new(&programs.pgbench);
    cmd.args(["-S", "-n", "-c", "4", "-j", "2"])
        .args(["-R", &format!("{rate:.0}"), "-T", &seconds.to_string()])
        .arg("-l")
        .arg(format!("--log-prefix={}", logs.join("pgbench").display()))
        .args(pg.connection())
        .arg("postgres");
    let logs = logs.to_path_buf();
    std::thread::spawn(move || {
        let started = Instant::now();
        let start_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let phase_of = |end_us: u64| {
            let elapsed = end_us.saturating_sub(start_us) as f64 / 1e6;
            super::Phase::at(elapsed, seconds) as usize
        };
        let run = output(&mut cmd, "pgbench (select-only load)");
        let busy_s = started.elapsed().as_secs_f64();
        let mut m = Measured { busy_s, ..Measured::default() };
        if let Err(e) = run {
            m.failures.push(e);
        }
        let entries = std::fs::read_dir(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
        for e in entries.filter_map(Result::ok) {
            if e.file_name().to_string_lossy().starts_with("pgbench") {
                let text = std::fs::read_to_string(e.path())
                    .map_err(|err| format!("{}: {err}", e.path().display()))?;
                let log = super::latency::pgbench_log(&text, start_us, &phase_of)
                    .map_err(|err| format!("{}: {err}", e.path().display()))?;
                m.requests += log.transactions;
                for (all, h) in m.phases.iter_mut().zip(&log.phases) {
                    all.merge(h);
                }
                m.windows.merge(&log.windows);
            }
        }
        Ok(m)
    })
}

/// The highest rate `pgbench -S` reaches on the node alone, for throttling.
pub fn pg_capacity(programs: &Programs, pg: &Postgres, seconds: u64) -> Result<f64, String> {
    let out = output(
        Command::new(&programs.pgbench)
            .args(["-S", "-n", "-c", "4", "-j", "2", "-T", &seconds.to_string()])
            .args(pg.connection())
            .arg("postgres"),
        "pgbench (capacity)",
    )?;
    out.lines()
        .find_map(|l| {
            let rest = l.strip_prefix("tps = ")?;
            rest.split_whitespace().next()?.parse::<f64>().ok()
        })
        .ok_or_else(|| format!("pgbench printed no `tps = ` line: {}", out.trim()))
}
