//! The opportunistic memory a Kubernetes node offers its scheduler
//! (issue 17 item 3), `overbook.io/batch-memory` in the Node's status:
//! what it is ([`offer_bytes`]), when a new value is told ([`Publisher`]),
//! and the quantities pods request it in ([`parse_quantity`]). Pure: the
//! agent's loop gives the figures and the time, the API link writes.

use overbook_core::Time;
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// What the node offers, in bytes: the memory available now less the
/// headroom the launcher keeps, plus what best-effort pods hold within
/// what they requested (the scheduler already counts their requests
/// against the offer: memory they hold is part of what was offered, not
/// taken from it). Zero while launches wait (`held`: the launcher's
/// post-kill delay, a thrashing node): work placed then would be the next
/// victim. Never negative.
///
/// `best_effort` is each best-effort pod's (usage, request) in bytes.
pub fn offer_bytes(
    available: u64,
    headroom: u64,
    best_effort: impl IntoIterator<Item = (u64, u64)>,
    held: bool,
) -> u64 {
    if held {
        return 0;
    }
    let holding = best_effort
        .into_iter()
        .fold(0u64, |sum, (usage, request)| sum.saturating_add(usage.min(request)));
    available.saturating_sub(headroom).saturating_add(holding)
}

/// Bytes as whole MiB, rounded down (an offer never promises more than
/// there is).
pub fn whole_mib(bytes: u64) -> u64 {
    bytes / MIB
}

/// A value the [`Publisher`] decided to tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Told {
    pub mib: u64,
    /// The value told before, if any.
    pub was_mib: Option<u64>,
    /// Why now: the first value, a drop to zero, a large change, or a small
    /// one that lasted the period.
    pub why: String,
}

/// When a new offer is told (hysteresis): the first value at once; a drop
/// to zero at once; a change of at least `step` at once but at most once
/// a second; a smaller change once it has lasted `period`. Why: every
/// write is a Node status update every scheduler and controller watching
/// nodes receives, while the scheduler only needs the offer to follow
/// large moves quickly.
#[derive(Clone, Debug)]
pub struct Publisher {
    step_mib: u64,
    period: Duration,
    told: Option<u64>,
    told_at: Option<Time>,
    /// Since when the value has differed (by less than a step) from the
    /// value told.
    differs_since: Option<Time>,
    /// The last value told was a step: a change that arrives over several
    /// samples (memory grows while a process allocates) has its rest told
    /// after MIN_INTERVAL, not after the period.
    settling: bool,
}

/// The shortest time between two told values, but for a drop to zero.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// An unchanged offer is told again this long after it was last told. The
/// agent never reads its Node (it has no `nodes get`), and the value can be
/// lost there: a kubelet that registers its Node anew rebuilds its status
/// from what it knows, and anyone may patch it. Once a minute is a small
/// share of the status updates a kubelet makes itself.
pub const REFRESH: Duration = Duration::from_secs(60);

impl Publisher {
    /// `step` in bytes (at least 1 MiB is taken); `period` for small changes.
    pub fn new(step: u64, period: Duration) -> Publisher {
        Publisher {
            step_mib: whole_mib(step).max(1),
            period,
            told: None,
            told_at: None,
            differs_since: None,
            settling: false,
        }
    }

    /// The value last told, in MiB.
    pub fn told(&self) -> Option<u64> {
        self.told
    }

    /// The offer is `bytes` at `now`: the value to tell now, if any.
    pub fn offer(&mut self, now: Time, bytes: u64) -> Option<Told> {
        let mib = whole_mib(bytes);
        let Some(was) = self.told else {
            return Some(self.tell(now, mib, "first value"));
        };
        if mib == was {
            self.differs_since = None;
            let stale = self.told_at.is_none_or(|t| now.since(t) >= REFRESH);
            return stale.then(|| self.tell(now, mib, "unchanged: told again"));
        }
        if mib == 0 {
            return Some(self.tell(now, 0, "dropped to zero: launches wait"));
        }
        let since_told = self.told_at.map_or(Duration::MAX, |t| now.since(t));
        if mib.abs_diff(was) >= self.step_mib {
            if since_told < MIN_INTERVAL {
                return None;
            }
            let why = format!("changed by {} MiB (step {} MiB)", mib.abs_diff(was), self.step_mib);
            let told = self.tell(now, mib, &why);
            self.settling = true;
            return Some(told);
        }
        if self.settling && since_told < self.period {
            if since_told < MIN_INTERVAL {
                return None;
            }
            let why = format!("the rest of a change, by {} MiB", mib.abs_diff(was));
            return Some(self.tell(now, mib, &why));
        }
        let since = *self.differs_since.get_or_insert(now);
        if now.since(since) >= self.period {
            let why = format!(
                "changed by {} MiB for {:.1}s (period)",
                mib.abs_diff(was),
                now.since(since).as_secs_f64()
            );
            return Some(self.tell(now, mib, &why));
        }
        None
    }

    fn tell(&mut self, now: Time, mib: u64, why: &str) -> Told {
        let was_mib = self.told.replace(mib);
        self.told_at = Some(now);
        self.differs_since = None;
        self.settling = false;
        Told { mib, was_mib, why: why.to_string() }
    }
}

/// A Kubernetes quantity as bytes, rounded up ("64Mi", "1Gi", "100M",
/// "1e9", "512Ki", "128974848", "0.5Gi", "1500m"). `Err` names the text.
pub fn parse_quantity(text: &str) -> Result<u64, String> {
    let bad = |why: &str| format!("{text:?} is no quantity ({why}; e.g. \"512Mi\", \"1G\")");
    let s = text.trim();
    if s.is_empty() {
        return Err(bad("empty"));
    }
    let (s, negative) = match s.strip_prefix('-') {
        Some(rest) => (rest, true),
        None => (s.strip_prefix('+').unwrap_or(s), false),
    };
    let num_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return Err(bad("no number"));
    }
    let value: f64 = num.parse().map_err(|_| bad("no number"))?;
    let factor: f64 = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().map_err(|_| bad("a bad exponent"))?;
            if !(-18..=18).contains(&exp) {
                return Err(bad("exponent out of range"));
            }
            10f64.powi(exp)
        }
        _ => return Err(bad("unknown suffix")),
    };
    if negative && value > 0.0 {
        return Err(bad("negative"));
    }
    let bytes = (value * factor).ceil();
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad("too large"));
    }
    Ok(overbook_core::convert::to_u64(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_offer_is_free_memory_less_headroom_plus_best_effort_holdings() {
        // 4 GiB available, 1 GiB headroom; pods hold 512 MiB of a 1 GiB
        // request (all counted) and 2 GiB of a 1 GiB request (1 counted).
        let pods = [(GIB / 2, GIB), (2 * GIB, GIB)];
        assert_eq!(offer_bytes(4 * GIB, GIB, pods, false), 3 * GIB + GIB / 2 + GIB);
        assert_eq!(offer_bytes(4 * GIB, GIB, pods, true), 0, "zero while launches wait");
        assert_eq!(offer_bytes(GIB / 2, GIB, [], false), 0, "never negative");
        assert_eq!(offer_bytes(u64::MAX, 0, [(u64::MAX, u64::MAX)], false), u64::MAX);
        assert_eq!(whole_mib(3 * MIB - 1), 2);
    }

    fn at(start: Time, ms: u64) -> Time {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn large_changes_at_once_at_most_once_a_second_small_ones_after_the_period() {
        let t0 = Time::from_secs(100);
        let mut p = Publisher::new(100 * MIB, Duration::from_secs(10));
        let first = p.offer(t0, 1000 * MIB).expect("the first value at once");
        assert_eq!((first.mib, first.was_mib), (1000, None));
        assert_eq!(p.offer(at(t0, 100), 1000 * MIB), None, "unchanged");
        // A large change within the second waits for it, then goes.
        assert_eq!(p.offer(at(t0, 500), 800 * MIB), None);
        let big = p.offer(at(t0, 1000), 800 * MIB).expect("a step, after a second");
        assert_eq!((big.mib, big.was_mib), (800, Some(1000)));
        // The rest of that change, arriving over the next samples, is told
        // a second after it, not after the period.
        assert_eq!(p.offer(at(t0, 1500), 780 * MIB), None);
        let rest = p.offer(at(t0, 2000), 780 * MIB).expect("the rest, after a second");
        assert_eq!((rest.mib, rest.was_mib), (780, Some(800)));
        // A small change waits the period, from when it began.
        assert_eq!(p.offer(at(t0, 13_000), 770 * MIB), None);
        assert_eq!(p.offer(at(t0, 22_000), 775 * MIB), None);
        let small = p.offer(at(t0, 23_000), 775 * MIB).expect("after the period");
        assert_eq!((small.mib, small.was_mib), (775, Some(780)));
        assert_eq!(p.offer(at(t0, 24_100), 770 * MIB), None, "not the rest of a step");
        // A blip that ends before the period is never told.
        assert_eq!(p.offer(at(t0, 25_000), 775 * MIB), None);
        assert_eq!(p.offer(at(t0, 41_000), 770 * MIB), None, "its period began anew");
        // Zero at once, even within the second.
        let zero = p.offer(at(t0, 41_100), 0).expect("zero at once");
        assert_eq!((zero.mib, zero.was_mib), (0, Some(775)));
        assert_eq!(p.offer(at(t0, 41_200), MIB / 2), None, "still zero in whole MiB");
        assert_eq!(p.told(), Some(0));
        // Unchanged, it is told again once a minute.
        assert_eq!(p.offer(at(t0, 41_100 + 59_900), 0), None);
        let again = p.offer(at(t0, 41_100 + 60_000), 0).expect("told again");
        assert_eq!((again.mib, again.was_mib), (0, Some(0)));
        assert_eq!(p.offer(at(t0, 41_100 + 60_100), 0), None, "then not for another minute");
    }

    #[test]
    fn quantities_as_kubernetes_writes_them() {
        for (text, bytes) in [
            ("64Mi", 64 * MIB),
            ("1Gi", GIB),
            ("100M", 100_000_000),
            ("1e9", 1_000_000_000),
            ("512Ki", 512 * 1024),
            ("128974848", 128_974_848),
            ("0.5Gi", GIB / 2),
            ("1500m", 2),
            (" 1k ", 1000),
            ("1E3", 1000),
            ("0", 0),
        ] {
            assert_eq!(parse_quantity(text), Ok(bytes), "{text}");
        }
        for text in ["", "Mi", "12 parsecs", "1.2.3Mi", "1e", "-1Gi", "1MB", "1e99"] {
            let e = parse_quantity(text).expect_err(text);
            assert!(e.contains(&format!("{text:?}")), "{text}: {e}");
        }
    }
}
