//! The simulator's heap on transparent huge pages.
//!
//! Why: a large simulation spends much of its time waiting on memory for
//! task state scattered over hundreds of MiB, and with 4 KiB pages many of
//! those waits are TLB misses (two-level walks in a guest). glibc's
//! allocator asks the kernel for huge pages when told to by its tunable
//! `glibc.malloc.hugetlb=1`, which is read only when the process starts:
//! so `overbook sim` and `overbook bench sim` run themselves again with it
//! set. Measured at 12,500 nodes (`overbook bench sim`, README "Speed"):
//! about a tenth faster, for under 1% more peak memory. Results do not
//! depend on where memory lies, so every output stays the same.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// `0` runs with the allocator's defaults; `1`, or unset, asks for huge
/// pages.
pub const OPT_OUT: &str = "OVERBOOK_HUGE_PAGES";
const TUNABLES: &str = "GLIBC_TUNABLES";
const TUNABLE: &str = "glibc.malloc.hugetlb";

/// Whether this process's allocator uses huge pages, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HugePages {
    /// With the tunable's value (`1`: transparent huge pages; `2`:
    /// hugetlbfs pages reserved by the administrator).
    On(String),
    Off(Off),
}

/// Why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Off {
    NotGlibc,
    OptedOut,
    /// `OVERBOOK_HUGE_PAGES` is neither `0` nor `1`.
    BadSetting(String),
    KernelNever,
    KernelHasNone,
    KernelUnreadable(String),
    TunableZero,
    /// The only case a second run changes.
    TunableUnset,
}

impl std::fmt::Display for HugePages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self {
            HugePages::On(value) => return write!(f, "on ({TUNABLES}: {TUNABLE}={value})"),
            HugePages::Off(why) => why,
        };
        match why {
            Off::NotGlibc => write!(f, "off (not built on glibc)"),
            Off::OptedOut => write!(f, "off ({OPT_OUT}=0)"),
            Off::BadSetting(v) => write!(f, "off ({OPT_OUT}={v:?} is neither 0 nor 1)"),
            Off::KernelNever => write!(f, "off (the kernel's transparent huge pages are `never`)"),
            Off::KernelHasNone => write!(f, "off (the kernel has no transparent huge pages)"),
            Off::KernelUnreadable(e) => write!(f, "off ({e})"),
            Off::TunableZero => write!(f, "off ({TUNABLES} sets {TUNABLE}=0)"),
            Off::TunableUnset => write!(f, "off ({TUNABLES} does not set {TUNABLE})"),
        }
    }
}

/// What this process runs with.
pub fn state() -> HugePages {
    use overbook_linux::host::{transparent_huge_pages, TransparentHugePages as Thp};
    if !cfg!(target_env = "gnu") {
        return HugePages::Off(Off::NotGlibc);
    }
    match std::env::var_os(OPT_OUT) {
        None => {}
        Some(v) if v == "1" => {}
        Some(v) if v == "0" => return HugePages::Off(Off::OptedOut),
        Some(v) => return HugePages::Off(Off::BadSetting(v.to_string_lossy().into_owned())),
    }
    match transparent_huge_pages() {
        Ok(Some(Thp::Always | Thp::Madvise)) => {}
        Ok(Some(Thp::Never)) => return HugePages::Off(Off::KernelNever),
        Ok(None) => return HugePages::Off(Off::KernelHasNone),
        Err(e) => return HugePages::Off(Off::KernelUnreadable(e.to_string())),
    }
    let tunables = std::env::var(TUNABLES).unwrap_or_default();
    match tunables.split(':').find_map(|t| t.strip_prefix(TUNABLE)?.strip_prefix('=')) {
        Some("0") => HugePages::Off(Off::TunableZero),
        Some(value) => HugePages::On(value.to_owned()),
        None => HugePages::Off(Off::TunableUnset),
    }
}

/// Run this same command again with huge pages where they would be used
/// and the allocator was not told: returns only if it does not (the run
/// then goes on here, as before, and says why if the new one could not
/// start). The user's own `GLIBC_TUNABLES` are kept, and the second run
/// finds the tunable set, so it never runs a third.
pub fn run_again_with_them() {
    match state() {
        HugePages::Off(Off::TunableUnset) => {}
        // Said at once, not only in `bench sim`'s report.
        bad @ HugePages::Off(Off::BadSetting(_)) => {
            eprintln!("overbook: huge pages {bad}");
            return;
        }
        _ => return,
    }
    let value = match std::env::var(TUNABLES) {
        Ok(t) if !t.is_empty() => format!("{t}:{TUNABLE}=1"),
        Ok(_) | Err(std::env::VarError::NotPresent) => format!("{TUNABLE}=1"),
        // Not text: left as the user set it, not overwritten.
        Err(std::env::VarError::NotUnicode(_)) => return,
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("overbook"));
    let e = Command::new("/proc/self/exe").arg0(arg0).args(args).env(TUNABLES, value).exec();
    eprintln!("overbook: running on 4 KiB pages: cannot run /proc/self/exe again: {e}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_state_says_itself() {
        let on = HugePages::On("1".into()).to_string();
        assert_eq!(on, "on (GLIBC_TUNABLES: glibc.malloc.hugetlb=1)");
        let bad = HugePages::Off(Off::BadSetting("yes".into())).to_string();
        assert!(bad.contains("OVERBOOK_HUGE_PAGES=\"yes\" is neither 0 nor 1"), "{bad}");
        let unset = HugePages::Off(Off::TunableUnset).to_string();
        assert!(unset.starts_with("off (") && unset.contains("glibc.malloc.hugetlb"), "{unset}");
        assert!(HugePages::Off(Off::OptedOut).to_string().contains("OVERBOOK_HUGE_PAGES=0"));
    }
}
