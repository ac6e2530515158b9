//! overbook's lab: everything that exists to measure or exercise the node
//! agent, kept out of the daemon so that who opens `overbook-agent` to
//! change how a node is protected finds the daemon alone.
//!
//! * [`bench`]: `overbook bench …`, the benchmarks on real kernels (kill
//!   latency, agent overhead, steered reclaim, preemption, checkpoints, the
//!   colocation head-to-head with Redis and PostgreSQL, calibration);
//! * [`workload`]: the programs put in containers (`overbook workload`,
//!   the `overbook-workload` binary): anonymous hogs, file readers;
//! * [`chain`]: a deterministic computation whose answer proves a task
//!   ran whole across checkpoints and restarts;
//! * [`demo`]: `overbook demo`'s scene and report.
//!
//! Its tests drive the agent on a real node (`tests/real_node.rs`,
//! `restarts.rs`, `odd_containers.rs`, `checkpoint_vm.rs`): they live here
//! because they start the workload binary, which a test can only name in
//! its own package.

pub mod bench;
pub mod chain;
pub mod demo;
pub mod workload;
