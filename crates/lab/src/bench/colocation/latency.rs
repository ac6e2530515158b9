//! Latency histograms from the load drivers' own output, merged across
//! rounds so the percentiles are of every request, not of per-round
//! percentiles.

use std::collections::BTreeMap;

/// Counts of requests by latency (microseconds).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    counts: BTreeMap<u64, u64>,
}

impl Histogram {
    pub fn add(&mut self, micros: u64, count: u64) {
        if count > 0 {
            *self.counts.entry(micros).or_insert(0) += count;
        }
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (&us, &n) in &other.counts {
            self.add(us, n);
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Nearest-rank percentile `p` (0..1), in milliseconds.
    pub fn percentile_ms(&self, p: f64) -> Option<f64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = overbook_core::convert::to_u64((p * total as f64).ceil()).clamp(1, total);
        let mut seen = 0;
        for (&us, &n) in &self.counts {
            seen += n;
            if seen >= rank {
                return Some(us as f64 / 1000.0);
            }
        }
        None
    }
}

/// The "Latency by percentile distribution" of a (non-quiet)
/// `redis-benchmark` run, as a histogram, its request count, and the
/// seconds it says the requests took (`N requests completed in S seconds`:
/// the program's own start, slow under emulation, not counted).
///
/// Lines are `50.000% <= 0.095 milliseconds (cumulative count 10542)`; each
/// line's requests are its cumulative count less the previous line's, all at
/// its latency (the upper end of an HDR bucket).
pub fn redis_benchmark_histogram(out: &str) -> Result<(Histogram, u64, f64), String> {
    let seconds = out
        .split(['\n', '\r'])
        .find_map(|l| {
            let (_, rest) = l.split_once("requests completed in ")?;
            rest.split_whitespace().next()?.parse::<f64>().ok()
        })
        .ok_or_else(|| {
            let tail: Vec<&str> = out.lines().rev().take(3).collect();
            format!(
                "redis-benchmark printed no `requests completed in` line (last lines: {tail:?})"
            )
        })?;
    let mut h = Histogram::default();
    let mut in_table = false;
    let mut last = 0u64;
    let mut seen_any = false;
    // Progress lines end in '\r', not '\n'.
    for line in out.split(['\n', '\r']).map(str::trim) {
        if line.starts_with("Latency by percentile distribution") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        // The table ends at a blank line or the next section's title.
        if line.is_empty() || !line.starts_with(|c: char| c.is_ascii_digit()) {
            if seen_any {
                break;
            }
            continue;
        }
        let parsed = (|| {
            let (_, rest) = line.split_once("<=")?;
            let mut words = rest.split_whitespace();
            let ms: f64 = words.next()?.parse().ok()?;
            let count: u64 =
                rest.split("cumulative count").nth(1)?.trim().trim_end_matches(')').parse().ok()?;
            Some((ms, count))
        })();
        let Some((ms, count)) = parsed else {
            return Err(format!("redis-benchmark: unexpected line in its latency table: {line:?}"));
        };
        if count < last {
            return Err(format!("redis-benchmark: cumulative count goes down at {line:?}"));
        }
        h.add(overbook_core::convert::to_u64((ms * 1000.0).round()), count - last);
        last = count;
        seen_any = true;
    }
    if !seen_any {
        let tail: Vec<&str> = out.lines().rev().take(3).collect();
        return Err(format!(
            "redis-benchmark printed no latency distribution (last lines: {tail:?})"
        ));
    }
    Ok((h, last, seconds))
}

/// A window of [`Windows`], in microseconds.
pub const WINDOW_US: u64 = 100_000;
/// What [`Windows`] counts as slow, in microseconds: on the reference host
/// isolated PostgreSQL's p99 is 1.1-1.2 ms, so a transaction over 2 ms is
/// one that something beside it held up.
pub const SLOW_US: u64 = 2_000;

/// Windows kept: a day's, far past any scene.
pub const MAX_WINDOWS: usize = 864_000;

/// A driver's transactions over time: for each [`WINDOW_US`] from its
/// start, how many ended in it and how many of those took over
/// [`SLOW_US`]. Where in a scene the tail is, beside what happened then.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Windows {
    pub counts: Vec<[u32; 2]>,
}

impl Windows {
    /// A transaction of `us` microseconds ended `since_us` after the start
    /// (past [`MAX_WINDOWS`], a clock that jumped: not counted here).
    pub fn add(&mut self, since_us: u64, us: u64) {
        let Some(w) = usize::try_from(since_us / WINDOW_US).ok().filter(|&w| w < MAX_WINDOWS)
        else {
            return;
        };
        if self.counts.len() <= w {
            self.counts.resize(w + 1, [0, 0]);
        }
        let c = &mut self.counts[w];
        c[0] = c[0].saturating_add(1);
        if us > SLOW_US {
            c[1] = c[1].saturating_add(1);
        }
    }

    pub fn merge(&mut self, other: &Windows) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), [0, 0]);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            a[0] = a[0].saturating_add(b[0]);
            a[1] = a[1].saturating_add(b[1]);
        }
    }
}

/// A `pgbench -l` log, read.
#[derive(Debug, Default)]
pub struct PgbenchLog {
    /// Latencies by the phase of the scene each transaction ended in.
    pub phases: [Histogram; 3],
    pub windows: Windows,
    pub transactions: u64,
}

/// A `pgbench -l` per-transaction log (`client tx latency_us script epoch
/// epoch_us [lag_us]`) of a run that started at `origin_us` (microseconds
/// since the epoch), split by the phase of the scene each transaction ended
/// in (`phase_of` maps its end to 0, 1 or 2; larger is taken as 2) and by
/// window. Skipped transactions (`skipped` in the latency field, with
/// `--latency-limit`) are refused: the benchmark does not use that option.
pub fn pgbench_log(
    text: &str,
    origin_us: u64,
    phase_of: &dyn Fn(u64) -> usize,
) -> Result<PgbenchLog, String> {
    let mut log = PgbenchLog::default();
    for (i, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let number = |k: usize| fields.get(k).and_then(|f| f.parse::<u64>().ok());
        let (Some(us), Some(epoch), Some(epoch_us)) = (number(2), number(4), number(5)) else {
            return Err(format!("line {}: not a pgbench transaction line: {line:?}", i + 1));
        };
        let end = epoch.saturating_mul(1_000_000).saturating_add(epoch_us);
        log.phases[phase_of(end).min(2)].add(us, 1);
        log.windows.add(end.saturating_sub(origin_us), us);
        log.transactions += 1;
    }
    Ok(log)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REDIS: &str = "\rGET: rps=0.0 (overall: nan) avg_msec=nan (overall: nan)\r\
====== GET ======
  1000 requests completed in 0.05 seconds
  4 parallel clients

Latency by percentile distribution:
0.000% <= 0.047 milliseconds (cumulative count 1)
50.000% <= 0.095 milliseconds (cumulative count 600)
99.000% <= 0.191 milliseconds (cumulative count 990)
100.000% <= 0.567 milliseconds (cumulative count 1000)
Cumulative distribution of latencies:
100.000% <= 0.607 milliseconds (cumulative count 1000)
";

    #[test]
    fn a_redis_benchmark_table_becomes_a_histogram() {
        let (h, n, s) = redis_benchmark_histogram(REDIS).expect("parses");
        assert_eq!((n, h.total(), s), (1000, 1000, 0.05));
        assert_eq!(h.percentile_ms(0.5), Some(0.095));
        assert_eq!(h.percentile_ms(0.99), Some(0.191));
        assert_eq!(h.percentile_ms(0.999), Some(0.567));
    }

    #[test]
    fn odd_driver_output_is_refused_with_the_line() {
        let e = redis_benchmark_histogram("nothing here\n").expect_err("no count");
        assert!(e.contains("requests completed in"), "{e}");
        let e = redis_benchmark_histogram("  9 requests completed in 0.5 seconds\n")
            .expect_err("no table");
        assert!(e.contains("no latency distribution"), "{e}");
        let bad = "1 requests completed in 1 seconds\n\
                   Latency by percentile distribution:\n50% <= fast milliseconds\n";
        assert!(redis_benchmark_histogram(bad).expect_err("bad").contains("fast"));
        let down = "1 requests completed in 1 seconds\nLatency by percentile distribution:\n\
                    1% <= 1 milliseconds (cumulative count 5)\n\
                    2% <= 2 milliseconds (cumulative count 3)\n";
        assert!(redis_benchmark_histogram(down).expect_err("down").contains("goes down"));
        let e = pgbench_log("0 1 250 0 1700000000 1\n0 2 x 0 1 1\n", 0, &|_| 0).expect_err("x");
        assert!(e.starts_with("line 2:"), "{e}");
    }

    #[test]
    fn pgbench_logs_and_merging() {
        let whole =
            |log| pgbench_log(log, 0, &|_| 0).map(|l| (l.phases[0].clone(), l.transactions));
        let (a, n) = whole("0 1 100 0 1 1\n1 1 300 0 1 2\n").expect("parses");
        let (b, _) = whole("0 2 200 0 1 3 0\n").expect("with lag");
        assert_eq!(n, 2);
        let mut all = a.clone();
        all.merge(&b);
        assert_eq!(all.total(), 3);
        assert_eq!(all.percentile_ms(0.5), Some(0.2));
        assert_eq!(all.percentile_ms(1.0), Some(0.3));
        assert_eq!(Histogram::default().percentile_ms(0.5), None);
    }

    #[test]
    fn a_pgbench_log_splits_by_when_each_transaction_ended() {
        let log = "0 1 100 0 10 0\n0 2 900 0 20 500000\n1 1 300 0 30 0\n1 2 5 0 99 0\n";
        let phase_of = |end_us: u64| usize::try_from(end_us / 10_000_000).unwrap_or(9) - 1;
        let PgbenchLog { phases: [a, b, c], transactions: n, .. } =
            pgbench_log(log, 0, &phase_of).expect("parses");
        assert_eq!(n, 4);
        assert_eq!((a.total(), b.total(), c.total()), (1, 1, 2));
        assert_eq!(b.percentile_ms(0.99), Some(0.9));
        assert_eq!(c.percentile_ms(1.0), Some(0.3));
        let e = pgbench_log("0 1 100 0 x 0\n", 0, &|_| 0).expect_err("no epoch");
        assert!(e.starts_with("line 1:"), "{e}");
    }

    #[test]
    fn a_pgbench_log_counts_its_slow_transactions_by_window_from_its_start() {
        // Started at 10 s: ends at 10.05 s, 10.25 s (slow), 10.29 s, 10.29 s (slow).
        let log = "0 1 100 0 10 50000\n0 2 2500 0 10 250000\n1 1 2000 0 10 290000\n\
                   1 2 9000 0 10 290000\n";
        let l = pgbench_log(log, 10_000_000, &|_| 0).expect("parses");
        assert_eq!(l.windows.counts, vec![[1, 0], [0, 0], [3, 2]]);
        let mut both = l.windows.clone();
        both.merge(&Windows { counts: vec![[1, 1]] });
        assert_eq!(both.counts, vec![[2, 1], [0, 0], [3, 2]]);
        // One ending before the start is counted in the first window.
        let early = pgbench_log("0 1 3000 0 9 0\n", 10_000_000, &|_| 0).expect("parses");
        assert_eq!(early.windows.counts, vec![[1, 1]]);
    }
}
