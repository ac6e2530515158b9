//! `bench colocation`'s figures per policy: each scene against the
//! `isolated` and `static` scenes of its own repeat, then the mean over
//! repeats with its 95% bootstrap interval (and the spread).
//!
//! Why pair by repeat: the scenes of one repeat run back to back, while
//! repeats are minutes apart; the machine's speed drifts (under emulation,
//! with the host), so a ratio within a repeat compares like with like.
//! Why a bootstrap: a handful of repeats of ratios that are far from
//! normal (a p99 that explodes in one repeat); resampling the repeats
//! assumes nothing of their shape. Two policies differ when their
//! intervals do not overlap.

use super::{ColocationReport, Phase, SceneResult, ServiceResult};
use crate::bench::MIB;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Resamples drawn for an interval.
const RESAMPLES: usize = 2000;

/// A 95% interval, `[low, high]`; `NaN`s where there is nothing to say.
pub type Interval = [f64; 2];

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
    /// Production's time waiting for a CPU, and on one (means, seconds).
    pub prod_runq_wait_s: f64,
    pub prod_cpu_s: f64,
    /// Best-effort jobs' CPU seconds (mean): production's tail beside them
    /// follows it, whatever their memory.
    pub be_cpu_s: f64,
    /// The benchmark's own CPU seconds (mean): its loop, and overbook's
    /// agent in overbook's scenes.
    pub bench_cpu_s: f64,
    /// Share of the CPU time the hypervisor took (mean over the scenes).
    pub cpu_steal: f64,
    /// Driver rounds that failed (a dead or silent service), all repeats.
    pub failures: usize,
    /// p99 against isolated's in the same phase of the same repeat, by
    /// phase (`Phase`: before the cache fill, during it, after it); empty
    /// where the scenes have no phases.
    pub redis_p99_by_phase: Vec<f64>,
    pub pg_p99_by_phase: Vec<f64>,
    /// PostgreSQL's transactions over `latency::SLOW_US` (a scene's mean);
    /// of them, the share that ended within [`AFTER_START`] after a
    /// best-effort start, and the share of the scene's time that is
    /// (means over the scenes that have windows). Starts hold up production
    /// when the first share is well above the second.
    pub pg_slow_tx: f64,
    pub pg_slow_after_starts: f64,
    pub after_starts_time: f64,
    /// 95% bootstrap intervals of the means above, over the repeats.
    pub redis_throughput_ci: Interval,
    pub redis_p50_ci: Interval,
    pub redis_p99_ci: Interval,
    pub pg_throughput_ci: Interval,
    pub pg_p50_ci: Interval,
    pub pg_p99_ci: Interval,
    pub be_work_ci: Interval,
    /// Repeats counted.
    pub repeats: usize,
}

/// The 95% percentile bootstrap interval of the mean of `xs` (its finite
/// values), drawn with a generator seeded by `seed`: the same report gives
/// the same interval.
pub fn bootstrap_ci(xs: &[f64], seed: u64) -> Interval {
    let v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    match v.len() {
        0 => return [f64::NAN, f64::NAN],
        1 => return [v[0], v[0]],
        _ => {}
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut means: Vec<f64> = (0..RESAMPLES)
        .map(|_| (0..v.len()).map(|_| v[rng.gen_range(0..v.len())]).sum::<f64>() / v.len() as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[overbook_core::convert::to_usize(q * (RESAMPLES - 1) as f64)];
    [at(0.025), at(0.975)]
}

/// How far the `isolated` scenes' production p99 strays from its mean
/// over the repeats, as a share (0.1: within ±10%): the run's own noise.
/// `(Redis, PostgreSQL)`; `NaN` with fewer than two isolated scenes.
pub fn isolated_noise(scenes: &[SceneResult]) -> (f64, f64) {
    let stray = |f: Figure| {
        let v: Vec<f64> = scenes
            .iter()
            .filter(|s| s.policy == "isolated")
            .map(f)
            .filter(|x| x.is_finite())
            .collect();
        if v.len() < 2 {
            return f64::NAN;
        }
        let m = v.iter().sum::<f64>() / v.len() as f64;
        v.iter().map(|x| (x / m - 1.0).abs()).fold(0.0, f64::max)
    };
    (stray(|s| s.redis.p99_ms), stray(|s| s.postgres.p99_ms))
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

/// How long after a best-effort start a window counts as "after a start".
pub const AFTER_START: f64 = 1.0;

/// A scene's PostgreSQL windows beside its best-effort starts: its slow
/// transactions, the share of them in windows that overlap the
/// [`AFTER_START`] after a start, and the share of its windows that do.
/// `None` for a scene with no windows (a report from before them).
pub fn slow_after_starts(s: &SceneResult) -> Option<(f64, f64, f64)> {
    if s.pg_windows.is_empty() {
        return None;
    }
    let width = super::latency::WINDOW_US as f64 / 1e6;
    let mut starts = s.be_starts_s.clone();
    starts.sort_by(f64::total_cmp);
    let (mut slow, mut slow_after, mut after) = (0u64, 0u64, 0usize);
    for (w, &[_, n_slow]) in s.pg_windows.iter().enumerate() {
        let from = w as f64 * width;
        // A start in (from - AFTER_START, from + width): its second overlaps the window.
        let k = starts.partition_point(|&t| t <= from - AFTER_START);
        let near = starts.get(k).is_some_and(|&t| t < from + width);
        slow += u64::from(n_slow);
        if near {
            slow_after += u64::from(n_slow);
            after += 1;
        }
    }
    let share = if slow > 0 { slow_after as f64 / slow as f64 } else { f64::NAN };
    Some((slow as f64, share, after as f64 / s.pg_windows.len() as f64))
}

/// The ratios of one figure of `policy`'s scenes to the `reference`
/// policy's scene of the same repeat (to the reference's mean when that
/// repeat has none).
fn ratios(
    scenes: &[SceneResult],
    policy: &str,
    reference: &str,
    f: impl Fn(&SceneResult) -> f64,
) -> Vec<f64> {
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
            // One generator seed per policy and figure: the same scenes
            // give the same intervals.
            let seed = |figure: u64| {
                p.bytes().fold(figure, |h, b| h.wrapping_mul(0x100_0000_01b3) ^ u64::from(b))
            };
            let to = |reference: &str, f: Figure| {
                let r = ratios(scenes, p, reference, f);
                (mean(r.iter().copied()), spread(r.iter().copied()))
            };
            let ci = |reference: &str, f: Figure, figure: u64| {
                bootstrap_ci(&ratios(scenes, p, reference, f), seed(figure))
            };
            let m = |f: Figure| mean(scenes.iter().filter(|s| &s.policy == p).map(f));
            let by_phase = |service: fn(&SceneResult) -> &ServiceResult| -> Vec<f64> {
                if !scenes.iter().all(|s| service(s).p99_ms_by_phase.len() == Phase::ALL.len()) {
                    return Vec::new();
                }
                Phase::ALL
                    .iter()
                    .map(|&phase| {
                        let p99 = |s: &SceneResult| {
                            service(s)
                                .p99_ms_by_phase
                                .get(phase as usize)
                                .copied()
                                .unwrap_or(f64::NAN)
                        };
                        mean(ratios(scenes, p, "isolated", p99).into_iter())
                    })
                    .collect()
            };
            let (redis_throughput, redis_throughput_spread) =
                to("isolated", |s| s.redis.throughput);
            let (redis_p99, redis_p99_spread) = to("isolated", |s| s.redis.p99_ms);
            let (pg_throughput, pg_throughput_spread) = to("isolated", |s| s.postgres.throughput);
            let (pg_p99, pg_p99_spread) = to("isolated", |s| s.postgres.p99_ms);
            let (be_work, be_work_spread) = to("static", |s| s.batch.work_mib_steps as f64);
            let windows: Vec<(f64, f64, f64)> =
                scenes.iter().filter(|s| &s.policy == p).filter_map(slow_after_starts).collect();
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
                prod_runq_wait_s: m(|s| s.prod_runq_wait_s),
                prod_cpu_s: m(|s| s.prod_cpu_s),
                be_cpu_s: m(|s| s.be_cpu_s),
                bench_cpu_s: m(|s| s.bench_cpu_s),
                pg_slow_tx: mean(windows.iter().map(|w| w.0)),
                pg_slow_after_starts: mean(windows.iter().map(|w| w.1)),
                after_starts_time: mean(windows.iter().map(|w| w.2)),
                cpu_steal: m(|s| s.cpu_steal),
                failures: scenes
                    .iter()
                    .filter(|s| &s.policy == p)
                    .map(|s| s.redis.failures.len() + s.postgres.failures.len())
                    .sum(),
                redis_p99_by_phase: by_phase(|s| &s.redis),
                pg_p99_by_phase: by_phase(|s| &s.postgres),
                redis_throughput_ci: ci("isolated", |s| s.redis.throughput, 1),
                redis_p50_ci: ci("isolated", |s| s.redis.p50_ms, 2),
                redis_p99_ci: ci("isolated", |s| s.redis.p99_ms, 3),
                pg_throughput_ci: ci("isolated", |s| s.postgres.throughput, 4),
                pg_p50_ci: ci("isolated", |s| s.postgres.p50_ms, 5),
                pg_p99_ci: ci("isolated", |s| s.postgres.p99_ms, 6),
                be_work_ci: ci("static", |s| s.batch.work_mib_steps as f64, 7),
                repeats: scenes.iter().filter(|s| &s.policy == p).count(),
            }
        })
        .collect()
}

/// The report as a table.
pub fn table(r: &ColocationReport) -> String {
    let repeats = r.scenes.iter().map(|s| s.repeat + 1).max().unwrap_or(1);
    let mode = if r.native.is_some() { "native, a node cgroup" } else { "the whole machine" };
    let mut out = format!(
        "{mode}: seed {}, {} s a scene, {repeats} repeat(s), node {} MiB (machine {} MiB), \
         production reserved {} MiB, static best-effort {} MiB\n\
         production relative to isolated, best-effort work relative to static, each within \
         its repeat: the mean ratio [its 95% bootstrap interval over the repeats]; production's \
         slowdown from memory (stall s: PSI) apart from CPU (runq s: waiting for a CPU; \
         BE cpu s: the best-effort jobs' CPU time; own cpu s: the benchmark's, with overbook's \
         agent in its scenes); steal: the CPU time the hypervisor took from the machine\n",
        r.seed,
        r.seconds,
        r.capacity / MIB,
        r.machine_memory / MIB,
        r.reserved / MIB,
        r.capacity.saturating_sub(r.reserved) / MIB,
    );
    let reruns: usize = r.scenes.iter().map(|s| s.reruns).sum();
    let stolen = r.scenes.iter().filter(|s| s.cpu_steal > r.max_steal).count();
    if reruns > 0 || stolen > 0 {
        out.push_str(&format!(
            "the host took more than {:.1}% of the CPU: {reruns} scene(s) ran again; {stolen} \
             counted all the same after {} tries\n",
            r.max_steal * 100.0,
            super::STEAL_RERUNS + 1
        ));
    }
    let (redis_noise, pg_noise) = isolated_noise(&r.scenes);
    if redis_noise.is_finite() || pg_noise.is_finite() {
        let pct = |x: f64| if x.is_finite() { format!("±{:.0}%", x * 100.0) } else { "-".into() };
        out.push_str(&format!(
            "noise: isolated's own p99 strays from its mean by Redis {}, PostgreSQL {} \
             (a difference inside it is no difference)\n",
            pct(redis_noise),
            pct(pg_noise)
        ));
    }
    out.push_str(&format!(
        "{:<18} {:>17} {:>6} {:>17} {:>17} {:>6} {:>17} {:>6} {:>17} {:>7} {:>6} {:>5} {:>5} {:>4} {:>8} {:>7} {:>8} {:>9} {:>6} {:>5}\n",
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
        "runq s",
        "BE cpu s",
        "own cpu s",
        "steal",
        "fail"
    ));
    let f = |x: f64, d: usize| if x.is_finite() { format!("{x:.d$}") } else { "-".into() };
    let with = |x: f64, ci: Interval| {
        if ci[0].is_finite() && ci[1].is_finite() && ci[0] < ci[1] {
            format!("{} [{}-{}]", f(x, 2), f(ci[0], 2), f(ci[1], 2))
        } else {
            f(x, 2)
        }
    };
    for s in &r.summary {
        out.push_str(&format!(
            "{:<18} {:>17} {:>6} {:>17} {:>17} {:>6} {:>17} {:>6} {:>17} {:>7} {:>6} {:>5} {:>5} {:>4} {:>8} {:>7} {:>8} {:>9} {:>6} {:>5}\n",
            s.policy,
            with(s.redis_throughput, s.redis_throughput_ci),
            f(s.redis_p50, 2),
            with(s.redis_p99, s.redis_p99_ci),
            with(s.pg_throughput, s.pg_throughput_ci),
            f(s.pg_p50, 2),
            with(s.pg_p99, s.pg_p99_ci),
            f(s.be_completed, 1),
            with(s.be_work, s.be_work_ci),
            f(s.lost_s, 1),
            f(s.kills, 1),
            f(s.suspensions, 1),
            f(s.checkpoints, 1),
            f(s.oom_kills, 1),
            f(s.prod_stall_s, 1),
            f(s.prod_runq_wait_s, 1),
            f(s.be_cpu_s, 1),
            f(s.bench_cpu_s, 1),
            format!("{}%", f(s.cpu_steal * 100.0, 1)),
            s.failures,
        ));
    }
    if r.summary.iter().any(|s| !s.pg_p99_by_phase.is_empty()) {
        out.push_str(
            "p99 by phase, against isolated's in the same phase: before the cache fill / \
             during it (production takes its memory back) / after it\n",
        );
        out.push_str(&format!("{:<18} {:>20} {:>20}\n", "policy", "redis p99", "pg p99"));
        let phases = |v: &[f64]| v.iter().map(|&x| f(x, 2)).collect::<Vec<_>>().join(" / ");
        for s in r.summary.iter().filter(|s| s.policy != "isolated") {
            out.push_str(&format!(
                "{:<18} {:>20} {:>20}\n",
                s.policy,
                phases(&s.redis_p99_by_phase),
                phases(&s.pg_p99_by_phase)
            ));
        }
    }
    if r.summary.iter().any(|s| s.pg_slow_tx.is_finite()) {
        out.push_str(&format!(
            "PostgreSQL's transactions over {} ms (a scene's), and the share of them that ended \
             within {AFTER_START:.0} s after a best-effort start, against the share of the \
             scene's time that is\n",
            super::latency::SLOW_US as f64 / 1000.0
        ));
        out.push_str(&format!(
            "{:<18} {:>8} {:>22}\n",
            "policy", "slow tx", "after starts: tx / time"
        ));
        let pct = |x: f64| if x.is_finite() { format!("{:.0}%", x * 100.0) } else { "-".into() };
        for s in r.summary.iter().filter(|s| s.pg_slow_tx.is_finite()) {
            out.push_str(&format!(
                "{:<18} {:>8} {:>22}\n",
                s.policy,
                f(s.pg_slow_tx, 0),
                format!("{} / {}", pct(s.pg_slow_after_starts), pct(s.after_starts_time))
            ));
        }
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
            p99_ms_by_phase: vec![],
            failures: vec![],
        };
        SceneResult {
            policy: policy.into(),
            repeat,
            redis: service(100.0, p99),
            postgres: service(50.0, 4.0),
            batch: BatchCounts { work_mib_steps: work, ..BatchCounts::default() },
            be_cpu_s: work as f64 / 100.0,
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
        // The jobs' CPU time is a mean of seconds, not a ratio.
        assert_eq!(s[2].be_cpu_s, 2.0);
        assert_eq!(s[1].be_cpu_s, 1.0);
    }

    fn report(scenes: &[SceneResult]) -> ColocationReport {
        ColocationReport {
            seed: 1,
            seconds: 90,
            machine_memory: 4 << 30,
            capacity: 2 << 30,
            native: None,
            reserved: 1 << 30,
            headroom: 200 << 20,
            sizes: crate::bench::colocation::services::ServiceSizes {
                redis_base: 0,
                redis_burst: 0,
                pg_scale: 1,
            },
            pg_bytes: 0,
            pg_rate: 100.0,
            redis_round: 100,
            jobs: vec![],
            scenes: scenes.to_vec(),
            summary: vec![],
            earlyoom_args: vec![],
            max_steal: 1.0,
        }
    }

    #[test]
    fn the_tail_is_told_apart_by_phase_only_where_every_scene_has_phases() {
        let policies: Vec<String> = ["isolated", "kernel"].iter().map(|s| s.to_string()).collect();
        let phased = |policy, repeat, pg: [f64; 3]| {
            let mut s = scene(policy, repeat, 1.0, 0);
            s.redis.p99_ms_by_phase = vec![1.0; 3];
            s.postgres.p99_ms_by_phase = pg.to_vec();
            s
        };
        let mut scenes = vec![
            phased("isolated", 0, [1.0, 1.0, 2.0]),
            phased("kernel", 0, [1.0, 4.0, 2.0]),
            phased("isolated", 1, [2.0, 2.0, 2.0]),
            phased("kernel", 1, [2.0, 4.0, 3.0]),
        ];
        let s = summarize(&policies, &scenes);
        assert_eq!(s[1].pg_p99_by_phase, vec![1.0, 3.0, 1.25]);
        assert_eq!(s[1].redis_p99_by_phase, vec![1.0; 3]);
        let r = ColocationReport { summary: s, ..report(&scenes) };
        assert!(table(&r).contains("1.00 / 3.00 / 1.25"), "{}", table(&r));
        // A report from before phases: no figures, no section.
        scenes[0].postgres.p99_ms_by_phase.clear();
        let s = summarize(&policies, &scenes);
        assert!(s[1].pg_p99_by_phase.is_empty());
        assert!(!table(&ColocationReport { summary: s, ..report(&scenes) }).contains("by phase"));
    }

    #[test]
    fn slow_transactions_are_told_apart_by_whether_a_start_came_just_before() {
        let mut s = scene("overbook", 0, 1.0, 0);
        assert_eq!(slow_after_starts(&s), None, "no windows: nothing to say");
        // Eleven windows of 100 ms; starts at 0.25 s and 0.95 s reach the
        // windows from 0.2 s on (2 to 10).
        s.pg_windows = vec![[10, 0]; 11];
        s.pg_windows[0] = [10, 4];
        s.pg_windows[2] = [10, 1];
        s.pg_windows[10] = [10, 5];
        s.be_starts_s = vec![0.95, 0.25];
        let (slow, share, time) = slow_after_starts(&s).expect("windows");
        assert_eq!(slow, 10.0);
        assert!((share - 0.6).abs() < 1e-9, "{share}");
        assert!((time - 9.0 / 11.0).abs() < 1e-9, "{time}");
        // A start 1 s or more before a window does not reach it (1.0 s on).
        s.be_starts_s = vec![0.0];
        let (_, share, time) = slow_after_starts(&s).expect("windows");
        assert!((share - 0.5).abs() < 1e-9, "{share}");
        assert!((time - 10.0 / 11.0).abs() < 1e-9, "{time}");
        s.be_starts_s = vec![];
        assert_eq!(slow_after_starts(&s).map(|w| (w.1, w.2)), Some((0.0, 0.0)));
        let policies = vec!["isolated".to_string(), "overbook".to_string()];
        let scenes = [scene("isolated", 0, 1.0, 0), s];
        let summary = summarize(&policies, &scenes);
        assert!(summary[0].pg_slow_tx.is_nan());
        assert_eq!(summary[1].pg_slow_tx, 10.0);
        let text = table(&ColocationReport { summary, ..report(&scenes) });
        assert!(text.contains("over 2 ms"), "{text}");
        assert!(text.contains("0% / 0%"), "{text}");
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

    #[test]
    fn an_interval_holds_the_mean_narrows_with_agreement_and_is_repeatable() {
        let ci = bootstrap_ci(&[1.0, 1.1, 0.9, 1.05, 0.95], 7);
        assert!(ci[0] <= 1.0 && 1.0 <= ci[1], "{ci:?}");
        assert!(ci[0] >= 0.9 && ci[1] <= 1.1, "inside the data: {ci:?}");
        assert_eq!(ci, bootstrap_ci(&[1.0, 1.1, 0.9, 1.05, 0.95], 7), "seeded");
        let wide = bootstrap_ci(&[0.5, 1.5, 0.5, 1.5, 1.0], 7);
        assert!(wide[1] - wide[0] > ci[1] - ci[0], "{wide:?} vs {ci:?}");
        assert_eq!(bootstrap_ci(&[2.0], 1), [2.0, 2.0]);
        assert!(bootstrap_ci(&[f64::NAN], 1)[0].is_nan());
    }

    #[test]
    fn the_noise_is_isolated_s_own_stray_from_its_mean() {
        let scenes = [scene("isolated", 0, 9.0, 0), scene("isolated", 1, 11.0, 0)];
        let (redis, pg) = isolated_noise(&scenes);
        assert!((redis - 0.1).abs() < 1e-9, "{redis}");
        assert_eq!(pg, 0.0);
        assert!(isolated_noise(&scenes[..1]).0.is_nan(), "one repeat says nothing");
        let policies: Vec<String> = ["isolated", "kernel"].iter().map(|s| s.to_string()).collect();
        let scenes = [
            scene("isolated", 0, 10.0, 0),
            scene("kernel", 0, 20.0, 0),
            scene("isolated", 1, 10.0, 0),
            scene("kernel", 1, 30.0, 0),
        ];
        let s = summarize(&policies, &scenes);
        assert_eq!(s[1].repeats, 2);
        assert!(
            s[1].redis_p99_ci[0] >= 2.0 && s[1].redis_p99_ci[1] <= 3.0,
            "{:?}",
            s[1].redis_p99_ci
        );
    }
}
