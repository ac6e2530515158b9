//! overbook's production-first preemptor: 004's Algorithm 1 when only
//! best-effort work is waiting, and a kill whenever a checkpoint would make
//! production wait longer than it can.
//!
//! Algorithm 1 weighs the victim's work against the checkpoint's cost to the
//! victim alone. But until the dump ends the victim's memory is still on the
//! node, so a production container that is stalling now stalls for the whole
//! dump (and the dumps queued before it). Here that wait counts too: once
//! production stalls, a checkpoint is chosen only if it ends within
//! `production_wait`, and its cost to the victim then includes the stall it
//! imposes (production's seconds are worth at least the victim's).

use super::adaptive::Adaptive;
use super::{incremental, transfer_secs, PreemptContext, Preemptor};
use crate::action::Preemption;
use crate::model::ContainerStats;
use std::time::Duration;

#[derive(Debug)]
pub(super) struct ProductionFirst {
    pub incremental: bool,
    pub production_wait: Duration,
}

impl Preemptor for ProductionFirst {
    fn name(&self) -> &'static str {
        "production-first"
    }

    fn choose(&self, victim: &ContainerStats, ctx: &PreemptContext) -> Preemption {
        if !ctx.can_checkpoint {
            return Preemption::Kill;
        }
        let incremental = incremental(self.incremental, victim, ctx);
        let mut overhead = Adaptive::overhead(victim, ctx, incremental);
        if ctx.production_waiting {
            let dump = transfer_secs(victim.checkpoint_size(incremental), ctx.store.write);
            let wait = dump + ctx.dump_backlog.as_secs_f64();
            if wait > self.production_wait.as_secs_f64() {
                return Preemption::Kill;
            }
            overhead += wait;
        }
        Adaptive::decide(victim, overhead, incremental)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Class, ContainerId, ImageInfo, JobId};
    use crate::preempt::StoreBandwidth;
    use crate::time::Time;

    const GB: u64 = 1_000_000_000;

    fn ctx(production_waiting: bool) -> PreemptContext {
        PreemptContext {
            now: Time::from_secs(1000),
            store: StoreBandwidth { write: 1e9, read: 1e9, net: 1e9 },
            dump_backlog: Duration::ZERO,
            can_checkpoint: true,
            can_incremental: true,
            production_waiting,
        }
    }

    fn victim(usage: u64, progress_secs: u64) -> ContainerStats {
        let mut c = ContainerStats::new(ContainerId(1), JobId(1), Class::BestEffort, Time::ZERO);
        c.usage = usage;
        c.progress = Duration::from_secs(progress_secs);
        c
    }

    fn preemptor() -> ProductionFirst {
        ProductionFirst { incremental: true, production_wait: Duration::from_millis(500) }
    }

    #[test]
    fn with_only_best_effort_waiting_it_is_algorithm_1() {
        let p = preemptor();
        let a = Adaptive { incremental: true };
        for (usage, progress) in [(GB, 1), (GB, 3), (4 * GB, 9), (4 * GB, 100), (GB / 10, 1)] {
            let v = victim(usage, progress);
            assert_eq!(p.choose(&v, &ctx(false)), a.choose(&v, &ctx(false)), "{usage} {progress}");
        }
    }

    #[test]
    fn a_dump_production_cannot_wait_for_is_a_kill() {
        let p = preemptor();
        // 1 GB dumps in 1 s: longer than production's 0.5 s, however old.
        assert_eq!(p.choose(&victim(GB, 1_000_000), &ctx(true)), Preemption::Kill);
        // 0.4 GB dumps in 0.4 s: production can wait, and its wait is a cost.
        let small = victim(GB * 4 / 10, 2);
        assert_eq!(p.choose(&small, &ctx(true)), Preemption::Checkpoint { incremental: false });
        let young = victim(GB * 4 / 10, 1);
        assert_eq!(p.choose(&young, &ctx(false)), Preemption::Checkpoint { incremental: false });
        assert_eq!(p.choose(&young, &ctx(true)), Preemption::Kill, "0.4 + 0.4 + 0.4 s > 1 s");
        // A queue of earlier dumps is production's wait too.
        let queued = PreemptContext { dump_backlog: Duration::from_millis(200), ..ctx(true) };
        assert_eq!(p.choose(&small, &queued), Preemption::Kill);
    }

    #[test]
    fn an_incremental_dump_can_be_quick_enough() {
        let p = preemptor();
        let mut old = victim(GB, 100);
        old.image = Some(ImageInfo { size: GB, taken_at: Time::ZERO, shared: false });
        old.dirty_fraction = Some(0.1);
        assert_eq!(p.choose(&old, &ctx(true)), Preemption::Checkpoint { incremental: true });
        let no_criu = PreemptContext { can_checkpoint: false, ..ctx(false) };
        assert_eq!(p.choose(&old, &no_criu), Preemption::Kill);
    }
}
