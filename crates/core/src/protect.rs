//! Critical containers (000 Table 2: job managers, application masters):
//! their memory is never swapped (swap bypass) and, where the kernel has a
//! memory floor (v2 `memory.min`), never reclaimed either, the floor
//! following their usage up.
//!
//! Why a stage of its own in the core: when to protect and how far to
//! raise a floor are decisions, and the simulator must see the ones the node
//! makes. Production is not protected this way (000 §5.6: its cold pages
//! going to swap is what makes room).

use crate::action::Action;
use crate::model::{Bytes, Class, ContainerStats};
use crate::ContainerId;
use std::collections::{BTreeMap, BTreeSet};

/// A floor is raised only once usage has grown past it by this share...
const RAISE_SHARE: Bytes = 10;
/// ...and by at least this much: not at every sample.
const RAISE_MIN: Bytes = 1 << 20;

/// Which critical containers are protected, and at what floor.
#[derive(Debug, Default)]
pub struct CriticalGuard {
    /// Floors set so far (0 where there is no floor).
    floors: BTreeMap<ContainerId, Bytes>,
    /// Whether the node has memory floors (v2's `memory.min`).
    floors_available: bool,
}

impl CriticalGuard {
    pub fn new(floors_available: bool) -> CriticalGuard {
        CriticalGuard { floors: BTreeMap::new(), floors_available }
    }

    /// The protections due now, appended to `out`: a critical container
    /// with processes, seen for the first time, gets swap bypass and (with
    /// floors) a floor at its usage; its floor is raised to its usage once
    /// that has grown by a tenth (at least 1 MiB) past it. Containers no
    /// longer critical and running are forgotten.
    pub fn plan(&mut self, containers: &[ContainerStats], out: &mut Vec<Action>) {
        let critical = |c: &&ContainerStats| c.class == Class::Critical;
        self.floors.retain(|id, _| containers.iter().filter(critical).any(|c| c.id == *id));
        for c in containers.iter().filter(critical) {
            let floor = self.floors.get(&c.id).copied();
            let grown =
                floor.is_some_and(|f| c.usage > f.saturating_add((f / RAISE_SHARE).max(RAISE_MIN)));
            if floor.is_none() || (self.floors_available && grown) {
                let min = self.floors_available.then_some(c.usage);
                self.floors.insert(c.id, c.usage);
                out.push(Action::Protect { id: c.id, min });
            }
        }
    }
}

/// Production containers whose memory is protected (`protect.production`):
/// each once, when first seen with processes. The kernel's protection
/// holds all of its memory, whatever it grows to; nothing to raise.
#[derive(Debug, Default)]
pub struct ProductionGuard {
    protected: BTreeSet<ContainerId>,
}

impl ProductionGuard {
    /// The protections due now, appended to `out`; containers no longer
    /// there are forgotten (a container of the same id later is new).
    pub fn plan(&mut self, containers: &[ContainerStats], out: &mut Vec<Action>) {
        let production = |c: &&ContainerStats| c.class == Class::Production;
        self.protected.retain(|id| containers.iter().filter(production).any(|c| c.id == *id));
        for c in containers.iter().filter(production) {
            if self.protected.insert(c.id) {
                out.push(Action::ProtectProduction { id: c.id });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobId;
    use crate::Time;

    const MIB: Bytes = 1 << 20;

    fn stats(id: u64, class: Class, usage: Bytes) -> ContainerStats {
        let mut c = ContainerStats::new(ContainerId(id), JobId(id), class, Time::ZERO);
        c.usage = usage;
        c
    }

    fn plan(g: &mut CriticalGuard, cs: &[ContainerStats]) -> Vec<Action> {
        let mut out = Vec::new();
        g.plan(cs, &mut out);
        out
    }

    #[test]
    fn a_critical_container_is_protected_once_and_its_floor_follows_its_growth() {
        let mut g = CriticalGuard::new(true);
        let mut am = stats(1, Class::Critical, 100 * MIB);
        let web = stats(2, Class::Production, 100 * MIB);
        assert_eq!(
            plan(&mut g, &[am.clone(), web.clone()]),
            vec![Action::Protect { id: ContainerId(1), min: Some(100 * MIB) }],
            "production is never protected this way"
        );
        am.usage = 105 * MIB;
        assert!(plan(&mut g, &[am.clone()]).is_empty(), "a twentieth more: not yet");
        am.usage = 111 * MIB;
        assert_eq!(
            plan(&mut g, &[am.clone()]),
            vec![Action::Protect { id: ContainerId(1), min: Some(111 * MIB) }]
        );
        // Gone, then back: protected anew.
        assert!(plan(&mut g, &[]).is_empty());
        assert_eq!(plan(&mut g, &[am]).len(), 1);
    }

    #[test]
    fn production_is_protected_once_while_it_is_there_and_nothing_else_is() {
        let mut g = ProductionGuard::default();
        let web = stats(2, Class::Production, 100 * MIB);
        let am = stats(1, Class::Critical, 100 * MIB);
        let batch = stats(3, Class::BestEffort, 100 * MIB);
        let mut out = Vec::new();
        g.plan(&[am.clone(), web.clone(), batch.clone()], &mut out);
        assert_eq!(out, vec![Action::ProtectProduction { id: ContainerId(2) }]);
        out.clear();
        g.plan(&[web.clone(), batch.clone()], &mut out);
        assert!(out.is_empty(), "once");
        g.plan(&[batch], &mut out);
        g.plan(&[web], &mut out);
        assert_eq!(out, vec![Action::ProtectProduction { id: ContainerId(2) }], "back: anew");
    }

    #[test]
    fn without_floors_only_swap_bypass_once() {
        let mut g = CriticalGuard::new(false);
        let mut am = stats(1, Class::Critical, 10 * MIB);
        assert_eq!(
            plan(&mut g, &[am.clone()]),
            vec![Action::Protect { id: ContainerId(1), min: None }]
        );
        am.usage = 500 * MIB;
        assert!(plan(&mut g, &[am]).is_empty());
    }
}
