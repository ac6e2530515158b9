//! 004 §4.1 Algorithm 1: checkpoint a victim only when the work it has done
//! exceeds what checkpointing it costs (dump, restore, and the wait for the
//! node's one-at-a-time dump queue); otherwise a kill loses less.

use super::{incremental, transfer_secs, PreemptContext, Preemptor};
use crate::action::Preemption;
use crate::model::ContainerStats;

#[derive(Debug)]
pub(super) struct Adaptive {
    pub incremental: bool,
}

impl Adaptive {
    /// Algorithm 1's `overhead_chkpt`, seconds. An incremental dump writes
    /// only the dirty share, but a restore reads the whole image chain back,
    /// so the two sizes differ (004 Table 3 shows only the dump shrinking).
    pub fn overhead(victim: &ContainerStats, ctx: &PreemptContext, incremental: bool) -> f64 {
        let dump = transfer_secs(victim.checkpoint_size(incremental), ctx.store.write);
        let restore = transfer_secs(victim.checkpoint_size(false), ctx.store.read);
        dump + restore + ctx.dump_backlog.as_secs_f64()
    }

    /// Algorithm 1's choice: checkpoint when the work done exceeds
    /// `overhead` seconds, else kill.
    pub fn decide(victim: &ContainerStats, overhead: f64, incremental: bool) -> Preemption {
        if victim.progress.as_secs_f64() > overhead {
            Preemption::Checkpoint { incremental }
        } else {
            Preemption::Kill
        }
    }
}

impl Preemptor for Adaptive {
    fn name(&self) -> &'static str {
        "adaptive"
    }

    fn choose(&self, victim: &ContainerStats, ctx: &PreemptContext) -> Preemption {
        if !ctx.can_checkpoint {
            return Preemption::Kill;
        }
        let incremental = incremental(self.incremental, victim, ctx);
        Adaptive::decide(victim, Adaptive::overhead(victim, ctx, incremental), incremental)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Class, ContainerId, ImageInfo, JobId};
    use crate::preempt::StoreBandwidth;
    use crate::time::Time;
    use std::time::Duration;

    const GB: u64 = 1_000_000_000;

    fn ctx() -> PreemptContext {
        PreemptContext {
            now: Time::from_secs(1000),
            store: StoreBandwidth { write: 1e9, read: 1e9, net: 1e9 },
            dump_backlog: Duration::ZERO,
            can_checkpoint: true,
            can_incremental: true,
            production_waiting: false,
            swap_room: 0,
            swap_write: 1e9,
        }
    }

    /// 1 GB resident: a full checkpoint costs 1 s to dump + 1 s to restore.
    fn victim(progress_secs: u64) -> ContainerStats {
        let mut c = ContainerStats::new(ContainerId(1), JobId(1), Class::BestEffort, Time::ZERO);
        c.usage = GB;
        c.progress = Duration::from_secs(progress_secs);
        c
    }

    fn with_image(mut c: ContainerStats, dirty: f64) -> ContainerStats {
        c.image = Some(ImageInfo { size: GB, taken_at: Time::ZERO, shared: false });
        c.dirty_fraction = Some(dirty);
        c
    }

    #[test]
    fn kills_young_tasks_and_checkpoints_old_ones() {
        let p = Adaptive { incremental: true };
        assert_eq!(p.choose(&victim(1), &ctx()), Preemption::Kill);
        assert_eq!(p.choose(&victim(2), &ctx()), Preemption::Kill);
        assert_eq!(p.choose(&victim(3), &ctx()), Preemption::Checkpoint { incremental: false });
    }

    #[test]
    fn the_dump_queue_counts_as_overhead() {
        let p = Adaptive { incremental: true };
        let busy = PreemptContext { dump_backlog: Duration::from_secs(60), ..ctx() };
        assert_eq!(p.choose(&victim(30), &busy), Preemption::Kill);
        assert_eq!(p.choose(&victim(63), &busy), Preemption::Checkpoint { incremental: false });
    }

    #[test]
    fn incremental_only_with_an_earlier_image_where_supported() {
        let p = Adaptive { incremental: true };
        let old = with_image(victim(100), 0.1);
        assert_eq!(p.choose(&old, &ctx()), Preemption::Checkpoint { incremental: true });
        let no_soft_dirty = PreemptContext { can_incremental: false, ..ctx() };
        assert_eq!(p.choose(&old, &no_soft_dirty), Preemption::Checkpoint { incremental: false });
        assert_eq!(
            Adaptive { incremental: false }.choose(&old, &ctx()),
            Preemption::Checkpoint { incremental: false }
        );
    }

    #[test]
    fn a_cheaper_incremental_dump_can_tip_the_choice() {
        // Full: 1 + 1 = 2 s > 1.5 s of progress. Incremental: 0.1 + 1 = 1.1 s < 1.5 s.
        let mut c = with_image(victim(0), 0.1);
        c.progress = Duration::from_millis(1500);
        assert_eq!(Adaptive { incremental: false }.choose(&c, &ctx()), Preemption::Kill);
        assert_eq!(
            Adaptive { incremental: true }.choose(&c, &ctx()),
            Preemption::Checkpoint { incremental: true }
        );
    }

    #[test]
    fn without_checkpoints_or_bandwidth_it_kills() {
        let p = Adaptive { incremental: true };
        let no_criu = PreemptContext { can_checkpoint: false, ..ctx() };
        assert_eq!(p.choose(&victim(1_000_000), &no_criu), Preemption::Kill);
        for bw in [0.0, -1.0, f64::NAN] {
            let broken = PreemptContext {
                store: StoreBandwidth { write: bw, read: 1e9, net: 1e9 },
                ..ctx()
            };
            assert_eq!(p.choose(&victim(1_000_000), &broken), Preemption::Kill, "write={bw}");
        }
    }
}
