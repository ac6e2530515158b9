//! 002 §3.2: a guest (best-effort) job thrashes when its page-fault rate has
//! stayed above a threshold for N seconds while its resident set did not
//! grow: a job that keeps paging without growing makes no progress. That job
//! itself is the one suspended, so the trigger names it as the only possible
//! victim. Production and critical containers are never suspects here: 002
//! favours host jobs by suspending guests, it never watches the hosts.
//!
//! The fault rate is major faults plus refaults per second (the two counters
//! the kernel gives per cgroup; an anonymous refault is also a major fault, so
//! swap thrashing counts twice, which only makes it cross the threshold
//! sooner). 002's second condition, "resident set smaller than the job's
//! size", is not checked: a cgroup's eventual size is not known here.

use super::samples::{Sample, Samples};
use super::{Detector, Reason, Trigger, Verdict};
use crate::model::{Bytes, ContainerId, ContainerStats, Observation};
use crate::time::Time;
use std::fmt::Write;
use std::time::Duration;

/// A stretch of high fault rate without growth.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Run {
    since: Time,
    /// Resident set when the run began: growth is measured against it.
    usage: Bytes,
    /// Faults (major + refaults) when the run began, for the reported rate.
    faults: u64,
}

#[derive(Debug)]
pub(super) struct FaultRate {
    threshold: f64,
    duration: Duration,
    rss_growth: f64,
    samples: Samples<Option<Run>>,
}

impl FaultRate {
    pub fn new(threshold: f64, duration: Duration, rss_growth: f64) -> FaultRate {
        FaultRate { threshold, duration, rss_growth, samples: Samples::new() }
    }
}

fn faults(c: &ContainerStats) -> u64 {
    c.faults.major_faults.saturating_add(c.faults.refaults())
}

impl Detector for FaultRate {
    fn name(&self) -> &'static str {
        "fault-rate"
    }

    fn observe(&mut self, obs: &Observation<'_>) -> Verdict {
        let now = obs.now;
        let mut decide_at: Option<Time> = None;
        let mut suspects = Vec::new();
        let mut reason = String::new();
        let mut lasted = Duration::ZERO;
        self.samples.begin();
        for c in obs.containers.iter().filter(|c| c.class.is_preemptible()) {
            let (sample, run) = self.samples.advance(now, c);
            if let Sample::Step(step) = sample {
                let delta = step.major_delta().saturating_add(step.refault_delta());
                if step.rate(delta) > self.threshold {
                    let current = run.get_or_insert(Run {
                        since: step.since,
                        usage: step.usage_before,
                        faults: faults(c).saturating_sub(delta),
                    });
                    // A growing resident set means the faults are bringing in
                    // new memory (progress), not the same pages again; the
                    // stretch starts over from here.
                    if c.usage as f64 > current.usage as f64 * (1.0 + self.rss_growth) {
                        *current = Run { since: now, usage: c.usage, faults: faults(c) };
                    }
                } else {
                    *run = None;
                }
            }
            let Some(r) = *run else { continue };
            let length = now - r.since;
            if length >= self.duration && length > Duration::ZERO {
                let rate = faults(c).saturating_sub(r.faults) as f64 / length.as_secs_f64();
                let sep = if suspects.is_empty() { "" } else { "; " };
                let _ = write!(
                    reason,
                    "{sep}{} faulting {rate:.0}/s for {:.1}s, resident set not growing",
                    c.id,
                    length.as_secs_f64()
                );
                suspects.push(c.id);
                lasted = lasted.max(length);
            } else {
                let at = r.since + self.duration;
                decide_at = Some(decide_at.map_or(at, |d| d.min(at)));
            }
        }
        self.samples.end();
        if !suspects.is_empty() {
            suspects.sort_unstable();
            return Verdict::Fire(Trigger {
                suspects,
                victim_among_suspects: true,
                protected_stalled: false,
                lasted,
                reason: Reason::Text(reason),
            });
        }
        match decide_at {
            Some(decide_at) => Verdict::Watching { decide_at },
            None => Verdict::Calm,
        }
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
    use crate::model::{Class, JobId, NodeStats};

    fn detector() -> FaultRate {
        FaultRate::new(20.0, Duration::from_secs(2), 0.01)
    }

    fn container(id: u64, class: Class, faults: u64, usage: Bytes) -> ContainerStats {
        let mut c = ContainerStats::new(ContainerId(id), JobId(id), class, Time::ZERO);
        c.faults.major_faults = faults;
        c.usage = usage;
        c
    }

    fn at(d: &mut FaultRate, secs: u64, cs: &[ContainerStats]) -> Verdict {
        d.observe(&Observation {
            now: Time::from_secs(secs),
            node: NodeStats::default(),
            containers: cs,
        })
    }

    #[test]
    fn paging_without_growth_fires_on_that_guest_only() {
        let mut d = detector();
        let mut verdicts = Vec::new();
        for s in 0..=2u64 {
            let cs = [
                container(4, Class::BestEffort, 100 * s, 1000),
                container(1, Class::Production, 100 * s, 1000),
            ];
            verdicts.push(at(&mut d, s, &cs));
        }
        assert_eq!(verdicts[0], Verdict::Calm);
        assert_eq!(verdicts[1], Verdict::Watching { decide_at: Time::from_secs(2) });
        let Verdict::Fire(t) = &verdicts[2] else { panic!("{verdicts:?}") };
        assert_eq!(t.suspects, vec![ContainerId(4)]);
        assert!(t.victim_among_suspects);
        assert_eq!(t.lasted, Duration::from_secs(2));
        assert!(t.reason.to_string().contains("c4 faulting 100/s"), "{}", t.reason);
    }

    #[test]
    fn production_and_critical_paging_is_never_suspected() {
        let mut d = detector();
        for s in 0..=10u64 {
            let cs = [
                container(1, Class::Production, 1000 * s, 10),
                container(2, Class::Critical, 1000 * s, 10),
            ];
            assert_eq!(at(&mut d, s, &cs), Verdict::Calm);
        }
    }

    #[test]
    fn a_growing_resident_set_is_progress_not_thrashing() {
        let mut d = detector();
        for s in 0..=10u64 {
            let v = at(&mut d, s, &[container(1, Class::BestEffort, 1000 * s, 1000 + 100 * s)]);
            assert!(!matches!(v, Verdict::Fire(_)), "s={s}: {v:?}");
        }
        // Once it stops growing, two more seconds of paging fire.
        let mut fired_at = None;
        for s in 11..=14u64 {
            if let Verdict::Fire(_) =
                at(&mut d, s, &[container(1, Class::BestEffort, 1000 * s, 2000)])
            {
                fired_at.get_or_insert(s);
            }
        }
        assert_eq!(fired_at, Some(12));
    }

    #[test]
    fn a_rate_at_or_below_threshold_never_fires_and_reset_is_safe() {
        let mut d = detector();
        for s in 0..=5u64 {
            assert_eq!(
                at(&mut d, s, &[container(1, Class::BestEffort, 20 * s, 10)]),
                Verdict::Calm
            );
        }
        assert_eq!(at(&mut d, 6, &[container(1, Class::BestEffort, 0, 10)]), Verdict::Calm);
        d.clear();
        assert_eq!(at(&mut d, 7, &[container(1, Class::BestEffort, 1000, 10)]), Verdict::Calm);
    }
}
