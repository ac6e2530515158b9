//! Real memory workloads for tests, the demo and benchmarks: a best-effort
//! "hog" that holds anonymous memory and touches it at random, and a
//! production-like reader whose working set is a file in the page cache.
//!
//! Why our own: thrashing must be real (the kernel evicting and faulting
//! back pages of a process that needs them), measured as the workload's
//! own throughput, with nothing to install. Each prints `ready` once its
//! whole working set has been touched, then `rate <touches per second>`
//! every second, so a test waits for the line instead of sleeping.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

const PAGE: usize = 4096;

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    /// Hold `size` bytes of anonymous memory and touch random pages,
    /// for `hold` (or until killed).
    Anon { size: u64, hold: Option<Duration> },
    /// Read random pages of the file at `path` (made `size` bytes long if it
    /// is shorter), for `hold` (or until killed).
    File { path: std::path::PathBuf, size: u64, hold: Option<Duration> },
}

/// A small, fast generator; the pattern only has to defeat the kernel's
/// readahead and LRU, not be unpredictable.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Runs the workload, writing `ready` and `rate` lines to `out`.
pub fn run(workload: &Workload, out: &mut dyn Write) -> io::Result<()> {
    match workload {
        Workload::Anon { size, hold } => anon(*size, *hold, out),
        Workload::File { path, size, hold } => file(path, *size, *hold, out),
    }
}

fn pages_of(size: u64) -> io::Result<usize> {
    let pages = usize::try_from(size).map_err(|_| io::Error::other("size too large"))? / PAGE;
    if pages == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "size must be at least 4 KiB"));
    }
    Ok(pages)
}

fn anon(size: u64, hold: Option<Duration>, out: &mut dyn Write) -> io::Result<()> {
    let pages = pages_of(size)?;
    let mut memory = vec![0u8; pages * PAGE];
    for p in 0..pages {
        memory[p * PAGE] = 1;
    }
    writeln!(out, "ready")?;
    out.flush()?;
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    touch_loop(hold, out, || {
        let p = (rng.next() % pages as u64) as usize;
        memory[p * PAGE] = memory[p * PAGE].wrapping_add(1);
        Ok(())
    })
}

fn file(path: &Path, size: u64, hold: Option<Duration>, out: &mut dyn Write) -> io::Result<()> {
    let pages = pages_of(size)?;
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
    if f.metadata()?.len() < size {
        let chunk = vec![7u8; 1 << 20];
        let mut at = 0u64;
        while at < size {
            let n = chunk.len().min((size - at) as usize);
            f.write_all_at(&chunk[..n], at)?;
            at += n as u64;
        }
        f.sync_all()?;
    }
    let f = File::open(path)?;
    let mut page = [0u8; PAGE];
    for p in 0..pages {
        f.read_exact_at(&mut page, (p * PAGE) as u64)?;
    }
    writeln!(out, "ready")?;
    out.flush()?;
    let mut rng = XorShift(0xD1B5_4A32_D192_ED03);
    touch_loop(hold, out, || {
        let p = rng.next() % pages as u64;
        f.read_exact_at(&mut page, p * PAGE as u64)
    })
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

    #[test]
    fn both_workloads_get_ready_and_report_rates() {
        let mut out = Vec::new();
        let hold = Some(Duration::from_millis(1100));
        run(&Workload::Anon { size: 1 << 20, hold }, &mut out).expect("anon runs");
        let text = String::from_utf8_lossy(&out).to_string();
        assert!(text.starts_with("ready\nrate "), "{text}");

        let dir = tempfile::tempdir().expect("temp dir");
        let mut out = Vec::new();
        let path = dir.path().join("ws");
        run(&Workload::File { path: path.clone(), size: 1 << 20, hold }, &mut out)
            .expect("file runs");
        assert_eq!(std::fs::metadata(&path).expect("made").len(), 1 << 20);
        let text = String::from_utf8_lossy(&out).to_string();
        assert!(text.starts_with("ready\nrate "), "{text}");
    }

    #[test]
    fn a_size_below_a_page_is_refused() {
        let err = run(&Workload::Anon { size: 100, hold: None }, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("4 KiB"));
    }
}
