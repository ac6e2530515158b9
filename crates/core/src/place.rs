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
    ///
    /// Load is `used / capacity`, compared by cross-multiplication in u128 so
    /// that two nodes are equal exactly when their loads are (floats would
    /// split ties by rounding, and a tie must fall to the queue and the
    /// index). A node of zero capacity can hold nothing: it comes last.
    pub fn placement_order(&self, other: &NodeLoad) -> Ordering {
        self.load_order(other)
            .then(self.queued.cmp(&other.queued))
            .then(self.index.cmp(&other.index))
    }

    fn load_order(&self, other: &NodeLoad) -> Ordering {
        match (self.capacity, other.capacity) {
            (0, 0) => Ordering::Equal,
            (0, _) => Ordering::Greater,
            (_, 0) => Ordering::Less,
            (mine, theirs) => {
                let a = u128::from(self.used) * u128::from(theirs);
                let b = u128::from(other.used) * u128::from(mine);
                a.cmp(&b)
            }
        }
    }
}

/// The best node of `nodes`, if any.
pub fn least_loaded(nodes: &[NodeLoad]) -> Option<usize> {
    nodes.iter().min_by(|a, b| a.placement_order(b)).map(|n| n.index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(index: usize, used: Bytes, capacity: Bytes, queued: usize) -> NodeLoad {
        NodeLoad { index, used, capacity, queued }
    }

    #[test]
    fn the_least_loaded_node_wins_whatever_its_size() {
        // 3/10 = 30 % beats 4/12 ≈ 33 %, whatever the queues.
        let nodes = [node(0, 4, 12, 0), node(1, 3, 10, 5)];
        assert_eq!(least_loaded(&nodes), Some(1));
        assert_eq!(least_loaded(&[]), None);
    }

    #[test]
    fn equal_loads_are_equal_exactly_then_the_shorter_queue_wins() {
        // 1/3 and 2/6 are the same load: the queue decides, not the sizes.
        let c = node(2, 1, 3, 4);
        let d = node(3, 2, 6, 3);
        assert_eq!(c.placement_order(&d), Ordering::Greater);
        assert_eq!(least_loaded(&[c, d]), Some(3));
    }

    #[test]
    fn full_ties_go_to_the_lower_index() {
        let a = node(7, 5, 10, 1);
        let b = node(2, 1, 2, 1);
        assert_eq!(a.placement_order(&b), Ordering::Greater);
        assert_eq!(b.placement_order(&a), Ordering::Less);
        assert_eq!(least_loaded(&[a, b]), Some(2));
        assert_eq!(a.placement_order(&a), Ordering::Equal);
    }

    #[test]
    fn loads_close_below_float_precision_are_still_told_apart() {
        // (2^60 + 1) / 2^61 is more than 1/2 by 2^-61: invisible in f64.
        let cap = 1u64 << 61;
        let a = node(0, (1u64 << 60) + 1, cap, 0);
        let b = node(1, 1u64 << 60, cap, 9);
        assert_eq!(a.placement_order(&b), Ordering::Greater);
        assert_eq!(least_loaded(&[a, b]), Some(1));
    }

    #[test]
    fn a_node_without_capacity_comes_last() {
        let empty = node(0, 0, 0, 0);
        let full = node(1, 10, 10, 100);
        assert_eq!(empty.placement_order(&full), Ordering::Greater);
        assert_eq!(least_loaded(&[empty, full]), Some(1));
        assert_eq!(least_loaded(&[empty, node(1, 0, 0, 0)]), Some(0));
    }
}
