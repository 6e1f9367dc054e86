//! The stand-in driven by kubectl (on these machines), as the README shows an operator:
//! `get`, `create -f`, `label`, `replace -f`, `delete`, for core, networking and
//! Cilium kinds.

use std::path::Path;
use std::process::Command;
use weft_kubeapi::KubeApi;

fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl is installed (see shared/reference/kubernetes.md)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(kubeconfig: &Path, args: &[&str]) -> String {
    let (success, stdout, stderr) = kubectl(kubeconfig, args);
    assert!(success, "kubectl {args:?}: {stderr}");
    stdout
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_creates_labels_replaces_and_deletes() {
    let api = KubeApi::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc, "lab").unwrap();
    let kc = kc.as_path();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };

    // `create -f` (kubectl's generators, `create namespace`, send protobuf, which the
    // stand-in refuses with 415: the README uses files).
    let ns = file(
        "ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n",
    );
    ok(kc, &["create", "-f", &ns]);
    let ns = ok(kc, &["get", "namespaces"]);
    assert!(ns.contains("shop") && ns.contains("Active"), "{ns}");

    let pod = file(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-1\n  namespace: shop\n  labels:\n    app: web\n\
         spec:\n  nodeName: n1\n  containers:\n  - name: c\n    image: pause\n",
    );
    assert!(ok(kc, &["create", "-f", &pod]).contains("pod/web-1 created"));
    let (exists, _, err) = kubectl(kc, &["create", "-f", &pod]);
    assert!(!exists && err.contains("AlreadyExists"), "{err}");

    let listed = ok(kc, &["get", "pods", "-n", "shop", "-l", "app=web"]);
    assert!(
        listed.contains("web-1") && listed.contains("Pending"),
        "{listed}"
    );
    ok(kc, &["label", "pod", "web-1", "-n", "shop", "tier=front"]);
    let labels = ok(
        kc,
        &[
            "get",
            "pod",
            "web-1",
            "-n",
            "shop",
            "-o",
            "jsonpath={.metadata.labels}",
        ],
    );
    assert!(labels.contains(r#""tier":"front""#), "{labels}");
    ok(kc, &["label", "pod", "web-1", "-n", "shop", "tier-"]);
    let labels = ok(
        kc,
        &[
            "get",
            "pod",
            "web-1",
            "-n",
            "shop",
            "-o",
            "jsonpath={.metadata.labels}",
        ],
    );
    assert!(!labels.contains("tier"), "{labels}");

    let policy = file(
        "np.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: web\n  namespace: shop\n\
         spec:\n  podSelector:\n    matchLabels:\n      app: web\n  ingress:\n  - from:\n    - podSelector: {}\n",
    );
    ok(kc, &["create", "-f", &policy]);
    let cnp = file(
        "cnp.yaml",
        "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata:\n  name: web\n  namespace: shop\n\
         spec:\n  endpointSelector:\n    matchLabels:\n      app: web\n",
    );
    ok(kc, &["create", "-f", &cnp]);
    let both = ok(kc, &["get", "networkpolicies,cnp", "-n", "shop"]);
    assert!(
        both.contains("networkpolicy.networking.k8s.io/web"),
        "{both}"
    );
    assert!(both.contains("ciliumnetworkpolicy.cilium.io/web"), "{both}");

    let changed = file(
        "cnp2.yaml",
        "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata:\n  name: web\n  namespace: shop\n\
         spec:\n  endpointSelector:\n    matchLabels:\n      app: api\n",
    );
    ok(kc, &["replace", "-f", &changed]);
    let sel = ok(
        kc,
        &[
            "get",
            "cnp",
            "web",
            "-n",
            "shop",
            "-o",
            "jsonpath={.spec.endpointSelector.matchLabels.app}",
        ],
    );
    assert_eq!(sel, "api");

    ok(kc, &["delete", "pod", "web-1", "-n", "shop"]);
    let (found, _, err) = kubectl(kc, &["get", "pod", "web-1", "-n", "shop"]);
    assert!(
        !found && err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
    api.stop().await;
}
