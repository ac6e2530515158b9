//! The placement index: every node's load key, to find the least-loaded node
//! (000 §4.1: least loaded, then the shorter queue, then the lower index).
//! It is the cluster scheduler's rule, not a node's: the simulator's alone
//! (the core's unused copy, exact where this rounds load to parts per
//! million, was removed rather than made to change every run's placement).
//!
//! A tournament tree over the nodes. Keys change on every memory change while
//! placement asks only on submissions and resumes, so a changed key is only
//! marked, and the tree catches up when asked.
//!
//! Each subtree keeps its winner's key itself, packed in a `u128` in the
//! key's order: catching up compares two neighbours in the tree, where
//! looking each winner's key up by node read two places far apart at every
//! level.

/// (load in ppm of capacity, queue length, node index): unique per node.
pub type Key = (u64, u32, u32);

/// A key packed so that its order is the integers' order.
type Packed = u128;

/// No node: above every key (no node has index `u32::MAX`).
const NONE: Packed = u128::MAX;

fn pack((load, queue, node): Key) -> Packed {
    (u128::from(load) << 64) | (u128::from(queue) << 32) | u128::from(node)
}

fn unpack(p: Packed) -> Option<Key> {
    use overbook_core::convert::{u128_to_u64, u64_to_u32};
    let low = u128_to_u64(p & u128::from(u64::MAX));
    let field = u64::from(u32::MAX);
    (p != NONE).then(|| (u128_to_u64(p >> 64), u64_to_u32(low >> 32), u64_to_u32(low & field)))
}

#[derive(Debug)]
pub struct Placement {
    /// The winning key of each subtree, heap layout from 1; the leaf of
    /// node `i` is at `size + i` and holds its key now, and leaves past the
    /// last node hold `NONE`.
    tree: Vec<Packed>,
    size: usize,
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
}

impl Placement {
    /// An index of `keys.len()` nodes, node `i` with key `keys[i]`.
    pub fn new(keys: Vec<Key>) -> Placement {
        let size = keys.len().next_power_of_two().max(1);
        let mut tree = vec![NONE; 2 * size];
        for (i, &key) in keys.iter().enumerate() {
            tree[size + i] = pack(key);
        }
        for i in (1..size).rev() {
            tree[i] = tree[2 * i].min(tree[2 * i + 1]);
        }
        Placement { tree, size, dirty: Vec::new(), is_dirty: vec![false; keys.len()] }
    }

    /// Node `node`'s key is now `key`.
    pub fn set(&mut self, node: u32, key: Key) {
        let i = node as usize;
        let key = pack(key);
        let leaf = &mut self.tree[self.size + i];
        if *leaf != key {
            *leaf = key;
            if !self.is_dirty[i] {
                self.is_dirty[i] = true;
                self.dirty.push(node);
            }
        }
    }

    /// Ask the cache for node `node`'s key, which `set` compares.
    pub fn prefetch(&self, node: u32) {
        if let Some(key) = self.tree.get(self.size + node as usize) {
            super::prefetch::prefetch(key);
        }
    }

    /// The least-loaded node's key.
    pub fn first(&mut self) -> Option<Key> {
        self.catch_up();
        unpack(self.tree[1])
    }

    /// The least-loaded node's key other than `node`'s.
    pub fn first_other(&mut self, node: u32) -> Option<Key> {
        self.catch_up();
        let mut best = NONE;
        let mut i = self.size + node as usize;
        while i > 1 {
            best = best.min(self.tree[i ^ 1]);
            i /= 2;
        }
        unpack(best)
    }

    /// Replay the changed keys up the tree. A walk stops where a subtree's
    /// winning key stays the same: nothing above depends on that subtree
    /// any differently (another changed node's walk covers what changes
    /// because of it), so the tree ends as if rebuilt.
    fn catch_up(&mut self) {
        for &node in &self.dirty {
            let mut i = (self.size + node as usize) / 2;
            while i >= 1 {
                let after = self.tree[2 * i].min(self.tree[2 * i + 1]);
                if after == self.tree[i] {
                    break;
                }
                self.tree[i] = after;
                i /= 2;
            }
            self.is_dirty[node as usize] = false;
        }
        self.dirty.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn agrees_with_a_sorted_set() {
        let n = 13u32;
        let keys: Vec<Key> = (0..n).map(|i| (0, 0, i)).collect();
        let mut p = Placement::new(keys.clone());
        let mut set: BTreeSet<Key> = keys.iter().copied().collect();
        let mut current = keys;
        let mut x = 12345u64;
        for step in 0..2000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let node = ((x >> 33) % u64::from(n)) as u32;
            let key = ((x >> 50) % 7, ((x >> 20) % 3) as u32, node);
            set.remove(&current[node as usize]);
            set.insert(key);
            current[node as usize] = key;
            p.set(node, key);
            if step % 3 == 0 {
                assert_eq!(p.first(), set.first().copied());
                let other = ((x >> 40) % u64::from(n)) as u32;
                assert_eq!(p.first_other(other), set.iter().find(|k| k.2 != other).copied());
            }
        }
    }

    /// Many changes between asks, so that walks meet and stop early.
    #[test]
    fn agrees_with_a_sorted_set_after_many_changes() {
        let n = 100u32;
        let keys: Vec<Key> = (0..n).map(|i| (0, 0, i)).collect();
        let mut p = Placement::new(keys.clone());
        let mut set: BTreeSet<Key> = keys.iter().copied().collect();
        let mut current = keys;
        let mut x = 777u64;
        for step in 0..20_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let node = ((x >> 33) % u64::from(n)) as u32;
            let key = ((x >> 50) % 13, ((x >> 20) % 2) as u32, node);
            set.remove(&current[node as usize]);
            set.insert(key);
            current[node as usize] = key;
            p.set(node, key);
            if step % (1 + (x >> 40) % 60) == 0 {
                assert_eq!(p.first(), set.first().copied());
                let other = ((x >> 45) % u64::from(n)) as u32;
                assert_eq!(p.first_other(other), set.iter().find(|k| k.2 != other).copied());
            }
        }
    }

    #[test]
    fn a_packed_key_keeps_the_keys_order() {
        use overbook_core::convert::u64_to_u32;
        let mut x = 4242u64;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            x
        };
        let mut keys = vec![(u64::MAX, u32::MAX, u32::MAX - 1), (0, 0, 0), (u64::MAX, 0, 0)];
        for _ in 0..200 {
            let (a, b) = (next(), next());
            let (queue, node) = (u64_to_u32(b >> 32), u64_to_u32(b & u64::from(u32::MAX)));
            keys.push((a >> (a % 64), queue >> (b % 32), node % (u32::MAX - 1)));
        }
        for &a in &keys {
            assert_eq!(unpack(pack(a)), Some(a));
            for &b in &keys {
                assert_eq!(pack(a).cmp(&pack(b)), a.cmp(&b), "{a:?} against {b:?}");
            }
        }
        assert_eq!(unpack(NONE), None);
    }

    #[test]
    fn one_node_has_no_other() {
        let mut p = Placement::new(vec![(5, 0, 0)]);
        assert_eq!(p.first(), Some((5, 0, 0)));
        assert_eq!(p.first_other(0), None);
    }
}
