//! overbook's policy engine.
//!
//! Everything here is a pure function of what it is given: observations and the
//! time come in, actions go out. Nothing reads a clock, a file or the kernel, so
//! the node agent and the simulator run exactly the same decisions.
//!
//! The engine is a pipeline of small stages (see `ARCHITECTURE.md`):
//! [`detect`] (is anyone thrashing, is the node under pressure) →
//! [`rank`] (which best-effort container pays) → [`preempt`] (how it pays) →
//! [`launch`] (who may start, who may resume). [`policy::NodePolicy`]
//! composes them; [`cadence`] says when it is consulted. (Placement across nodes is the cluster scheduler's: the
//! simulator's own, in `overbook-sim`, or Kubernetes'.)

pub mod action;
pub mod cadence;
pub mod config;
pub mod convert;
pub mod cpu_budget;
pub mod detect;
pub mod launch;
pub mod model;
pub mod policy;
pub mod preempt;
pub mod protect;
pub mod rank;
pub mod reclaim;
pub mod time;

pub use action::{Action, Evidence, Preemption, ResumeSite};
pub use model::{
    Bytes, Class, ContainerId, ContainerStats, FaultCounters, ImageInfo, JobId, NodeStats,
    Observation, RunState,
};
pub use time::Time;
