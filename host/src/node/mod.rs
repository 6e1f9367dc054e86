//! Nodes: this node's record in its own etcd, and the manager of every known node.

mod leased_keys;
mod manager;
mod registration;

pub use leased_keys::{LeasedKeys, PutError};

pub use manager::{NodeId, NodeListener, NodeManager};
pub use registration::{node_key, run_registration, Registration, NODES_CANARY_BASE};
