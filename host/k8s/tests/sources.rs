//! The node's Kubernetes sources against the stand-in API server: initial lists gate
//! "synced", the Pod source holds this node's pods only, a CNI-style wait finds a pod
//! whose event arrives late (and gives up at its bound), the API down at start is
//! counted and recovered from, a kubeconfig that does not read is named.

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::task::JoinSet;
use weft_k8s::{KubernetesSources, NodeFacts, Retry};
use weft_kubeapi::{resources::find, KubeApi, Options};

const BOUND: Duration = Duration::from_secs(20);

fn fast() -> Retry {
    Retry {
        min: Duration::from_millis(50),
        max: Duration::from_millis(300),
    }
}

async fn client(api: &KubeApi) -> kube::Client {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    api.write_kubeconfig(&path, "lab").unwrap();
    weft_k8s::client(Some(&path))
        .await
        .unwrap()
        .expect("a client")
}

fn create(api: &KubeApi, plural: &str, ns: Option<&str>, object: Value) {
    let r = weft_kubeapi::resources::RESOURCES
        .iter()
        .find(|r| r.plural == plural)
        .unwrap();
    api.store().create(r, ns, object).unwrap();
}

fn pod(name: &str, node: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"app": "web"}}, "spec": {"nodeName": node, "containers": []}})
}

#[tokio::test]
async fn sources_sync_and_the_pod_source_holds_this_nodes_pods() {
    let api = KubeApi::start().await.unwrap();
    create(
        &api,
        "namespaces",
        None,
        json!({"metadata": {"name": "shop"}}),
    );
    create(&api, "pods", Some("shop"), pod("here", "n1"));
    create(&api, "pods", Some("shop"), pod("there", "n2"));
    create(
        &api,
        "nodes",
        None,
        json!({"metadata": {"name": "n1"}, "spec": {"podCIDRs": ["10.1.0.0/24", "fd00:1::/64"]},
               "status": {"addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "192.168.1.1"}]}}),
    );
    create(&api, "nodes", None, json!({"metadata": {"name": "n2"}}));
    let client = client(&api).await;
    let mut tasks = JoinSet::new();
    let sources = KubernetesSources::start(&client, "n1", fast(), &mut tasks);
    assert!(sources.wait_synced(BOUND).await, "{:?}", sources.statuses());
    assert!(sources.synced());

    let pods: Vec<String> = sources
        .pods
        .store()
        .state()
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(pods, ["here"]);
    let status = sources.statuses();
    assert_eq!(status.len(), 8);
    assert_eq!(status[0].name, "pods");
    assert_eq!((status[0].objects, status[0].lists), (1, 1));
    assert_eq!(status[1].objects, 1, "one namespace");

    let nodes = sources.node.store().state();
    assert_eq!(nodes.len(), 1, "only this node");
    let facts = NodeFacts::of(&nodes[0]);
    assert_eq!(facts.pod_cidrs, ["10.1.0.0/24", "fd00:1::/64"]);
    assert_eq!(
        facts.addresses,
        ["192.168.1.1".parse::<std::net::IpAddr>().unwrap()]
    );
    api.stop().await;
}

/// A CNI ADD may come before the Pod's event: the wait finds the pod once it arrives,
/// and ends at its bound for a pod that never does.
#[tokio::test]
async fn a_wait_finds_a_late_pod_and_gives_up_at_its_bound() {
    let api = KubeApi::start().await.unwrap();
    create(
        &api,
        "namespaces",
        None,
        json!({"metadata": {"name": "shop"}}),
    );
    let client = client(&api).await;
    let mut tasks = JoinSet::new();
    let sources = KubernetesSources::start(&client, "n1", fast(), &mut tasks);
    assert!(sources.wait_synced(BOUND).await);

    let key = ObjectRef::<Pod>::new("late").within("shop");
    let waiting = {
        let pods = sources.pods.clone();
        let key = key.clone();
        tokio::spawn(async move { pods.wait_for(&key, BOUND, |_| true).await })
    };
    create(&api, "pods", Some("shop"), pod("late", "n1"));
    let found = waiting
        .await
        .unwrap()
        .expect("the pod arrives within the bound");
    assert_eq!(found.metadata.name.as_deref(), Some("late"));

    let never = ObjectRef::<Pod>::new("never").within("shop");
    let started = std::time::Instant::now();
    assert!(sources
        .pods
        .wait_for(&never, Duration::from_millis(300), |_| true)
        .await
        .is_none());
    assert!(started.elapsed() >= Duration::from_millis(300));
    api.stop().await;
}

/// The API server down when the agent starts: the sources count the errors, are not
/// synced, and sync once it is up, with the objects it holds.
#[tokio::test]
async fn sources_recover_from_an_api_server_that_is_down_at_start() {
    let api = KubeApi::start().await.unwrap();
    let client = client(&api).await;
    let addr = api.addr();
    let store = api.stop().await;
    let ns = find("", "v1", "namespaces").unwrap();
    store
        .create(ns, None, json!({"metadata": {"name": "shop"}}))
        .unwrap();

    let mut tasks = JoinSet::new();
    let sources = KubernetesSources::start(&client, "n1", fast(), &mut tasks);
    assert!(!sources.wait_synced(Duration::from_millis(500)).await);
    let down = sources.namespaces.status();
    assert!(!down.synced && down.errors > 0, "{down:?}");
    assert!(down.last_error.is_some());

    let api = KubeApi::start_with(
        store,
        Options {
            addr,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    assert!(sources.wait_synced(BOUND).await, "{:?}", sources.statuses());
    assert_eq!(sources.namespaces.status().objects, 1);
    api.stop().await;
}

#[tokio::test]
async fn a_kubeconfig_that_does_not_read_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing-kubeconfig");
    let e = weft_k8s::client(Some(&path)).await.err().expect("an error");
    assert!(e.to_string().contains("missing-kubeconfig"), "{e}");
}

/// A pod's identity labels from the stores: its labels through the default filter,
/// its namespace's labels, its service account and the cluster; a UID that is not the
/// Pod's is not found; with the API down, the lookup says the sources are not synced.
#[tokio::test]
async fn a_pods_identity_labels_come_from_the_pod_and_namespace_stores() {
    let api = KubeApi::start().await.unwrap();
    create(
        &api,
        "namespaces",
        None,
        json!({"metadata": {"name": "shop", "labels": {"team": "payments"}}}),
    );
    create(
        &api,
        "pods",
        Some("shop"),
        json!({"metadata": {"name": "web-5d9c8-x2x", "labels": {"app": "web", "pod-template-hash": "5d9c8"}},
               "spec": {"nodeName": "n1", "serviceAccountName": "web", "containers": []}}),
    );
    let uid = api
        .store()
        .get(
            find("", "v1", "pods").unwrap(),
            Some("shop"),
            "web-5d9c8-x2x",
        )
        .unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let client = client(&api).await;
    let mut tasks = JoinSet::new();
    let sources = KubernetesSources::start(&client, "n1", fast(), &mut tasks);
    let filter = weft_model::LabelFilter::default();
    let labels = sources
        .pod_identity_labels("shop", "web-5d9c8-x2x", Some(&uid), "c1", &filter, BOUND)
        .await
        .unwrap();
    assert_eq!(
        labels.to_string(),
        "k8s:app=web;\
         k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=shop;\
         k8s:io.cilium.k8s.namespace.labels.team=payments;\
         k8s:io.cilium.k8s.policy.cluster=c1;\
         k8s:io.cilium.k8s.policy.serviceaccount=web;\
         k8s:io.kubernetes.pod.namespace=shop;"
    );
    let other = sources
        .pod_identity_labels(
            "shop",
            "web-5d9c8-x2x",
            Some("another-uid"),
            "c1",
            &filter,
            Duration::from_millis(200),
        )
        .await;
    assert_eq!(other, Err(weft_k8s::Missing::Pod));

    api.stop().await;
    let down = KubernetesSources::start(&client, "n1", fast(), &mut tasks);
    let lookup = down
        .pod_identity_labels(
            "shop",
            "web-5d9c8-x2x",
            None,
            "c1",
            &filter,
            Duration::from_millis(300),
        )
        .await;
    assert_eq!(lookup, Err(weft_k8s::Missing::NotSynced));
}

fn set_of(
    rx: &tokio::sync::watch::Receiver<std::sync::Arc<weft_state::policy::PolicySet>>,
) -> (Vec<String>, Vec<String>) {
    let set = rx.borrow();
    (
        set.policies.iter().map(|p| p.name.clone()).collect(),
        set.refused
            .iter()
            .map(|r| format!("{}: {}", r.file, r.reason))
            .collect(),
    )
}

/// The API's policies become one set through the directory's parser: an object with
/// an unknown field is refused and named, the others in force; a change while the API
/// is down with its history compacted (410 Gone on the way back) is seen after the
/// re-list, and no policy is lost.
#[tokio::test]
async fn the_apis_policies_are_one_set_and_a_410_relist_loses_none() {
    let api = KubeApi::start().await.unwrap();
    create(
        &api,
        "namespaces",
        None,
        json!({"metadata": {"name": "shop"}}),
    );
    create(
        &api,
        "networkpolicies",
        Some("shop"),
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "np"},
               "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"from": [{"podSelector": {}}]}]}}),
    );
    create(
        &api,
        "ciliumnetworkpolicies",
        Some("shop"),
        json!({"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy", "metadata": {"name": "cnp"},
               "spec": {"endpointSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"fromEndpoints": [{}]}]}}),
    );
    create(
        &api,
        "ciliumnetworkpolicies",
        Some("shop"),
        json!({"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy", "metadata": {"name": "bad"},
               "spec": {"endpointSelector": {}, "ingress": [{"fromEndpointz": [{}]}]}}),
    );
    create(
        &api,
        "ciliumclusterwidenetworkpolicies",
        None,
        json!({"apiVersion": "cilium.io/v2", "kind": "CiliumClusterwideNetworkPolicy", "metadata": {"name": "ccnp"},
               "spec": {"endpointSelector": {}, "egress": [{"toEntities": ["world"]}]}}),
    );
    let client = client(&api).await;
    let mut tasks = JoinSet::new();
    let sources = KubernetesSources::start(&client, "n1", fast(), &mut tasks);
    let (tx, mut rx) = tokio::sync::watch::channel(std::sync::Arc::new(Default::default()));
    tasks.spawn(weft_k8s::policies::follow(sources.clone(), tx));
    tokio::time::timeout(BOUND, rx.wait_for(|s| s.policies.len() == 3))
        .await
        .expect("the policies within the bound")
        .unwrap();
    let (names, refused) = set_of(&rx);
    assert_eq!(names, ["shop/np", "shop/cnp", "ccnp"]);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].starts_with("CiliumNetworkPolicy shop/bad: ")
            && refused[0].contains("fromEndpointz"),
        "{refused:?}"
    );

    // Down, compacted, changed: np goes, another comes. Back: re-listed.
    let addr = api.addr();
    let store = api.stop().await;
    let np = find("networking.k8s.io", "v1", "networkpolicies").unwrap();
    store.delete(np, Some("shop"), "np").unwrap();
    store
        .create(
            np,
            Some("shop"),
            json!({"metadata": {"name": "np2"}, "spec": {"podSelector": {}, "policyTypes": ["Egress"]}}),
        )
        .unwrap();
    store.compact();
    let api = KubeApi::start_with(
        store,
        Options {
            addr,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    tokio::time::timeout(
        BOUND,
        rx.wait_for(|s| s.policies.iter().any(|p| p.name == "shop/np2")),
    )
    .await
    .expect("the change after the re-list within the bound")
    .unwrap();
    let (names, _) = set_of(&rx);
    assert_eq!(
        names,
        ["shop/np2", "shop/cnp", "ccnp"],
        "np gone, nothing else lost"
    );
    assert!(sources.network_policies.status().lists >= 2);
    api.stop().await;
}
