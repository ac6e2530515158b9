//! overbook-sim
