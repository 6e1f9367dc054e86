//! Endpoints: the pods on this node, created and removed through `weft-cni`.
//!
//! - [`ipam`]: addresses from the node's pod CIDRs, remembered across restarts;
//! - [`link`]: the veth pair, addresses and routes, through rtnetlink;
//! - [`store`]: one record per endpoint, written before the first side effect;
//! - [`manager`]: the CNI operations, each step idempotent, with crash recovery;
//! - [`regeneration`]: each endpoint's wait, as the regeneration policy decides;
//! - [`switch`]: the endpoints switched into the agent's datapath, and regenerated when
//!   the policies or the identities change their entries.

pub mod ipam;
pub mod link;
pub mod manager;
pub mod regeneration;
pub mod store;
pub mod switch;

pub use manager::{Config, EndpointManager};
pub use switch::EndpointSwitch;
