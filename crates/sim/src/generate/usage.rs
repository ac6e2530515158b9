//! Production usage shares: `Beta` draws made in batches, bit for bit
//! what `rand_distr::Beta` draws one at a time.
//!
//! Why: a Google-scale day draws tens of millions of shares (one every
//! usage period of every production task), and `Beta::sample` makes each
//! a chain of a division, `ln` and `exp` ending in a branch (accept the
//! attempt or not) that the processor often guesses wrong, and the
//! draws ran one after another. Cheng's algorithm BB, which `Beta` uses
//! when both shapes exceed 1, draws every attempt from two uniforms of
//! its own: attempts do not depend on one another, and a draw is the next
//! accepted attempt. So a batch of attempts is computed without a branch,
//! their chains overlapping, and the accepted ones are taken in order. A
//! batch is never larger than the draws still wanted, so the uniforms used
//! are exactly those `Beta` would use and the stream after is the same.
//! The arithmetic is `Beta`'s, operation for operation (rand_distr 0.4's
//! `gamma.rs`), and a test holds the two to equal bits.

use rand::distributions::Open01;
use rand::Rng;
use rand_distr::{Beta, Distribution};
use std::cmp::Ordering;

/// Attempts computed together: enough to overlap their chains, few
/// enough (1.3 KB) to stay on the stack and in the first-level cache.
const BATCH: usize = 32;

/// Draws of `Beta(alpha, beta)`.
#[derive(Clone, Copy, Debug)]
pub(super) enum UsageShares {
    /// Both shapes above 1: Cheng's BB, batched.
    Batched(ChengBb),
    /// Otherwise (Cheng's BC: here a mean usage under 1/4 or over 3/4):
    /// `Beta` itself.
    Single(Beta<f64>),
}

impl UsageShares {
    /// `None` where `Beta::new` refuses the shapes.
    pub(super) fn new(alpha: f64, beta: f64) -> Option<UsageShares> {
        let single = Beta::new(alpha, beta).ok()?;
        // As `Beta::new`: `a` the smaller shape, and whether they swapped.
        let (a, b, switched) =
            if alpha < beta { (alpha, beta, false) } else { (beta, alpha, true) };
        Some(if a > 1.0 {
            UsageShares::Batched(ChengBb::new(a, b, switched))
        } else {
            UsageShares::Single(single)
        })
    }

    /// `n` draws appended to `out`, as `n` calls of `Beta::sample` make
    /// them from `rng`.
    pub(super) fn draw<R: Rng + ?Sized>(&self, rng: &mut R, n: usize, out: &mut Vec<f64>) {
        out.reserve(n);
        match self {
            UsageShares::Batched(bb) => bb.draw(rng, n, out),
            UsageShares::Single(beta) => out.extend((0..n).map(|_| beta.sample(rng))),
        }
    }
}

/// Cheng's algorithm BB (1978) with `Beta::new`'s constants.
#[derive(Clone, Copy, Debug)]
pub(super) struct ChengBb {
    a: f64,
    b: f64,
    switched: bool,
    alpha: f64,
    beta: f64,
    gamma: f64,
}

/// One attempt's values, from its two uniforms.
#[derive(Clone, Copy, Default)]
struct Attempt {
    w: f64,
    z: f64,
    r: f64,
    s: f64,
    /// Accepted by step 2, the quick test.
    quick: bool,
}

impl ChengBb {
    fn new(a: f64, b: f64, switched: bool) -> ChengBb {
        let alpha = a + b;
        let beta = ((alpha - 2.0) / (2.0 * a * b - alpha)).sqrt();
        let gamma = a + 1.0 / beta;
        ChengBb { a, b, switched, alpha, beta, gamma }
    }

    fn draw<R: Rng + ?Sized>(&self, rng: &mut R, n: usize, out: &mut Vec<f64>) {
        let (ln4, ln5) = (4.0f64.ln(), 5.0f64.ln());
        let mut attempts = [Attempt::default(); BATCH];
        let mut wanted = n;
        while wanted > 0 {
            let batch = &mut attempts[..wanted.min(BATCH)];
            for t in batch.iter_mut() {
                // Step 1, the uniforms in the order `Beta` takes them.
                let u1: f64 = rng.sample(Open01);
                let u2: f64 = rng.sample(Open01);
                let v = self.beta * (u1 / (1.0 - u1)).ln();
                let w = self.a * v.exp();
                let z = u1 * u1 * u2;
                let r = self.gamma * v - ln4;
                let s = self.a + r - w;
                // Step 2.
                let quick = s + 1.0 + ln5 >= 5.0 * z;
                *t = Attempt { w, z, r, s, quick };
            }
            for t in batch.iter() {
                if t.quick || self.late_accept(t) {
                    out.push(self.value(t.w));
                    wanted -= 1;
                }
            }
        }
    }

    /// Steps 3 and 4, for an attempt step 2 did not accept. Step 4
    /// accepts where its sum is not below `ln z`, a NaN included, as `Beta`'s
    /// `!(… < t)` does.
    fn late_accept(&self, t: &Attempt) -> bool {
        let lz = t.z.ln();
        let sum = t.r + self.alpha * (self.alpha / (self.b + t.w)).ln();
        t.s >= lz || sum.partial_cmp(&lz) != Some(Ordering::Less)
    }

    /// Step 5.
    fn value(&self, w: f64) -> f64 {
        if self.switched {
            self.b / (self.b + w)
        } else if w == f64::INFINITY {
            1.0
        } else {
            w / (self.b + w)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngCore, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Every draw bit for bit `Beta`'s, and the stream left where `Beta`
    /// leaves it, over shapes on both sides of 1 and swapped, and counts
    /// around the batch's size.
    #[test]
    fn batched_draws_are_beta_s_bit_for_bit_and_leave_the_stream_as_it_does() {
        let shapes = [
            (2.8, 1.2),
            (1.2, 2.8),
            (5.0, 5.0),
            (1.01, 40.0),
            (300.0, 1.5),
            (0.5, 0.7),
            (0.9, 3.0),
        ];
        let counts = [0, 1, BATCH - 1, BATCH, BATCH + 1, 3 * BATCH + 5, 5_000];
        for (i, &(alpha, beta)) in shapes.iter().enumerate() {
            let shares = UsageShares::new(alpha, beta).expect("valid shapes");
            let reference = Beta::new(alpha, beta).expect("valid shapes");
            for (j, &n) in counts.iter().enumerate() {
                let seed = (i * 100 + j) as u64;
                let (mut ours, mut theirs) =
                    (ChaCha8Rng::seed_from_u64(seed), ChaCha8Rng::seed_from_u64(seed));
                let mut got = Vec::new();
                shares.draw(&mut ours, n, &mut got);
                let want: Vec<f64> = (0..n).map(|_| reference.sample(&mut theirs)).collect();
                assert_eq!(got.len(), n);
                for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        w.to_bits(),
                        "Beta({alpha}, {beta}), draw {k} of {n}: {g} against {w}"
                    );
                }
                assert_eq!(
                    ours.next_u64(),
                    theirs.next_u64(),
                    "Beta({alpha}, {beta}), {n} draws: the stream after"
                );
            }
        }
    }

    #[test]
    fn shapes_beta_refuses_are_refused() {
        assert!(UsageShares::new(0.0, 1.0).is_none());
        assert!(UsageShares::new(1.0, f64::NAN).is_none());
        assert!(matches!(UsageShares::new(2.8, 1.2), Some(UsageShares::Batched(_))));
        assert!(matches!(UsageShares::new(0.5, 3.0), Some(UsageShares::Single(_))));
    }
}
