//! Endpoints: the pods on this node, created and removed through `weft-cni`, their
//! regeneration waits and their switch into the node's datapath.
//!
//! - [`ipam`]: addresses from the node's pod CIDRs, remembered across restarts;
//! - [`link`]: the veth pair, addresses and routes, through rtnetlink;
//! - [`pods`]: where a pod's labels come from in Kubernetes mode (the agent's Pod
//!   store, behind [`PodDirectory`]);
//! - [`store`]: one record per endpoint, written before the first side effect;
//! - [`manager`]: the CNI operations, each step idempotent, with crash recovery, and
//!   each endpoint's regeneration task;
//! - [`regeneration`]: what a regeneration records (the API's typed outcome);
//! - [`wait`]: the regeneration policy asked, then its wait carried out on the mesh's
//!   barriers, bounded by the verdict's timeout;
//! - [`switch`]: the endpoints switched into the agent's datapath, and regenerated when
//!   the policies or the identities change their entries.
//!
//! Owns the endpoint's lifecycle on this node. Knows the mesh (to wait on its
//! barriers, allocate identities and publish the endpoint's IP), the hook types (never
//! the plugin runtime: the policy comes in as a [`weft_hooks::RegenerationPolicy`]),
//! and the datapath (the switch). Must not know the agent's wiring, its API server or
//! the lab.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod ipam;
pub mod link;
pub mod manager;
pub mod pods;
pub mod regeneration;
pub mod store;
pub mod switch;
pub mod wait;

pub use manager::{Config, EndpointManager};
pub use pods::{PodDirectory, PodLookupError, PodRef};
pub use switch::EndpointSwitch;
