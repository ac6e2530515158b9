//! A task's memory over its work, and how it is kept.
//!
//! Why two shapes: at Google scale (`overbook bench sim`, 12,500 nodes) the
//! generator's production profiles were half the peak heap, 278 of 569 MB,
//! at 24 bytes a point. Their points come every `usage_period` from offset
//! 0, so on a grid only their memory is kept, 8 bytes a point. Every page a
//! run touches first costs the kernel a zeroed page (in a guest, often a
//! fault on the host too), and a smaller heap is missed in less. Trace
//! profiles, whose offsets are the rows', stay listed.

use overbook_core::convert::{u64_to_u32, u64_to_usize, usize_to_u32};
use overbook_core::Bytes;
use serde::{Deserialize, Serialize};
use std::num::NonZeroU64;
use std::time::Duration;

/// Words a listed point takes: its offset's seconds and nanoseconds, its memory.
const LISTED: usize = 3;

/// Memory over the course of a task's work: a step function of the work done.
/// At offset `t` the task holds the memory of the last point at or before `t`
/// (the first point's before it). Offsets are work done, not wall time, so a
/// slowed or restarted task replays the same curve.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(from = "Wire", into = "Wire")]
#[repr(C)] // `words` first: `TaskSpec`'s first cache line holds it.
pub struct MemProfile {
    /// Listed: `LISTED` words a point. On a grid: each point's memory, then
    /// the last point's offset in nanoseconds.
    words: Vec<u64>,
    shape: Shape,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// Offsets as given. Before `coarse_until` each point stands for
    /// several samples, holding their peak (`coarsen_before`).
    Listed { coarse_until: Duration },
    /// Point `i` at `i × step` nanoseconds, but the last at the offset kept
    /// after the memories: a generated profile folds what its task cannot
    /// reach into one point there.
    Grid { step: NonZeroU64 },
}

impl Default for Shape {
    fn default() -> Shape {
        Shape::Listed { coarse_until: Duration::ZERO }
    }
}

/// The serialized form, the same for both shapes: the points.
#[derive(Serialize, Deserialize)]
#[serde(rename = "MemProfile")]
struct Wire {
    points: Vec<(Duration, Bytes)>,
}

impl From<Wire> for MemProfile {
    fn from(wire: Wire) -> MemProfile {
        MemProfile::listed(&wire.points, Duration::ZERO)
    }
}

impl From<MemProfile> for Wire {
    fn from(profile: MemProfile) -> Wire {
        Wire { points: profile.to_points() }
    }
}

impl PartialEq for MemProfile {
    fn eq(&self, other: &MemProfile) -> bool {
        self.coarse_until() == other.coarse_until()
            && self.len() == other.len()
            && self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for MemProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemProfile")
            .field("points", &self.to_points())
            .field("coarse_until", &self.coarse_until())
            .finish()
    }
}

impl MemProfile {
    /// A task that holds `mem` for its whole life.
    pub fn flat(mem: Bytes) -> MemProfile {
        MemProfile::listed(&[(Duration::ZERO, mem)], Duration::ZERO)
    }

    /// Points in any order; they are sorted by offset, later duplicates win.
    pub fn from_points(mut points: Vec<(Duration, Bytes)>) -> MemProfile {
        points.sort_by_key(|p| p.0);
        points.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                earlier.1 = later.1;
                true
            } else {
                false
            }
        });
        MemProfile::listed(&points, Duration::ZERO)
    }

    /// Points every `step` from offset 0 holding `mems`, but the last one
    /// at `last` (after the one before it): the same profile as
    /// `from_points` of those points. Listed when it cannot be a grid (a
    /// zero step, an offset past `u64` nanoseconds, a `last` out of order).
    pub fn every(step: Duration, mems: Vec<Bytes>, last: Duration) -> MemProfile {
        match grid_of(step, mems.len(), last) {
            Some((step, last)) => {
                let mut words = mems;
                words.push(last);
                MemProfile { words, shape: Shape::Grid { step } }
            }
            None => MemProfile::from_points(grid_points(step, &mems, last)),
        }
    }

    fn listed(points: &[(Duration, Bytes)], coarse_until: Duration) -> MemProfile {
        let words = points
            .iter()
            .flat_map(|&(o, m)| [o.as_secs(), u64::from(o.subsec_nanos()), m])
            .collect();
        MemProfile { words, shape: Shape::Listed { coarse_until } }
    }

    fn coarse_until(&self) -> Duration {
        match self.shape {
            Shape::Listed { coarse_until } => coarse_until,
            Shape::Grid { .. } => Duration::ZERO,
        }
    }

    /// The listed points as `[seconds, nanoseconds, memory]` words and
    /// where the coarse past ends, after listing a grid (a trace's usage
    /// rows or a coarsening change it).
    fn listed_mut(&mut self) -> (&mut Vec<u64>, Duration) {
        let coarse_until = match self.shape {
            Shape::Listed { coarse_until } => coarse_until,
            Shape::Grid { .. } => {
                *self = MemProfile::listed(&self.to_points(), Duration::ZERO);
                Duration::ZERO
            }
        };
        (&mut self.words, coarse_until)
    }

    fn listed_points(words: &[u64]) -> &[[u64; LISTED]] {
        words.as_chunks::<LISTED>().0
    }

    pub fn len(&self) -> usize {
        match self.shape {
            Shape::Listed { .. } => self.words.len() / LISTED,
            Shape::Grid { .. } => self.words.len().saturating_sub(1),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Point `i`'s offset in nanoseconds, `None` past `u64` (584 years).
    fn offset_nanos(&self, i: usize) -> Option<u64> {
        match self.shape {
            Shape::Listed { .. } => {
                let w = &self.words[LISTED * i..];
                w[0].checked_mul(1_000_000_000)?.checked_add(w[1])
            }
            Shape::Grid { .. } if i + 1 == self.len() => self.words.last().copied(),
            // Below the last, which fits.
            Shape::Grid { step } => Some(i as u64 * step.get()),
        }
    }

    /// Point `i` (`i < len()`): its offset and memory.
    pub fn point(&self, i: usize) -> (Duration, Bytes) {
        match self.shape {
            Shape::Listed { .. } => {
                let w = &self.words[LISTED * i..LISTED * i + LISTED];
                (Duration::new(w[0], u64_to_u32(w[1])), w[2])
            }
            Shape::Grid { .. } => {
                let mem = self.words[..self.len()][i];
                (Duration::from_nanos(self.offset_nanos(i).unwrap_or(0)), mem)
            }
        }
    }

    /// Points from `start` on into `out`, offsets in nanoseconds, as many
    /// as fit, stopping short before an offset past `u64` nanoseconds;
    /// how many it copied.
    pub fn copy_points(&self, start: usize, out: &mut [(u64, Bytes)]) -> usize {
        let len = self.len();
        let end = len.min(start.saturating_add(out.len()));
        let mut n = 0;
        match self.shape {
            Shape::Listed { .. } => {
                for p in MemProfile::listed_points(&self.words).get(start..end).unwrap_or(&[]) {
                    let Some(offset) =
                        p[0].checked_mul(1_000_000_000).and_then(|o| o.checked_add(p[1]))
                    else {
                        break;
                    };
                    out[n] = (offset, p[2]);
                    n += 1;
                }
            }
            Shape::Grid { step } => {
                for i in start..end {
                    // Below the last, which fits.
                    let offset = if i + 1 == len { self.words[len] } else { i as u64 * step.get() };
                    out[n] = (offset, self.words[i]);
                    n += 1;
                }
            }
        }
        n
    }

    pub fn iter(&self) -> impl Iterator<Item = (Duration, Bytes)> + '_ {
        (0..self.len()).map(|i| self.point(i))
    }

    pub fn to_points(&self) -> Vec<(Duration, Bytes)> {
        self.iter().collect()
    }

    /// Bytes its points take on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.words.len() * std::mem::size_of::<u64>()
    }

    /// The index of the first point at or after `from` whose offset is
    /// after `at` (`from` at most `len()`): the points' `partition_point`
    /// from there.
    pub fn first_after(&self, from: usize, at: Duration) -> usize {
        let len = self.len();
        match self.shape {
            Shape::Listed { .. } => {
                let points = &MemProfile::listed_points(&self.words)[from..];
                let (secs, nanos) = (at.as_secs(), u64::from(at.subsec_nanos()));
                from + points.partition_point(|p| (p[0], p[1]) <= (secs, nanos))
            }
            Shape::Grid { step } => {
                let at = at.as_nanos();
                let last = self.words.last().copied().map_or(0, u128::from);
                let found = if len == 0 {
                    0
                } else if last <= at {
                    len
                } else {
                    // The points before the last at or before `at`.
                    let on_grid = at / u128::from(step.get()) + 1;
                    u64_to_usize(u64::try_from(on_grid).unwrap_or(u64::MAX)).min(len - 1)
                };
                found.max(from).min(len)
            }
        }
    }

    /// Add a sample at `offset`; samples are expected in order (a trace's usage
    /// rows), and an out-of-order one replaces in place.
    pub fn push(&mut self, offset: Duration, mem: Bytes) {
        let (secs, nanos) = (offset.as_secs(), u64::from(offset.subsec_nanos()));
        let (words, coarse_until) = self.listed_mut();
        let points = MemProfile::listed_points(words);
        if offset < coarse_until {
            // A late sample in the coarsened past can only raise the point
            // in force there: replacing or splitting it would drop the peak
            // of the samples it stands for, and the profile would hold less
            // than the trace said.
            let i = points.partition_point(|p| (p[0], p[1]) <= (secs, nanos)).saturating_sub(1);
            if let Some(m) = words.get_mut(LISTED * i + 2) {
                *m = (*m).max(mem);
            }
            return;
        }
        match points.last() {
            // Out of order or repeated: in place, so the coarse past stays
            // marked as such (rebuilding the profile forgot where it ends).
            Some(last) if (secs, nanos) <= (last[0], last[1]) => {
                match points.binary_search_by_key(&(secs, nanos), |p| (p[0], p[1])) {
                    Ok(i) => words[LISTED * i + 2] = mem,
                    Err(i) => {
                        words.splice(LISTED * i..LISTED * i, [secs, nanos, mem]);
                    }
                }
            }
            _ => words.extend([secs, nanos, mem]),
        }
    }

    /// Halve the points before index `keep`: each pair becomes one point at
    /// the first's offset holding the larger memory. The profile from
    /// point `keep` on is unchanged, and before it never holds less
    /// than it did, even after late samples there (`push`): an envelope,
    /// coarser in time.
    pub fn coarsen_before(&mut self, keep: usize) {
        let keep = keep.min(self.len());
        let mut points = self.to_points();
        let last_merged = keep.checked_sub(1).map(|i| points[i].0);
        let mut write = 0;
        let mut read = 0;
        while read < keep {
            let end = (read + 2).min(keep);
            let mem = points[read..end].iter().map(|p| p.1).max().unwrap_or(0);
            points[write] = (points[read].0, mem);
            write += 1;
            read = end;
        }
        points.drain(write..keep);
        // The coarse points cover up to the first point kept as it was;
        // with none kept, up to and including the last sample merged.
        let end = match points.get(write) {
            Some(&(kept, _)) => Some(kept),
            None => last_merged.map(|t| t + Duration::from_nanos(1)),
        };
        let coarse_until = self.coarse_until().max(end.unwrap_or(Duration::ZERO));
        *self = MemProfile::listed(&points, coarse_until);
    }

    /// Memory held at work offset `at` (0 for an empty profile).
    pub fn at(&self, at: Duration) -> Bytes {
        match self.first_after(0, at) {
            _ if self.is_empty() => 0,
            0 => self.point(0).1,
            i => self.point(i - 1).1,
        }
    }

    /// The offset of the next change after `at`, if any.
    pub fn next_change(&self, at: Duration) -> Option<Duration> {
        let i = self.first_after(0, at);
        (i < self.len()).then(|| self.point(i).0)
    }

    /// The largest memory held at any point.
    pub fn peak(&self) -> Bytes {
        match self.shape {
            Shape::Listed { .. } => {
                MemProfile::listed_points(&self.words).iter().map(|p| p[2]).max().unwrap_or(0)
            }
            Shape::Grid { .. } => self.words[..self.len()].iter().copied().max().unwrap_or(0),
        }
    }
}

/// A grid's step and last offset in nanoseconds, for `n` points every
/// `step` but the last at `last`; `None` when they cannot be one (a zero
/// step, an offset past `u64` nanoseconds, `last` not after the point
/// before it, no point).
fn grid_of(step: Duration, n: usize, last: Duration) -> Option<(NonZeroU64, u64)> {
    let step = NonZeroU64::new(u64::try_from(step.as_nanos()).ok()?)?;
    let last = u64::try_from(last.as_nanos()).ok()?;
    if let Some(k) = n.checked_sub(2) {
        let before_last = (k as u64).checked_mul(step.get())?;
        if before_last >= last {
            return None;
        }
    }
    (n > 0).then_some((step, last))
}

/// Points every `step` from 0 holding `mems`, the last moved to `last`.
fn grid_points(step: Duration, mems: &[Bytes], last: Duration) -> Vec<(Duration, Bytes)> {
    let mut points: Vec<(Duration, Bytes)> = mems
        .iter()
        .enumerate()
        .map(|(i, &m)| (step.checked_mul(usize_to_u32(i)).unwrap_or(Duration::MAX), m))
        .collect();
    if let Some(p) = points.last_mut() {
        p.0 = last;
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: u64) -> Duration {
        Duration::from_secs(x)
    }

    #[test]
    fn a_coarsened_profile_is_an_envelope_and_keeps_its_tail() {
        let points: Vec<(Duration, Bytes)> =
            (0..9u64).map(|i| (Duration::from_secs(i * 10), (i * 7 % 5) * 100)).collect();
        let before = MemProfile::from_points(points);
        let mut after = before.clone();
        after.coarsen_before(6);
        assert_eq!(after.len(), 3 + 3, "six points before index 6 become three");
        for t in 0..100 {
            let at = Duration::from_secs(t);
            if at >= Duration::from_secs(60) {
                assert_eq!(after.at(at), before.at(at), "the tail is unchanged at {t}");
            } else {
                assert!(after.at(at) >= before.at(at), "never less at {t}");
            }
        }
        let mut odd = before.clone();
        odd.coarsen_before(5);
        assert_eq!(odd.len(), 3 + 4);
        assert_eq!(odd.point(2), before.point(4), "an odd one out stays as it is");
        let mut all = before.clone();
        all.coarsen_before(usize::MAX);
        assert_eq!(all.len(), 5);
    }

    #[test]
    fn a_late_sample_in_the_coarsened_past_only_raises_it() {
        let points: Vec<(Duration, Bytes)> =
            (0..9u64).map(|i| (Duration::from_secs(i * 10), (i * 7 % 5) * 100 + 100)).collect();
        let before = MemProfile::from_points(points);
        let mut late = before.clone();
        late.coarsen_before(6);
        let coarse = late.clone();
        // Low samples on a merged point's own offset, between two, and
        // before the first: the coarse past keeps its peaks.
        for (at, mem) in [(20, 1), (35, 1), (0, 1)] {
            late.push(Duration::from_secs(at), mem);
        }
        assert_eq!(late, coarse, "low samples change nothing there");
        // A high one raises the point in force at its offset, and only it.
        late.push(Duration::from_secs(25), 10_000);
        assert_eq!(late.at(Duration::from_secs(20)), 10_000);
        assert_eq!(late.len(), coarse.len(), "no point split");
        for t in 0..100 {
            let at = Duration::from_secs(t);
            assert!(late.at(at) >= before.at(at), "never less than the trace said at {t}");
        }
        // Past the coarse part a late sample is exact again.
        late.push(Duration::from_secs(65), 1);
        assert_eq!(late.at(Duration::from_secs(65)), 1);
        // ... and the coarse past stays coarse after it: a low sample on a
        // merged point's offset still cannot lower its peak.
        late.push(Duration::from_secs(20), 1);
        assert_eq!(late.at(Duration::from_secs(20)), 10_000, "the peak kept after a late row");
        let mut all = before.clone();
        all.coarsen_before(usize::MAX);
        all.push(Duration::from_secs(80), 1);
        let at80 = Duration::from_secs(80);
        assert_eq!(all.at(at80), before.at(at80), "the last sample merged keeps its memory");
        all.push(Duration::from_secs(90), 1);
        assert_eq!(all.at(Duration::from_secs(90)), 1, "a new sample after them all");
    }

    #[test]
    fn profile_is_a_step_function_of_work() {
        let p = MemProfile::from_points(vec![(s(10), 300), (s(0), 100), (s(5), 200)]);
        assert_eq!(p.at(s(0)), 100);
        assert_eq!(p.at(s(4)), 100);
        assert_eq!(p.at(s(5)), 200);
        assert_eq!(p.at(s(100)), 300);
        assert_eq!(p.next_change(s(5)), Some(s(10)));
        assert_eq!(p.next_change(s(10)), None);
        assert_eq!(p.peak(), 300);
    }

    #[test]
    fn out_of_order_samples_are_placed_in_order() {
        let mut p = MemProfile::default();
        p.push(s(10), 3);
        p.push(s(0), 1);
        p.push(s(10), 4);
        assert_eq!(p.to_points(), [(s(0), 1), (s(10), 4)]);
    }

    /// Grids against the same points listed, on everything a profile answers.
    #[test]
    fn a_grid_is_the_profile_its_points_list() {
        let step = Duration::from_millis(300_001);
        for (mems, last) in [
            (vec![5], Duration::ZERO),
            (vec![5], s(7)),
            (vec![5, 9], step),
            (vec![5, 9, 2, 7], step * 3),
            (vec![5, 9, 2, 7], step * 40 + Duration::from_nanos(1)),
        ] {
            let grid = MemProfile::every(step, mems.clone(), last);
            assert!(matches!(grid.shape, Shape::Grid { .. }), "{mems:?} at {last:?} is a grid");
            let points = grid_points(step, &mems, last);
            let listed = MemProfile::from_points(points.clone());
            assert_eq!(grid, listed);
            assert_eq!(grid.to_points(), points);
            assert_eq!(grid.peak(), listed.peak());
            let probes = (0..=last.as_secs() + 2 * step.as_secs())
                .flat_map(|t| [s(t), s(t) + Duration::from_nanos(1)])
                .chain(points.iter().flat_map(|p| {
                    [
                        p.0,
                        p.0.saturating_sub(Duration::from_nanos(1)),
                        p.0 + Duration::from_nanos(1),
                    ]
                }));
            for at in probes {
                for from in 0..=grid.len() {
                    assert_eq!(grid.first_after(from, at), listed.first_after(from, at), "{at:?}");
                }
                assert_eq!(grid.at(at), listed.at(at), "{at:?}");
                assert_eq!(grid.next_change(at), listed.next_change(at), "{at:?}");
            }
            for start in 0..grid.len() {
                let (mut a, mut b) = ([(0, 0); 3], [(0, 0); 3]);
                assert_eq!(grid.copy_points(start, &mut a), listed.copy_points(start, &mut b));
                assert_eq!(a, b);
            }
            let mut pushed = grid.clone();
            pushed.push(last + s(1), 1);
            let mut expect = listed.clone();
            expect.push(last + s(1), 1);
            assert_eq!(pushed, expect, "a sample after a grid lists it");
        }
    }

    #[test]
    fn what_cannot_be_a_grid_is_listed_as_the_same_points() {
        let cases = [
            (Duration::ZERO, vec![1, 2], s(3)),
            (s(10), vec![1, 2, 3], s(10)),
            (s(10), vec![1, 2, 3], s(5)),
            (Duration::MAX, vec![1, 2], Duration::MAX),
            (s(1), vec![], Duration::ZERO),
        ];
        for (step, mems, last) in cases {
            let p = MemProfile::every(step, mems.clone(), last);
            assert!(matches!(p.shape, Shape::Listed { .. }), "{step:?} {mems:?} {last:?}");
            assert_eq!(p, MemProfile::from_points(grid_points(step, &mems, last)));
        }
    }

    #[test]
    fn both_shapes_serialize_as_their_points() {
        let step = s(300);
        let grid = MemProfile::every(step, vec![4, 8, 6], s(900));
        let listed = MemProfile::from_points(vec![(s(0), 4), (s(300), 8), (s(900), 6)]);
        let a = serde_json::to_string(&grid).expect("a profile serializes");
        assert_eq!(a, serde_json::to_string(&listed).expect("a profile serializes"));
        assert!(a.starts_with(r#"{"points":[[{"secs":0,"nanos":0},4]"#), "{a}");
        let back: MemProfile = serde_json::from_str(&a).expect("and reads back");
        assert_eq!(back, grid);
    }
}
