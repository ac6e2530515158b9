//! A task whose answer depends on all of its memory and all of its past:
//! the proof that a checkpoint kept the work (004 §5). `SIZE` bytes of
//! anonymous memory are filled from a seed, then `STEPS` times every page
//! is read into a running hash, and a share of the pages (`dirty`, a
//! window that moves each step) is rewritten from it. The final hash is the
//! answer: a restore that lost or mixed up one page or one step changes it.
//!
//! It prints `ready` once its memory is filled, `progress K` after each
//! step and `answer 0x...` at the end, each line flushed, so a test reads
//! how far it got from its log instead of sleeping. With a gate file, it
//! takes step K only once the file holds a number of at least K: a test
//! decides exactly how many steps run between two moments (how many pages
//! an incremental dump finds dirty), however fast the machine is.

use std::io::{self, Write};
use std::time::Duration;

/// Words of one page.
const WORDS_PER_PAGE: usize = 4096 / 8;

/// What to compute.
#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    /// Bytes of memory (whole pages).
    pub size: u64,
    pub steps: u32,
    /// Share of the pages rewritten per step, (0, 1].
    pub dirty: f64,
    /// Pause after each step (pacing, so a test can catch it mid-way).
    pub pace: Duration,
    /// A file holding how many steps may run so far (read again every
    /// 10 ms while it holds too few; missing or unreadable counts as 0).
    pub gate: Option<std::path::PathBuf>,
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Chain {
    fn pages(&self) -> io::Result<usize> {
        let pages = usize::try_from(self.size / 4096).map_err(|_| io::Error::other("too large"))?;
        if pages == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "size must be at least 4 KiB"));
        }
        Ok(pages)
    }

    /// Runs it, with its lines to `out`; the answer.
    pub fn run(&self, out: &mut dyn Write) -> io::Result<u64> {
        self.compute(|line| {
            writeln!(out, "{line}")?;
            out.flush()
        })
    }

    /// The answer an uninterrupted run gives, computed here.
    pub fn answer(&self) -> io::Result<u64> {
        self.compute(|_| Ok(()))
    }

    /// Waits until the gate (if any) lets step `step` run. Whoever opens the
    /// gate writes a number of one fixed width: a task checkpointed while it
    /// reads the gate has it open in its image, and CRIU restores an open
    /// file only if its size has not changed.
    fn wait_at_gate(&self, step: u32) {
        let Some(gate) = &self.gate else { return };
        let allowed = || {
            std::fs::read_to_string(gate)
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
                .unwrap_or(0)
        };
        while allowed() < step {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn compute(&self, mut say: impl FnMut(String) -> io::Result<()>) -> io::Result<u64> {
        let pages = self.pages()?;
        let mut memory: Vec<u64> = (0..pages * WORDS_PER_PAGE).map(|i| mix(i as u64 + 1)).collect();
        say("ready".into())?;
        let window =
            overbook_core::convert::to_usize((pages as f64 * self.dirty.clamp(0.0, 1.0)).ceil())
                .clamp(1, pages);
        let mut h: u64 = 0x0123_4567_89ab_cdef;
        for step in 0..self.steps {
            self.wait_at_gate(step + 1);
            for page in memory.chunks(WORDS_PER_PAGE) {
                h = mix(h ^ page[0] ^ page[WORDS_PER_PAGE - 1]);
            }
            let first = (step as usize * window) % pages;
            for k in 0..window {
                let page = (first + k) % pages;
                h = mix(h.wrapping_add(k as u64));
                memory[page * WORDS_PER_PAGE] = h;
                memory[page * WORDS_PER_PAGE + WORDS_PER_PAGE - 1] = h.rotate_left(17);
            }
            say(format!("progress {}", step + 1))?;
            if !self.pace.is_zero() {
                std::thread::sleep(self.pace);
            }
        }
        say(format!("answer {h:#018x}"))?;
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_depends_on_every_step_and_the_run_says_it() {
        let c = Chain { size: 64 << 10, steps: 5, dirty: 0.25, pace: Duration::ZERO, gate: None };
        let mut out = Vec::new();
        let a = c.run(&mut out).expect("runs");
        assert_eq!(a, c.answer().expect("computes"));
        let text = String::from_utf8(out).expect("text");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.first(), Some(&"ready"));
        assert_eq!(
            lines[1..6],
            ["progress 1", "progress 2", "progress 3", "progress 4", "progress 5"]
        );
        assert_eq!(lines.last().copied(), Some(format!("answer {a:#018x}").as_str()));
        assert_ne!(a, Chain { steps: 4, ..c.clone() }.answer().expect("computes"));
        assert_ne!(a, Chain { dirty: 0.5, ..c.clone() }.answer().expect("computes"));
        assert!(Chain { size: 100, ..c.clone() }.answer().is_err());
    }
}
