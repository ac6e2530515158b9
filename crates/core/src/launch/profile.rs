//! Per-job memory profiles (000 §4.2): the estimate of a best-effort task's
//! future memory is the mean peak of its job's last finished tasks, because
//! jobs recur and their tasks look alike.
//!
//! Memory stays bounded however many jobs a node sees over its life: each job
//! keeps a ring of at most `history` peaks, and at most `max_jobs` jobs are
//! kept. When a new job would exceed that, the job whose latest task finished
//! longest ago is forgotten (least recently updated first), so jobs that are
//! still running tasks here keep their profile.

use crate::model::{Bytes, JobId};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// The last peaks of one job.
///
/// Their sum is not kept: a u128 sum would align the entry to 16 bytes and
/// make it 80, where a node keeps tens of jobs and a Google-scale cell
/// millions, and summing at most `history` peaks when a launch asks is cheap
/// next to the hash lookup that finds them.
#[derive(Debug)]
struct JobProfile {
    /// Grows by push up to `history`, then is overwritten as a ring, so a job
    /// with few tasks here costs only what it uses.
    peaks: Vec<Bytes>,
    /// When this job was last updated, in `Profiles::clock` ticks.
    stamp: u64,
    /// The slot the next peak overwrites once the ring is full; `history`
    /// fits u32 (`LaunchConfig::validate` bounds it).
    next: u32,
}

impl JobProfile {
    fn push(&mut self, peak: Bytes, history: u32) {
        if self.peaks.len() < history as usize {
            self.peaks.push(peak);
            return;
        }
        if let Some(slot) = self.peaks.get_mut(self.next as usize) {
            *slot = peak;
        }
        self.next = (self.next + 1) % history;
    }

    fn mean(&self) -> Option<Bytes> {
        let n = u128::try_from(self.peaks.len()).ok().filter(|&n| n > 0)?;
        // u128: `history` u64 peaks can never overflow it.
        let sum: u128 = self.peaks.iter().map(|&p| u128::from(p)).sum();
        // The mean of u64 values fits u64.
        Bytes::try_from(sum / n).ok()
    }
}

/// Peak history per job, and the node's mean task runtime (for the sync period).
#[derive(Debug)]
pub(super) struct Profiles {
    history: u32,
    max_jobs: usize,
    jobs: HashMap<JobId, JobProfile>,
    /// Recency order for eviction, updated lazily: every update appends
    /// `(job, stamp)`, and an entry whose stamp is no longer the job's is stale
    /// and skipped. This keeps an update O(1) with no linked list; the queue
    /// is compacted when stale entries outnumber live ones, so it stays
    /// O(max_jobs) and the cost of compaction is amortized over the updates.
    order: VecDeque<(JobId, u64)>,
    clock: u64,
    /// Runtimes of every task that finished here, in microseconds.
    runtime_sum: u128,
    runtime_count: u64,
}

impl Profiles {
    pub fn new(history: usize, max_jobs: usize) -> Profiles {
        Profiles {
            // `LaunchConfig::validate` keeps `profile_history` far below
            // u32::MAX; a longer ring would never fill on a node anyway.
            history: u32::try_from(history).unwrap_or(u32::MAX),
            max_jobs,
            jobs: HashMap::new(),
            order: VecDeque::new(),
            clock: 0,
            runtime_sum: 0,
            runtime_count: 0,
        }
    }

    /// A task of `job` finished after `runtime` having peaked at `peak`.
    pub fn record(&mut self, job: JobId, peak: Bytes, runtime: Duration) {
        self.runtime_sum = self.runtime_sum.saturating_add(runtime.as_micros());
        self.runtime_count = self.runtime_count.saturating_add(1);
        if self.history == 0 || self.max_jobs == 0 {
            return;
        }
        if !self.jobs.contains_key(&job) {
            while self.jobs.len() >= self.max_jobs && self.evict_one() {}
        }
        self.clock += 1;
        let stamp = self.clock;
        let profile = self.jobs.entry(job).or_insert_with(|| JobProfile {
            peaks: Vec::new(),
            stamp,
            next: 0,
        });
        profile.push(peak, self.history);
        profile.stamp = stamp;
        self.order.push_back((job, stamp));
        if self.order.len() > 2 * self.jobs.len() + 16 {
            let jobs = &self.jobs;
            self.order.retain(|(j, s)| jobs.get(j).is_some_and(|p| p.stamp == *s));
        }
    }

    /// Forget the least recently updated job; false when there is none.
    fn evict_one(&mut self) -> bool {
        while let Some((job, stamp)) = self.order.pop_front() {
            if self.jobs.get(&job).is_some_and(|p| p.stamp == stamp) {
                self.jobs.remove(&job);
                return true;
            }
        }
        false
    }

    /// The job's profiled peak: the mean of its last `history` peaks.
    pub fn estimate(&self, job: JobId) -> Option<Bytes> {
        self.jobs.get(&job).and_then(JobProfile::mean)
    }

    /// Mean runtime of the tasks that finished here, if any did.
    pub fn mean_runtime(&self) -> Option<Duration> {
        if self.runtime_count == 0 {
            return None;
        }
        let mean = self.runtime_sum / u128::from(self.runtime_count);
        Some(Duration::from_micros(u64::try_from(mean).unwrap_or(u64::MAX)))
    }

    /// Jobs whose profile is kept.
    #[cfg(test)]
    pub fn jobs(&self) -> usize {
        self.jobs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn the_estimate_is_the_mean_of_the_last_peaks_only() {
        let mut p = Profiles::new(20, 10);
        assert_eq!(p.estimate(JobId(1)), None);
        // 30 peaks 1..=30: the last 20 are 11..=30, mean 20.5 → 20 (floor).
        for peak in 1..=30 {
            p.record(JobId(1), peak * 1000, S);
        }
        assert_eq!(p.estimate(JobId(1)), Some(20_500));
        // Fewer than `history`: the mean of what there is.
        p.record(JobId(2), 4, S);
        p.record(JobId(2), 8, S);
        assert_eq!(p.estimate(JobId(2)), Some(6));
    }

    #[test]
    fn a_full_ring_of_huge_peaks_does_not_overflow() {
        let mut p = Profiles::new(3, 1);
        for _ in 0..10 {
            p.record(JobId(1), u64::MAX, S);
        }
        assert_eq!(p.estimate(JobId(1)), Some(u64::MAX));
    }

    #[test]
    fn the_least_recently_updated_job_is_forgotten_first() {
        let mut p = Profiles::new(5, 2);
        p.record(JobId(1), 10, S);
        p.record(JobId(2), 20, S);
        // Job 1 updated again: job 2 is now the oldest.
        p.record(JobId(1), 10, S);
        p.record(JobId(3), 30, S);
        assert_eq!(p.jobs(), 2);
        assert_eq!(p.estimate(JobId(1)), Some(10));
        assert_eq!(p.estimate(JobId(2)), None);
        assert_eq!(p.estimate(JobId(3)), Some(30));
    }

    #[test]
    fn the_recency_queue_stays_bounded_under_many_updates() {
        let mut p = Profiles::new(4, 3);
        for i in 0..10_000u64 {
            p.record(JobId(i % 5), i, S);
        }
        assert_eq!(p.jobs(), 3);
        assert!(p.order.len() <= 2 * 3 + 17, "{}", p.order.len());
    }

    #[test]
    fn mean_runtime_counts_every_finished_task() {
        let mut p = Profiles::new(0, 0);
        assert_eq!(p.mean_runtime(), None);
        p.record(JobId(1), 1, Duration::from_secs(2));
        p.record(JobId(2), 1, Duration::from_secs(4));
        assert_eq!(p.mean_runtime(), Some(Duration::from_secs(3)));
        // No history kept with a zero ring, but runtimes still count.
        assert_eq!(p.estimate(JobId(1)), None);
    }
}
