//! How the facts of one prefix resolve into an entry. Pure: the same facts give the same
//! entry, whatever order they arrived in.

use super::{Entry, Fact, Owner, Source};
use crate::identity::Reserved;
use std::sync::Arc;
use weft_model::Labels;

/// Where the resolved identity comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IdentitySpec {
    /// A reserved identity, from the merged labels.
    Reserved(Reserved),
    /// The explicit identity of the strongest owner that gives one.
    Explicit(u32),
    /// A local (CIDR) identity for these merged labels.
    Local(Arc<Labels>),
}

/// The resolution of `facts`, sorted strongest first (see [`sort_key`]), minus the
/// local identity number, which the cache allocates. `None` when no fact says anything
/// about identity: a tunnel peer or key alone does not make an entry (they wait for
/// the labels, whatever the order).
///
/// When this cluster claims the prefix (a fact from a source stronger than
/// `clustermesh`, other than the kube-apiserver's, which only labels an address),
/// remote clusters' facts count for nothing: a remote cluster cannot give one of our
/// prefixes a tunnel endpoint or a key that our own facts leave out.
pub(crate) fn resolve(all: &[(Owner, Fact)]) -> Option<(IdentitySpec, Entry)> {
    let (strongest, _) = all.first()?;
    let ours = all
        .iter()
        .any(|(o, _)| o.source > Source::ClusterMesh && o.source != Source::KubeApiServer);
    let facts = || {
        all.iter()
            .filter(move |(o, _)| !(ours && o.source == Source::ClusterMesh))
    };
    // Compared field by field: `Reserved::label` allocates, and this runs at every
    // change of every prefix.
    let has = |r: Reserved| {
        facts().any(|(_, f)| {
            f.labels.as_ref().is_some_and(|l| {
                l.iter()
                    .any(|x| x.source == "reserved" && x.key == r.name() && x.value.is_empty())
            })
        })
    };
    let spec = if has(Reserved::Host) {
        IdentitySpec::Reserved(Reserved::Host)
    } else if has(Reserved::RemoteNode) {
        if has(Reserved::KubeApiServer) {
            IdentitySpec::Reserved(Reserved::KubeApiServer)
        } else {
            IdentitySpec::Reserved(Reserved::RemoteNode)
        }
    } else if has(Reserved::Health) {
        IdentitySpec::Reserved(Reserved::Health)
    } else if let Some(id) = facts().find_map(|(_, f)| f.identity) {
        IdentitySpec::Explicit(id)
    } else {
        let merged: Labels = facts()
            .filter_map(|(_, f)| f.labels.as_ref())
            .flat_map(|l| l.iter().cloned())
            .collect();
        if merged.is_empty() {
            return None;
        }
        IdentitySpec::Local(Arc::new(merged))
    };
    let identity = match &spec {
        IdentitySpec::Reserved(r) => r.id(),
        IdentitySpec::Explicit(id) => *id,
        IdentitySpec::Local(_) => 0, // filled in by the cache
    };
    let entry = Entry {
        identity,
        tunnel_endpoint: facts().find_map(|(_, f)| f.tunnel_peer),
        encrypt_key: facts()
            .map(|(_, f)| f.encrypt_key)
            .find(|k| *k != 0)
            .unwrap_or(0),
        source: strongest.source,
        k8s: facts().find_map(|(_, f)| f.k8s.clone()),
    };
    Some((spec, entry))
}

/// Facts are kept sorted by this key: strongest source first, then by scope and
/// resource name,
/// so that ties between owners of one source are broken the same way in every order.
pub(crate) fn sort_key(owner: &Owner) -> (std::cmp::Reverse<super::Source>, u32, &str) {
    (
        std::cmp::Reverse(owner.source),
        owner.scope,
        &owner.resource,
    )
}
