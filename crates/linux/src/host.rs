//! Node-wide figures from procfs: memory and swap (`/proc/meminfo`) and
//! memory pressure (`/proc/pressure/memory`).
//!
//! Why apart from the cgroup traits: they describe the machine, not a
//! container, and are the same whatever the cgroup version.

use std::path::Path;

use crate::error::CgroupError;
use crate::fsio;
use crate::parse::{MemInfo, Pressure};

/// System-wide PSI for memory.
pub const SYSTEM_PRESSURE: &str = "/proc/pressure/memory";

/// The machine's memory and swap.
pub fn meminfo() -> Result<MemInfo, CgroupError> {
    read_host(Path::new(MemInfo::FILE), MemInfo::parse)
}

/// The machine's memory pressure, or `None` where the kernel has no PSI
/// (built without it, or booted with `psi=0`).
pub fn system_pressure() -> Result<Option<Pressure>, CgroupError> {
    let path = Path::new(SYSTEM_PRESSURE);
    match std::fs::read_to_string(path) {
        Ok(text) => fsio::parse_at(path, &text, Pressure::parse).map(Some),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::EOPNOTSUPP)) => {
            Ok(None)
        }
        Err(source) => Err(CgroupError::Io { op: "read", path: path.to_path_buf(), source }),
    }
}

fn read_host<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, crate::parse::ParseError>,
) -> Result<T, CgroupError> {
    let text = std::fs::read_to_string(path).map_err(|source| CgroupError::Io {
        op: "read",
        path: path.to_path_buf(),
        source,
    })?;
    fsio::parse_at(path, &text, parse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_has_meminfo() {
        let m = meminfo().expect("/proc/meminfo reads");
        assert!(m.total > 0);
        assert!(m.available_or_free() <= m.total);
    }
}
