//! The two waiting lines of a node: best-effort tasks waiting to launch, and
//! preempted tasks waiting to resume (002 §3.1: first-come-first-served).
//!
//! Both are FIFO `VecDeque`s, so a launch is O(1). A task that leaves while it
//! still waits (cancelled) must also leave its line; finding it by scanning on
//! every departure would cost a queue length per finished task, so a map of
//! the waiting ids answers "is it waiting, and where" in O(1), and only a task
//! that really waits pays the O(n) removal.

use super::TaskRequest;
use crate::model::{Bytes, ContainerId};
use std::collections::{HashMap, VecDeque};

/// A preempted task waiting to come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Suspended {
    pub task: TaskRequest,
    /// What it holds once back (its memory when it was preempted).
    pub memory: Bytes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
    Launch,
    Resume,
}

#[derive(Debug, Default)]
pub(super) struct Queues {
    launch: VecDeque<TaskRequest>,
    resume: VecDeque<Suspended>,
    waiting: HashMap<ContainerId, Line>,
}

impl Queues {
    pub fn contains(&self, id: ContainerId) -> bool {
        self.waiting.contains_key(&id)
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// (waiting to launch, waiting to resume).
    pub fn lens(&self) -> (usize, usize) {
        (self.launch.len(), self.resume.len())
    }

    /// Callers check `contains` first: a task waits in one line, once.
    pub fn push_launch(&mut self, task: TaskRequest) {
        self.waiting.insert(task.id, Line::Launch);
        self.launch.push_back(task);
    }

    pub fn push_resume(&mut self, s: Suspended) {
        self.waiting.insert(s.task.id, Line::Resume);
        self.resume.push_back(s);
    }

    pub fn front_launch(&self) -> Option<&TaskRequest> {
        self.launch.front()
    }

    pub fn front_resume(&self) -> Option<&Suspended> {
        self.resume.front()
    }

    pub fn pop_launch(&mut self) -> Option<TaskRequest> {
        let t = self.launch.pop_front()?;
        self.waiting.remove(&t.id);
        Some(t)
    }

    pub fn pop_resume(&mut self) -> Option<Suspended> {
        let s = self.resume.pop_front()?;
        self.waiting.remove(&s.task.id);
        Some(s)
    }

    /// Take `id` out of whichever line it waits in; false if it waits nowhere.
    pub fn remove(&mut self, id: ContainerId) -> bool {
        match self.waiting.remove(&id) {
            Some(Line::Launch) => self.launch.retain(|t| t.id != id),
            Some(Line::Resume) => self.resume.retain(|s| s.task.id != id),
            None => return false,
        }
        true
    }
}
