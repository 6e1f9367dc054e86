//! An endpoint's policy: from the policies that select it and every identity known
//! (this cluster's, remote clusters', reserved), what it may receive and send. It is a
//! pure function of those three inputs, recomputed when any changes: a remote
//! identity arriving widens what a selector admits, one leaving narrows it.

use super::rule::{Peer, Policy, PortRange};
use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use weft_model::Labels;

/// One allowed flow: from (ingress) or to (egress) `identity`, on `ports`. Identity 0
/// stands for every identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Allow {
    /// The peer's identity; 0 for any.
    pub identity: u32,
    /// IP protocol, 0 for any.
    pub protocol: u8,
    /// First port.
    pub first: u16,
    /// Last port.
    pub last: u16,
}

/// What an endpoint may receive and send.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointPolicy {
    /// Some policy with ingress rules selects it: what is not allowed is dropped.
    pub ingress_enforced: bool,
    /// Likewise for egress.
    pub egress_enforced: bool,
    /// Allowed ingress.
    pub ingress: BTreeSet<Allow>,
    /// Allowed egress.
    pub egress: BTreeSet<Allow>,
    /// The policies that select it, by name.
    pub selected_by: Vec<String>,
}

impl EndpointPolicy {
    /// Whether a packet from `identity` to `port`/`protocol` may come in.
    pub fn allows_ingress(&self, identity: u32, protocol: u8, port: u16) -> bool {
        !self.ingress_enforced || admits(&self.ingress, identity, protocol, port)
    }

    /// Whether a packet to `identity` at `port`/`protocol` may go out.
    pub fn allows_egress(&self, identity: u32, protocol: u8, port: u16) -> bool {
        !self.egress_enforced || admits(&self.egress, identity, protocol, port)
    }
}

fn admits(allows: &BTreeSet<Allow>, identity: u32, protocol: u8, port: u16) -> bool {
    allows.iter().any(|a| {
        (a.identity == 0 || a.identity == identity)
            && (a.protocol == 0 || a.protocol == protocol)
            && (a.first..=a.last).contains(&port)
    })
}

/// The policy of the endpoint labelled `endpoint`, given `policies` and every known
/// identity with its labels (owned, or shared as the identity cache holds them).
pub fn compute<L: Borrow<Labels>>(
    policies: &[Policy],
    endpoint: &Labels,
    identities: &BTreeMap<u32, L>,
) -> EndpointPolicy {
    let mut out = EndpointPolicy::default();
    for p in policies.iter().filter(|p| p.subject.matches(endpoint)) {
        out.selected_by.push(p.name.clone());
        if let Some(rules) = &p.ingress {
            out.ingress_enforced = true;
            for r in rules {
                allow(&mut out.ingress, &r.peers, &r.ports, identities);
            }
        }
        if let Some(rules) = &p.egress {
            out.egress_enforced = true;
            for r in rules {
                allow(&mut out.egress, &r.peers, &r.ports, identities);
            }
        }
    }
    out
}

fn allow<L: Borrow<Labels>>(
    into: &mut BTreeSet<Allow>,
    peers: &[Peer],
    ports: &[PortRange],
    identities: &BTreeMap<u32, L>,
) {
    let mut ids = BTreeSet::new();
    if peers.is_empty() {
        ids.insert(0);
    }
    for peer in peers {
        match peer {
            Peer::All => {
                ids.insert(0);
            }
            Peer::Entity(id) => {
                ids.insert(*id);
            }
            Peer::Endpoints(selector) => ids.extend(
                identities
                    .iter()
                    .filter(|(_, labels)| selector.matches((*labels).borrow()))
                    .map(|(id, _)| *id),
            ),
        }
    }
    let any_port = [PortRange {
        protocol: 0,
        first: 0,
        last: u16::MAX,
    }];
    let ports = if ports.is_empty() {
        &any_port[..]
    } else {
        ports
    };
    for id in ids {
        for p in ports {
            into.insert(Allow {
                identity: id,
                protocol: p.protocol,
                first: p.first,
                last: p.last,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::rule::parse;

    const TCP: u8 = 6;

    fn labels(s: &str) -> Labels {
        s.parse().unwrap()
    }

    /// web in shop on cluster1, client in shop on cluster1 and cluster2, db elsewhere.
    fn identities() -> BTreeMap<u32, Labels> {
        [
            (65_800, "k8s:app=web;k8s:io.cilium.k8s.policy.cluster=cluster1;k8s:io.kubernetes.pod.namespace=shop;"),
            (65_801, "k8s:app=client;k8s:io.cilium.k8s.policy.cluster=cluster1;k8s:io.kubernetes.pod.namespace=shop;"),
            (131_400, "k8s:app=client;k8s:io.cilium.k8s.policy.cluster=cluster2;k8s:io.kubernetes.pod.namespace=shop;"),
            (131_401, "k8s:app=client;k8s:io.cilium.k8s.policy.cluster=cluster2;k8s:io.kubernetes.pod.namespace=other;"),
        ]
        .into_iter()
        .map(|(id, l)| (id, labels(l)))
        .collect()
    }

    fn web() -> Labels {
        identities()[&65_800].clone()
    }

    const CNP: &str = "
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-from-remote-clients, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromEndpoints:
    - matchLabels: {app: client, io.cilium.k8s.policy.cluster: cluster2}
    toPorts:
    - ports: [{port: '80', protocol: TCP}]
  - fromEntities: [host]
";

    #[test]
    fn a_cluster_selector_admits_only_that_clusters_clients_of_the_namespace() {
        let p = parse("web.yaml", CNP).unwrap();
        let pol = compute(&[p], &web(), &identities());
        assert!(pol.ingress_enforced && !pol.egress_enforced);
        assert!(
            pol.allows_ingress(131_400, TCP, 80),
            "cluster2's client in shop"
        );
        assert!(!pol.allows_ingress(131_400, TCP, 81), "another port");
        assert!(!pol.allows_ingress(65_801, TCP, 80), "cluster1's client");
        assert!(!pol.allows_ingress(131_401, TCP, 80), "another namespace");
        assert!(pol.allows_ingress(1, TCP, 9999), "the host, any port");
        assert!(
            !pol.allows_ingress(424_242, TCP, 80),
            "an identity not (yet) known"
        );
        assert!(
            pol.allows_egress(424_242, TCP, 80),
            "egress is not enforced"
        );
    }

    #[test]
    fn an_identity_arriving_widens_what_is_admitted() {
        let p = parse("web.yaml", CNP).unwrap();
        let mut ids = identities();
        ids.remove(&131_400);
        let before = compute(std::slice::from_ref(&p), &web(), &ids);
        assert!(
            !before.allows_ingress(131_400, TCP, 80),
            "not arrived: dropped"
        );
        ids.insert(131_400, identities()[&131_400].clone());
        let after = compute(&[p], &web(), &ids);
        assert!(after.allows_ingress(131_400, TCP, 80));
    }

    #[test]
    fn network_policies_and_refusals() {
        let np = "
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-egress, namespace: shop}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
  - to: [{podSelector: {matchLabels: {app: client}}}]
    ports: [{port: 53, protocol: UDP}]
";
        let p = parse("np.yaml", np).unwrap();
        let pol = compute(&[p], &web(), &identities());
        assert!(!pol.ingress_enforced && pol.egress_enforced);
        assert!(pol.allows_egress(65_801, 17, 53));
        assert!(
            pol.allows_egress(131_400, 17, 53),
            "no cluster label: every cluster"
        );
        assert!(!pol.allows_egress(131_401, 17, 53), "same namespace only");
        assert!(!pol.allows_egress(65_801, TCP, 53));

        let other_ns = parse(
            "o.yaml",
            &CNP.replace("namespace: shop", "namespace: other"),
        )
        .unwrap();
        assert!(compute(&[other_ns], &web(), &identities())
            .selected_by
            .is_empty());

        for (bad, needle) in [
            (
                CNP.replace("fromEntities: [host]", "fromEntities: [cluster-ish]"),
                "cluster-ish",
            ),
            (CNP.replace("port: '80'", "port: http"), "named ports"),
            (CNP.replace("toPorts:", "toPortz:"), "toPortz"),
            (
                CNP.replace("cilium.io/v2", "cilium.io/v9"),
                "unsupported kind",
            ),
            ("{not: [yaml".to_owned(), ""),
        ] {
            let e = parse("bad.yaml", &bad).unwrap_err();
            assert!(
                e.to_string().contains("bad.yaml") && e.to_string().contains(needle),
                "{e}"
            );
        }
    }

    #[test]
    fn the_order_of_policies_does_not_matter() {
        let p1 = parse("a.yaml", CNP).unwrap();
        let p2 = CNP
            .replace("cluster2", "cluster1")
            .replace("'80'", "'443'")
            .replace("web-from-remote-clients", "web-tls-from-local-clients");
        let p2 = parse("b.yaml", &p2).unwrap();
        let mut a = compute(&[p1.clone(), p2.clone()], &web(), &identities());
        let mut b = compute(&[p2, p1], &web(), &identities());
        assert_ne!(a.selected_by, b.selected_by);
        a.selected_by.sort();
        b.selected_by.sort();
        assert_eq!(a, b);
        assert!(a.allows_ingress(65_801, TCP, 443) && a.allows_ingress(131_400, TCP, 80));
    }

    /// A NetworkPolicy's `namespaceSelector`, by the namespace's name and by its own
    /// labels (the identity labels `io.cilium.k8s.namespace.labels.<key>` that
    /// pods made through the Kubernetes API carry), `In` and `DoesNotExist` as well.
    #[test]
    fn namespace_selectors_match_the_namespaces_labels() {
        let ids: BTreeMap<u32, Labels> = [
            (70_001, "k8s:app=client;k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=team-a;k8s:io.cilium.k8s.namespace.labels.team=payments;k8s:io.cilium.k8s.policy.cluster=cluster1;k8s:io.kubernetes.pod.namespace=team-a;"),
            (70_002, "k8s:app=client;k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=team-b;k8s:io.cilium.k8s.policy.cluster=cluster1;k8s:io.kubernetes.pod.namespace=team-b;"),
            // Made without the API: no namespace labels, only the namespace.
            (70_003, "k8s:app=client;k8s:io.cilium.k8s.policy.cluster=cluster1;k8s:io.kubernetes.pod.namespace=team-c;"),
        ]
        .into_iter()
        .map(|(id, l)| (id, labels(l)))
        .collect();
        let policy = |from: &str| {
            let text = format!(
                "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: p, namespace: shop}}\n\
                 spec:\n  podSelector: {{}}\n  ingress:\n  - from:\n    - {from}\n"
            );
            let p = parse("p.yaml", &text).unwrap_or_else(|e| panic!("{from}: {e}"));
            compute(&[p], &web(), &ids)
        };
        let admits = |pol: &EndpointPolicy| -> Vec<u32> {
            [70_001, 70_002, 70_003]
                .into_iter()
                .filter(|id| pol.allows_ingress(*id, TCP, 80))
                .collect()
        };
        let by_team = policy("namespaceSelector: {matchLabels: {team: payments}}");
        assert_eq!(admits(&by_team), [70_001]);
        let by_name =
            policy("namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: team-c}}");
        assert_eq!(
            admits(&by_name),
            [70_003],
            "the name also selects identities without namespace labels"
        );
        let by_names = policy(
            "namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [team-a, team-b]}]}",
        );
        assert_eq!(admits(&by_names), [70_001, 70_002]);
        let untagged =
            policy("namespaceSelector: {matchExpressions: [{key: team, operator: DoesNotExist}]}");
        assert_eq!(admits(&untagged), [70_002, 70_003]);
        let every = policy("namespaceSelector: {}");
        assert_eq!(admits(&every), [70_001, 70_002, 70_003]);
        let both = policy("{namespaceSelector: {matchLabels: {team: payments}}, podSelector: {matchLabels: {app: server}}}");
        assert!(admits(&both).is_empty(), "the pod selector still applies");
    }
}
