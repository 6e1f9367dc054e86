//! The reserved security identities: fixed numbers every cluster agrees on.

use crate::{Label, Labels};
use std::sync::Arc;

/// The reserved numeric identities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Reserved {
    /// The local host.
    Host = 1,
    /// Anything outside the mesh.
    World = 2,
    /// An endpoint weft does not manage.
    Unmanaged = 3,
    /// A node's health endpoint.
    Health = 4,
    /// An endpoint whose identity is not resolved yet.
    Init = 5,
    /// Any other node.
    RemoteNode = 6,
    /// The kube-apiserver running on a remote node.
    KubeApiServer = 7,
}

impl Reserved {
    /// Every reserved identity.
    pub const ALL: [Reserved; 7] = [
        Reserved::Host,
        Reserved::World,
        Reserved::Unmanaged,
        Reserved::Health,
        Reserved::Init,
        Reserved::RemoteNode,
        Reserved::KubeApiServer,
    ];

    /// The label key of the identity, under the `reserved` source.
    pub fn name(self) -> &'static str {
        match self {
            Reserved::Host => "host",
            Reserved::World => "world",
            Reserved::Unmanaged => "unmanaged",
            Reserved::Health => "health",
            Reserved::Init => "init",
            Reserved::RemoteNode => "remote-node",
            Reserved::KubeApiServer => "kube-apiserver",
        }
    }

    /// The numeric identity.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The reserved identity with this number.
    pub fn from_id(id: u32) -> Option<Reserved> {
        Self::ALL.into_iter().find(|r| r.id() == id)
    }

    /// The label `reserved:<name>`.
    pub fn label(self) -> Label {
        Label {
            source: "reserved".into(),
            key: self.name().into(),
            value: String::new(),
        }
    }

    /// The identity's labels: its one reserved label.
    pub fn labels(self) -> Arc<Labels> {
        Arc::new(std::iter::once(self.label()).collect())
    }
}
