//! `docs/operator-guide.md` and `docs/plugin-author-guide.md`, run as written: the
//! install and upgrade commands with Helm (as `helm template` with the same
//! arguments: no API server runs here), the manifests validated against the
//! Kubernetes schemas, and the status, health, metrics, troubleshooting and plugin
//! commands against a running agent on the ports the guides name.

use weft_testkit as support;

use std::path::Path;
use std::time::Duration;
use support::agent::{cluster_config, Agent};
use support::deploy_tools::{root, tool};
use support::docs::{block, Shell};
use support::{eventually, Etcd};

const GUIDE: &str = include_str!("../docs/operator-guide.md");
const PLUGINS: &str = include_str!("../docs/plugin-author-guide.md");

/// `kubernetes-validate --strict` of `manifest`: the validator's output on failure.
fn validate(manifest: &str) -> Result<(), String> {
    match support::deploy_tools::validate(manifest, "1.37.0") {
        (true, _) => Ok(()),
        (false, text) => Err(text),
    }
}

/// A directory for the guide's PATH: `helm`, which renders what install and upgrade
/// would apply (`helm template`, same arguments), before weftd's directory and the
/// test's PATH.
fn path_with_helm(dir: &Path) -> std::ffi::OsString {
    let helm = tool("helm");
    let wrapper = dir.join("helm");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncase \"$1\" in install|upgrade) shift; exec {} template \"$@\";; esac\nexec {} \"$@\"\n",
            helm.display(),
            helm.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let weftd_dir = Path::new(support::bin::weftd())
        .parent()
        .unwrap()
        .to_path_buf();
    std::env::join_paths(
        [dir.to_path_buf(), weftd_dir]
            .into_iter()
            .chain(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            )),
    )
    .unwrap()
}

#[test]
fn the_install_and_upgrade_render_and_the_secret_is_valid() {
    let work = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root().join("deploy"), work.path().join("deploy")).unwrap();
    let shell = Shell {
        env: vec![("PATH", path_with_helm(work.path()))],
    };
    let installed = shell.run(&block(GUIDE, "sh operator=install"), work.path());
    assert!(installed.contains("kind: DaemonSet"), "{installed}");
    assert!(
        installed.contains("value: \"cluster1\""),
        "the values file is used:\n{installed}"
    );
    let upgraded = shell.run(&block(GUIDE, "sh operator=upgrade"), work.path());
    assert!(
        upgraded.contains(
            "image: \"ghcr.io/weft-dev/weft@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\""
        ) || upgraded.contains(
            "image: ghcr.io/weft-dev/weft@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        ),
        "pinned by digest:\n{upgraded}"
    );

    validate(&block(GUIDE, "yaml operator=secret")).unwrap();
    validate(&block(PLUGINS, "yaml plugin=configmap")).unwrap();
    let trust = block(PLUGINS, "yaml plugin=trust");
    validate(&trust).unwrap();
    // The trust policy in it is one the agent reads.
    let toml: String = trust
        .lines()
        .skip_while(|l| !l.contains("[[keys]]"))
        .map(|l| format!("{}\n", l.trim_start()))
        .collect();
    let policy = weft_plugins::TrustPolicy::parse(&toml).unwrap_or_else(|e| panic!("{e}: {toml}"));
    assert_eq!(policy.keys_for("acme-policy").count(), 1);
    assert_eq!(
        policy.min_version("acme-policy").unwrap().to_string(),
        "1.2.0"
    );
    // The control: the validator refuses what Kubernetes would.
    assert!(
        validate(&block(PLUGINS, "yaml plugin=trust").replace("stringData", "stringDatum"))
            .is_err()
    );
    // The config in it is one weft reads, and its TLS files would not be clusters.
    let config = block(GUIDE, "yaml operator=secret");
    let text: String = config
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("endpoints:"))
        .map(|l| format!("{}\n", l.trim_start()))
        .collect();
    let endpoints = weft_clustermesh::parse_config_file(Path::new("cluster2"), &text)
        .unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(
        endpoints.urls,
        ["https://clustermesh.cluster2.example:2379"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_status_health_metrics_and_troubleshooting_commands_answer_as_the_guide_says() {
    let (e1, e2) = (Etcd::start().await, Etcd::start().await);
    cluster_config("cluster1", 1, &e1, false);
    cluster_config("cluster2", 2, &e2, false);
    let _a2 = Agent::start("cluster2", 2, &e2);
    // A vendor's plugin, signed, as the plugin guide ships it.
    let vendor = support::agent::VendorKey::new();
    let plugins = tempfile::tempdir().unwrap();
    support::agent::package(
        plugins.path(),
        "acme-policy",
        "regeneration_policy",
        "1.2.0",
        10,
        &vendor.key,
    );
    // The ports the guides name (no other test here binds them).
    let a1 = Agent::start_with(
        "cluster1",
        1,
        &e1,
        &[
            "--health-addr".as_ref(),
            "127.0.0.1:9879".as_ref(),
            "--prometheus-serve-addr".as_ref(),
            "127.0.0.1:9962".as_ref(),
            "--plugin-dir".as_ref(),
            plugins.path().as_os_str(),
            "--plugin-trusted-keys".as_ref(),
            vendor.trusted.as_os_str(),
        ],
    );
    support::write_config_file(a1.mesh_dir.path(), "cluster2", &e2.url());
    eventually("cluster2 ready", Duration::from_secs(30), || {
        a1.status_json()
            .filter(|s| s["clusters"][0]["ready"] == true)
    })
    .await;
    let work = tempfile::tempdir().unwrap();
    let shell = Shell {
        env: vec![
            ("PATH", path_with_helm(work.path())),
            ("WEFT_STATE_DIR", a1.state.path().into()),
        ],
    };
    let run = |name: &str| {
        let script = match name.strip_prefix("plugin:") {
            Some(step) => block(PLUGINS, &format!("sh plugin={step}")),
            None => block(GUIDE, &format!("sh operator={name}")),
        };
        let (shell, dir) = (&shell, work.path().to_owned());
        tokio::task::block_in_place(|| shell.run(&script, &dir))
    };
    let status = run("status");
    assert_eq!(
        status.matches("cluster2 ").count(),
        2,
        "the view, then again after --wait:\n{status}"
    );
    assert_eq!(run("health"), "ok\nok\n");
    let flags = run("flags");
    assert_eq!(flags.lines().count(), 2, "{flags}");
    // Every flag and variable the guide's table names, `weftd run` has.
    let help = std::process::Command::new(support::bin::weftd())
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let table = GUIDE
        .split("## Flags")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap();
    for word in table
        .split('`')
        .filter(|w| w.starts_with("--") || w.starts_with("WEFT_"))
    {
        for name in word.split(", ") {
            let named = if name.starts_with("WEFT_") {
                format!("[env: {name}=")
            } else {
                format!("{name} <")
            };
            assert!(
                help.contains(&named) || help.contains(&format!("{name}\n")),
                "{name} in the guide is not in `weftd run --help`"
            );
        }
    }
    assert_eq!(
        run("metrics"),
        "weft_remote_cluster_ready{cluster=\"cluster2\"} 1.0\n"
    );
    assert!(run("waiting").contains("no barrier pending"));
    assert_eq!(run("peers"), "no WireGuard on this agent\n");

    // The plugin guide's view: the host endpoint's regeneration asked acme-policy.
    let status = run("plugin:status");
    assert!(status.starts_with("plugins: 1 loaded"), "{status}");
    assert!(status.contains("acme-policy"), "{status}");
    let metrics = run("plugin:metrics");
    let calls = metrics
        .lines()
        .find_map(|l| l.strip_prefix("weft_plugin_calls_total{plugin=\"acme-policy\"} "))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(calls.parse::<u64>().unwrap() >= 1, "{metrics}");
    assert!(
        metrics.contains(&format!(
            "weft_plugin_call_duration_seconds_count{{plugin=\"acme-policy\"}} {calls}\n"
        )),
        "every call timed:\n{metrics}"
    );
}
