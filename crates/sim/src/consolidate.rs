//! 001's consolidation scenario on every node (`[workload] kind =
//! "consolidation"`): three containers, of which only two fit at once.
//!
//! * A (priority 10, high band) is active throughout, 840 s of work; it warms
//!   up over its first 100 s and then keeps demanding memory (its usage moves
//!   by a few MiB every few seconds, as a database's buffers do);
//! * B (priority 5, medium band) warms up over 50 s, works until 240 s, is
//!   idle for 360 s, and works again to the end: 600 s of work;
//! * C (priority 1, low band) boots at 360 s, ramping up to its memory over
//!   `boot_ramp` of work, and works 120 s.
//!
//! All three are production containers with a request of 30% of the node, so
//! the production scheduler puts one of each on every node (the containers of
//! 001 are placed, not queued); their memory is what the shares say, above
//! the request. C's submission and size vary by up to `jitter` and 10% per
//! node (seeded), so the nodes are not copies of one another.

use crate::units::Span;
use crate::workload::{MemProfile, Pause, TaskKey, TaskSpec, TraceError, WorkloadEvent};
use overbook_core::{Bytes, Class, JobId, Time};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

const ACTIVE_WORK: u64 = 840;
const ACTIVE_WARMUP: u64 = 100;
const IDLE_WARMUP: u64 = 50;
const IDLE_AT: u64 = 240;
const IDLE_FOR: u64 = 360;
const BOOT_AT: u64 = 360;
const BOOT_WORK: u64 = 120;
/// Steps of a warm-up or boot ramp.
const RAMP_STEPS: u64 = 20;
/// A's churn after its warm-up: every this many seconds of work, its usage
/// moves by `CHURN`.
const CHURN_PERIOD: u64 = 5;
const CHURN: Bytes = 16 << 20;
const REQUEST_SHARE: f64 = 0.3;

/// `[workload]` with `kind = "consolidation"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsolidationConfig {
    /// A's memory (active throughout), as a share of the node's.
    pub active_memory: f64,
    /// B's memory (idle in the middle), as a share of the node's.
    pub idle_memory: f64,
    /// C's memory once booted, as a share of the node's.
    pub boot_memory: f64,
    /// Work over which C grows to its memory.
    pub boot_ramp: Span,
    /// Weights of A, B and C for the `weighted` reclaimer (003).
    pub weights: [u32; 3],
    /// Up to how much earlier or later than 360 s C boots on a node.
    pub jitter: Span,
}

impl Default for ConsolidationConfig {
    fn default() -> ConsolidationConfig {
        ConsolidationConfig {
            active_memory: 0.45,
            idle_memory: 0.45,
            boot_memory: 0.25,
            boot_ramp: Span(Duration::from_secs(10)),
            weights: [3, 1, 2],
            jitter: Span(Duration::from_secs(30)),
        }
    }
}

impl ConsolidationConfig {
    /// Read `[workload]` (without its `kind`); the error names its key.
    pub fn from_table(table: &toml::Table) -> Result<ConsolidationConfig, (String, String)> {
        let cfg: ConsolidationConfig =
            serde_path_to_error::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
                (e.path().to_string(), overbook_core::config::plain_words(e.inner().message()))
            })?;
        for (key, v) in [
            ("active_memory", cfg.active_memory),
            ("idle_memory", cfg.idle_memory),
            ("boot_memory", cfg.boot_memory),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return Err((key.into(), format!("{v} must be above 0 and at most 1")));
            }
        }
        if cfg.weights.contains(&0) {
            return Err(("weights".into(), "every weight must be at least 1".into()));
        }
        if cfg.boot_ramp.0.as_secs() >= BOOT_WORK {
            return Err(("boot_ramp".into(), format!("must be under C's {BOOT_WORK} s of work")));
        }
        if cfg.jitter.0.as_secs() >= BOOT_AT - IDLE_AT {
            return Err((
                "jitter".into(),
                "must be under 120 s, so C boots while B is idle".into(),
            ));
        }
        Ok(cfg)
    }

    /// The workload on `nodes` nodes of `node_memory`, in time order.
    pub fn stream(
        &self,
        nodes: usize,
        node_memory: Bytes,
        seed: u64,
    ) -> impl Iterator<Item = Result<WorkloadEvent, TraceError>> + Send {
        let share = |s: f64| overbook_core::convert::to_u64(s * node_memory as f64);
        let request = share(REQUEST_SHARE);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0001_acdc);
        let mut tasks = VecDeque::new();
        let spec = |key: u64, job: u64, priority: u8, weight: u32| TaskSpec {
            key: TaskKey(key),
            job: JobId(job),
            submit: Time::ZERO,
            class: Class::Production,
            priority,
            request,
            cpus: 1.0,
            work: None,
            profile: MemProfile::default(),
            weight,
            pauses: Vec::new(),
        };
        let [wa, wb, wc] = self.weights;
        let n = nodes as u64;
        // All A's, then all B's: the scheduler then gives each node one of each.
        for i in 0..n {
            let mut a = spec(i, 0, 10, wa);
            a.work = Some(secs(ACTIVE_WORK));
            a.profile = active_profile(share(self.active_memory));
            tasks.push_back(a);
        }
        for i in 0..n {
            let mut b = spec(n + i, 1, 5, wb);
            b.work = Some(secs(ACTIVE_WORK - IDLE_FOR));
            b.profile = ramp(share(self.idle_memory), secs(IDLE_WARMUP), Duration::ZERO);
            b.pauses = vec![Pause { at: secs(IDLE_AT), length: secs(IDLE_FOR) }];
            tasks.push_back(b);
        }
        let jitter = self.jitter.0.as_secs_f64();
        let mut boots: Vec<TaskSpec> = (0..n)
            .map(|i| {
                let mut c = spec(2 * n + i, 2, 1, wc);
                let shift = rng.gen_range(-jitter..=jitter);
                c.submit = Time::ZERO + Duration::from_secs_f64(BOOT_AT as f64 + shift);
                c.work = Some(secs(BOOT_WORK));
                let mem = share(self.boot_memory * rng.gen_range(0.9..=1.1));
                c.profile = ramp(mem, self.boot_ramp.0, Duration::ZERO);
                c
            })
            .collect();
        boots.sort_by_key(|c| (c.submit, c.key));
        tasks.extend(boots);
        tasks.into_iter().map(|t| Ok(WorkloadEvent::Submit(t)))
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// From a step up to `mem` in `RAMP_STEPS` steps over `over` of work, starting at `from`.
fn ramp(mem: Bytes, over: Duration, from: Duration) -> MemProfile {
    let points = (1..=RAMP_STEPS)
        .map(|k| {
            (
                from + over * overbook_core::convert::u64_to_u32(k - 1)
                    / overbook_core::convert::u64_to_u32(RAMP_STEPS),
                mem * k / RAMP_STEPS,
            )
        })
        .collect();
    MemProfile::from_points(points)
}

/// A: warm up, then churn a little below and back up to `mem` to the end.
fn active_profile(mem: Bytes) -> MemProfile {
    let mut points = ramp(mem, secs(ACTIVE_WARMUP), Duration::ZERO).to_points();
    let mut t = ACTIVE_WARMUP + CHURN_PERIOD;
    let mut low = true;
    while t < ACTIVE_WORK {
        points.push((secs(t), if low { mem.saturating_sub(CHURN) } else { mem }));
        low = !low;
        t += CHURN_PERIOD;
    }
    MemProfile::from_points(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_of_each_per_node_in_time_order() {
        let cfg = ConsolidationConfig::default();
        let events: Vec<WorkloadEvent> =
            cfg.stream(4, 4 << 30, 7).map(|e| e.expect("no trace errors")).collect();
        assert_eq!(events.len(), 12);
        let at: Vec<Time> = events.iter().map(WorkloadEvent::at).collect();
        assert!(at.windows(2).all(|w| w[0] <= w[1]), "{at:?}");
        let again: Vec<WorkloadEvent> = cfg.stream(4, 4 << 30, 7).map(|e| e.expect("ok")).collect();
        assert_eq!(events, again, "the same seed gives the same workload");
        let WorkloadEvent::Submit(b) = &events[4] else { panic!("submits only") };
        assert_eq!(b.pauses.len(), 1);
        assert_eq!(b.profile.peak(), overbook_core::convert::to_u64(0.45 * (4u64 << 30) as f64));
    }

    #[test]
    fn bad_settings_name_their_key() {
        let table: toml::Table = toml::from_str("weights = [1, 0, 2]").expect("toml");
        assert_eq!(ConsolidationConfig::from_table(&table).unwrap_err().0, "weights");
        let table: toml::Table = toml::from_str("boot_memory = 2.0").expect("toml");
        assert_eq!(ConsolidationConfig::from_table(&table).unwrap_err().0, "boot_memory");
        let table: toml::Table = toml::from_str("no_such = 1").expect("toml");
        assert!(ConsolidationConfig::from_table(&table).is_err());
    }
}
