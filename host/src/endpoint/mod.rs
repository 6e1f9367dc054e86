//! Endpoints: the pods on this node, created and removed through `weft-cni`.

pub mod ipam;
pub mod link;
