//! overbook's production-first preemptor: keep the victim's work where
//! that costs less than the work, and never make production wait longer
//! than it can for the memory.
//!
//! Two ways keep the work: a CRIU checkpoint (004) and a freeze whose
//! memory the kernel then pushes out to swap (002's suspension, made to
//! free memory at once). Each is costed as 004's Algorithm 1 costs a
//! checkpoint: the seconds to move the memory out and back in (dump and
//! restore, or swap-out and swap-in, plus the dumps queued before it); the
//! cheaper one is taken if the victim has run longer than that, else the
//! victim is killed.
//!
//! But until the memory has moved, it is still on the node, so a
//! production container that is stalling now stalls for that long too. Once
//! production waits, a way is open only if it frees the memory within
//! `production_wait`, and that wait counts in its cost (production's
//! seconds are worth at least the victim's); when neither is, a kill frees
//! the memory at once.

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

impl ProductionFirst {
    /// A way to keep the work: `(cost, how)`, if production can wait for
    /// it. `out` is how long it holds the memory; `overhead` what it costs
    /// the victim.
    fn open(
        &self,
        ctx: &PreemptContext,
        out: f64,
        overhead: f64,
        how: Preemption,
    ) -> Option<(f64, Preemption)> {
        if !ctx.production_waiting {
            return Some((overhead, how));
        }
        (out <= self.production_wait.as_secs_f64()).then_some((overhead + out, how))
    }
}

impl Preemptor for ProductionFirst {
    fn name(&self) -> &'static str {
        "production-first"
    }

    fn choose(&self, victim: &ContainerStats, ctx: &PreemptContext) -> Preemption {
        let checkpoint = ctx.can_checkpoint.then(|| {
            let incremental = incremental(self.incremental, victim, ctx);
            let dump = transfer_secs(victim.checkpoint_size(incremental), ctx.store.write);
            let out = dump + ctx.dump_backlog.as_secs_f64();
            let overhead = Adaptive::overhead(victim, ctx, incremental);
            self.open(ctx, out, overhead, Preemption::Checkpoint { incremental })
        });
        let swap = (victim.usage <= ctx.swap_room).then(|| {
            let out = transfer_secs(victim.usage, ctx.swap_write);
            // Out now, and faulted back in when it resumes.
            self.open(ctx, out, 2.0 * out, Preemption::FreezeAndSwapOut)
        });
        let cheapest = [checkpoint.flatten(), swap.flatten()]
            .into_iter()
            .flatten()
            .min_by(|a, b| a.0.total_cmp(&b.0));
        match cheapest {
            Some((overhead, how)) if victim.progress.as_secs_f64() > overhead => how,
            _ => Preemption::Kill,
        }
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
            swap_room: 0,
            swap_write: 1e9,
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

    #[test]
    fn with_swap_room_a_freeze_keeps_the_work_where_a_kill_would_lose_it() {
        let p = preemptor();
        let with_swap = |waiting, write| PreemptContext {
            swap_room: 2 * GB,
            swap_write: write,
            can_checkpoint: false,
            ..ctx(waiting)
        };
        // 0.4 GB out and back in at 1 GB/s: 0.8 s, kept once it ran longer.
        let small = victim(GB * 4 / 10, 2);
        assert_eq!(p.choose(&small, &with_swap(false, 1e9)), Preemption::FreezeAndSwapOut);
        assert_eq!(p.choose(&victim(GB * 4 / 10, 0), &with_swap(false, 1e9)), Preemption::Kill);
        // Production waits 0.4 s for it: can wait, and the wait is a cost.
        assert_eq!(p.choose(&small, &with_swap(true, 1e9)), Preemption::FreezeAndSwapOut);
        assert_eq!(p.choose(&victim(GB * 4 / 10, 1), &with_swap(true, 1e9)), Preemption::Kill);
        // On slow swap production cannot wait for it, however old the victim.
        let old = victim(GB * 4 / 10, 1_000_000);
        assert_eq!(p.choose(&old, &with_swap(true, 1e8)), Preemption::Kill);
        assert_eq!(p.choose(&old, &with_swap(false, 1e8)), Preemption::FreezeAndSwapOut);
        // No room in swap for it: the freeze would free nothing.
        let full = PreemptContext { swap_room: GB / 10, ..with_swap(false, 1e9) };
        assert_eq!(p.choose(&old, &full), Preemption::Kill);
    }

    #[test]
    fn the_cheaper_of_checkpoint_and_swap_is_taken() {
        let p = preemptor();
        let both = |write| PreemptContext { swap_room: 2 * GB, swap_write: write, ..ctx(false) };
        let v = victim(GB, 100);
        // Dump and restore take 2 s; swap out and in 1 s at 2 GB/s, 10 s at 0.2 GB/s.
        assert_eq!(p.choose(&v, &both(2e9)), Preemption::FreezeAndSwapOut);
        assert_eq!(p.choose(&v, &both(2e8)), Preemption::Checkpoint { incremental: false });
    }
}
