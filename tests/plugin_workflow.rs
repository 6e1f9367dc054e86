//! The vendor workflow: what the agent records of its hooks, a replay of it against
//! another build (`weftd plugin test`), and a shadow plugin compared with the live one.

use weft_testkit as support;

use support::cluster_sync as sync;

use std::sync::Arc;
use std::time::Duration;
use weft_hooks::{EndpointKind, Verdict};
use weft_plugins::{
    read_recording, replay, Config, HookInput, Isolation, LoadedPlugin, MeshView, PluginHost,
    Recorder, Runtime, Said,
};

fn plugin(rt: &Runtime, name: &str, file: &str, config: &str, shadow: bool) -> LoadedPlugin {
    let wasm = std::fs::read(support::plugin_wasm(file)).unwrap();
    LoadedPlugin {
        version: file.into(),
        digest: weft_plugins::digest_hex(&wasm),
        config: config.into(),
        shadow,
        ..LoadedPlugin::new(name, rt.compile(&wasm).unwrap())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shadow_is_compared_never_acted_on_and_a_recording_replays_against_a_build() {
    let rt = Arc::new(Runtime::new(Config::default()).unwrap());
    let mesh: MeshView = Arc::new(Vec::new);
    let host = PluginHost::new(rt.clone(), mesh, Isolation::default());
    let recording = tempfile::tempdir().unwrap();
    host.record_to(Arc::new(
        Recorder::start(recording.path(), 1 << 20).unwrap(),
    ));
    host.install(plugin(&rt, "policy", "regeneration_policy", "", false))
        .await
        .unwrap();
    // The same build as a shadow: it agrees.
    host.install(plugin(&rt, "policy", "regeneration_policy", "", true))
        .await
        .unwrap();
    let pending = || support::request(EndpointKind::Workload, false, vec![sync("c2", false)]);
    let synced = || support::request(EndpointKind::Workload, false, vec![sync("c2", true)]);
    let live = host.regeneration_policy(pending()).await;
    assert_eq!(live.decided_by.as_deref(), Some("policy"));
    let shadow = support::eventually("the shadow compared", Duration::from_secs(10), || {
        let r = host.report();
        (r.shadows.first()?.compared == 1).then_some(r.shadows[0].clone())
    })
    .await;
    assert_eq!((shadow.agreed, shadow.last_disagreement), (1, None));

    // Another build as the shadow: it disagrees, and the agent still acts on the live.
    host.install(plugin(&rt, "policy", "critical_clusters", "c2", true))
        .await
        .unwrap();
    assert_eq!(host.report().shadows.len(), 1, "one shadow per name");
    assert_eq!(host.regeneration_policy(pending()).await, live);
    // Comparisons finish off the question's path, in any order: one at a time here,
    // so that the last disagreement is the second question's.
    support::eventually("the first comparison", Duration::from_secs(10), || {
        (host.report().shadows.first()?.compared == 1).then_some(())
    })
    .await;
    assert_eq!(
        host.regeneration_policy(synced()).await.verdict,
        live.verdict
    );
    let shadow = support::eventually("the new shadow compared", Duration::from_secs(10), || {
        let r = host.report();
        (r.shadows.first()?.compared == 2).then_some(r.shadows[0].clone())
    })
    .await;
    assert_eq!(shadow.version, "critical_clusters");
    assert_eq!(shadow.agreed, 0);
    let last = shadow.last_disagreement.unwrap();
    assert_eq!(
        last.input,
        HookInput::RegenerationPolicy { request: synced() }
    );
    assert_eq!(last.shadow, Said::Regeneration(Verdict::Proceed));
    assert_eq!(last.live, Said::Regeneration(live.verdict.clone()));

    // The recording: the three questions, with the live answers and the decision.
    let events = support::eventually("three questions recorded", Duration::from_secs(10), || {
        let e = read_recording(recording.path()).ok()?;
        (e.len() == 3).then_some(e)
    })
    .await;
    assert_eq!(
        events[0].input,
        HookInput::RegenerationPolicy { request: pending() }
    );
    assert_eq!(events[0].answers.len(), 1);
    assert_eq!(events[0].answers[0].plugin, "policy");
    let decided = events[2].decided.clone().unwrap();
    assert_eq!(
        decided,
        (
            Said::Regeneration(live.verdict.clone()),
            Some("policy".into())
        )
    );

    // Replayed against the build that was live: nothing differs.
    let same = replay(
        rt.clone(),
        plugin(&rt, "policy", "regeneration_policy", "", false),
        &events,
    )
    .unwrap();
    assert_eq!((same.compared, same.differences.len()), (3, 0), "{same:?}");
    // Against the other build: every question, each with its input.
    let other = replay(
        rt.clone(),
        plugin(&rt, "policy", "critical_clusters", "c2", false),
        &events,
    )
    .unwrap();
    assert_eq!(other.differences.len(), 3, "{other:?}");
    assert_eq!(
        other.differences[2].input,
        HookInput::RegenerationPolicy { request: synced() }
    );
    assert_eq!(
        other.differences[2].replayed,
        Said::Regeneration(Verdict::Proceed)
    );
    assert!(host.report().recording.is_some_and(|r| r.dropped == 0));
}

/// The SDK README's walkthrough step `step`, run as written in `dir`.
fn step(shell: &support::docs::Shell, step: &str, dir: &std::path::Path) -> String {
    let readme = include_str!("../plugin-sdk/README.md");
    shell.run(
        &support::docs::block(readme, &format!("sh walkthrough={step}")),
        dir,
    )
}

/// The SDK README's vendor walkthrough, run as written against a real agent: new →
/// build → sign → ship → (recorded) → test → shadow → promote.
#[tokio::test]
async fn the_sdk_readme_walkthrough_runs_as_written() {
    use support::agent::{cluster_config, Agent, VendorKey};
    let e1 = support::Etcd::start().await;
    cluster_config("cluster1", 1, &e1, false);
    let vendor = VendorKey::new();
    let dirs = tempfile::tempdir().unwrap();
    let (work, plugins, recording) = (
        dirs.path().join("work"),
        dirs.path().join("plugins"),
        dirs.path().join("recording"),
    );
    for d in [&work, &plugins] {
        std::fs::create_dir(d).unwrap();
    }
    let trust = dirs.path().join("trust.toml");
    std::fs::write(
        &trust,
        format!(
            "[[keys]]\nname = \"acme\"\npublic = \"{}\"\nplugins = [\"acme-*\"]\n",
            vendor.public
        ),
    )
    .unwrap();
    let flags: Vec<std::ffi::OsString> = vec![
        "--plugin-dir".into(),
        plugins.clone().into(),
        "--plugin-trust-policy".into(),
        trust.clone().into(),
        "--plugin-record".into(),
        recording.clone().into(),
    ];
    let refs = || flags.iter().map(|f| f.as_os_str()).collect::<Vec<_>>();
    let mut agent = Agent::start_with("cluster1", 1, &e1, &refs());
    let bin = std::path::Path::new(support::bin::weftd())
        .parent()
        .unwrap();
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let shell = support::docs::Shell {
        env: vec![
            ("PATH", path),
            ("KEY", vendor.key.clone().into()),
            ("TRUST", trust.clone().into()),
            ("PLUGIN_DIR", plugins.clone().into()),
            ("RECORDING", recording.clone().into()),
            ("STATE", agent.state.path().into()),
            // Shared between runs: the crate's dependencies are built once.
            (
                "CARGO_TARGET_DIR",
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../target/plugin-walkthrough")
                    .into(),
            ),
        ],
    };
    let plugin = |s: &serde_json::Value| {
        s["plugins"]["loaded"]
            .as_array()?
            .iter()
            .find(|p| p["name"] == "acme-policy")
            .cloned()
    };

    step(&shell, "new", &work);
    let krate = work.join("acme-policy");
    step(&shell, "build", &krate);
    let signed = step(&shell, "sign", &krate);
    assert!(signed.contains("accepted: signed by \"acme\""), "{signed}");
    let live = support::eventually("acme-policy loaded", Duration::from_secs(30), || {
        plugin(&agent.status_json()?)
    })
    .await;
    assert_eq!(
        (live["signed_by"].as_str(), live["wit"].as_str()),
        (Some("acme"), Some("0.2.0"))
    );

    // A restart (an upgrade, a reboot) asks the policy for the host endpoint: recorded.
    agent.restart(&refs());
    support::eventually(
        "the host endpoint's question recorded",
        Duration::from_secs(30),
        || {
            let events = weft_plugins::read_recording(&recording).ok()?;
            events
                .iter()
                .any(|e| e.answers.iter().any(|a| a.plugin == "acme-policy"))
                .then_some(())
        },
    )
    .await;
    let tested = step(&shell, "test", &krate);
    // The question acme-policy 0.1.0 answered (5 s) is answered differently (1 s);
    // the one before it was shipped is compared with what the agent did.
    assert!(
        tested.contains("recorded:   Wait { timeout: 5s, barriers: [IpCache, Identities], clusters: [] } (acme-policy 0.1.0)")
            && tested.contains("this build: Wait { timeout: 1s")
            && tested.contains("\"labels\":[\"reserved:host\"]")
            && tested.contains("decisions differ: read them before shipping"),
        "{tested}"
    );

    step(&shell, "shadow", &krate);
    support::eventually("the shadow loaded", Duration::from_secs(30), || {
        let s = agent.status_json()?;
        (s["plugins"]["shadows"][0]["version"] == "0.2.0").then_some(())
    })
    .await;
    agent.restart(&refs());
    let shadow = support::eventually("the shadow compared", Duration::from_secs(30), || {
        let s = agent.status_json()?;
        let shadow = s["plugins"]["shadows"][0].clone();
        (shadow["compared"] == 1).then_some(shadow)
    })
    .await;
    assert_eq!(shadow["agreed"], 0, "{shadow}");
    assert!(!shadow["last_disagreement"].is_null(), "{shadow}");
    let status = step(&shell, "status", &krate);
    assert!(
        status.contains("shadow acme-policy 0.2.0 (signed by acme): 1 compared, 0 agreed")
            && status.contains("last disagreement on regeneration-policy"),
        "{status}"
    );
    // The live plugin still decided.
    let live = plugin(&agent.status_json().unwrap()).unwrap();
    assert_eq!(live["version"], "0.1.0");

    step(&shell, "promote", &krate);
    support::eventually(
        "0.2.0 promoted, the shadow gone",
        Duration::from_secs(30),
        || {
            let s = agent.status_json()?;
            (plugin(&s)?["version"] == "0.2.0" && s["plugins"]["shadows"] == serde_json::json!([]))
                .then_some(())
        },
    )
    .await;
}
