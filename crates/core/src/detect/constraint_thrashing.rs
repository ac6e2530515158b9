//! 000 §3.1 and Algorithm 1 (`cggroup_thrash_threshold`): a container
//! thrashes when its major faults or its refaults have kept increasing for the
//! whole tolerance window (`cgth_time`). Shorter bursts are tolerated: reading
//! back a working set after a kill, or the first pass over a file, makes the
//! counters climb briefly without anyone thrashing (000 §3.1, Figure 4-b).
//!
//! Every container counts, production included: a production container whose
//! file pages are being thrashed is exactly what 000 protects (§5.3,
//! Cassandra), and the victim is then any best-effort container.
//!
//! 000 keeps a circular buffer of samples per cgroup and scans it in one pass
//! for an unbroken increase. Here the result of that scan is kept instead:
//! for each counter, the time its current unbroken increase began. It answers
//! the same question exactly, in constant memory, and unlike a buffer of fixed
//! length it cannot fall short of the window when samples come fast.
//! An interval between two samples counts whole, so callers sample when
//! pressure begins and then often (the agent on PSI wake-ups and its poll,
//! the simulator every `sample_period` while a node thrashes); a `Watching`
//! verdict says when the next look is due.
//!
//! Where the node reports how often its memory was full
//! ([`crate::model::NodeStats::reclaims`]), an interval in which it was never
//! full counts as no increase: after a kill, a container reading its evicted
//! working set back into free memory refaults for as long as that takes
//! (seconds on a slow swap device), and that is recovery, not thrashing.
//!
//! The production-first variant ([`ConstraintThrashing::production_first`])
//! keeps this tolerance for best-effort containers alone, where waiting pays
//! (a brief burst settles by itself and a kill loses work), and gives
//! production and critical containers a short one of their own: their stall
//! is the harm overbook exists to prevent, and it is not repaid by waiting.
//!
//! Per-cgroup PSI (`stall`) is not used: memory stall time also grows during
//! plain reclaim that refaults nothing, so counting it would fire earlier than
//! 000 on pressure that is not thrashing, and thrashing itself already shows
//! in the two counters.

use super::samples::{Sample, Samples, Step};
use super::{Detector, Reason, ThrashHit, Trigger, Verdict};
use crate::model::{ContainerId, Observation};
use crate::time::Time;
use std::time::Duration;

/// An unbroken increase of one counter.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Run {
    /// Start of the first interval of the increase.
    since: Time,
    /// The counter's value then, for the rate reported as evidence.
    base: u64,
    /// The end of the last interval in which it rose.
    rose: Time,
}

/// The longest pause in a counter's rise that does not break it. 000 looks
/// once a second, so a pause shorter than that never showed there; the
/// agent looks every 100 ms while the node is under pressure, and a
/// thrashing container often takes no fault for a tenth of a second. Without
/// this, the faster the look, the later (or never) thrashing was seen.
const PAUSE: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, Default)]
struct Runs {
    major: Option<Run>,
    refault: Option<Run>,
}

#[derive(Debug)]
pub(super) struct ConstraintThrashing {
    name: &'static str,
    tolerance: Duration,
    /// Production's and critical containers' own tolerance, where it is
    /// shorter than best-effort's (the production-first variant).
    protected_tolerance: Duration,
    min_rate: f64,
    samples: Samples<Runs>,
    /// The node's `reclaims` at the last observation.
    last_reclaims: Option<u64>,
    /// Reused between observations so that a calm step allocates nothing.
    hits: Vec<ThrashHit>,
}

impl ConstraintThrashing {
    pub fn new(tolerance: Duration, min_rate: f64) -> ConstraintThrashing {
        ConstraintThrashing {
            name: "constraint-thrashing",
            tolerance,
            protected_tolerance: tolerance,
            min_rate,
            samples: Samples::new(),
            last_reclaims: None,
            hits: Vec::new(),
        }
    }

    /// 000's detector with production and critical containers acted on
    /// once their own thrashing has lasted `protected` (best-effort
    /// containers keep `tolerance`).
    pub fn production_first(
        tolerance: Duration,
        protected: Duration,
        min_rate: f64,
    ) -> ConstraintThrashing {
        let protected_tolerance = protected.min(tolerance);
        ConstraintThrashing {
            name: "production-first",
            protected_tolerance,
            ..ConstraintThrashing::new(tolerance, min_rate)
        }
    }
}

/// Extend `run` over `step` when the counter rose fast enough; end it when
/// it rose too slowly, or has not risen for [`PAUSE`].
fn extend(run: &mut Option<Run>, now: Time, step: &Step, delta: u64, before: u64, min_rate: f64) {
    if delta > 0 && step.rate(delta) >= min_rate {
        run.get_or_insert(Run { since: step.since, base: before, rose: now }).rose = now;
    } else if delta > 0 || run.is_some_and(|r| now - r.rose >= PAUSE) {
        *run = None;
    }
}

impl Detector for ConstraintThrashing {
    fn name(&self) -> &'static str {
        self.name
    }

    fn observe(&mut self, obs: &Observation<'_>) -> Verdict {
        let now = obs.now;
        // Unknown either side: every interval may be thrashing, as in 000.
        let full = match (obs.node.reclaims, self.last_reclaims) {
            (Some(now), Some(before)) => now > before,
            _ => true,
        };
        self.last_reclaims = obs.node.reclaims;
        let mut decide_at: Option<Time> = None;
        self.hits.clear();
        self.samples.begin();
        for c in obs.containers {
            let (sample, runs) = self.samples.advance(now, c);
            if let Sample::Step(step) = sample {
                let (major, refault) =
                    if full { (step.major_delta(), step.refault_delta()) } else { (0, 0) };
                let rate = self.min_rate;
                extend(&mut runs.major, now, &step, major, step.before.major_faults, rate);
                extend(&mut runs.refault, now, &step, refault, step.before.refaults(), rate);
            }
            // Neither counter rising: no hit and nothing to decide (most
            // containers, most looks).
            if runs.major.is_none() && runs.refault.is_none() {
                continue;
            }
            let protected = !c.class.is_preemptible();
            let tolerance = if protected { self.protected_tolerance } else { self.tolerance };
            let mut hit = ThrashHit {
                id: c.id,
                class: c.class,
                lasted: Duration::ZERO,
                major_rate: None,
                refault_rate: None,
            };
            let signals = [
                (runs.major, c.faults.major_faults, &mut hit.major_rate),
                (runs.refault, c.faults.refaults(), &mut hit.refault_rate),
            ];
            let mut lasted = Duration::ZERO;
            for (run, count, rate) in signals {
                let Some(run) = run else { continue };
                // How long it has risen: a pause does not count.
                let length = run.rose - run.since;
                if length >= tolerance {
                    lasted = lasted.max(length);
                    let secs = length.as_secs_f64().max(f64::MIN_POSITIVE);
                    *rate = Some(count.saturating_sub(run.base) as f64 / secs);
                } else {
                    // Rising: decided when the window is full; paused:
                    // when the pause would end it.
                    let at = if run.rose == now { run.since + tolerance } else { run.rose + PAUSE };
                    decide_at = Some(decide_at.map_or(at, |d| d.min(at)));
                }
            }
            if hit.major_rate.is_some() || hit.refault_rate.is_some() {
                hit.lasted = lasted;
                self.hits.push(hit);
            }
        }
        self.samples.end();
        if self.hits.is_empty() {
            return match decide_at {
                Some(decide_at) => Verdict::Watching { decide_at },
                None => Verdict::Calm,
            };
        }
        self.hits.sort_by_key(|h| h.id);
        Verdict::Fire(Trigger {
            suspects: self.hits.iter().map(|h| h.id).collect(),
            victim_among_suspects: false,
            protected_stalled: self.hits.iter().any(|h| !h.class.is_preemptible()),
            lasted: self.hits.iter().map(|h| h.lasted).max().unwrap_or_default(),
            reason: Reason::Thrashing(self.hits.clone()),
        })
    }

    fn clear(&mut self) {
        self.samples.clear();
    }

    fn forget(&mut self, id: ContainerId) {
        self.samples.forget(id);
    }

    fn state_span(&self) -> (usize, usize) {
        self.samples.span()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Class, ContainerStats, JobId, NodeStats};
    use proptest::prelude::*;

    const TOL: Duration = Duration::from_secs(3);

    fn detector() -> ConstraintThrashing {
        ConstraintThrashing::new(TOL, 1.0)
    }

    fn container(id: u64, class: Class, major: u64, refaults: u64) -> ContainerStats {
        let mut c = ContainerStats::new(ContainerId(id), JobId(id), class, Time::ZERO);
        c.faults.major_faults = major;
        c.faults.refault_file = refaults;
        c
    }

    fn at(d: &mut ConstraintThrashing, secs: f64, cs: &[ContainerStats]) -> Verdict {
        d.observe(&Observation {
            now: Time::from_secs_f64(secs),
            node: NodeStats::default(),
            containers: cs,
        })
    }

    #[test]
    fn refaults_into_free_memory_are_recovery_not_thrashing() {
        let mut d = detector();
        let at_node = |d: &mut ConstraintThrashing, secs: f64, reclaims: u64, refaults: u64| {
            d.observe(&Observation {
                now: Time::from_secs_f64(secs),
                node: NodeStats { reclaims: Some(reclaims), ..NodeStats::default() },
                containers: &[container(1, Class::Production, 0, refaults)],
            })
        };
        at_node(&mut d, 0.0, 7, 0);
        // Refaulting for 10 s while the node never ran out of memory: calm.
        for i in 1u32..=20 {
            let v = at_node(&mut d, f64::from(i) * 0.5, 7, 100 * u64::from(i));
            assert_eq!(v, Verdict::Calm, "t={}", f64::from(i) * 0.5);
        }
        // The same refaults while the node keeps hitting its limit: fires
        // once they have lasted the tolerance.
        let mut fired = None;
        for i in 21u32..=30 {
            let t = f64::from(i) * 0.5;
            if let Verdict::Fire(trigger) = at_node(&mut d, t, 7 + u64::from(i), 100 * u64::from(i))
            {
                fired = Some((t, trigger.lasted));
                break;
            }
        }
        let (t, lasted) = fired.expect("fires under pressure");
        assert_eq!(t, 13.0);
        assert_eq!(lasted, TOL);
    }

    /// When (seconds) the detector first fires on a container of `class`
    /// whose refaults climb every 100 ms, and what it says.
    fn first_fire(d: &mut ConstraintThrashing, class: Class) -> Option<(f64, Trigger)> {
        (0..=60u32).find_map(|i| {
            let t = f64::from(i) / 10.0;
            match at(d, t, &[container(1, class, 0, 100 * u64::from(i))]) {
                Verdict::Fire(trigger) => Some((t, trigger)),
                _ => None,
            }
        })
    }

    #[test]
    fn production_first_acts_on_production_at_once_and_tolerates_best_effort() {
        let quick = Duration::from_millis(300);
        for class in [Class::Production, Class::Critical] {
            let mut d = ConstraintThrashing::production_first(TOL, quick, 1.0);
            let (t, trigger) = first_fire(&mut d, class).expect("fires");
            assert!((t - 0.3).abs() < 1e-9, "{class}: {t}");
            assert!(trigger.protected_stalled, "{class}");
            assert!(trigger.reason.to_string().contains(class.as_str()), "{}", trigger.reason);
            assert_eq!(d.name(), "production-first");
        }
        let mut d = ConstraintThrashing::production_first(TOL, quick, 1.0);
        let (t, trigger) = first_fire(&mut d, Class::BestEffort).expect("fires");
        assert!((t - 3.0).abs() < 1e-9, "best-effort keeps 000's tolerance: {t}");
        assert!(!trigger.protected_stalled);
        // 000's detector is unchanged: production waits the whole window.
        let (t, trigger) = first_fire(&mut detector(), Class::Production).expect("fires");
        assert!((t - 3.0).abs() < 1e-9, "{t}");
        assert!(trigger.protected_stalled, "it says who stalled all the same");
    }

    #[test]
    fn brief_thrashing_is_tolerated_and_watched() {
        let mut d = detector();
        assert_eq!(at(&mut d, 0.0, &[container(1, Class::BestEffort, 0, 0)]), Verdict::Calm);
        // Rising for 2.5 s, then flat: never fires.
        for (i, t) in [0.5, 1.0, 1.5, 2.0, 2.5].into_iter().enumerate() {
            let v = at(&mut d, t, &[container(1, Class::BestEffort, 100 * (i as u64 + 1), 0)]);
            assert_eq!(v, Verdict::Watching { decide_at: Time::from_secs(3) }, "t={t}");
        }
        // A pause shorter than a second is watched to its end, then over.
        let v = at(&mut d, 3.0, &[container(1, Class::BestEffort, 500, 0)]);
        assert_eq!(v, Verdict::Watching { decide_at: Time::from_secs_f64(3.5) });
        for t in [3.5, 10.0] {
            assert_eq!(at(&mut d, t, &[container(1, Class::BestEffort, 500, 0)]), Verdict::Calm);
        }
    }

    #[test]
    fn thrashing_sampled_every_100ms_with_faultless_tenths_is_seen() {
        let mut d = detector();
        let mut faults = 0;
        let mut fired = None;
        for i in 0..=60u64 {
            // Faults in two tenths of a second out of three, as a thrashing
            // container's come under a 100 ms look.
            if i % 3 != 0 {
                faults += 20;
            }
            let t = i as f64 * 0.1;
            if let Verdict::Fire(tr) = at(&mut d, t, &[container(1, Class::BestEffort, faults, 0)])
            {
                fired = Some((t, tr.lasted));
                break;
            }
        }
        let (t, lasted) = fired.expect("fires");
        assert!((3.0..3.3).contains(&t), "after the 3 s window, at {t}");
        assert!(lasted >= TOL, "{lasted:?}");
    }

    #[test]
    fn sustained_thrashing_fires_once_per_window_and_clear_resets() {
        let mut d = detector();
        let mut fired = Vec::new();
        for step in 0..=16u64 {
            let t = step as f64 * 0.5;
            let cs = [
                container(7, Class::Production, 0, 1000 * step),
                container(2, Class::BestEffort, 5, 0),
            ];
            if let Verdict::Fire(trig) = at(&mut d, t, &cs) {
                assert_eq!(trig.suspects, vec![ContainerId(7)]);
                assert!(!trig.victim_among_suspects);
                assert!(trig.lasted >= TOL);
                assert!(
                    trig.reason.to_string().contains("c7")
                        && trig.reason.to_string().contains("refaults 2000/s"),
                    "{}",
                    trig.reason
                );
                fired.push(t);
                d.clear();
            }
        }
        // Fires at 3 s; after the clear, 3.5 s is a new baseline, so the next
        // window closes at 6.5 s.
        assert_eq!(fired, vec![3.0, 6.5]);
    }

    #[test]
    fn either_counter_alone_qualifies_and_suspects_are_all_thrashing_containers() {
        let mut d = detector();
        let mut last = Verdict::Calm;
        for s in 0..=3u64 {
            let cs = [
                container(9, Class::BestEffort, 10 * s, 0),
                container(3, Class::Critical, 0, 10 * s),
                container(5, Class::BestEffort, 0, 0),
            ];
            last = at(&mut d, s as f64, &cs);
        }
        let Verdict::Fire(trig) = last else { panic!("expected fire, got {last:?}") };
        assert_eq!(trig.suspects, vec![ContainerId(3), ContainerId(9)]);
    }

    #[test]
    fn slow_increase_below_min_rate_is_not_thrashing() {
        let mut d = ConstraintThrashing::new(TOL, 50.0);
        for s in 0..=10u64 {
            let v = at(&mut d, s as f64, &[container(1, Class::BestEffort, 10 * s, 0)]);
            assert_eq!(v, Verdict::Calm);
        }
    }

    #[test]
    fn a_pause_in_the_increase_restarts_the_window() {
        let mut d = detector();
        let counts = [0, 10, 20, 20, 30, 40, 50];
        let verdicts: Vec<_> = counts
            .iter()
            .enumerate()
            .map(|(s, &n)| at(&mut d, s as f64, &[container(1, Class::BestEffort, n, 0)]))
            .collect();
        assert!(verdicts[..6].iter().all(|v| !matches!(v, Verdict::Fire(_))), "{verdicts:?}");
        assert_eq!(verdicts[5], Verdict::Watching { decide_at: Time::from_secs(6) });
        assert!(matches!(verdicts[6], Verdict::Fire(_)));
    }

    #[test]
    fn counter_reset_restarts_history_without_panicking() {
        let mut d = detector();
        for s in 0..=2u64 {
            at(&mut d, s as f64, &[container(1, Class::BestEffort, u64::MAX - 10 + s, 0)]);
        }
        // Restarted: counters near zero. Not a huge delta, not a fire.
        assert_eq!(at(&mut d, 3.0, &[container(1, Class::BestEffort, 5, 0)]), Verdict::Calm);
        assert_eq!(
            at(&mut d, 4.0, &[container(1, Class::BestEffort, 50, 0)]),
            Verdict::Watching { decide_at: Time::from_secs(6) }
        );
    }

    #[test]
    fn departed_containers_are_dropped() {
        let mut d = detector();
        at(
            &mut d,
            0.0,
            &[container(1, Class::BestEffort, 0, 0), container(2, Class::BestEffort, 0, 0)],
        );
        at(&mut d, 1.0, &[container(2, Class::BestEffort, 0, 0)]);
        assert_eq!(d.samples.len(), 1);
        d.forget(ContainerId(2));
        assert_eq!(d.samples.len(), 0);
    }

    proptest! {
        /// Whatever the counters do (including going backwards), nothing
        /// panics and no fire comes before a full window since the history
        /// last started.
        #[test]
        fn never_fires_before_a_window_has_passed(
            steps in prop::collection::vec(
                (1u64..2_000_000, any::<bool>(), 0u64..5000, 0u64..5000),
                1..60,
            )
        ) {
            let mut d = detector();
            let mut now = Time::ZERO;
            let mut history_start = now;
            let (mut major, mut refaults) = (0u64, 0u64);
            at(&mut d, 0.0, &[container(1, Class::BestEffort, 0, 0)]);
            for (dt_us, reset, dm, dr) in steps {
                now = Time(now.0 + dt_us);
                if reset {
                    if dm < major || dr < refaults {
                        history_start = now;
                    }
                    (major, refaults) = (dm, dr);
                } else {
                    major += dm;
                    refaults += dr;
                }
                let cs = [container(1, Class::BestEffort, major, refaults)];
                let obs = Observation { now, node: NodeStats::default(), containers: &cs };
                let v = d.observe(&obs);
                if let Verdict::Fire(t) = &v {
                    prop_assert!(now - history_start >= TOL);
                    prop_assert!(t.lasted >= TOL);
                }
                if let Verdict::Watching { decide_at } = v {
                    prop_assert!(decide_at > now);
                }
            }
        }
    }
}
