//! The agent on a Kubernetes node (issue 17): pods' classes from the API
//! server. The pods themselves are found in the kubelet's cgroups
//! ([`overbook_linux::kubepods`]); the API server says which class each
//! is, by its uid.

pub mod classify;
pub mod link;
pub mod offer;
pub mod watch;
pub mod writes;

pub use classify::{classify, PodClass, PodFacts};
pub use link::ApiLink;
pub use watch::PodEvent;
