//! weft-hooks' plain types into the WIT contract's, at the call: the one place the two
//! meet. The current contract (0.2.0) says everything the plain types say; 0.1.0 says
//! less (see [`super::v0_1`]).

use super::bindings::weft::plugin::types as wit;
use weft_hooks as plain;

fn count(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl From<&plain::ClusterInfo> for wit::Cluster {
    fn from(c: &plain::ClusterInfo) -> Self {
        wit::Cluster {
            name: c.name.clone(),
            id: c.id,
            counts: wit::ResourceCounts {
                nodes: count(c.counts.nodes),
                ipcache: count(c.counts.ipcache),
                identities: count(c.counts.identities),
                services: count(c.counts.services),
            },
        }
    }
}

impl From<plain::ClusterSync> for wit::ClusterSync {
    fn from(c: plain::ClusterSync) -> Self {
        wit::ClusterSync {
            name: c.name,
            connected: c.connected,
            nodes_synced: c.nodes_synced,
            ipcache_synced: c.ipcache_synced,
            identities_synced: c.identities_synced,
            services_synced: c.services_synced,
        }
    }
}

impl From<plain::EndpointKind> for wit::EndpointKind {
    fn from(k: plain::EndpointKind) -> Self {
        match k {
            plain::EndpointKind::Host => wit::EndpointKind::Host,
            plain::EndpointKind::Workload => wit::EndpointKind::Workload,
        }
    }
}

impl From<plain::RegenerationReason> for wit::RegenerationReason {
    fn from(r: plain::RegenerationReason) -> Self {
        match r {
            plain::RegenerationReason::Restore => wit::RegenerationReason::Restore,
            plain::RegenerationReason::Create => wit::RegenerationReason::Create,
            plain::RegenerationReason::IdentityChange => wit::RegenerationReason::IdentityChange,
            plain::RegenerationReason::PolicyChange => wit::RegenerationReason::PolicyChange,
        }
    }
}

impl From<&plain::RegenerationRequest> for wit::RegenerationRequest {
    fn from(r: &plain::RegenerationRequest) -> Self {
        let e = &r.endpoint;
        wit::RegenerationRequest {
            endpoint: wit::Endpoint {
                kind: e.kind.into(),
                identity: e.identity,
                namespace: e.namespace.clone(),
                name: e.name.clone(),
                labels: e.labels.clone(),
            },
            reason: r.reason.into(),
            ipsec: r.ipsec,
            wireguard: r.wireguard,
            default_timeout_ms: r.default_timeout_ms,
            clusters: r.clusters.iter().cloned().map(Into::into).collect(),
        }
    }
}

impl From<&plain::PeerGcRequest> for wit::PeerGcRequest {
    fn from(r: &plain::PeerGcRequest) -> Self {
        wit::PeerGcRequest {
            peers: r
                .peers
                .iter()
                .map(|p| wit::RestoredPeer {
                    public_key: p.public_key.clone(),
                    allowed_ips: p.allowed_ips.clone(),
                })
                .collect(),
            clusters: r.clusters.iter().cloned().map(Into::into).collect(),
        }
    }
}
