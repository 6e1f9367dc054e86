//! Plugins from a directory: manifests, digests and signatures, the compile cache, hot
//! reload, and the cluster mesh's callbacks calling the hooks. Real components only.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use weft::plugins::{
    seal, CacheOutcome, CompileCache, Config, EndpointKind, Isolation, Loader, PluginDir,
    PluginHost, PluginsReport, RegenerationRequest, Runtime, TrustedKeys, Verdict,
};

/// A plugin directory followed into a plugin host.
struct Plugins {
    dir: tempfile::TempDir,
    host: PluginHost,
    follow: PluginDir,
    _cache: tempfile::TempDir,
}

impl Plugins {
    fn new(trusted: TrustedKeys) -> Self {
        let runtime = Arc::new(Runtime::new(Config::default()).unwrap());
        let host = PluginHost::new(runtime.clone(), Arc::new(Vec::new), Isolation::default());
        let cache_dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::open(cache_dir.path()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let loader = Loader::new(runtime, Some(cache), trusted);
        let follow = PluginDir::new(dir.path().into(), loader, host.clone());
        Self {
            dir,
            host,
            follow,
            _cache: cache_dir,
        }
    }

    /// Writes manifest `name.toml` for component `file` (copied in) and seals it.
    fn put(&self, name: &str, file: &str, version: &str, priority: i32, config: &str) -> PathBuf {
        put_manifest(self.dir.path(), name, file, version, priority, config)
    }

    fn report(&self) -> PluginsReport {
        self.host.report()
    }

    fn refusal(&self, manifest: &str) -> String {
        let path = self.dir.path().join(manifest);
        self.report()
            .refused
            .iter()
            .find(|r| r.manifest == path)
            .unwrap_or_else(|| panic!("{manifest} is not refused: {:?}", self.report()))
            .error
            .clone()
    }

    fn versions(&self) -> Vec<(String, String)> {
        self.report()
            .loaded
            .iter()
            .map(|s| (s.name.clone(), s.version.clone()))
            .collect()
    }
}

fn put_manifest(
    dir: &Path,
    name: &str,
    file: &str,
    version: &str,
    priority: i32,
    config: &str,
) -> PathBuf {
    std::fs::copy(support::plugin_wasm(file), dir.join(format!("{file}.wasm"))).unwrap();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "name = {name:?}\nversion = {version:?}\nwasm = \"{file}.wasm\"\nsha256 = \"\"\npriority = {priority}\nconfig = {config:?}\n"
        ),
    )
    .unwrap();
    seal(&path, None).unwrap();
    path
}

fn request(clusters: Vec<weft::plugins::ClusterSync>) -> RegenerationRequest {
    RegenerationRequest {
        endpoint: EndpointKind::Workload,
        restoring: true,
        ipsec: false,
        wireguard: false,
        default_timeout_ms: 60_000,
        clusters,
    }
}

fn pending(name: &str) -> weft::plugins::ClusterSync {
    weft::plugins::ClusterSync {
        name: name.into(),
        connected: true,
        nodes_synced: false,
        ipcache_synced: false,
        identities_synced: false,
        services_synced: false,
    }
}

#[tokio::test]
async fn a_directory_loads_verified_plugins_and_the_highest_priority_with_an_opinion_decides() {
    let mut p = Plugins::new(TrustedKeys::none());
    p.put("regeneration-policy", "regeneration_policy", "1.0.0", 0, "");
    p.put("critical", "critical_clusters", "2.0.0", 10, "east");
    p.put("sync-events", "sync_events", "0.3.0", 5, "");
    let changes = p.follow.reconcile().await;
    assert_eq!(changes.loaded.len(), 3, "{changes:?}");
    assert_eq!(
        p.versions(),
        [
            ("critical".into(), "2.0.0".into()),
            ("sync-events".into(), "0.3.0".into()),
            ("regeneration-policy".into(), "1.0.0".into()),
        ]
    );
    let digest = weft::plugins::digest_hex(
        &std::fs::read(support::plugin_wasm("critical_clusters")).unwrap(),
    );
    assert_eq!(p.report().loaded[0].digest, digest);

    let answer = p
        .host
        .regeneration_policy(request(vec![pending("east"), pending("west")]))
        .await;
    assert_eq!(answer.decided_by.as_deref(), Some("critical"));
    assert!(matches!(
        answer.verdict,
        Verdict::Wait { ref clusters, .. } if clusters == &["east".to_string()]
    ));
    // A second pass over an unchanged directory loads nothing again.
    assert_eq!(p.follow.reconcile().await, Default::default());
    assert_eq!(p.report().loads, 3);
}

#[tokio::test]
async fn a_wrong_digest_is_refused_and_named() {
    let mut p = Plugins::new(TrustedKeys::none());
    let path = p.put("policy", "regeneration_policy", "1", 0, "");
    let text = std::fs::read_to_string(&path).unwrap();
    let forged = text.replace(
        &weft::plugins::Manifest::read(&path).unwrap().sha256,
        &"ab".repeat(32),
    );
    std::fs::write(&path, forged).unwrap();
    p.follow.reconcile().await;
    let error = p.refusal("policy.toml");
    assert!(error.contains("wrong digest"), "{error}");
    assert!(p.report().loaded.is_empty());
    assert_eq!(p.report().failed_loads, 1);
}

#[tokio::test]
async fn with_trusted_keys_only_plugins_signed_by_one_load() {
    use weft::plugins::{generate_signing_key, read_signing_key};
    let keys = tempfile::tempdir().unwrap();
    let trusted_path = keys.path().join("trusted");
    let ops = generate_signing_key(&keys.path().join("ops.key")).unwrap();
    let stranger = keys.path().join("stranger.key");
    generate_signing_key(&stranger).unwrap();
    std::fs::write(&trusted_path, format!("# ops\n{}\n", hex(ops.as_bytes()))).unwrap();
    let trusted = TrustedKeys::read(&trusted_path).unwrap();
    let mut p = Plugins::new(trusted);

    let unsigned = p.put("unsigned", "regeneration_policy", "1", 0, "");
    let forged = p.put("forged", "sync_events", "1", 0, "");
    seal(&forged, Some(&read_signing_key(&stranger).unwrap())).unwrap();
    let signed = p.put("signed", "critical_clusters", "1", 0, "east");
    seal(
        &signed,
        Some(&read_signing_key(&keys.path().join("ops.key")).unwrap()),
    )
    .unwrap();
    p.follow.reconcile().await;

    assert!(unsigned.exists());
    let e = p.refusal("unsigned.toml");
    assert!(e.contains("unsigned"), "{e}");
    let e = p.refusal("forged.toml");
    assert!(e.contains("bad signature"), "{e}");
    assert_eq!(
        p.versions(),
        [("signed".into(), "1".into())],
        "{:?}",
        p.report()
    );

    // A signature over another digest does not verify either: the signature covers
    // the component, not the manifest.
    let text = std::fs::read_to_string(&signed).unwrap();
    std::fs::copy(
        support::plugin_wasm("sync_events"),
        p.dir.path().join("critical_clusters.wasm"),
    )
    .unwrap();
    let sync_digest =
        weft::plugins::digest_hex(&std::fs::read(support::plugin_wasm("sync_events")).unwrap());
    let m = weft::plugins::Manifest::read(&signed).unwrap();
    std::fs::write(&signed, text.replace(&m.sha256, &sync_digest)).unwrap();
    p.follow.reconcile().await;
    let e = p.refusal("signed.toml");
    assert!(e.contains("bad signature"), "{e}");
    // ... and the plugin signed before keeps running.
    assert_eq!(p.versions(), [("signed".into(), "1".into())]);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn a_missing_export_and_another_wit_version_are_refused_saying_which() {
    let mut p = Plugins::new(TrustedKeys::none());
    p.put("no-policy", "test_missing_export", "1", 0, "");
    p.put("v2", "test_wit_v2", "1", 0, "");
    p.follow.reconcile().await;
    let e = p.refusal("no-policy.toml");
    assert!(
        e.contains("missing export") && e.contains("regeneration-policy"),
        "{e}"
    );
    let e = p.refusal("v2.toml");
    assert!(e.contains("incompatible WIT version"), "{e}");
    assert!(p.report().loaded.is_empty());
}

#[tokio::test]
async fn a_failed_reload_keeps_the_running_plugin_and_a_good_one_replaces_it() {
    let mut p = Plugins::new(TrustedKeys::none());
    p.put("critical", "critical_clusters", "1", 0, "east");
    p.follow.reconcile().await;
    assert_eq!(p.versions(), [("critical".into(), "1".into())]);

    // init refuses an empty config: the new version never replaces the old.
    p.put("critical", "critical_clusters", "2", 0, "");
    let changes = p.follow.reconcile().await;
    assert_eq!(changes.refused.len(), 1, "{changes:?}");
    let e = p.refusal("critical.toml");
    assert!(e.contains("init failed"), "{e}");
    assert_eq!(p.report().refused[0].kept.as_deref(), Some("critical"));
    assert_eq!(p.versions(), [("critical".into(), "1".into())]);
    let answer = p
        .host
        .regeneration_policy(request(vec![pending("east")]))
        .await;
    assert_eq!(answer.decided_by.as_deref(), Some("critical"));

    // Bytes that are no component, with a matching digest: refused at compilation.
    let path = p.dir.path().join("critical.toml");
    std::fs::write(p.dir.path().join("critical_clusters.wasm"), b"\0asm junk").unwrap();
    seal(&path, None).unwrap();
    p.follow.reconcile().await;
    let e = p.refusal("critical.toml");
    assert!(e.contains("cannot compile"), "{e}");
    assert_eq!(p.versions(), [("critical".into(), "1".into())]);

    // A good version replaces it and clears the refusal.
    p.put("critical", "critical_clusters", "3", 0, "west");
    p.follow.reconcile().await;
    assert_eq!(
        p.versions(),
        [("critical".into(), "3".into())],
        "{:?}",
        p.report()
    );
    assert!(p.report().refused.is_empty());
    let answer = p
        .host
        .regeneration_policy(request(vec![pending("east")]))
        .await;
    assert_eq!(
        answer.verdict,
        Verdict::Proceed,
        "east is no longer critical"
    );

    // Removing the manifest removes the plugin.
    std::fs::remove_file(&path).unwrap();
    let changes = p.follow.reconcile().await;
    assert_eq!(changes.removed, ["critical"]);
    assert!(p.report().loaded.is_empty());
}

#[tokio::test]
async fn a_followed_directory_reloads_on_change_without_being_asked() {
    let p = Plugins::new(TrustedKeys::none());
    p.put("critical", "critical_clusters", "1", 0, "east");
    let (loaded_tx, mut loaded) = tokio::sync::watch::channel(false);
    let Plugins {
        dir, host, follow, ..
    } = p;
    let task = tokio::spawn(follow.run(loaded_tx));
    support::within(
        "the first pass",
        Duration::from_secs(30),
        loaded.wait_for(|l| *l),
    )
    .await
    .unwrap();
    assert_eq!(host.report().loaded[0].version, "1");
    put_manifest(dir.path(), "critical", "critical_clusters", "2", 0, "west");
    support::eventually("version 2 loaded", Duration::from_secs(30), || {
        (host.report().loaded.first()?.version == "2").then_some(())
    })
    .await;
    task.abort();
}

#[test]
fn the_compile_cache_hits_and_never_trusts_a_bad_entry() {
    let rt = Runtime::new(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::open(dir.path()).unwrap();
    let wasm = std::fs::read(support::plugin_wasm("regeneration_policy")).unwrap();
    let digest = weft::plugins::digest_hex(&wasm);
    let entry = cache.entry_path(&rt, &digest);
    let load = || cache.load(&rt, &digest, &wasm).unwrap().1;

    assert_eq!(load(), CacheOutcome::Miss);
    assert!(entry.exists());
    assert_eq!(load(), CacheOutcome::Hit);

    let rebuilt = |outcome: CacheOutcome, why: &str| match outcome {
        CacheOutcome::Rebuilt(reason) => assert!(reason.contains(why), "{reason}"),
        other => panic!("expected a rebuild ({why}), got {other:?}"),
    };
    // One flipped bit in the compiled code.
    let mut bytes = std::fs::read(&entry).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&entry, &bytes).unwrap();
    rebuilt(load(), "integrity");
    assert_eq!(load(), CacheOutcome::Hit, "the rebuilt entry is good");

    // Truncated, and not an entry at all.
    let bytes = std::fs::read(&entry).unwrap();
    std::fs::write(&entry, &bytes[..20]).unwrap();
    rebuilt(load(), "truncated");
    std::fs::write(&entry, b"hello").unwrap();
    rebuilt(load(), "not a weft compile cache entry");

    // An entry made by another node (another key) for the same module.
    let other_dir = tempfile::tempdir().unwrap();
    let other = CompileCache::open(other_dir.path()).unwrap();
    other.load(&rt, &digest, &wasm).unwrap();
    std::fs::copy(other.entry_path(&rt, &digest), &entry).unwrap();
    rebuilt(load(), "integrity");

    // Another module's valid entry renamed to this one's.
    let sync = std::fs::read(support::plugin_wasm("sync_events")).unwrap();
    let sync_digest = weft::plugins::digest_hex(&sync);
    cache.load(&rt, &sync_digest, &sync).unwrap();
    std::fs::copy(cache.entry_path(&rt, &sync_digest), &entry).unwrap();
    rebuilt(load(), "integrity");
    assert_eq!(load(), CacheOutcome::Hit);

    // The cache survives a restart: a new runtime and cache over the same directory.
    let rt2 = Runtime::new(Config::default()).unwrap();
    let cache2 = CompileCache::open(dir.path()).unwrap();
    assert_eq!(
        cache2.load(&rt2, &digest, &wasm).unwrap().1,
        CacheOutcome::Hit
    );
}

#[tokio::test]
async fn mesh_callbacks_call_the_hooks_and_late_plugins_learn_what_synced_before() {
    let etcd = support::Etcd::start().await;
    let runtime = Arc::new(Runtime::new(Config::default()).unwrap());
    let host = PluginHost::new(runtime.clone(), Arc::new(Vec::new), Isolation::default());
    let component = runtime
        .compile(&std::fs::read(support::plugin_wasm("sync_events")).unwrap())
        .unwrap();
    let plugin = |name: &str| weft::plugins::LoadedPlugin {
        name: name.into(),
        version: "1".into(),
        digest: "-".into(),
        priority: 0,
        config: String::new(),
        component: component.clone(),
    };
    host.install(plugin("sync-events")).await.unwrap();
    let lab = support::Lab::start_with(256, host.sync_callbacks());
    support::seed_cluster(&etcd, "east", 2, 3).await;
    support::put_cluster_config(&etcd, "east", r#"{"id":2}"#).await;
    lab.add("east", &etcd.url());
    lab.until("east ready", "east", |s| s.ready).await;
    let counter_of = |plugin: &str, name: &str| {
        let report = host.report();
        let p = report.loaded.iter().find(|p| p.name == plugin).unwrap();
        p.counters.get(name).copied().unwrap_or(0)
    };
    let counter = |name: &str| counter_of("sync-events", name);
    host.flush().await;
    for r in ["nodes", "ipcache", "identities", "services"] {
        assert_eq!(counter(&format!("sync_events_{r}")), 1, "{r}");
    }
    assert_eq!(counter("sync_events_disconnected"), 0);
    // A plugin loaded later is told of the clusters already synced.
    host.install(plugin("late")).await.unwrap();
    host.flush().await;
    for r in ["nodes", "ipcache", "identities", "services"] {
        assert_eq!(counter_of("late", &format!("sync_events_{r}")), 1, "{r}");
    }
    lab.remove("east");
    support::eventually("east removed", Duration::from_secs(30), || {
        lab.status_of("east").is_none().then_some(())
    })
    .await;
    host.flush().await;
    assert_eq!(counter("sync_events_disconnected"), 1);
    // ... but not of a cluster that went away.
    host.install(plugin("later")).await.unwrap();
    host.flush().await;
    assert_eq!(counter_of("later", "sync_events_nodes"), 0);
    assert_eq!(host.report().loaded[0].failures, 0);
}
