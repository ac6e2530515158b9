//! Policy time: a point on a monotonic timeline, in microseconds.
//!
//! The core never reads a clock. The agent passes the monotonic clock, the
//! simulator passes virtual time; both start wherever they like.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point in time, microseconds since an origin chosen by the caller.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Time(pub u64);

impl Time {
    pub const ZERO: Time = Time(0);
    pub const MAX: Time = Time(u64::MAX);

    pub const fn from_micros(us: u64) -> Time {
        Time(us)
    }

    pub const fn from_millis(ms: u64) -> Time {
        Time(ms.saturating_mul(1_000))
    }

    pub const fn from_secs(s: u64) -> Time {
        Time(s.saturating_mul(1_000_000))
    }

    /// From fractional seconds; negative and NaN inputs clamp to zero.
    /// A span from the start of time (a caller's clock reading since its
    /// start), saturating.
    pub fn from_duration(d: Duration) -> Time {
        Time(crate::convert::u128_to_u64(d.as_micros()))
    }

    pub fn from_secs_f64(s: f64) -> Time {
        if s.is_nan() || s <= 0.0 {
            Time(0)
        } else {
            Time(crate::convert::to_u64((s * 1e6).min(u64::MAX as f64)))
        }
    }

    pub const fn as_micros(self) -> u64 {
        self.0
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// Time elapsed since `earlier`, zero if `earlier` is later.
    pub fn since(self, earlier: Time) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        Time(self.0.saturating_add(us))
    }
}

impl AddAssign<Duration> for Time {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Time> for Time {
    type Output = Duration;
    fn sub(self, earlier: Time) -> Duration {
        self.since(earlier)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6}s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        assert_eq!(Time::MAX + Duration::from_secs(1), Time::MAX);
        assert_eq!(Time::from_secs(1) - Time::from_secs(2), Duration::ZERO);
        assert_eq!(Time::from_secs_f64(-3.0), Time::ZERO);
        assert_eq!(Time::from_secs_f64(f64::NAN), Time::ZERO);
        assert_eq!(Time::from_secs_f64(1.5), Time::from_millis(1500));
    }
}
