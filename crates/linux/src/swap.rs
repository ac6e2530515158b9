//! A swap file added for a demo or a benchmark, and removed after.
//!
//! Why: the thrashing the agent exists to stop needs swap to push
//! anonymous memory to, and a test machine often has none. Adding swap is
//! a change to the whole machine, so it is a guard: turned off and deleted
//! on drop, on error paths too. Formatting and turning it on use the
//! system's `mkswap` and `swapon` (`mkswap` has no syscall; `swapon(8)`
//! knows every filesystem's quirks), which need root.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::CgroupError;
use crate::host;

/// The swap file's name in the directory it is made in.
pub const FILE_NAME: &str = "overbook-demo.swap";

/// A swap file in use; turned off and deleted on drop.
#[derive(Debug)]
pub struct SwapFile {
    path: PathBuf,
}

impl SwapFile {
    /// Writes, formats and turns on a swap file of `size` bytes in `dir`
    /// (a disk, not tmpfs: the kernel swaps to no file in memory).
    pub fn add(dir: &Path, size: u64) -> Result<SwapFile, CgroupError> {
        let path = dir.join(FILE_NAME);
        let io = |op: &'static str| {
            let path = path.clone();
            move |source| CgroupError::Io { op, path, source }
        };
        let file = File::create(&path).map_err(io("create"))?;
        // From here on, a failure removes the file again.
        let made = SwapFile { path: path.clone() };
        // A swap file must have real blocks: written, not sparse.
        let chunk = vec![0u8; 1 << 20];
        let mut w = BufWriter::new(file);
        let mut left = size;
        while left > 0 {
            let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
            w.write_all(&chunk[..n]).map_err(io("write"))?;
            left -= n as u64;
        }
        let file = w.into_inner().map_err(|e| io("write")(e.into_error()))?;
        file.sync_all().map_err(io("sync"))?;
        std::fs::set_permissions(&path, PermissionsExt::from_mode(0o600)).map_err(io("chmod"))?;
        run_tool("mkswap", &path)?;
        run_tool("swapon", &path)?;
        Ok(made)
    }

    /// The swap file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SwapFile {
    fn drop(&mut self) {
        // Best effort: a swap file that cannot be turned off stays in use,
        // and the kernel refuses to free its blocks until it is.
        let _ = run_tool("swapoff", &self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Runs `tool path`; its standard error is the error when it fails.
fn run_tool(tool: &'static str, path: &Path) -> Result<(), CgroupError> {
    let failed = |problem: String| CgroupError::Tool { tool, path: path.to_path_buf(), problem };
    let out = Command::new(tool)
        .arg(path)
        .output()
        .map_err(|e| failed(format!("cannot run {tool}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(failed(String::from_utf8_lossy(&out.stderr).trim().to_owned()))
    }
}

/// Whether the machine has swap of its own (`SwapTotal` above zero).
pub fn machine_has_swap() -> Result<bool, CgroupError> {
    host::meminfo().map(|m| m.swap_total > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_whether_there_is_swap() {
        let swaps = host::swaps().expect("/proc/swaps");
        assert_eq!(machine_has_swap().expect("meminfo"), !swaps.areas.is_empty());
    }

    #[test]
    fn a_failed_add_leaves_no_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Too small to format (mkswap wants ten pages at least), so the
        // add fails whether or not this runs as root, or mkswap exists.
        let e = SwapFile::add(dir.path(), 4096).expect_err("too small");
        assert!(matches!(e, CgroupError::Tool { tool: "mkswap", .. }), "{e}");
        assert!(e.to_string().starts_with("mkswap "), "{e}");
        assert!(!dir.path().join(FILE_NAME).exists());
        let e = SwapFile::add(&dir.path().join("missing"), 4096).expect_err("no dir");
        assert!(matches!(e, CgroupError::Io { op: "create", .. }), "{e}");
    }
}
