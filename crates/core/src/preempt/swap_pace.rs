//! How fast this node really pushes a frozen container's memory out to
//! swap, learned from its own swap-outs.
//!
//! The `production-first` preemptor opens a freeze-and-swap-out to a
//! stalled production container only if the memory is out within its wait,
//! so the pace it is told decides between keeping a victim's work and
//! killing it. A configured pace is a guess, and the obvious measure is the
//! wrong one: told the pace its swap file was written at sequentially
//! (1.7 GB/s), the agent froze victims as fitting in 0.5 s whose swap-outs
//! then took 0.2 to 1.6 s, while PostgreSQL waited (README, Production
//! first). Scattered pages pushed out by reclaim go slower than a
//! sequential write, so the node's own swap-outs are the measure.
//!
//! The estimate averages seconds per byte, not bytes per second: one slow
//! swap-out then weighs as much as the time it cost, and a pace promised too
//! fast makes production wait, where one promised too slow only kills a
//! victim that could have been kept.

use crate::model::Bytes;
use std::time::Duration;

/// Smallest swap-out that says anything of the disk: below it the fixed
/// costs (the freeze settling, the thread, the first reclaim pass) dominate.
pub const MIN_SAMPLE: Bytes = 16 << 20;

/// Weight of the newest swap-out in the average: the pace follows a disk
/// that got busier within a few swap-outs, and one odd swap-out moves it by
/// less than half.
const NEWEST_WEIGHT: f64 = 0.3;

/// The node's swap pace: the configured one until a swap-out has been
/// timed, then what the swap-outs showed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SwapPace {
    /// Seconds per byte, averaged over the swap-outs seen.
    secs_per_byte: f64,
    samples: u64,
    learns: bool,
}

impl SwapPace {
    /// Starts at `bytes_per_sec` (the configured pace); `learns` says
    /// whether swap-outs move it.
    pub fn new(bytes_per_sec: f64, learns: bool) -> SwapPace {
        let secs_per_byte = if bytes_per_sec.is_finite() && bytes_per_sec > 0.0 {
            1.0 / bytes_per_sec
        } else {
            // A pace no config passes validation with: as slow as can be,
            // so nothing is promised from it.
            1.0
        };
        SwapPace { secs_per_byte, samples: 0, learns }
    }

    /// Bytes per second.
    pub fn bytes_per_sec(&self) -> f64 {
        1.0 / self.secs_per_byte
    }

    /// Swap-outs that moved the pace so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// A swap-out pushed `bytes` out in `took`. Returns whether the pace
    /// moved: not when learning is off, nor for a swap-out too small or too
    /// quick to time. The first one timed replaces the configured guess.
    pub fn swapped_out(&mut self, bytes: Bytes, took: Duration) -> bool {
        if !self.learns || bytes < MIN_SAMPLE || took.is_zero() {
            return false;
        }
        let sample = took.as_secs_f64() / bytes as f64;
        self.secs_per_byte = if self.samples == 0 {
            sample
        } else {
            NEWEST_WEIGHT * sample + (1.0 - NEWEST_WEIGHT) * self.secs_per_byte
        };
        self.samples += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: Bytes = 1_000_000;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 * b.abs()
    }

    #[test]
    fn the_first_timed_swap_out_replaces_the_configured_guess() {
        let mut pace = SwapPace::new(100e6, true);
        assert!(close(pace.bytes_per_sec(), 100e6));
        assert!(pace.swapped_out(400 * MB, Duration::from_secs(1)));
        assert!(close(pace.bytes_per_sec(), 400e6), "{}", pace.bytes_per_sec());
        assert_eq!(pace.samples(), 1);
    }

    #[test]
    fn a_slow_swap_out_weighs_by_the_time_it_cost() {
        let mut pace = SwapPace::new(100e6, true);
        pace.swapped_out(400 * MB, Duration::from_secs(1));
        // 40 MB/s once: seconds per byte 0.3 x 1/40e6 + 0.7 x 1/400e6.
        pace.swapped_out(40 * MB, Duration::from_secs(1));
        let expected = 1.0 / (0.3 / 40e6 + 0.7 / 400e6);
        assert!(close(pace.bytes_per_sec(), expected), "{}", pace.bytes_per_sec());
        // Slower than the mean of the two paces (220 MB/s) would say.
        assert!(pace.bytes_per_sec() < 120e6);
    }

    #[test]
    fn swap_outs_too_small_or_untimed_say_nothing() {
        let mut pace = SwapPace::new(100e6, true);
        assert!(!pace.swapped_out(MIN_SAMPLE - 1, Duration::from_millis(1)));
        assert!(!pace.swapped_out(1 << 30, Duration::ZERO));
        assert!(close(pace.bytes_per_sec(), 100e6));
        assert_eq!(pace.samples(), 0);
    }

    #[test]
    fn a_fixed_pace_stays_what_it_was_told() {
        let mut pace = SwapPace::new(250e6, false);
        assert!(!pace.swapped_out(400 * MB, Duration::from_secs(10)));
        assert!(close(pace.bytes_per_sec(), 250e6));
    }

    #[test]
    fn the_pace_follows_a_disk_that_got_slower_within_a_few_swap_outs() {
        let mut pace = SwapPace::new(100e6, true);
        for _ in 0..5 {
            pace.swapped_out(500 * MB, Duration::from_secs(1));
        }
        for _ in 0..6 {
            pace.swapped_out(100 * MB, Duration::from_secs(1));
        }
        // Within 15% of the new 100 MB/s after six swap-outs.
        assert!(pace.bytes_per_sec() < 115e6, "{}", pace.bytes_per_sec());
    }
}
