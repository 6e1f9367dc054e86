//! The stand-in through kube-rs, the client the agent uses: typed objects round-trip,
//! errors carry the API's codes, and a watcher lists, follows, and lists again after
//! the server restarts with its history compacted (`410 Gone`), losing nothing.

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt as _};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;
use weft_kubeapi::{KubeApi, Options};

async fn client(api: &KubeApi) -> kube::Client {
    let config = kube::config::Kubeconfig::from_yaml(&api.kubeconfig("test")).unwrap();
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .expect("the kubeconfig is usable");
    kube::Client::try_from(config).expect("a client")
}

fn pod(name: &str, node: &str, app: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "pause"}]},
    }))
    .unwrap()
}

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("not an API error: {other}"),
    }
}

async fn namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

#[tokio::test]
async fn typed_objects_round_trip_and_errors_carry_the_api_codes() {
    let api = KubeApi::start().await.unwrap();
    let client = client(&api).await;
    namespace(&client, "shop").await;
    let ns = Api::<Namespace>::all(client.clone())
        .get("shop")
        .await
        .unwrap();
    assert_eq!(
        ns.metadata.labels.unwrap()["kubernetes.io/metadata.name"],
        "shop",
        "set on every namespace, as Kubernetes does"
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), "shop");
    let pp = PostParams::default();
    pods.create(&pp, &pod("web-1", "n1", "web")).await.unwrap();
    pods.create(&pp, &pod("db-1", "n2", "db")).await.unwrap();
    assert_eq!(
        code(
            pods.create(&pp, &pod("web-1", "n1", "web"))
                .await
                .unwrap_err()
        ),
        409
    );
    let elsewhere: Api<Pod> = Api::namespaced(client.clone(), "nowhere");
    assert_eq!(
        code(
            elsewhere
                .create(&pp, &pod("x", "n1", "x"))
                .await
                .unwrap_err()
        ),
        404
    );

    let names = |l: kube::core::ObjectList<Pod>| -> Vec<String> {
        l.items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect()
    };
    let by_label = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(names(by_label), ["web-1"]);
    let on_n2 = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields("spec.nodeName=n2"))
        .await
        .unwrap();
    assert_eq!(names(on_n2), ["db-1"]);

    let before = pods.get("web-1").await.unwrap();
    let patch = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
    let after = pods
        .patch("web-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(after.metadata.labels.as_ref().unwrap()["tier"], "front");
    assert_ne!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    // A replace carrying the older resourceVersion conflicts.
    assert_eq!(
        code(pods.replace("web-1", &pp, &before).await.unwrap_err()),
        409
    );

    pods.delete("web-1", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(code(pods.get("web-1").await.unwrap_err()), 404);
    api.stop().await;
}

/// Waits (bounded) until `f` holds for the names the watcher's events leave.
async fn until(
    stream: &mut (impl futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Unpin),
    names: &mut BTreeSet<String>,
    relists: &mut usize,
    f: impl Fn(&BTreeSet<String>, usize) -> bool,
) {
    // While a list is under way, its objects gather here until InitDone.
    let mut listing: Option<BTreeSet<String>> = None;
    let wait = async {
        while !f(names, *relists) {
            match stream.next().await.expect("the watcher goes on") {
                Ok(watcher::Event::Init) => listing = Some(BTreeSet::new()),
                Ok(watcher::Event::InitApply(p)) => {
                    listing
                        .as_mut()
                        .expect("after Init")
                        .insert(p.metadata.name.unwrap());
                }
                Ok(watcher::Event::InitDone) => {
                    *names = listing.take().expect("after Init");
                    *relists += 1;
                }
                Ok(watcher::Event::Apply(p)) => {
                    names.insert(p.metadata.name.unwrap());
                }
                Ok(watcher::Event::Delete(p)) => {
                    names.remove(&p.metadata.name.unwrap());
                }
                // A failed connection while the server is down: the watcher retries.
                Err(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), wait)
        .await
        .unwrap_or_else(|_| {
            panic!("the watcher did not reach the state; it has {names:?} after {relists} lists")
        });
}

#[tokio::test]
async fn a_watcher_follows_its_node_and_lists_again_after_410_gone() {
    let api = KubeApi::start().await.unwrap();
    let client = client(&api).await;
    namespace(&client, "shop").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "shop");
    let pp = PostParams::default();
    pods.create(&pp, &pod("a", "n1", "web")).await.unwrap();

    let config = watcher::Config::default()
        .fields("spec.nodeName=n1")
        .timeout(30);
    let mut stream = Box::pin(watcher(Api::<Pod>::all(client.clone()), config).default_backoff());
    let (mut names, mut relists) = (BTreeSet::new(), 0);
    until(&mut stream, &mut names, &mut relists, |n, r| {
        r == 1 && n.contains("a")
    })
    .await;

    pods.create(&pp, &pod("b", "n1", "web")).await.unwrap();
    pods.create(&pp, &pod("elsewhere", "n2", "web"))
        .await
        .unwrap();
    until(&mut stream, &mut names, &mut relists, |n, _| {
        n.contains("b")
    })
    .await;
    assert!(
        !names.contains("elsewhere"),
        "the field selector holds on the watch"
    );

    // The server goes down with its history compacted; meanwhile a is deleted and c
    // made. Back on the same address, the watch from the old revision is 410 Gone:
    // the watcher lists again and ends with exactly what is there.
    let addr = api.addr();
    let store = api.stop().await;
    let pods_resource = weft_kubeapi::resources::find("", "v1", "pods").unwrap();
    store.delete(pods_resource, Some("shop"), "a").unwrap();
    store
        .create(
            pods_resource,
            Some("shop"),
            serde_json::to_value(pod("c", "n1", "web")).unwrap(),
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
    until(&mut stream, &mut names, &mut relists, |_, r| r == 2).await;
    assert_eq!(names, BTreeSet::from(["b".to_string(), "c".to_string()]));
    api.stop().await;
}
