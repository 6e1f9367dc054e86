//! The endpoint programs on this kernel (`BPF_PROG_TEST_RUN`): with the ipcache filled
//! by the map writer from a real `IpCache` and the endpoint's policy computed from a
//! real policy file, a packet passes only if the policy admits its peer's identity on
//! its port, or if it answers a flow allowed the other way. A remote pod whose ipcache
//! entry has not arrived is dropped, and admitted once it arrives: the seed note's
//! story, on packets. Needs root and a bpffs; without them each test says so.

use weft_testkit as support;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use support::bpf::Bpf;
use weft_datapath::{policy_entries, FROM_ENDPOINT, TC_ACT_OK, TO_ENDPOINT};
use weft_model::Labels;

const TC_ACT_SHOT: u32 = 2;
/// The endpoint under test is named by the loopback's ifindex: the test run needs a
/// device of this namespace.
const ENDPOINT: u32 = 1;
const WEB: u32 = 65_800;
const CLIENT2: u32 = 131_400;
const DB2: u32 = 131_401;

fn run(b: &mut Bpf, program: &str, src: (&str, u16), dst: (&str, u16)) -> u32 {
    let packet = tcp(src.0.parse().unwrap(), src.1, dst.0.parse().unwrap(), dst.1);
    b.dp.test_run_endpoint(program, &packet, ENDPOINT, 1)
        .unwrap()
        .action
}

/// States `ip` (a /32) with `identity`.
fn put(b: &Bpf, ip: &str, identity: u32) {
    b.put(&format!("{ip}/32"), identity, 0);
}

/// An Ethernet frame with an IPv4 header and a TCP header.
fn tcp(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> Vec<u8> {
    let mut p = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
    p.extend_from_slice(&[0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    p
}

fn labels(s: &str) -> Labels {
    s.parse().unwrap()
}

/// Web (cluster1) admits cluster2's clients on TCP 80; its policy written for the
/// endpoint, computed with every identity known.
fn install_web_policy(b: &mut Bpf) {
    install_web_policy_knowing(b, &[WEB, CLIENT2, DB2]);
}

/// [`install_web_policy`] computed with only the identities `known`.
fn install_web_policy_knowing(b: &mut Bpf, known: &[u32]) {
    let policy = weft_state::policy::parse(
        "web.yaml",
        "
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromEndpoints: [{matchLabels: {app: client, io.cilium.k8s.policy.cluster: cluster2}}]
    toPorts: [{ports: [{port: '80', protocol: TCP}]}]
",
    )
    .unwrap();
    let web = labels("k8s:app=web;k8s:io.cilium.k8s.policy.cluster=cluster1;k8s:io.kubernetes.pod.namespace=shop;");
    let identities: BTreeMap<u32, Labels> = [
        (WEB, web.clone()),
        (CLIENT2, labels("k8s:app=client;k8s:io.cilium.k8s.policy.cluster=cluster2;k8s:io.kubernetes.pod.namespace=shop;")),
        (DB2, labels("k8s:app=db;k8s:io.cilium.k8s.policy.cluster=cluster2;k8s:io.kubernetes.pod.namespace=shop;")),
    ]
    .into_iter()
    .filter(|(id, _)| known.contains(id))
    .collect();
    let computed = weft_state::policy::compute(&[policy], &web, &identities);
    let (info, keys) = policy_entries(ENDPOINT, WEB, &computed).unwrap();
    b.dp.set_endpoint(ENDPOINT, info, &keys).unwrap();
}

#[test]
fn ingress_is_admitted_by_identity_and_port() {
    let Some(mut b) = Bpf::start("ep-ingress") else {
        return;
    };
    // Not yet known to this generation: not judged.
    assert_eq!(
        run(&mut b, TO_ENDPOINT, ("10.2.0.8", 40000), ("10.1.0.5", 80)),
        TC_ACT_OK
    );
    put(&b, "10.1.0.5", WEB);
    put(&b, "10.2.0.7", CLIENT2);
    put(&b, "10.2.0.8", DB2);
    install_web_policy(&mut b);
    assert_eq!(
        run(&mut b, TO_ENDPOINT, ("10.2.0.7", 40000), ("10.1.0.5", 80)),
        TC_ACT_OK,
        "client2 on 80"
    );
    assert_eq!(
        run(&mut b, TO_ENDPOINT, ("10.2.0.7", 40000), ("10.1.0.5", 81)),
        TC_ACT_SHOT,
        "another port"
    );
    assert_eq!(
        run(&mut b, TO_ENDPOINT, ("10.2.0.8", 40000), ("10.1.0.5", 80)),
        TC_ACT_SHOT,
        "db2 is not a client"
    );
    assert_eq!(
        run(&mut b, TO_ENDPOINT, ("10.9.9.9", 40000), ("10.1.0.5", 80)),
        TC_ACT_SHOT,
        "world"
    );
    // Egress is not enforced.
    assert_eq!(
        run(
            &mut b,
            FROM_ENDPOINT,
            ("10.1.0.5", 41000),
            ("10.9.9.9", 443)
        ),
        TC_ACT_OK
    );
    b.dp.remove_endpoint(ENDPOINT);
    assert_eq!(
        run(&mut b, TO_ENDPOINT, ("10.2.0.8", 40000), ("10.1.0.5", 80)),
        TC_ACT_OK,
        "forgotten"
    );
}

#[test]
fn replies_to_allowed_flows_pass_and_nothing_else_does() {
    let Some(mut b) = Bpf::start("ep-ct") else {
        return;
    };
    put(&b, "10.1.0.5", WEB);
    put(&b, "10.2.0.8", DB2);
    install_web_policy(&mut b);
    // The control: db2 cannot reach web's port 41000 on its own.
    assert_eq!(
        run(&mut b, TO_ENDPOINT, ("10.2.0.8", 5432), ("10.1.0.5", 41000)),
        TC_ACT_SHOT
    );
    // Web connects to db2 (egress is open), and db2's replies come back in.
    assert_eq!(
        run(
            &mut b,
            FROM_ENDPOINT,
            ("10.1.0.5", 41000),
            ("10.2.0.8", 5432)
        ),
        TC_ACT_OK
    );
    assert_eq!(
        run(&mut b, TO_ENDPOINT, ("10.2.0.8", 5432), ("10.1.0.5", 41000)),
        TC_ACT_OK,
        "a reply"
    );
    assert_eq!(
        run(&mut b, TO_ENDPOINT, ("10.2.0.8", 5433), ("10.1.0.5", 41000)),
        TC_ACT_SHOT,
        "another flow"
    );
}

#[test]
fn a_remote_pod_is_dropped_until_its_entry_arrives() {
    let Some(mut b) = Bpf::start("ep-arrival") else {
        return;
    };
    put(&b, "10.1.0.5", WEB);
    install_web_policy(&mut b);
    // cluster2's client, before its ipcache entry is in: it counts as world.
    assert_eq!(
        run(&mut b, TO_ENDPOINT, ("10.2.0.7", 40000), ("10.1.0.5", 80)),
        TC_ACT_SHOT
    );
    put(&b, "10.2.0.7", CLIENT2);
    assert_eq!(
        run(&mut b, TO_ENDPOINT, ("10.2.0.7", 40000), ("10.1.0.5", 80)),
        TC_ACT_OK
    );
}

#[test]
fn an_established_flows_own_packets_stay_judged_after_its_replies() {
    let Some(mut b) = Bpf::start("ep-established") else {
        return;
    };
    put(&b, "10.1.0.5", WEB);
    put(&b, "10.2.0.7", CLIENT2);
    install_web_policy(&mut b);
    let (client, web) = (("10.2.0.7", 40000), ("10.1.0.5", 80));
    assert_eq!(run(&mut b, TO_ENDPOINT, client, web), TC_ACT_OK);
    // Web answers: a reply, remembered as nothing of its own.
    assert_eq!(run(&mut b, FROM_ENDPOINT, web, client), TC_ACT_OK);
    assert_eq!(run(&mut b, TO_ENDPOINT, client, web), TC_ACT_OK);
    // The client's identity leaves (its cluster gone, or an endpoint switched to a
    // generation that lacks it): the flow's next packet is judged again, and dropped.
    install_web_policy_knowing(&mut b, &[WEB, DB2]);
    assert_eq!(
        run(&mut b, TO_ENDPOINT, client, web),
        TC_ACT_SHOT,
        "the established flow is judged by the policy as it is now"
    );
}
