//! overbook's node agent.
//!
//! It watches every container under one cgroup (the node's root), feeds
//! what the kernel says to the same policy core the simulator runs, and
//! carries out what the core decides: preempting best-effort containers
//! (kill, freeze, swap out or checkpoint with CRIU) and resuming them when memory is back. Every decision
//! is logged with its evidence.
//!
//! * [`config`]: the TOML config, checked with errors that name the key;
//! * [`node`]: sampling the containers into the core's observations;
//! * [`agent`]: the loop body, one [`Agent::tick`] at a time;
//! * [`checkpoint`]: CRIU and the image store;
//! * [`events`]: the decision log;
//! * [`api`], [`http`], [`daemon`], [`lock`]: the daemon around the loop.
//!
//! What measures or exercises the agent (benchmarks, workloads, the demo)
//! is in `overbook-lab`.

pub mod agent;
pub mod api;
pub mod checkpoint;
pub mod classes;
pub mod config;
pub mod daemon;
pub mod events;
pub mod http;
pub mod kubernetes;
pub mod lock;
pub mod metrics;
pub mod node;
pub mod spawn;
pub mod starts;
pub mod store;
pub mod tasks;

pub use agent::{Agent, AgentError, ContainerStatus, NodeStatus, Tick};
pub use config::{AgentConfig, AgentConfigError};
pub use events::{Event, EventKind, EventLog};
