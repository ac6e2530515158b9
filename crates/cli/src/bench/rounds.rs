//! `overbook bench sim --against OTHER`: this binary's speed against
//! another's on the same machine at the same moment.
//!
//! A host whose speed moves by a fifth from run to run (this project's
//! development machines) cannot tell a tenth from one run of each, nor
//! from runs an hour apart. So the two run in rounds, one after the other
//! in each, their order swapped every round so that neither always runs
//! on a warmer or busier machine; what is compared is the ratio of their
//! wall times within a round, its mean over the rounds and the 95%
//! t-interval of that mean. Each run is a process of its own, with the
//! environment this command was given, so each binary runs as it would
//! alone (its own choice of huge pages included), and any overbook binary
//! that has `bench sim` can be the other, whatever its output.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// Both binaries' wall times in one round, seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Round {
    pub this: f64,
    pub other: f64,
}

impl Round {
    /// How many times faster this binary ran than the other.
    pub fn speedup(&self) -> f64 {
        self.other / self.this
    }
}

/// A mean and its 95% t-interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    pub mean: f64,
    pub low: f64,
    pub high: f64,
}

impl std::fmt::Display for Estimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3} [{:.3}–{:.3}]", self.mean, self.low, self.high)
    }
}

/// Two-sided 95% quantiles of Student's t for 1 to 30 degrees of freedom.
const T95: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// The mean of `xs` with its 95% t-interval; `None` for fewer than two.
/// Past 31 values the quantile for 30 degrees of freedom is used, which
/// errs wide (by at most 5%, against the normal's 1.96).
pub fn t_interval(xs: &[f64]) -> Option<Estimate> {
    if xs.len() < 2 {
        return None;
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let t = T95[(xs.len() - 2).min(T95.len() - 1)];
    let half = t * (var / n).sqrt();
    Some(Estimate { mean, low: mean - half, high: mean + half })
}

/// Run `rounds` rounds of `bench sim` with `set`, this binary (`this`)
/// against `other`, printing each round and then the estimate.
pub fn against(this: &Path, other: &Path, rounds: usize, set: &[String]) -> Result<()> {
    if rounds < 2 {
        bail!("--rounds {rounds}: at least 2 are needed for an interval");
    }
    if !other.is_file() {
        bail!("--against {}: no such file", other.display());
    }
    // Refuse bad settings before the first run: this binary's own check.
    overbook_sim::scenario::Scenario::load("scale", set)?;
    let mut done = Vec::with_capacity(rounds);
    for r in 1..=rounds {
        // Odd rounds run the other first, even ones this binary.
        let order = if r % 2 == 1 { [false, true] } else { [true, false] };
        let mut round = Round { this: 0.0, other: 0.0 };
        for (i, is_this) in order.into_iter().enumerate() {
            let (label, bin) = if is_this { ("this", this) } else { ("other", other) };
            eprintln!("[round {r}/{rounds}, {}/2] {label}: {} bench sim …", i + 1, bin.display());
            let secs = time_run(bin, set)?;
            if is_this {
                round.this = secs;
            } else {
                round.other = secs;
            }
        }
        println!(
            "round {r:>2}: other {:7.2} s, this {:7.2} s, this {:.3}× as fast",
            round.other,
            round.this,
            round.speedup()
        );
        done.push(round);
    }
    let speedups: Vec<f64> = done.iter().map(Round::speedup).collect();
    let mean = |f: fn(&Round) -> f64| done.iter().map(f).sum::<f64>() / done.len() as f64;
    println!("other:   {} (mean {:.2} s)", other.display(), mean(|r| r.other));
    println!("this:    {} (mean {:.2} s)", this.display(), mean(|r| r.this));
    if let Some(e) = t_interval(&speedups) {
        let told = if e.low <= 1.0 && 1.0 <= e.high { ": no difference told" } else { "" };
        println!(
            "speedup: {e} (the other's wall time over this one's, per round: mean and 95% \
             t-interval over {rounds} rounds){told}"
        );
    }
    Ok(())
}

/// Wall time of one `bench sim` run of `bin`, seconds, from its start to
/// its exit (the same for any binary, whatever it prints).
fn time_run(bin: &Path, set: &[String]) -> Result<f64> {
    let mut cmd = Command::new(bin);
    cmd.args(["bench", "sim"]);
    for s in set {
        cmd.args(["--set", s]);
    }
    let started = Instant::now();
    let output = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    let secs = started.elapsed().as_secs_f64();
    if !output.status.success() {
        bail!("{} bench sim failed: {}", bin.display(), output.status);
    }
    Ok(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_holds_its_mean_and_widens_with_the_spread() {
        assert_eq!(t_interval(&[]), None);
        assert_eq!(t_interval(&[1.5]), None);
        let same = t_interval(&[1.5, 1.5, 1.5]).expect("three values");
        assert_eq!((same.mean, same.low, same.high), (1.5, 1.5, 1.5));
        // Mean 2, sample sd 1, n 4: 2 ± 3.182 / 2.
        let e = t_interval(&[1.0, 2.0, 3.0, 2.0]).expect("four values");
        let half = 3.182 * (2.0_f64 / 3.0).sqrt() / 2.0;
        assert!((e.mean - 2.0).abs() < 1e-12, "{e}");
        assert!((e.high - e.mean - half).abs() < 1e-9, "{e}");
        assert!((e.mean - e.low - half).abs() < 1e-9, "{e}");
        let wide = t_interval(&[1.0, 3.0, 5.0, 3.0]).expect("four values");
        assert!(wide.high - wide.low > e.high - e.low);
    }

    #[test]
    fn past_thirty_values_the_last_quantile_serves() {
        let xs: Vec<f64> = (0..40).map(|i| f64::from(i % 2)).collect();
        let e = t_interval(&xs).expect("forty values");
        let sd = (xs.iter().map(|x| (x - 0.5).powi(2)).sum::<f64>() / 39.0).sqrt();
        assert!((e.high - 0.5 - 2.042 * sd / 40f64.sqrt()).abs() < 1e-12, "{e}");
    }

    #[test]
    fn a_speedup_is_the_others_time_over_this_ones() {
        assert_eq!(Round { this: 2.0, other: 3.0 }.speedup(), 1.5);
    }
}
