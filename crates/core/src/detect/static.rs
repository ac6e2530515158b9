//! The Mercury baseline (000 §5): best-effort work only gets memory nobody
//! reserved, so there is never oversubscription to detect.

use super::{Detector, Verdict};
use crate::model::{ContainerId, Observation};

#[derive(Debug)]
pub(super) struct Static;

impl Detector for Static {
    fn name(&self) -> &'static str {
        "static"
    }

    fn observe(&mut self, _: &Observation<'_>) -> Verdict {
        Verdict::Calm
    }

    fn clear(&mut self) {}

    fn forget(&mut self, _: ContainerId) {}
}
