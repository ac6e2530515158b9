//! Placement (000 §4.1): a task goes to the least-loaded node, ties broken by
//! the shorter queue, then by the lower node index (deterministic).

use crate::model::Bytes;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// What the cluster scheduler knows of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeLoad {
    pub index: usize,
    /// Memory in use or charged, bytes.
    pub used: Bytes,
    pub capacity: Bytes,
    /// Tasks waiting in its launcher.
    pub queued: usize,
}

impl NodeLoad {
    /// The placement order: `Less` means `self` is the better place.
    pub fn placement_order(&self, other: &NodeLoad) -> Ordering {
        let _ = other;
        todo!("launcher helper")
    }
}

/// The best node of `nodes`, if any.
pub fn least_loaded(nodes: &[NodeLoad]) -> Option<usize> {
    nodes.iter().min_by(|a, b| a.placement_order(b)).map(|n| n.index)
}
