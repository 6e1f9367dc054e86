//! Nodes: the manager of every known node. This node's record in its own etcd is the
//! mesh's (`weft_clustermesh::registration`).

mod manager;

pub use manager::{NodeId, NodeListener, NodeManager};
