//! Identity-aware policy, the reason remote identities must be synced before an
//! endpoint switches: a policy admits peers by the labels of their identities, the
//! cluster label included, so a peer whose identity has not arrived is not admitted.
//!
//! - [`selector`]: label selectors;
//! - [`rule`]: policy files (`CiliumNetworkPolicy`, `NetworkPolicy`) as [`Policy`];
//! - [`mod@compute`]: an endpoint's allowed ingress and egress by identity and port;
//! - [`dir`]: the policy directory, followed live.

pub mod compute;
pub mod dir;
pub mod rule;
pub mod selector;

pub use compute::{compute, Allow, EndpointPolicy};
pub use dir::PolicySet;
pub use rule::{parse, parse_all, Peer, PeerRule, Policy, PortRange, Refused};
pub use selector::{Expression, Operator, Selector};
