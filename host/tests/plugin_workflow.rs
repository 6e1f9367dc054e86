//! The vendor workflow: what the agent records of its hooks, a replay of it against
//! another build (`weftd plugin test`), and a shadow plugin compared with the live one.

mod support;

use std::sync::Arc;
use std::time::Duration;
use weft::plugins::{
    read_recording, replay, ClusterSync, Config, EndpointKind, HookInput, Isolation, LoadedPlugin,
    MeshView, PluginHost, Recorder, Runtime, Said, Verdict,
};

fn sync(name: &str, synced: bool) -> ClusterSync {
    ClusterSync {
        name: name.into(),
        connected: true,
        nodes_synced: synced,
        ipcache_synced: synced,
        identities_synced: synced,
        services_synced: synced,
    }
}

fn plugin(rt: &Runtime, name: &str, file: &str, config: &str, shadow: bool) -> LoadedPlugin {
    let wasm = std::fs::read(support::plugin_wasm(file)).unwrap();
    LoadedPlugin {
        version: file.into(),
        digest: weft::plugins::digest_hex(&wasm),
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
