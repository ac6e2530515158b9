//! Reading one counter from cgroupfs or procfs without allocating, for
//! loops that sample every millisecond (a benchmark's instrument timing a
//! kill).
//!
//! Why apart from [`crate::parse`]: those parsers read whole files into
//! `String`s and build typed values, which costs allocations and time an
//! instrument sampling at ~1 kHz on a squeezed machine cannot spend (an
//! allocation can stall on reclaim). Here a file is read into a buffer on
//! the stack and only the one figure wanted is taken out. An error names
//! no file, since that would allocate: the caller holds the path, and
//! [`FastReadError::at`] makes a [`CgroupError`] of both when it reports.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use crate::error::CgroupError;
use crate::parse::{ParseError, Problem};

/// Why a figure could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FastReadError {
    /// The file could not be opened or read (a vanished cgroup: `ENOENT`
    /// or `ENODEV`).
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The file is longer than the buffer it is read into.
    #[error("longer than {0} bytes")]
    TooLong(usize),
    /// The figure is not in the file, or not a number.
    #[error("the figure is not there")]
    Format,
}

impl FastReadError {
    /// The error as the rest of the crate reports it, naming `path`.
    pub fn at(self, path: &Path) -> CgroupError {
        let path = path.to_path_buf();
        match self {
            Self::Io(source) => CgroupError::Io { op: "read", path, source },
            Self::TooLong(n) => CgroupError::Parse {
                path,
                source: ParseError::whole(
                    "a sampled file",
                    Problem::Unexpected { text: format!("more than {n} bytes") },
                ),
            },
            Self::Format => CgroupError::Parse {
                path,
                source: ParseError::whole(
                    "a sampled file",
                    Problem::Missing { key: "the sampled figure" },
                ),
            },
        }
    }
}

/// Reads the whole file at `path` into `buf`; the bytes read.
pub fn read_into(path: &Path, buf: &mut [u8]) -> Result<usize, FastReadError> {
    let mut f = File::open(path)?;
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => return Ok(n),
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    // A full buffer: the file must end here, or its tail would be lost.
    let mut more = [0u8; 1];
    match f.read(&mut more)? {
        0 => Ok(n),
        _ => Err(FastReadError::TooLong(buf.len())),
    }
}

/// The number in a file of one decimal number (`memory.current`, v1
/// `memory.usage_in_bytes`).
pub fn number(path: &Path) -> Result<u64, FastReadError> {
    let mut buf = [0u8; 64];
    let n = read_into(path, &mut buf)?;
    parse_number(&buf[..n]).ok_or(FastReadError::Format)
}

/// The value of the `key N` line of a flat keyed file (`oom_kill` in
/// `memory.events` or v1 `memory.oom_control`).
pub fn keyed(path: &Path, key: &str) -> Result<u64, FastReadError> {
    let mut buf = [0u8; 1024];
    let n = read_into(path, &mut buf)?;
    parse_keyed(&buf[..n], key).ok_or(FastReadError::Format)
}

/// The `some` line's `total=` of a PSI file (`/proc/pressure/memory`,
/// v2 `memory.pressure`): microseconds some task stalled, since boot.
pub fn psi_some_total(path: &Path) -> Result<u64, FastReadError> {
    let mut buf = [0u8; 256];
    let n = read_into(path, &mut buf)?;
    parse_psi_some_total(&buf[..n]).ok_or(FastReadError::Format)
}

/// The number in the text of a one-number file.
pub fn parse_number(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.trim().parse().ok()
}

/// The value of `key` in the text of a flat keyed file.
pub fn parse_keyed(bytes: &[u8], key: &str) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?;
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next()? == key).then(|| it.next()?.parse().ok())?
    })
}

/// The `some` line's `total=` in the text of a PSI file.
pub fn parse_psi_some_total(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let some = text.lines().find(|l| l.starts_with("some "))?;
    some.split_whitespace().find_map(|f| f.strip_prefix("total="))?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        let v2 = include_bytes!("../tests/fixtures/v2/memory.current");
        assert_eq!(parse_number(v2), Some(66715648));
        let v1 = include_bytes!("../tests/fixtures/v1/memory.usage_in_bytes");
        assert!(parse_number(v1).is_some());
        assert_eq!(parse_number(b"max\n"), None);
        assert_eq!(parse_number(b""), None);
    }

    #[test]
    fn keyed_values() {
        let v1 = include_bytes!("../tests/fixtures/v1/memory.oom_control");
        assert_eq!(parse_keyed(v1, "oom_kill"), Some(0));
        assert_eq!(parse_keyed(v1, "under_oom"), Some(0));
        let v2 = include_bytes!("../tests/fixtures/v2/memory.events");
        assert!(parse_keyed(v2, "oom_kill").is_some());
        assert_eq!(parse_keyed(b"oom_kill_disable 1\noom_kill 7\n", "oom_kill"), Some(7));
        assert_eq!(parse_keyed(b"oom 1\n", "oom_kill"), None);
    }

    #[test]
    fn psi_totals() {
        let sys = include_bytes!("../tests/fixtures/proc/pressure-memory");
        assert!(parse_psi_some_total(sys).is_some());
        let text = b"some avg10=0.00 avg60=0.01 avg300=0.45 total=4797877\n\
                     full avg10=0.00 avg60=0.00 avg300=0.08 total=1139251\n";
        assert_eq!(parse_psi_some_total(text), Some(4797877));
        assert_eq!(parse_psi_some_total(b"full total=3\n"), None);
    }

    #[test]
    fn reads_files_and_sorts_failures() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("memory.current");
        std::fs::write(&file, "4096\n").expect("write");
        assert_eq!(number(&file).expect("reads"), 4096);
        std::fs::write(&file, "oom 1\noom_kill 2\n").expect("write");
        assert_eq!(keyed(&file, "oom_kill").expect("reads"), 2);
        assert!(matches!(number(&file), Err(FastReadError::Format)));
        std::fs::write(&file, format!("{}7", "0".repeat(63))).expect("write");
        assert_eq!(number(&file).expect("fills the buffer exactly"), 7);
        std::fs::write(&file, "0".repeat(65)).expect("write");
        assert!(matches!(number(&file), Err(FastReadError::TooLong(64))));
        let gone = dir.path().join("gone");
        let e = number(&gone).expect_err("missing");
        assert!(matches!(&e, FastReadError::Io(io) if io.kind() == io::ErrorKind::NotFound));
        let e = e.at(&gone).to_string();
        assert!(e.starts_with(&format!("read {}", gone.display())), "{e}");
        let e = FastReadError::Format.at(&file).to_string();
        assert!(e.starts_with(&file.display().to_string()), "{e}");
    }

    #[test]
    fn reads_this_machines_pressure() {
        // Kernels without PSI have no such file; this host has one.
        let path = Path::new(crate::host::SYSTEM_PRESSURE);
        if path.exists() {
            psi_some_total(path).expect("some total");
        }
    }
}
