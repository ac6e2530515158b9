//! overbook-sim: a discrete-event cluster simulator in virtual time that runs
//! overbook-core's node policy on every simulated node, fed by cluster traces
//! or the built-in workload generator.

pub mod calibration;
pub mod consolidate;
pub mod engine;
pub mod generate;
pub mod killdelay;
pub mod outcome;
pub mod report;
pub mod scenario;
pub mod storage;
pub mod tally;
pub mod trace;
pub mod units;
pub mod workload;
