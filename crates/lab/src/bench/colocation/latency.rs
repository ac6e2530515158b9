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

/// A `pgbench -l` per-transaction log (`client tx latency_us script epoch
/// epoch_us [lag_us]`) as histograms of latencies by the phase of the
/// scene each transaction ended in, and its count: `phase_of` maps its end
/// (microseconds since the epoch) to 0, 1 or 2 (larger is taken as 2).
/// Skipped transactions (`skipped` in the latency field, with
/// `--latency-limit`) are refused: the benchmark does not use that option.
pub fn pgbench_log_phases(
    text: &str,
    phase_of: &dyn Fn(u64) -> usize,
) -> Result<([Histogram; 3], u64), String> {
    let mut phases: [Histogram; 3] = Default::default();
    let mut n = 0;
    for (i, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let number = |k: usize| fields.get(k).and_then(|f| f.parse::<u64>().ok());
        let (Some(us), Some(epoch), Some(epoch_us)) = (number(2), number(4), number(5)) else {
            return Err(format!("line {}: not a pgbench transaction line: {line:?}", i + 1));
        };
        let end = epoch.saturating_mul(1_000_000).saturating_add(epoch_us);
        phases[phase_of(end).min(2)].add(us, 1);
        n += 1;
    }
    Ok((phases, n))
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
        let e = pgbench_log_phases("0 1 250 0 1700000000 1\n0 2 x 0 1 1\n", &|_| 0).expect_err("x");
        assert!(e.starts_with("line 2:"), "{e}");
    }

    #[test]
    fn pgbench_logs_and_merging() {
        let whole = |log| pgbench_log_phases(log, &|_| 0).map(|([h, ..], n)| (h, n));
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
        let ([a, b, c], n) = pgbench_log_phases(log, &phase_of).expect("parses");
        assert_eq!(n, 4);
        assert_eq!((a.total(), b.total(), c.total()), (1, 1, 2));
        assert_eq!(b.percentile_ms(0.99), Some(0.9));
        assert_eq!(c.percentile_ms(1.0), Some(0.3));
        let e = pgbench_log_phases("0 1 100 0 x 0\n", &|_| 0).expect_err("no epoch");
        assert!(e.starts_with("line 1:"), "{e}");
    }
}
