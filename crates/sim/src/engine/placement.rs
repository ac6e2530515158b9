//! The placement index: every node's load key, to find the least-loaded node
//! (000 §4.1: least loaded, then the shorter queue, then the lower index).
//! It is the cluster scheduler's rule, not a node's: the simulator's alone
//! (the core's unused copy, exact where this rounds load to parts per
//! million, was removed rather than made to change every run's placement).
//!
//! A tournament tree over the nodes. Keys change on every memory change while
//! placement asks only on submissions and resumes, so a changed key is only
//! marked, and the tree catches up when asked.

/// (load in ppm of capacity, queue length, node index): unique per node.
pub type Key = (u64, u32, u32);

const NONE: u32 = u32::MAX;

#[derive(Debug)]
pub struct Placement {
    keys: Vec<Key>,
    /// The winning node of each subtree, heap layout from 1; the leaf of
    /// node `i` is at `size + i`, and leaves past the last node hold `NONE`.
    tree: Vec<u32>,
    size: usize,
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
}

impl Placement {
    /// An index of `keys.len()` nodes, node `i` with key `keys[i]`.
    pub fn new(keys: Vec<Key>) -> Placement {
        let size = keys.len().next_power_of_two().max(1);
        let mut tree = vec![NONE; 2 * size];
        for i in 0..keys.len() {
            tree[size + i] = overbook_core::convert::usize_to_u32(i);
        }
        let n = keys.len();
        let mut p = Placement { keys, tree, size, dirty: Vec::new(), is_dirty: vec![false; n] };
        for i in (1..size).rev() {
            p.tree[i] = p.better(p.tree[2 * i], p.tree[2 * i + 1]);
        }
        p
    }

    /// Node `node`'s key is now `key`.
    pub fn set(&mut self, node: u32, key: Key) {
        let i = node as usize;
        if self.keys[i] != key {
            self.keys[i] = key;
            if !self.is_dirty[i] {
                self.is_dirty[i] = true;
                self.dirty.push(node);
            }
        }
    }

    /// Ask the cache for node `node`'s key, which `set` compares.
    pub fn prefetch(&self, node: u32) {
        if let Some(key) = self.keys.get(node as usize) {
            super::prefetch::prefetch(key);
        }
    }

    /// The least-loaded node's key.
    pub fn first(&mut self) -> Option<Key> {
        self.catch_up();
        self.key(self.tree[1])
    }

    /// The least-loaded node's key other than `node`'s.
    pub fn first_other(&mut self, node: u32) -> Option<Key> {
        self.catch_up();
        let mut best = NONE;
        let mut i = self.size + node as usize;
        while i > 1 {
            best = self.better(best, self.tree[i ^ 1]);
            i /= 2;
        }
        self.key(best)
    }

    fn key(&self, node: u32) -> Option<Key> {
        self.keys.get(node as usize).copied()
    }

    fn better(&self, a: u32, b: u32) -> u32 {
        match (self.key(a), self.key(b)) {
            (Some(ka), Some(kb)) if kb < ka => b,
            (Some(_), _) => a,
            (None, _) => b,
        }
    }

    /// Replay the changed keys up the tree. A walk stops where a subtree's
    /// winner stays the same node with an unchanged key: nothing above it
    /// depends on that subtree any differently (another changed node's walk
    /// covers what changes because of it), so the tree ends as if rebuilt.
    fn catch_up(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty);
        for &node in &dirty {
            let mut i = (self.size + node as usize) / 2;
            while i >= 1 {
                let before = self.tree[i];
                let after = self.better(self.tree[2 * i], self.tree[2 * i + 1]);
                if after == before && self.is_dirty.get(after as usize) != Some(&true) {
                    break;
                }
                self.tree[i] = after;
                i /= 2;
            }
        }
        for &node in &dirty {
            self.is_dirty[node as usize] = false;
        }
        dirty.clear();
        self.dirty = dirty;
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
    fn one_node_has_no_other() {
        let mut p = Placement::new(vec![(5, 0, 0)]);
        assert_eq!(p.first(), Some((5, 0, 0)));
        assert_eq!(p.first_other(0), None);
    }
}
