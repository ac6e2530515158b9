//! `bench colocation`'s figures per policy: each scene against the
//! `isolated` and `static` scenes of its own repeat, then the mean and the
//! spread over repeats.
//!
//! Why pair by repeat: the scenes of one repeat run back to back, while
//! repeats are minutes apart; under emulation the machine's speed drifts
//! with the host, so a ratio within a repeat compares like with like.

use super::{ColocationReport, SceneResult};
use crate::bench::MIB;
use serde::{Deserialize, Serialize};

/// A policy over its repeats, relative to `isolated` and `static`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PolicySummary {
    pub policy: String,
    pub redis_throughput: f64,
    pub redis_p50: f64,
    pub redis_p99: f64,
    pub pg_throughput: f64,
    pub pg_p50: f64,
    pub pg_p99: f64,
    /// Largest minus smallest ratio over the repeats (0 with one).
    pub redis_throughput_spread: f64,
    pub redis_p99_spread: f64,
    pub pg_throughput_spread: f64,
    pub pg_p99_spread: f64,
    pub be_completed: f64,
    /// Best-effort work over `static`'s.
    pub be_work: f64,
    pub be_work_spread: f64,
    pub lost_s: f64,
    pub kills: f64,
    pub suspensions: f64,
    pub checkpoints: f64,
    pub oom_kills: f64,
    pub prod_stall_s: f64,
    /// Driver rounds that failed (a dead or silent service), all repeats.
    pub failures: usize,
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn spread(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.filter(|x| x.is_finite()).collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.is_empty() {
        f64::NAN
    } else {
        hi - lo
    }
}

/// A figure of a scene.
type Figure = fn(&SceneResult) -> f64;

/// The ratios of one figure of `policy`'s scenes to the `reference`
/// policy's scene of the same repeat (to the reference's mean when that
/// repeat has none).
fn ratios(scenes: &[SceneResult], policy: &str, reference: &str, f: Figure) -> Vec<f64> {
    let references: Vec<&SceneResult> = scenes.iter().filter(|s| s.policy == reference).collect();
    let overall = mean(references.iter().map(|s| f(s)));
    scenes
        .iter()
        .filter(|s| s.policy == policy)
        .map(|s| {
            let base = references.iter().find(|r| r.repeat == s.repeat).map_or(overall, |r| f(r));
            f(s) / base
        })
        .collect()
}

/// Each policy over its repeats: production against `isolated`, best-effort
/// work against `static`, each within its repeat.
pub fn summarize(policies: &[String], scenes: &[SceneResult]) -> Vec<PolicySummary> {
    policies
        .iter()
        .map(|p| {
            let to = |reference: &str, f: Figure| {
                let r = ratios(scenes, p, reference, f);
                (mean(r.iter().copied()), spread(r.iter().copied()))
            };
            let m = |f: Figure| mean(scenes.iter().filter(|s| &s.policy == p).map(f));
            let (redis_throughput, redis_throughput_spread) =
                to("isolated", |s| s.redis.throughput);
            let (redis_p99, redis_p99_spread) = to("isolated", |s| s.redis.p99_ms);
            let (pg_throughput, pg_throughput_spread) = to("isolated", |s| s.postgres.throughput);
            let (pg_p99, pg_p99_spread) = to("isolated", |s| s.postgres.p99_ms);
            let (be_work, be_work_spread) = to("static", |s| s.batch.work_mib_steps as f64);
            PolicySummary {
                policy: p.clone(),
                redis_throughput,
                redis_p50: to("isolated", |s| s.redis.p50_ms).0,
                redis_p99,
                pg_throughput,
                pg_p50: to("isolated", |s| s.postgres.p50_ms).0,
                pg_p99,
                redis_throughput_spread,
                redis_p99_spread,
                pg_throughput_spread,
                pg_p99_spread,
                be_completed: m(|s| s.batch.completed as f64),
                be_work,
                be_work_spread,
                lost_s: m(|s| s.batch.lost_s),
                kills: m(|s| s.batch.kills as f64),
                suspensions: m(|s| s.suspensions as f64),
                checkpoints: m(|s| s.checkpoints as f64),
                oom_kills: m(|s| s.oom_kills as f64),
                prod_stall_s: m(|s| s.prod_stall_s),
                failures: scenes
                    .iter()
                    .filter(|s| &s.policy == p)
                    .map(|s| s.redis.failures.len() + s.postgres.failures.len())
                    .sum(),
            }
        })
        .collect()
}

/// The report as a table.
pub fn table(r: &ColocationReport) -> String {
    let repeats = r.scenes.iter().map(|s| s.repeat + 1).max().unwrap_or(1);
    let mut out = format!(
        "seed {}, {} s a scene, {repeats} repeat(s), node {} MiB (machine {} MiB), \
         production reserved {} MiB, static best-effort {} MiB\n\
         production relative to isolated (x: ratio; ±: spread over repeats), best-effort \
         work relative to static, each within its repeat\n",
        r.seed,
        r.seconds,
        r.capacity / MIB,
        r.machine_memory / MIB,
        r.reserved / MIB,
        r.capacity.saturating_sub(r.reserved) / MIB,
    );
    out.push_str(&format!(
        "{:<18} {:>11} {:>6} {:>12} {:>11} {:>6} {:>12} {:>6} {:>11} {:>7} {:>6} {:>5} {:>5} {:>4} {:>8} {:>5}\n",
        "policy",
        "redis t",
        "r p50",
        "r p99",
        "pg t",
        "pg p50",
        "pg p99",
        "BE ok",
        "BE work",
        "lost s",
        "kills",
        "susp",
        "ckpt",
        "oom",
        "stall s",
        "fail"
    ));
    let f = |x: f64, d: usize| if x.is_finite() { format!("{x:.d$}") } else { "-".into() };
    let pm = |x: f64, spread: f64| format!("{}±{}", f(x, 2), f(spread, 2));
    for s in &r.summary {
        out.push_str(&format!(
            "{:<18} {:>11} {:>6} {:>12} {:>11} {:>6} {:>12} {:>6} {:>11} {:>7} {:>6} {:>5} {:>5} {:>4} {:>8} {:>5}\n",
            s.policy,
            pm(s.redis_throughput, s.redis_throughput_spread),
            f(s.redis_p50, 2),
            pm(s.redis_p99, s.redis_p99_spread),
            pm(s.pg_throughput, s.pg_throughput_spread),
            f(s.pg_p50, 2),
            pm(s.pg_p99, s.pg_p99_spread),
            f(s.be_completed, 1),
            pm(s.be_work, s.be_work_spread),
            f(s.lost_s, 1),
            f(s.kills, 1),
            f(s.suspensions, 1),
            f(s.checkpoints, 1),
            f(s.oom_kills, 1),
            f(s.prod_stall_s, 1),
            s.failures,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::colocation::batch::BatchCounts;
    use crate::bench::colocation::ServiceResult;

    fn scene(policy: &str, repeat: usize, p99: f64, work: u64) -> SceneResult {
        let service = |throughput, p99_ms| ServiceResult {
            requests: 10,
            throughput,
            p50_ms: 1.0,
            p99_ms,
            failures: vec![],
        };
        SceneResult {
            policy: policy.into(),
            repeat,
            redis: service(100.0, p99),
            postgres: service(50.0, 4.0),
            batch: BatchCounts { work_mib_steps: work, ..BatchCounts::default() },
            ..SceneResult::default()
        }
    }

    #[test]
    fn the_summary_is_relative_to_isolated_and_static() {
        let policies: Vec<String> =
            ["isolated", "static", "kernel"].iter().map(|s| s.to_string()).collect();
        let scenes = [
            scene("isolated", 0, 2.0, 0),
            scene("static", 0, 2.0, 100),
            scene("kernel", 0, 5.0, 300),
            scene("kernel", 1, 3.0, 100),
        ];
        let s = summarize(&policies, &scenes);
        assert_eq!(s[0].redis_p99, 1.0);
        // Repeat 1 has no isolated or static scene: the means stand in.
        assert_eq!(s[2].redis_p99, 2.0);
        assert_eq!(s[2].redis_p99_spread, 1.0);
        assert_eq!(s[2].be_work, 2.0);
        assert_eq!(s[2].be_work_spread, 2.0);
        assert_eq!(s[2].redis_throughput, 1.0);
        assert_eq!(s[0].be_work, 0.0);
    }

    #[test]
    fn each_scene_is_paired_with_its_own_repeat() {
        let policies: Vec<String> = ["isolated", "kernel"].iter().map(|s| s.to_string()).collect();
        // The machine ran twice as slow in repeat 1: so did both scenes.
        let scenes = [
            scene("isolated", 0, 10.0, 0),
            scene("kernel", 0, 20.0, 0),
            scene("isolated", 1, 20.0, 0),
            scene("kernel", 1, 40.0, 0),
        ];
        let s = summarize(&policies, &scenes);
        assert_eq!((s[1].redis_p99, s[1].redis_p99_spread), (2.0, 0.0));
        assert_eq!((s[0].redis_p99, s[0].redis_p99_spread), (1.0, 0.0));
    }

    #[test]
    fn a_policy_with_no_work_to_compare_is_not_a_number() {
        let policies: Vec<String> = ["isolated", "static"].iter().map(|s| s.to_string()).collect();
        let scenes = [scene("isolated", 0, 1.0, 0), scene("static", 0, 1.0, 0)];
        let s = summarize(&policies, &scenes);
        assert!(s[1].be_work.is_nan(), "{}", s[1].be_work);
    }
}
