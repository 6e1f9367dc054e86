//! weftd in Kubernetes mode, against the stand-in API server (kube-rs in the agent,
//! kubectl from the test) and a real etcd: a pod made as Kubernetes makes it — the Pod
//! object first, then the runtime's CNI ADD with only the `K8S_*` arguments — gets the
//! identity the established agent computes (its labels through the default filter, its
//! namespace's labels, service account and cluster); `kubectl label` gives it a new
//! identity; an ADD for a pod the API does not have fails with "try again later"
//! naming it; the sources show in status. The control: the same ADD without the
//! Kubernetes API gets an identity without any of those labels.

use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use weft_kubeapi::KubeApi;
use weft_testkit::agent::Agent;
use weft_testkit::netns::Netns;
use weft_testkit::{eventually, Etcd};

fn conf(agent: &Agent) -> Value {
    // No runtimeConfig labels: containerd and CRI-O pass none.
    json!({
        "cniVersion": "1.0.0",
        "name": "weft",
        "type": "weft-cni",
        "socket": agent.state.path().join("weftd.sock"),
    })
}

fn cni(command: &str, pod: &str, netns: Option<&Path>, conf: &Value) -> (Value, i32) {
    weft_testkit::cni::call(command, pod, netns, conf)
}

async fn get(etcd: &Etcd, key: &str) -> Option<Value> {
    etcd.get_json(key).await
}

async fn identity_of(etcd: &Etcd, ip: &str) -> (u64, Option<Value>) {
    let entry = get(etcd, &format!("cilium/state/ip/v1/default/{ip}"))
        .await
        .expect("the pod's ipcache entry");
    let id = entry["ID"].as_u64().unwrap();
    (
        id,
        get(etcd, &format!("cilium/state/identities/v1/id/{id}")).await,
    )
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl is installed");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The lab's API: namespace `shop` labelled `team=payments`, and Pod `web-0` on the
/// agent's node (`cluster1-node`), as a Deployment labels it.
async fn api_with_pod(dir: &Path) -> (KubeApi, std::path::PathBuf) {
    let api = KubeApi::start().await.unwrap();
    let kc = dir.join("kubeconfig");
    api.write_kubeconfig(&kc, "cluster1").unwrap();
    let file = dir.join("objects.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels:\n    team: payments\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-0\n  namespace: shop\n  labels:\n    app: web\n    pod-template-hash: 7c5ddbdf54\n\
         spec:\n  nodeName: cluster1-node\n  serviceAccountName: web\n  containers:\n  - name: c\n    image: pause\n",
    )
    .unwrap();
    kubectl(&kc, &["create", "-f", file.to_str().unwrap()]);
    (api, kc)
}

fn flags<'a>(node: &'a Path, kubeconfig: Option<&'a Path>) -> Vec<&'a std::ffi::OsStr> {
    let mut f: Vec<&std::ffi::OsStr> = vec![
        "--pod-cidr".as_ref(),
        "10.78.0.0/24".as_ref(),
        "--datapath-netns".as_ref(),
        node.as_os_str(),
    ];
    if let Some(kc) = kubeconfig {
        f.extend(["--k8s-kubeconfig-path".as_ref(), kc.as_os_str()]);
    }
    f
}

async fn ready(agent: &Agent) {
    let mut c = conf(agent);
    c["cniVersion"] = json!("1.1.0");
    eventually("weftd answers CNI STATUS", Duration::from_secs(20), || {
        (cni("STATUS", "", None, &c).1 == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_gets_its_identity_from_the_api_and_a_label_change_moves_it() {
    let dir = tempfile::tempdir().unwrap();
    let (api, kc) = api_with_pod(dir.path()).await;
    let etcd = Etcd::start().await;
    let node = Netns::new("weft-k8s-node");
    let pod = Netns::new("weft-k8s-pod");
    let agent = Agent::start_with("cluster1", 1, &etcd, &flags(&node.path(), Some(&kc)));
    ready(&agent).await;
    eventually(
        "the Kubernetes sources are synced",
        Duration::from_secs(20),
        || {
            let status = agent.status_json()?;
            let sources = status["kubernetes"]["sources"].as_array()?.clone();
            (sources.len() == 8 && sources.iter().all(|s| s["synced"] == true)).then_some(())
        },
    )
    .await;

    let (added, status) = cni("ADD", "web-0", Some(&pod.path()), &conf(&agent));
    assert_eq!(status, 0, "{added}");
    let ip = added["ips"][0]["address"]
        .as_str()
        .unwrap()
        .trim_end_matches("/32")
        .to_owned();
    let (first, labels) = identity_of(&etcd, &ip).await;
    assert_eq!(
        labels,
        Some(json!(
            "k8s:app=web;\
             k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=shop;\
             k8s:io.cilium.k8s.namespace.labels.team=payments;\
             k8s:io.cilium.k8s.policy.cluster=cluster1;\
             k8s:io.cilium.k8s.policy.serviceaccount=web;\
             k8s:io.kubernetes.pod.namespace=shop;"
        )),
        "the established agent's label set: pod-template-hash dropped"
    );

    // kubectl label: a new identity, the entry rewritten in place, the old identity
    // released; both seen as etcd events (watched before the label changes).
    let mut c = etcd.client().await;
    let mut entry = c
        .watch(format!("cilium/state/ip/v1/default/{ip}"), None)
        .await
        .unwrap();
    let mut old_id = c
        .watch(format!("cilium/state/identities/v1/id/{first}"), None)
        .await
        .unwrap();
    kubectl(&kc, &["label", "pod", "web-0", "-n", "shop", "tier=front"]);
    let second = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let resp = entry.message().await.unwrap().expect("the watch goes on");
            for ev in resp.events() {
                assert_eq!(
                    ev.event_type(),
                    etcd_client::EventType::Put,
                    "the entry is never deleted"
                );
                let v: Value = serde_json::from_slice(ev.kv().unwrap().value()).unwrap();
                let id = v["ID"].as_u64().unwrap();
                if id != first {
                    return id;
                }
            }
        }
    })
    .await
    .expect("the label change reaches the ipcache entry within 20 s");
    let (_, labels) = identity_of(&etcd, &ip).await;
    assert_eq!(identity_of(&etcd, &ip).await.0, second);
    assert!(labels
        .unwrap()
        .as_str()
        .unwrap()
        .contains("k8s:tier=front;"));
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let resp = old_id.message().await.unwrap().expect("the watch goes on");
            if resp
                .events()
                .iter()
                .any(|e| e.event_type() == etcd_client::EventType::Delete)
            {
                return;
            }
        }
    })
    .await
    .expect("the old identity, unused, is released");

    // A pod the API does not know: the ADD waits (bounded), then asks to try later.
    let other = Netns::new("weft-k8s-pod2");
    let (failed, status) = cni("ADD", "ghost-0", Some(&other.path()), &conf(&agent));
    assert_eq!(status, 1, "{failed}");
    assert_eq!(failed["code"], 11, "try again later: {failed}");
    assert!(
        failed["details"]
            .as_str()
            .unwrap_or_default()
            .contains("shop/ghost-0"),
        "{failed}"
    );
    api.stop().await;
}

/// The control: without the Kubernetes API the runtime's arguments are all the agent
/// has, and the same pod's identity has none of the labels the API gives.
#[tokio::test(flavor = "multi_thread")]
async fn control_without_the_api_the_pod_gets_a_label_less_identity() {
    let etcd = Etcd::start().await;
    let node = Netns::new("weft-k8s-ctl-node");
    let pod = Netns::new("weft-k8s-ctl-pod");
    let agent = Agent::start_with("cluster1", 1, &etcd, &flags(&node.path(), None));
    ready(&agent).await;
    let (added, status) = cni("ADD", "web-0", Some(&pod.path()), &conf(&agent));
    assert_eq!(status, 0, "{added}");
    let ip = added["ips"][0]["address"]
        .as_str()
        .unwrap()
        .trim_end_matches("/32")
        .to_owned();
    let (_, labels) = identity_of(&etcd, &ip).await;
    assert_eq!(
        labels,
        Some(json!(
            "k8s:io.cilium.k8s.policy.cluster=cluster1;k8s:io.kubernetes.pod.namespace=shop;"
        )),
        "no app label, no namespace labels, no service account"
    );
    assert!(agent.status_json().unwrap().get("kubernetes").is_none());
}

/// `--ipam kubernetes`: the agent waits for its Node's pod CIDRs (the Node gets them
/// after the agent started, as when the node controller is slow), then makes pods in
/// them and publishes them in its node record.
#[tokio::test(flavor = "multi_thread")]
async fn with_ipam_kubernetes_the_pod_cidrs_come_from_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let (api, kc) = api_with_pod(dir.path()).await;
    let etcd = Etcd::start().await;
    let node = Netns::new("weft-k8s-ipam-node");
    let pod = Netns::new("weft-k8s-ipam-pod");
    let node_path = node.path();
    let flags: Vec<&std::ffi::OsStr> = vec![
        "--ipam".as_ref(),
        "kubernetes".as_ref(),
        "--datapath-netns".as_ref(),
        node_path.as_os_str(),
        "--k8s-kubeconfig-path".as_ref(),
        kc.as_os_str(),
    ];
    let agent = Agent::start_with("cluster1", 1, &etcd, &flags);
    eventually(
        "the agent waits for the Node's pod CIDRs",
        Duration::from_secs(20),
        || {
            agent
                .log()
                .contains("waiting for the Node's pod CIDRs")
                .then_some(())
        },
    )
    .await;
    let nodes = weft_kubeapi::resources::find("", "v1", "nodes").unwrap();
    api.store()
        .create(
            nodes,
            None,
            json!({"metadata": {"name": "cluster1-node"}, "spec": {"podCIDRs": ["10.79.0.0/24"]}}),
        )
        .unwrap();
    ready(&agent).await;
    let (added, status) = cni("ADD", "web-0", Some(&pod.path()), &conf(&agent));
    assert_eq!(status, 0, "{added}");
    assert_eq!(added["ips"][0]["address"], "10.79.0.2/32", "{added}");
    let record = get(&etcd, "cilium/state/nodes/v1/cluster1/cluster1-node")
        .await
        .unwrap();
    assert_eq!(record["IPv4AllocCIDR"]["IP"], "10.79.0.0", "{record}");
    api.stop().await;
}
