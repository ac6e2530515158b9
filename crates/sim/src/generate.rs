//! (in progress)
use crate::scenario::RunSpec;
use crate::workload::{TraceError, WorkloadEvent};

#[derive(Debug)]
pub struct GenError {
    pub key: String,
    pub problem: String,
}

#[derive(Debug)]
pub struct Generator {}

impl Generator {
    pub fn from_spec(_t: &toml::Table, _s: &RunSpec) -> Result<Generator, GenError> {
        Ok(Generator {})
    }
}

impl Iterator for Generator {
    type Item = Result<WorkloadEvent, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        None
    }
}
