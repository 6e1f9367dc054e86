//! The kube-apiserver source against a mock Kubernetes API answering real list/watch
//! JSON (kube's own approach): addresses of `default/kubernetes` get the
//! `reserved:kube-apiserver` label, and lose it when they go away.

use weft_testkit as support;

use http::{Request, Response};
use kube::client::Body;
use std::sync::Arc;
use std::time::Duration;
use support::{eventually, within};
use tower_test::mock;
use weft_state::identity::Reserved;
use weft_state::ipcache::{Entry, Fact, IpCache, Owner, Source};

type Handle = mock::Handle<Request<Body>, Response<Body>>;

fn slice(addresses: &[&str], rv: u32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "resourceVersion": rv.to_string(),
            "labels": {"kubernetes.io/service-name": "kubernetes"}
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": addresses, "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]
    })
}

/// Answers the next request, checking it is a `kind` (list or watch) of the slices.
async fn answer(handle: &mut Handle, watch: bool, body: String) {
    let (request, send) = within(
        "a request from the watcher",
        Duration::from_secs(30),
        handle.next_request(),
    )
    .await
    .expect("the client is alive");
    let uri = request.uri().to_string();
    assert!(
        uri.starts_with("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?"),
        "{uri}"
    );
    assert!(
        uri.contains("labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes"),
        "{uri}"
    );
    assert_eq!(uri.contains("watch=true"), watch, "{uri}");
    send.send_response(
        Response::builder()
            .body(Body::from(body.into_bytes()))
            .unwrap(),
    );
}

fn watch_event(kind: &str, object: serde_json::Value) -> String {
    serde_json::json!({"type": kind, "object": object}).to_string() + "\n"
}

#[tokio::test]
async fn endpoint_addresses_are_labelled_kube_apiserver_and_lose_it_when_gone() {
    let ipcache = Arc::new(IpCache::default());
    // A remote node that also runs the kube-apiserver, with an IPsec key.
    let node = Fact {
        labels: Some(Reserved::RemoteNode.labels()),
        tunnel_peer: Some("172.18.0.3".parse().unwrap()),
        encrypt_key: 7,
        ..Fact::default()
    };
    ipcache.upsert(
        "172.18.0.3".parse().unwrap(),
        Owner::new(Source::ClusterMesh, "node/c2/n1"),
        node,
    );

    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let source = tokio::spawn(weft_k8s::run_kube_apiserver_source(client, ipcache.clone()));
    let lookup = |ip: &str| ipcache.lookup(ip.parse().unwrap());
    let wait = |what: &'static str, f: Box<dyn Fn() -> bool>| {
        eventually(what, Duration::from_secs(30), move || f().then_some(()))
    };

    let list = serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSliceList",
        "metadata": {"resourceVersion": "100"},
        "items": [slice(&["172.18.0.3", "172.18.0.4"], 100)]
    });
    answer(&mut handle, false, list.to_string()).await;
    let c = ipcache.clone();
    wait("both addresses labelled", Box::new(move || c.len() == 2)).await;
    let node = lookup("172.18.0.3").unwrap();
    assert_eq!(
        node,
        Entry {
            identity: Reserved::KubeApiServer.id(),
            tunnel_endpoint: Some("172.18.0.3".parse().unwrap()),
            encrypt_key: 7,
            source: Source::KubeApiServer,
            k8s: None,
        },
        "kube-apiserver on a remote node: identity 7, the node's key and tunnel kept"
    );
    let other = lookup("172.18.0.4").unwrap();
    let labels = ipcache
        .local_identity_labels(other.identity)
        .expect("a local identity");
    assert_eq!(labels.to_string(), "reserved:kube-apiserver=;");

    // The endpoint at .4 goes away.
    answer(
        &mut handle,
        true,
        watch_event("MODIFIED", slice(&["172.18.0.3"], 101)),
    )
    .await;
    let c = ipcache.clone();
    wait(
        ".4 unlabelled",
        Box::new(move || c.lookup("172.18.0.4".parse().unwrap()).is_none()),
    )
    .await;
    assert_eq!(lookup("172.18.0.3").unwrap().identity, 7);

    // The slice is deleted: the node is a plain remote node again, key intact.
    answer(
        &mut handle,
        true,
        watch_event("DELETED", slice(&["172.18.0.3"], 102)),
    )
    .await;
    let c = ipcache.clone();
    wait(
        ".3 back to remote-node",
        Box::new(move || {
            c.lookup("172.18.0.3".parse().unwrap())
                .is_some_and(|e| e.identity == 6)
        }),
    )
    .await;
    let e = lookup("172.18.0.3").unwrap();
    assert_eq!((e.encrypt_key, e.source), (7, Source::ClusterMesh));
    source.abort();
}

#[tokio::test]
async fn the_source_is_off_without_a_kubernetes_configuration() {
    // No kubeconfig, no in-cluster service account in this environment.
    std::env::set_var("KUBECONFIG", "/nonexistent/weft-test-kubeconfig");
    std::env::remove_var("KUBERNETES_SERVICE_HOST");
    assert!(weft_k8s::client(None).await.unwrap().is_none());
}
