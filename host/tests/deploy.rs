//! The deployment (`deploy/`): the Helm chart rendered by Helm and validated against
//! the Kubernetes schemas with `kubernetes-validate` (both installed by `make deps`),
//! what the DaemonSet grants and probes, that it names only flags `weftd` has, and the
//! image's default plugins signed as the agent will verify them.

mod support;

use serde_yaml::Value;
use std::process::Command;
use support::deploy_tools::{root, tool, validate};

/// `helm template` of the chart with `sets`: the manifests, or Helm's error.
fn render(sets: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(tool("helm"));
    cmd.args(["template", "weft"])
        .arg(root().join("deploy/helm/weft"))
        .args(["--namespace", "kube-system"]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn documents(manifests: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(manifests)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

use serde::Deserialize as _;

fn daemonset(manifests: &str) -> Value {
    documents(manifests)
        .into_iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet")
}

fn containers<'a>(ds: &'a Value, which: &str) -> &'a Vec<Value> {
    ds["spec"]["template"]["spec"][which]
        .as_sequence()
        .unwrap_or_else(|| panic!("{which}"))
}

fn env<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_sequence()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

const ENDPOINTS: &str = "kvstore.endpoints=https://etcd.kube-system:2379";

#[test]
fn the_chart_renders_to_manifests_the_schemas_accept_and_the_validator_can_refuse() {
    let cases: [&[&str]; 4] = [
        &[ENDPOINTS],
        &[ENDPOINTS, "plugins.configMap=acme-plugins"],
        &[
            ENDPOINTS,
            "plugins.oci.reference=registry.example/acme/weft-plugins",
            "plugins.oci.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ],
        &[
            ENDPOINTS,
            "endpoints.enabled=false",
            "datapath.enabled=false",
            "wireguard.enabled=false",
            "metrics.enabled=false",
        ],
    ];
    for sets in cases {
        let manifests = render(sets).unwrap_or_else(|e| panic!("{sets:?}: {e}"));
        for version in ["1.27.0", "1.37.0"] {
            let (ok, text) = validate(&manifests, version);
            assert!(ok, "{sets:?} against {version}:\n{text}");
            assert!(
                text.contains("passed for resource daemonset/weft"),
                "{text}"
            );
        }
    }
    // The control: a field the schema does not have is refused.
    let manifests = render(&[ENDPOINTS]).unwrap().replacen(
        "hostNetwork: true",
        "hostNetwork: true\n      hostNetworks: true",
        1,
    );
    let (ok, text) = validate(&manifests, "1.37.0");
    assert!(!ok, "the validator refuses an unknown field:\n{text}");
}

#[test]
fn the_daemonset_runs_on_the_host_network_with_named_capabilities_and_no_privilege() {
    let ds = daemonset(&render(&[ENDPOINTS]).unwrap());
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    for which in ["initContainers", "containers"] {
        for c in containers(&ds, which) {
            let sc = &c["securityContext"];
            assert_ne!(sc["privileged"], true, "{}", c["name"].as_str().unwrap());
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{:?}", c["name"]);
            assert_eq!(sc["capabilities"]["drop"][0], "ALL", "{:?}", c["name"]);
        }
    }
    let weftd = &containers(&ds, "containers")[0];
    let added: Vec<&str> = weftd["securityContext"]["capabilities"]["add"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        added,
        ["NET_ADMIN", "BPF", "PERFMON", "SYS_ADMIN", "SYS_RESOURCE"]
    );
    // Each capability is justified where it is granted.
    let template =
        std::fs::read_to_string(root().join("deploy/helm/weft/templates/daemonset.yaml")).unwrap();
    for cap in added {
        let line = template
            .lines()
            .position(|l| l.trim() == format!("- {cap}"))
            .unwrap();
        let above = template.lines().nth(line - 1).unwrap().trim();
        assert!(above.starts_with('#'), "{cap} has no reason above it");
    }
    assert_eq!(weftd["securityContext"]["readOnlyRootFilesystem"], true);

    // The probes ask what the agent serves, where it serves it.
    assert_eq!(env(weftd, "WEFT_HEALTH_ADDR"), Some("127.0.0.1:9879"));
    for (probe, path) in [
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ] {
        let get = &weftd[probe]["httpGet"];
        assert_eq!(
            (
                get["host"].as_str(),
                get["port"].as_u64(),
                get["path"].as_str()
            ),
            (Some("127.0.0.1"), Some(9879), Some(path)),
            "{probe}"
        );
    }
    // The remote clusters come from a Secret, mounted where the agent follows them.
    let volumes = pod["volumes"].as_sequence().unwrap();
    let mesh = volumes.iter().find(|v| v["name"] == "clustermesh").unwrap();
    assert_eq!(mesh["secret"]["secretName"], "weft-clustermesh");
    assert_eq!(
        env(weftd, "WEFT_CLUSTERMESH_CONFIG"),
        Some("/var/lib/weft/clustermesh")
    );
    // Without vendor plugins, the image's own trust policy.
    assert_eq!(
        env(weftd, "WEFT_PLUGIN_TRUST_POLICY"),
        Some("/usr/lib/weft/trust.toml")
    );
}

#[test]
fn vendor_plugins_come_pinned_by_digest_with_the_operators_trust_policy() {
    let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let ds = daemonset(
        &render(&[
            ENDPOINTS,
            "plugins.oci.reference=registry.example/acme/weft-plugins",
            &format!("plugins.oci.digest={digest}"),
        ])
        .unwrap(),
    );
    let pull = containers(&ds, "initContainers")
        .iter()
        .find(|c| c["name"] == "vendor-plugins-oci")
        .expect("the OCI pull");
    assert_eq!(
        pull["args"][1].as_str(),
        Some(format!("registry.example/acme/weft-plugins@{digest}").as_str())
    );
    let weftd = &containers(&ds, "containers")[0];
    assert_eq!(
        env(weftd, "WEFT_PLUGIN_TRUST_POLICY"),
        Some("/etc/weft/trust/trust.toml")
    );
    // A tag, or no digest, is refused at render time.
    let no_digest = render(&[
        ENDPOINTS,
        "plugins.oci.reference=registry.example/acme/weft-plugins:latest",
    ])
    .unwrap_err();
    assert!(
        no_digest.contains("plugins.oci.digest is required"),
        "{no_digest}"
    );
    let not_sha = render(&[
        ENDPOINTS,
        "plugins.oci.reference=registry.example/acme/weft-plugins",
        "plugins.oci.digest=latest",
    ])
    .unwrap_err();
    assert!(not_sha.contains("must be sha256:"), "{not_sha}");
    // No etcd, no agent: said at render time too.
    let no_etcd = render(&[]).unwrap_err();
    assert!(no_etcd.contains("kvstore.endpoints"), "{no_etcd}");
}

#[test]
fn every_setting_the_chart_passes_is_a_flag_weftd_run_has() {
    let help = Command::new(env!("CARGO_BIN_EXE_weftd"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let ds = daemonset(&render(&[ENDPOINTS, "plugins.configMap=acme-plugins"]).unwrap());
    let weftd = &containers(&ds, "containers")[0];
    let mut names: Vec<&str> = weftd["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    // The wrapper sets the pod CIDRs the init container read.
    names.push("WEFT_POD_CIDR");
    for name in names {
        assert!(
            help.contains(&format!("[env: {name}=")),
            "{name} is no flag of `weftd run`"
        );
    }
}

#[test]
fn the_images_default_plugins_are_signed_as_its_trust_policy_says() {
    let out = tempfile::tempdir().unwrap();
    let components = root().join("plugins/target/wasm32-wasip2/release");
    let weftd = env!("CARGO_BIN_EXE_weftd");
    let status = Command::new(root().join("deploy/sign-defaults.sh"))
        .arg(out.path())
        .arg(weftd)
        .arg(&components)
        .status()
        .unwrap();
    assert!(status.success());
    let trust = out.path().join("trust.toml");
    for name in ["regeneration-policy", "sync-events"] {
        let verify = Command::new(weftd)
            .args(["plugin", "verify"])
            .arg(out.path().join("plugins").join(format!("{name}.toml")))
            .arg("--trust-policy")
            .arg(&trust)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&verify.stdout);
        assert!(verify.status.success(), "{name}: {text}");
        assert!(text.contains("accepted: signed by \"weft\""), "{text}");
    }
    // The key it signed with is gone: nothing else can be signed for this policy.
    let left: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    // A given key is used, not replaced.
    let key = out.path().join("release.key");
    let public = Command::new(weftd)
        .args(["plugin", "keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    let public = String::from_utf8(public.stdout).unwrap();
    let again = tempfile::tempdir().unwrap();
    let status = Command::new(root().join("deploy/sign-defaults.sh"))
        .arg(again.path())
        .arg(weftd)
        .arg(&components)
        .arg(&key)
        .status()
        .unwrap();
    assert!(status.success());
    let trust = std::fs::read_to_string(again.path().join("trust.toml")).unwrap();
    assert!(trust.contains(public.trim()), "{trust}");
}
