//! The deployment (`deploy/`): the Helm chart rendered by Helm and validated against
//! the Kubernetes schemas with `kubernetes-validate` (both installed by `make deps`),
//! what the DaemonSet grants and probes, that it names only flags `weftd` has, and the
//! image's default plugins signed as the agent will verify them.

use weft_testkit as support;

use serde_yaml::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use support::chart::{
    command_line, container, containers, daemonset, documents, env, environment, mount_of, mounts,
    render, ENDPOINTS,
};
use support::deploy_tools::{root, validate};

#[test]
fn the_chart_renders_to_manifests_the_schemas_accept_and_the_validator_can_refuse() {
    let cases: [&[&str]; 5] = [
        &[ENDPOINTS],
        &[ENDPOINTS, "wireguard.userspace=false"],
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
    let weftd = container(&ds, "weftd");
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
    let weftd = container(&ds, "weftd");
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
    let help = Command::new(support::bin::weftd())
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let ds = daemonset(&render(&[ENDPOINTS, "plugins.configMap=acme-plugins"]).unwrap());
    let weftd = container(&ds, "weftd");
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
    let weftd = support::bin::weftd();
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

/// What the binary a container runs says it writes, run with the container's
/// environment as the chart sets it: `weftd run --print-written-paths` or `weft-wg
/// --print-written-paths`; each path with what is written there.
fn written_paths(c: &Value) -> Vec<(String, String)> {
    let words = command_line(c);
    let line = words.join(" ");
    let mut cmd = if line.contains("weftd run") {
        let mut cmd = Command::new(support::bin::weftd());
        cmd.arg("run");
        cmd
    } else if words[0] == "weft-wg" {
        Command::new(support::bin::weft_wg())
    } else {
        panic!("which of weft's binaries does {:?} run? {line}", c["name"]);
    };
    let node = BTreeMap::from([
        ("spec.nodeName", "node-1".to_owned()),
        ("status.hostIP", "192.0.2.10".to_owned()),
    ]);
    cmd.arg("--print-written-paths")
        .env_clear()
        .envs(environment(c, &node));
    // The wrapper's: the pod CIDRs the init container read.
    if line.contains("WEFT_POD_CIDR=") {
        cmd.env("WEFT_POD_CIDR", "10.0.0.0/24");
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        c["name"],
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .map(|l| {
            let (path, what) = l.split_once('\t').unwrap();
            (path.to_owned(), what.to_owned())
        })
        .collect()
}

/// Every path a container's binary writes that no writable volume holds, named with
/// its container and what is written there; and how many paths were checked.
fn unwritable(ds: &Value) -> (Vec<String>, usize) {
    let (mut problems, mut checked) = (Vec::new(), 0);
    for c in containers(ds, "containers") {
        let name = c["name"].as_str().unwrap();
        assert_eq!(
            c["securityContext"]["readOnlyRootFilesystem"], true,
            "{name}: everything but its volumes is read-only"
        );
        let mounts = mounts(ds, c);
        for (path, what) in written_paths(c) {
            checked += 1;
            match mount_of(&mounts, Path::new(&path)) {
                Some(m) if m.writable() => {}
                Some(m) => problems.push(format!(
                    "{name}: {path} ({what}) is on {} volume {} mounted at {}",
                    if m.read_only { "the read-only" } else { "the" },
                    m.volume,
                    m.path
                )),
                None => problems.push(format!(
                    "{name}: {path} ({what}) is on the read-only root filesystem"
                )),
            }
        }
    }
    (problems, checked)
}

#[test]
fn every_path_the_binaries_write_as_the_chart_runs_them_has_a_writable_volume() {
    let cases: [&[&str]; 5] = [
        &[ENDPOINTS],
        &[ENDPOINTS, "wireguard.userspace=false"],
        &[ENDPOINTS, "plugins.configMap=acme-plugins"],
        &[
            ENDPOINTS,
            "endpoints.enabled=false",
            "datapath.enabled=false",
        ],
        &[ENDPOINTS, "wireguard.enabled=false"],
    ];
    for sets in cases {
        let ds = daemonset(&render(sets).unwrap());
        let (problems, checked) = unwritable(&ds);
        assert!(problems.is_empty(), "{sets:?}:\n{}", problems.join("\n"));
        assert!(checked >= 2, "{sets:?}: only {checked} paths checked");
    }
    // What the default chart's binaries write, so that the check above checked them.
    let ds = daemonset(&render(&[ENDPOINTS]).unwrap());
    let helper: Vec<String> = written_paths(container(&ds, "wireguard"))
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert_eq!(helper, ["/var/run/wireguard"]);
    let agent: Vec<String> = written_paths(container(&ds, "weftd"))
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    for p in [
        "/var/run/weft",
        "/sys/fs/bpf/weft",
        "/host/proc/sys/net/ipv4/ip_forward",
    ] {
        assert!(agent.iter().any(|a| a == p), "{p} in {agent:?}");
    }
    // An agent that starts its own device (the kernel's asked for) writes its
    // socket directory.
    let kernel = daemonset(&render(&[ENDPOINTS, "wireguard.userspace=false"]).unwrap());
    let agent = written_paths(container(&kernel, "weftd"));
    assert!(
        agent.iter().any(|(p, _)| p == "/var/run/wireguard"),
        "{agent:?}"
    );
}

/// `ds` with the mount of `volume` taken from container `name`.
fn without_mount(ds: &Value, name: &str, volume: &str) -> Value {
    let mut ds = ds.clone();
    let containers = ds["spec"]["template"]["spec"]["containers"]
        .as_sequence_mut()
        .unwrap();
    let c = containers.iter_mut().find(|c| c["name"] == name).unwrap();
    let mounts = c["volumeMounts"].as_sequence_mut().unwrap();
    let before = mounts.len();
    mounts.retain(|m| m["name"] != volume);
    assert_eq!(mounts.len(), before - 1, "{name} mounts {volume}");
    ds
}

#[test]
fn control_without_the_wireguard_or_proc_volume_the_check_names_the_path() {
    let ds = daemonset(&render(&[ENDPOINTS]).unwrap());
    let (problems, _) = unwritable(&without_mount(&ds, "wireguard", "wireguard-run"));
    assert!(
        problems.len() == 1 && problems[0].starts_with("wireguard: /var/run/wireguard ("),
        "{problems:?}"
    );
    let (problems, _) = unwritable(&without_mount(&ds, "weftd", "host-proc-sys-net"));
    assert!(
        problems.len() == 1
            && problems[0].starts_with("weftd: /host/proc/sys/net/ipv4/ip_forward (")
            && problems[0].ends_with("is on the read-only root filesystem"),
        "{problems:?}"
    );
    // A read-only mount is no better than none.
    let kernel = daemonset(&render(&[ENDPOINTS, "wireguard.userspace=false"]).unwrap());
    let mut ro = kernel.clone();
    for c in ro["spec"]["template"]["spec"]["containers"]
        .as_sequence_mut()
        .unwrap()
    {
        for m in c["volumeMounts"].as_sequence_mut().unwrap() {
            if m["name"] == "state" {
                m["readOnly"] = true.into();
            }
        }
    }
    let (problems, _) = unwritable(&ro);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("weftd: /var/run/weft (")
                && p.contains("the read-only volume state")),
        "{problems:?}"
    );
}

#[test]
fn every_container_requests_resources_and_the_pod_uses_the_nodes_resolver() {
    let ds = daemonset(&render(&[ENDPOINTS, "plugins.configMap=acme-plugins"]).unwrap());
    for which in ["initContainers", "containers"] {
        for c in containers(&ds, which) {
            let requests = &c["resources"]["requests"];
            assert!(
                requests["cpu"].is_string() && requests["memory"].is_string(),
                "{:?} requests no cpu and memory: {:?}",
                c["name"],
                c["resources"]
            );
        }
    }
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    // The node's resolver, as the comment beside it says: the cluster's DNS runs in
    // pods that need the agent.
    assert_eq!(pod["dnsPolicy"], "Default");
    let template =
        std::fs::read_to_string(root().join("deploy/helm/weft/templates/daemonset.yaml")).unwrap();
    let line = template
        .lines()
        .position(|l| l.trim() == "dnsPolicy: Default")
        .unwrap();
    let comment: String = template.lines().take(line).collect::<Vec<_>>()[line - 4..].join(" ");
    assert!(comment.contains("node's resolver"), "{comment}");
}

#[test]
fn values_without_which_the_agent_cannot_start_are_refused_at_render_naming_the_value() {
    for (sets, names) in [
        (vec![], "kvstore.endpoints is required"),
        (vec![ENDPOINTS, "cluster.name="], "cluster.name is required"),
        (
            vec![ENDPOINTS, "cluster.id=256"],
            "cluster.id must be 0-255",
        ),
        (vec![ENDPOINTS, "cluster.id=-1"], "cluster.id must be 0-255"),
        (
            vec![ENDPOINTS, "datapath.nativeDevice="],
            "datapath.nativeDevice",
        ),
        (vec![ENDPOINTS, "wireguard.device="], "wireguard.device"),
    ] {
        let error = render(&sets).expect_err(names);
        assert!(error.contains(names), "{sets:?}: {error}");
    }
    // Turned off, a part needs nothing.
    render(&[
        ENDPOINTS,
        "datapath.enabled=false",
        "datapath.nativeDevice=",
    ])
    .unwrap();
    render(&[ENDPOINTS, "wireguard.enabled=false", "wireguard.device="]).unwrap();
    render(&[ENDPOINTS, "cluster.id=255"]).unwrap();
}

/// The ClusterRole grants get, list and watch on exactly the resources the agent
/// watches, and nothing else (no write verb anywhere).
#[test]
fn the_cluster_role_grants_read_on_exactly_what_the_agent_watches() {
    let docs = documents(&render(&[ENDPOINTS]).unwrap());
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("a ClusterRole");
    let mut granted = Vec::new();
    for rule in role["rules"].as_sequence().unwrap() {
        let verbs: Vec<&str> = rule["verbs"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(verbs, ["get", "list", "watch"], "{rule:?}");
        for group in rule["apiGroups"].as_sequence().unwrap() {
            for resource in rule["resources"].as_sequence().unwrap() {
                granted.push((
                    group.as_str().unwrap().to_owned(),
                    resource.as_str().unwrap().to_owned(),
                ));
            }
        }
    }
    granted.sort();
    assert_eq!(granted, weft_k8s::watched_resources());
}

/// The chart's CRDs are the two Cilium kinds weft reads (group, version, kind, plural,
/// scope as its client asks for them); `crds.install=false` leaves them to the
/// established agent's.
#[test]
fn the_crds_are_the_cilium_kinds_weft_reads() {
    use kube::Resource as _;
    use weft_k8s::cilium::{CiliumClusterwideNetworkPolicy as Ccnp, CiliumNetworkPolicy as Cnp};
    let crds = |sets: &[&str]| -> Vec<Value> {
        documents(&render(sets).unwrap())
            .into_iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
            .collect()
    };
    let ours = crds(&[ENDPOINTS]);
    let want = [
        (Cnp::kind(&()), Cnp::plural(&()), "Namespaced"),
        (Ccnp::kind(&()), Ccnp::plural(&()), "Cluster"),
    ];
    assert_eq!(ours.len(), want.len());
    for (crd, (kind, plural, scope)) in ours.iter().zip(want) {
        let spec = &crd["spec"];
        assert_eq!(
            crd["metadata"]["name"].as_str(),
            Some(format!("{plural}.cilium.io").as_str())
        );
        assert_eq!(spec["group"].as_str(), Some(Cnp::group(&()).as_ref()));
        assert_eq!(spec["names"]["kind"].as_str(), Some(kind.as_ref()));
        assert_eq!(spec["names"]["plural"].as_str(), Some(plural.as_ref()));
        assert_eq!(spec["scope"].as_str(), Some(scope));
        assert_eq!(
            spec["versions"][0]["name"].as_str(),
            Some(Cnp::version(&()).as_ref())
        );
    }
    assert!(crds(&[ENDPOINTS, "crds.install=false"]).is_empty());
}
