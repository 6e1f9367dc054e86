//! Security identities: reserved, local (allocated here) and per remote cluster.
//!
//! A numeric identity names a set of labels. Reserved identities are fixed; a remote
//! cluster's identities carry its cluster ID in bits 16–23 and are checked against it;
//! local identities (CIDR identities of the ipcache) carry the local-scope bit 24. The
//! global allocator, which writes identities to etcd, is the mesh's
//! (`weft_clustermesh::identity_allocator`).

mod cache;
mod local;

pub use cache::{IdentityCache, Totals};
pub use local::LocalAllocator;

pub use weft_model::Reserved;

/// The bit that marks an identity allocated locally (CIDR identities).
pub const LOCAL_SCOPE: u32 = 1 << 24;

/// The cluster ID encoded in a cluster-scoped identity (bits 16–23).
pub fn cluster_id_of(id: u32) -> u32 {
    (id >> 16) & 0xFF
}

/// Checks that `id`, stated by remote `cluster` (whose ID is `cluster_id`, when it
/// announced one), is one of that cluster's: cluster-scoped, and with its cluster ID
/// in bits 16–23. A remote cluster speaks for its own identities only.
///
/// # Errors
/// [`Error::NotClusterScoped`] for a reserved, local-scope or out-of-range identity;
/// [`Error::WrongCluster`] for another cluster's.
///
/// # Example
/// ```
/// use weft_state::identity::check_remote;
/// assert!(check_remote("c2", Some(2), 0x2_0001).is_ok());
/// assert!(check_remote("c2", Some(2), 0x3_0001).is_err(), "cluster 3's");
/// assert!(check_remote("c2", Some(2), 6).is_err(), "reserved: remote-node");
/// ```
pub fn check_remote(cluster: &str, cluster_id: Option<u32>, id: u32) -> Result<(), Error> {
    let found = cluster_id_of(id);
    if found == 0 || id & LOCAL_SCOPE != 0 || id > 0x00FF_FFFF {
        return Err(Error::NotClusterScoped {
            id,
            cluster: cluster.into(),
        });
    }
    match cluster_id.filter(|e| *e != found) {
        Some(expected) => Err(Error::WrongCluster {
            id,
            cluster: cluster.into(),
            found,
            expected,
        }),
        None => Ok(()),
    }
}

/// Why an identity was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A remote identity whose cluster bits name another cluster.
    #[error("identity {id} of cluster {cluster:?} carries cluster ID {found}, the cluster's is {expected}")]
    WrongCluster {
        /// The identity.
        id: u32,
        /// The remote cluster it came from.
        cluster: String,
        /// The cluster ID in its bits 16–23.
        found: u32,
        /// The cluster's ID.
        expected: u32,
    },
    /// A remote cluster may not define reserved or local identities.
    #[error("identity {id} of cluster {cluster:?} is not cluster-scoped")]
    NotClusterScoped {
        /// The identity.
        id: u32,
        /// The remote cluster it came from.
        cluster: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_numbers_and_labels() {
        let expect = [
            (1, "host"),
            (2, "world"),
            (3, "unmanaged"),
            (4, "health"),
            (5, "init"),
            (6, "remote-node"),
            (7, "kube-apiserver"),
        ];
        for (id, name) in expect {
            let r = Reserved::from_id(id).unwrap();
            assert_eq!(r.name(), name);
            assert_eq!(r.labels().to_string(), format!("reserved:{name}=;"));
        }
        assert_eq!(Reserved::from_id(8), None);
    }

    #[test]
    fn cluster_bits() {
        assert_eq!(cluster_id_of(0x0003_0001), 3);
        assert_eq!(cluster_id_of(199475), 3);
        assert_eq!(cluster_id_of(LOCAL_SCOPE | 5), 0);
    }
}
