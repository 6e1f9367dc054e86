//! This node: its record in its own cluster's etcd.

mod registration;

pub use registration::{node_key, run_registration, Registration, NODES_CANARY_BASE};
