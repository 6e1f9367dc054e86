//! Rogue plugins against a real `weftd`: whatever the plugin first in priority does,
//! the host endpoint's start-up wait ends within the plugin deadline plus the default
//! wait, and `weftd status` answers throughout.

use weft_testkit as support;

use std::time::Duration;
use support::agent::{cluster_config, logged_at, package, Agent, VendorKey};
use support::{eventually, Etcd};

/// The default wait the built-in policy carries out for an unreachable cluster.
const DEFAULT_WAIT: Duration = Duration::from_secs(3);

#[tokio::test]
async fn rogue_plugins_cannot_hold_the_host_endpoint_or_the_status() {
    let e1 = Etcd::start().await;
    cluster_config("cluster1", 1, &e1, false);
    let vendor = VendorKey::new();
    let (key, trusted) = (&vendor.key, &vendor.trusted);
    // Nothing listens there: cluster2 never syncs, so the default waits its full time.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let unreachable = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);

    for (file, reason) in [
        ("test_wasi_sleep", "deadline exceeded"),
        ("test_busy_poll", "deadline exceeded"),
        ("test_spin", "deadline exceeded"),
        ("test_resource_leak", "host resources"),
        ("test_metric_flood", "metric names"),
        ("test_huge_log", "log bytes per call"),
        ("test_table_grow", "table elements"),
    ] {
        let plugins = tempfile::tempdir().unwrap();
        package(plugins.path(), "rogue", file, "1.0.0", 100, key);
        package(
            plugins.path(),
            "sync-events",
            "sync_events",
            "1.0.0",
            0,
            key,
        );
        let timeout = humantime::format_duration(DEFAULT_WAIT).to_string();
        let agent = Agent::start_with(
            "cluster1",
            1,
            &e1,
            &[
                "--plugin-dir".as_ref(),
                plugins.path().as_os_str(),
                "--plugin-trusted-keys".as_ref(),
                trusted.as_os_str(),
                "--clustermesh-ip-identities-sync-timeout".as_ref(),
                timeout.as_ref(),
            ],
        );
        support::write_config_file(agent.mesh_dir.path(), "cluster2", &unreachable);
        eventually(
            &format!("{file}: the API is up"),
            Duration::from_secs(10),
            || agent.status_json(),
        )
        .await;
        // From then on, status answers every time it is asked while the wait goes on.
        let log = eventually(
            &format!("{file}: the host endpoint proceeds"),
            Duration::from_secs(30),
            || {
                assert!(
                    agent.status_json().is_some(),
                    "{file}: status did not answer"
                );
                let log = agent.log();
                log.contains("host endpoint proceeds without full remote state")
                    .then_some(log)
            },
        )
        .await;
        let asked = logged_at(&log, &["asking the regeneration policy", "Host"]).unwrap();
        let proceeded = logged_at(
            &log,
            &[
                "host endpoint proceeds without full remote state",
                "\"decided_by\":\"built-in default\"",
            ],
        )
        .unwrap_or_else(|| panic!("{file}: the default did not decide:\n{log}"));
        let waited = proceeded.duration_since(asked).unwrap();
        // The plugin's 50 ms deadline, the default wait, and room for a loaded machine.
        assert!(
            waited < DEFAULT_WAIT + Duration::from_millis(50) + Duration::from_secs(1),
            "{file}: the host endpoint waited {waited:?}"
        );
        let s = agent.status_json().unwrap();
        let loaded = s["plugins"]["loaded"].as_array().unwrap();
        let rogue = loaded.iter().find(|p| p["name"] == "rogue").unwrap();
        assert_eq!(rogue["failures"], 1, "{file}: {rogue}");
        let error = rogue["last_error"].as_str().unwrap();
        assert!(error.contains(reason), "{file}: {error}");
        let events = loaded.iter().find(|p| p["name"] == "sync-events").unwrap();
        assert_eq!(events["failures"], 0, "{file}: {events}");
    }
}

/// `weftd plugin verify` checks a package as an agent would and prints what is signed;
/// `weftd run` refuses to allow unsigned plugins beside trusted keys.
#[test]
fn verify_prints_the_signed_fields_and_the_verdict() {
    let vendor = VendorKey::new();
    let dir = tempfile::tempdir().unwrap();
    package(
        dir.path(),
        "policy",
        "regeneration_policy",
        "1.2.0",
        7,
        &vendor.key,
    );
    let manifest = dir.path().join("policy.toml");
    let verify = |extra: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new(support::bin::weftd())
            .args(["plugin".as_ref(), "verify".as_ref(), manifest.as_os_str()])
            .args(extra)
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8(out.stdout).unwrap())
    };
    let with_keys = ["--trusted-keys".as_ref(), vendor.trusted.as_os_str()];
    let (ok, text) = verify(&with_keys);
    assert!(ok, "{text}");
    assert!(text.contains("  priority  \"7\""), "{text}");
    assert!(text.contains("  version   \"1.2.0\""), "{text}");
    assert!(text.contains("accepted: signed by \"key-"), "{text}");
    let (ok, text) = verify(&[]);
    assert!(
        !ok && text.contains("refused: plugin \"policy\" refused: unsigned"),
        "{text}"
    );

    let signed = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, signed.replace("priority = 7", "priority = 70")).unwrap();
    let (ok, text) = verify(&with_keys);
    assert!(!ok, "{text}");
    assert!(
        text.contains("priority changed since it was signed"),
        "{text}"
    );

    let out = std::process::Command::new(support::bin::weftd())
        .args(["run", "--plugin-allow-unsigned", "--plugin-trusted-keys"])
        .arg(&vendor.trusted)
        .args(["--plugin-dir", "/nonexistent"])
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--plugin-allow-unsigned cannot be used with trusted keys"),
        "{stderr}"
    );
}
