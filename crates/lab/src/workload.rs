//! Real memory workloads for tests, the demo and benchmarks: a best-effort
//! "hog" that holds anonymous memory and touches it at random, and a
//! production-like reader whose working set is a file in the page cache.
//!
//! Why our own: thrashing must be real (the kernel evicting and faulting
//! back pages of a process that needs them), measured as the workload's
//! own throughput, with nothing to install. Each prints `ready` once its
//! whole working set has been touched, then `rate <touches per second>`
//! every second, so a test waits for the line instead of sleeping.
//!
//! Three paces shape a container's memory demand as the kernel sees it
//! (001's scenario needs all three): `--ramp` grows to the size at a given
//! rate (a booting container), `--idle` holds the memory untouched after
//! `ready` (a container that stopped using it), `--fresh` keeps writing
//! new pages past the file's working set at a given rate (a database
//! taking in new data: a steady page demand, seen as usage growth on a disk
//! and on tmpfs alike).

use overbook_agent::config::parse_size_text;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PAGE: usize = 4096;

/// How the workload program is called.
pub const USAGE: &str = "anon SIZE [SECONDS] [--ramp RATE] [--idle] | \
file PATH SIZE [SECONDS] [--idle] [--fresh RATE] | \
chain SIZE STEPS [--pace SECONDS] [--dirty FRACTION] [--gate FILE]  (RATE: bytes per second, e.g. 32M)";

/// Where the working set lives.
#[derive(Clone, Debug, PartialEq)]
pub enum Memory {
    /// Anonymous memory.
    Anon,
    /// Pages of this file, in the page cache (made `size` bytes long if it
    /// is shorter).
    File(PathBuf),
    /// A hash chain over anonymous memory with an answer
    /// ([`crate::chain`]): work a checkpoint must keep.
    Chain(crate::chain::Chain),
}

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub memory: Memory,
    /// The working set, bytes.
    pub size: u64,
    /// How long to run after `ready` (until killed if `None`).
    pub hold: Option<Duration>,
    /// Touch the working set once, then leave it untouched.
    pub idle: bool,
    /// Anon only: grow to `size` at this many bytes per second.
    pub ramp: Option<u64>,
    /// File only: besides reading the working set, write this many bytes
    /// per second of new pages past it (in order, up to three times `size`,
    /// then again from the start of that region).
    pub fresh: Option<u64>,
}

impl Workload {
    /// Held anonymous memory touched at random, until killed.
    pub fn anon(size: u64) -> Workload {
        Workload { memory: Memory::Anon, size, hold: None, idle: false, ramp: None, fresh: None }
    }

    /// Parses the program's arguments (see [`USAGE`]).
    pub fn parse(args: &[String]) -> Result<Workload, String> {
        let (positional, flags): (Vec<&String>, Vec<&String>) = {
            let split = args.iter().position(|a| a.starts_with("--")).unwrap_or(args.len());
            (args[..split].iter().collect(), args[split..].iter().collect())
        };
        if positional.first().is_some_and(|k| k.as_str() == "chain") {
            return parse_chain(&positional[1..], &flags);
        }
        let (memory, rest) = match positional.split_first() {
            Some((kind, rest)) if kind.as_str() == "anon" => (Memory::Anon, rest),
            Some((kind, rest)) if kind.as_str() == "file" && !rest.is_empty() => {
                (Memory::File(PathBuf::from(rest[0])), &rest[1..])
            }
            _ => return Err(format!("expected `anon ...` or `file PATH ...`, got {args:?}")),
        };
        let (size, hold) = match rest {
            [size] => (size, None),
            [size, seconds] => (size, Some(seconds_of(seconds)?)),
            _ => return Err(format!("expected SIZE [SECONDS] after the kind, got {rest:?}")),
        };
        let mut w = Workload { memory, size: parse_size_text(size)?, hold, ..Workload::anon(0) };
        let mut it = flags.into_iter();
        while let Some(flag) = it.next() {
            let mut rate = || -> Result<u64, String> {
                let v = it.next().ok_or_else(|| format!("{flag} needs a rate, e.g. 32M"))?;
                parse_size_text(v).map_err(|e| format!("{flag}: {e}"))
            };
            match (flag.as_str(), &w.memory) {
                ("--idle", _) => w.idle = true,
                ("--ramp", Memory::Anon) => w.ramp = Some(rate()?),
                ("--fresh", Memory::File(_)) => w.fresh = Some(rate()?),
                (other, _) => return Err(format!("{other:?} is not an option of this workload")),
            }
        }
        Ok(w)
    }
}

/// `chain SIZE STEPS [--pace SECONDS] [--dirty FRACTION] [--gate FILE]`.
fn parse_chain(positional: &[&String], flags: &[&String]) -> Result<Workload, String> {
    let [size, steps] = positional else {
        return Err(format!("expected `chain SIZE STEPS`, got {positional:?}"));
    };
    let size = parse_size_text(size)?;
    let steps = steps.parse().map_err(|_| format!("{steps:?} is not a number of steps"))?;
    let mut chain =
        crate::chain::Chain { size, steps, dirty: 1.0, pace: Duration::ZERO, gate: None };
    let mut it = flags.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--pace" => chain.pace = seconds_of(value)?,
            "--gate" => chain.gate = Some(std::path::PathBuf::from(value.as_str())),
            "--dirty" => {
                chain.dirty = value
                    .parse::<f64>()
                    .ok()
                    .filter(|d| *d > 0.0 && *d <= 1.0)
                    .ok_or_else(|| format!("--dirty {value:?} is not a share in (0, 1]"))?
            }
            other => return Err(format!("{other:?} is not an option of chain")),
        }
    }
    Ok(Workload { memory: Memory::Chain(chain), size, ..Workload::anon(0) })
}

fn seconds_of(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x > 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{s:?} is not a positive number of seconds"))
}

/// A small, fast generator; the pattern only has to defeat the kernel's
/// readahead and LRU, not be unpredictable.
pub(crate) struct XorShift(pub(crate) u64);

impl XorShift {
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Runs the workload, writing `ready` and `rate` lines to `out`.
pub fn run(w: &Workload, out: &mut dyn Write) -> io::Result<()> {
    match &w.memory {
        Memory::Anon => anon(w, out),
        Memory::File(path) => file(path, w, out),
        Memory::Chain(chain) => chain.run(out).map(drop),
    }
}

fn pages_of(size: u64) -> io::Result<usize> {
    let pages = usize::try_from(size).map_err(|_| io::Error::other("size too large"))? / PAGE;
    if pages == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "size must be at least 4 KiB"));
    }
    Ok(pages)
}

/// Sleeps until `done` bytes are due at `rate` since `start`: pacing, not
/// synchronization.
fn pace(start: Instant, rate: Option<u64>, done: u64) {
    let Some(rate) = rate.filter(|r| *r > 0) else { return };
    let due = Duration::from_secs_f64(done as f64 / rate as f64);
    if let Some(wait) = due.checked_sub(start.elapsed()) {
        std::thread::sleep(wait);
    }
}

fn anon(w: &Workload, out: &mut dyn Write) -> io::Result<()> {
    let pages = pages_of(w.size)?;
    let mut memory = vec![0u8; pages * PAGE];
    let start = Instant::now();
    for p in 0..pages {
        memory[p * PAGE] = 1;
        if p % 64 == 63 {
            pace(start, w.ramp, (p as u64 + 1) * PAGE as u64);
        }
    }
    writeln!(out, "ready")?;
    out.flush()?;
    if w.idle {
        return idle(w.hold);
    }
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    touch_loop(w.hold, out, || {
        let p = overbook_core::convert::u64_to_usize(rng.next() % pages as u64);
        memory[p * PAGE] = memory[p * PAGE].wrapping_add(1);
        Ok(())
    })
}

/// Writes `len` bytes at `from` into `f` if it is shorter than `from + len`.
fn fill(f: &File, from: u64, len: u64) -> io::Result<()> {
    if f.metadata()?.len() >= from + len {
        return Ok(());
    }
    let chunk = vec![7u8; 1 << 20];
    let mut at = from;
    while at < from + len {
        let n = chunk.len().min(overbook_core::convert::u64_to_usize(from + len - at));
        f.write_all_at(&chunk[..n], at)?;
        at += n as u64;
    }
    f.sync_all()
}

fn file(path: &Path, w: &Workload, out: &mut dyn Write) -> io::Result<()> {
    use rustix::fs::{fadvise, Advice};
    let pages = pages_of(w.size)?;
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
    // What an earlier run appended is not part of the working set.
    if f.metadata()?.len() > w.size {
        f.set_len(w.size)?;
    }
    fill(&f, 0, w.size)?;
    // Every page must come from the disk when this process reads it, so it
    // is charged to this container, not to whoever cached it before (the
    // file's writer, an earlier run).
    fadvise(&f, 0, None, Advice::DontNeed)?;
    // Each read is one page: readahead would charge pages nobody asked for.
    fadvise(&f, 0, None, Advice::Random)?;
    let mut page = [0u8; PAGE];
    for p in 0..pages {
        f.read_exact_at(&mut page, (p * PAGE) as u64)?;
    }
    writeln!(out, "ready")?;
    out.flush()?;
    if w.idle {
        return idle(w.hold);
    }
    let mut rng = XorShift(0xD1B5_4A32_D192_ED03);
    let start = Instant::now();
    let mut fresh_written = 0u64;
    let fresh_rate = w.fresh.unwrap_or(0) as f64;
    let fresh_page = [5u8; PAGE];
    touch_loop(w.hold, out, || {
        let p = rng.next() % pages as u64;
        f.read_exact_at(&mut page, p * PAGE as u64)?;
        while (fresh_written as f64) < start.elapsed().as_secs_f64() * fresh_rate / PAGE as f64 {
            let at = w.size + (fresh_written % (3 * pages as u64)) * PAGE as u64;
            f.write_all_at(&fresh_page, at)?;
            fresh_written += 1;
        }
        Ok(())
    })
}

/// Holds what was touched, touching nothing more, for `hold` or until killed.
fn idle(hold: Option<Duration>) -> io::Result<()> {
    let start = Instant::now();
    loop {
        match hold {
            Some(h) if start.elapsed() >= h => return Ok(()),
            Some(h) => std::thread::sleep(h - start.elapsed()),
            None => std::thread::sleep(Duration::from_secs(3600)),
        }
    }
}

/// Calls `touch` until `hold` is over, reporting the rate every second.
fn touch_loop(
    hold: Option<Duration>,
    out: &mut dyn Write,
    mut touch: impl FnMut() -> io::Result<()>,
) -> io::Result<()> {
    let start = Instant::now();
    let mut window = Instant::now();
    let mut count: u64 = 0;
    loop {
        for _ in 0..256 {
            touch()?;
        }
        count += 256;
        let elapsed = window.elapsed();
        if elapsed >= Duration::from_secs(1) {
            writeln!(out, "rate {:.0}", count as f64 / elapsed.as_secs_f64())?;
            out.flush()?;
            count = 0;
            window = Instant::now();
        }
        if hold.is_some_and(|h| start.elapsed() >= h) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn both_workloads_get_ready_and_report_rates() {
        let mut out = Vec::new();
        let hold = Some(Duration::from_millis(1100));
        run(&Workload { hold, ..Workload::anon(1 << 20) }, &mut out).expect("anon runs");
        let text = String::from_utf8_lossy(&out).to_string();
        assert!(text.starts_with("ready\nrate "), "{text}");

        let dir = tempfile::tempdir().expect("temp dir");
        let mut out = Vec::new();
        let path = dir.path().join("ws");
        let w = Workload {
            memory: Memory::File(path.clone()),
            hold,
            fresh: Some(1 << 20),
            ..Workload::anon(1 << 20)
        };
        run(&w, &mut out).expect("file runs");
        let len = std::fs::metadata(&path).expect("made").len();
        assert!(len > 1 << 20, "about 1 MiB/s written past the working set: {len}");
        let text = String::from_utf8_lossy(&out).to_string();
        assert!(text.starts_with("ready\nrate "), "{text}");
    }

    #[test]
    fn an_idle_ramped_workload_is_ready_then_quiet() {
        let mut out = Vec::new();
        let w = Workload {
            hold: Some(Duration::from_millis(50)),
            idle: true,
            ramp: Some(64 << 20),
            ..Workload::anon(1 << 20)
        };
        run(&w, &mut out).expect("runs");
        assert_eq!(String::from_utf8_lossy(&out), "ready\n");
    }

    #[test]
    fn arguments_parse_and_bad_ones_are_named() {
        let w = Workload::parse(&args("anon 64M 2.5 --ramp 32M --idle")).expect("ok");
        assert_eq!(
            w,
            Workload {
                hold: Some(Duration::from_millis(2500)),
                idle: true,
                ramp: Some(32 << 20),
                ..Workload::anon(64 << 20)
            }
        );
        let w = Workload::parse(&args("file /tmp/x 8M --fresh 1M")).expect("ok");
        assert_eq!((w.memory, w.fresh), (Memory::File("/tmp/x".into()), Some(1 << 20)));
        for (bad, says) in [
            ("anon", "SIZE"),
            ("file 8M", "SIZE"),
            ("anon 8M --fresh 1M", "--fresh"),
            ("anon 8M --ramp", "needs a rate"),
            ("anon 8M -1", "seconds"),
            ("disk 8M", "expected"),
            ("anon 8M 1 2", "SIZE [SECONDS]"),
        ] {
            let e = Workload::parse(&args(bad)).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_size_below_a_page_is_refused() {
        let err = run(&Workload::anon(100), &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("4 KiB"));
    }
}
