//! Preemptors that always pay the same way (kill, freeze, freeze and swap
//! out), and the always-checkpoint one of 004 §3.

use super::{PreemptContext, Preemptor};
use crate::action::Preemption;
use crate::model::ContainerStats;

/// Always the same preemption.
#[derive(Debug)]
pub(super) struct Fixed {
    pub name: &'static str,
    pub how: Preemption,
}

impl Preemptor for Fixed {
    fn name(&self) -> &'static str {
        self.name
    }

    fn choose(&self, _: &ContainerStats, _: &PreemptContext) -> Preemption {
        self.how
    }
}

/// Always checkpoint; incrementally when configured, supported here, and the
/// victim has an earlier image to build on.
#[derive(Debug)]
pub(super) struct Checkpoint {
    pub incremental: bool,
}

impl Preemptor for Checkpoint {
    fn name(&self) -> &'static str {
        "checkpoint"
    }

    fn choose(&self, victim: &ContainerStats, ctx: &PreemptContext) -> Preemption {
        // The memory must come back either way; where CRIU cannot dump, the
        // only other way that frees it is a kill.
        if !ctx.can_checkpoint {
            return Preemption::Kill;
        }
        Preemption::Checkpoint { incremental: super::incremental(self.incremental, victim, ctx) }
    }
}
