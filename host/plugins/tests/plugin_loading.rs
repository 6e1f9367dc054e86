//! Plugins from a directory: manifests, digests and signatures, the compile cache, hot
//! reload, and the cluster mesh's callbacks calling the hooks. Real components only.

use weft_testkit as support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use weft_hooks::{EndpointKind, RegenerationRequest, Verdict};
use weft_plugins::{
    seal, CacheOutcome, CompileCache, Config, Isolation, Loader, PluginDir, PluginHost,
    PluginsReport, Runtime, TrustPolicy,
};

/// A plugin directory followed into a plugin host.
struct Plugins {
    dir: tempfile::TempDir,
    host: PluginHost,
    follow: PluginDir,
    _cache: tempfile::TempDir,
}

impl Plugins {
    fn new(trusted: TrustPolicy) -> Self {
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

fn request(clusters: Vec<weft_hooks::ClusterSync>) -> RegenerationRequest {
    support::request(EndpointKind::Workload, false, clusters)
}

fn pending(name: &str) -> weft_hooks::ClusterSync {
    weft_hooks::ClusterSync {
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
    let mut p = Plugins::new(TrustPolicy::none().allowing_unsigned());
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
    let digest = weft_plugins::digest_hex(
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
    let mut p = Plugins::new(TrustPolicy::none().allowing_unsigned());
    let path = p.put("policy", "regeneration_policy", "1.0.0", 0, "");
    let text = std::fs::read_to_string(&path).unwrap();
    let forged = text.replace(
        &weft_plugins::Manifest::read(&path).unwrap().sha256,
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
    use weft_plugins::{generate_signing_key, read_signing_key};
    let keys = tempfile::tempdir().unwrap();
    let trusted_path = keys.path().join("trusted");
    let ops = generate_signing_key(&keys.path().join("ops.key")).unwrap();
    let stranger = keys.path().join("stranger.key");
    generate_signing_key(&stranger).unwrap();
    std::fs::write(&trusted_path, format!("# ops\n{}\n", hex(ops.as_bytes()))).unwrap();
    let mut trusted = TrustPolicy::none();
    trusted.add_keys_file(&trusted_path).unwrap();
    let mut p = Plugins::new(trusted);

    let unsigned = p.put("unsigned", "regeneration_policy", "1.0.0", 0, "");
    let forged = p.put("forged", "sync_events", "1.0.0", 0, "");
    seal(&forged, Some(&read_signing_key(&stranger).unwrap())).unwrap();
    let signed = p.put("signed", "critical_clusters", "1.0.0", 0, "east");
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
        [("signed".into(), "1.0.0".into())],
        "{:?}",
        p.report()
    );

    // A manifest whose digest was changed to another component's does not verify:
    // the signature covers the digest, and says that it changed.
    let text = std::fs::read_to_string(&signed).unwrap();
    std::fs::copy(
        support::plugin_wasm("sync_events"),
        p.dir.path().join("critical_clusters.wasm"),
    )
    .unwrap();
    let sync_digest =
        weft_plugins::digest_hex(&std::fs::read(support::plugin_wasm("sync_events")).unwrap());
    let m = weft_plugins::Manifest::read(&signed).unwrap();
    std::fs::write(&signed, text.replace(&m.sha256, &sync_digest)).unwrap();
    p.follow.reconcile().await;
    let e = p.refusal("signed.toml");
    assert!(
        e.contains("bad signature: sha256 changed since it was signed"),
        "{e}"
    );
    // ... and the plugin signed before keeps running.
    assert_eq!(p.versions(), [("signed".into(), "1.0.0".into())]);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn a_missing_export_and_another_wit_version_are_refused_saying_which() {
    let mut p = Plugins::new(TrustPolicy::none().allowing_unsigned());
    p.put("no-policy", "test_missing_export", "1.0.0", 0, "");
    let v = p.put("future", "test_wit_future", "1.0.0", 0, "");
    let text = std::fs::read_to_string(&v).unwrap();
    std::fs::write(&v, text + "wit = \"0.99.0\"\n").unwrap();
    p.follow.reconcile().await;
    let e = p.refusal("no-policy.toml");
    assert!(
        e.contains("missing export") && e.contains("regeneration-policy"),
        "{e}"
    );
    let e = p.refusal("future.toml");
    assert!(e.contains("incompatible WIT version"), "{e}");
    assert!(p.report().loaded.is_empty());
}

#[tokio::test]
async fn a_failed_reload_keeps_the_running_plugin_and_a_good_one_replaces_it() {
    let mut p = Plugins::new(TrustPolicy::none().allowing_unsigned());
    p.put("critical", "critical_clusters", "1.0.0", 0, "east");
    p.follow.reconcile().await;
    assert_eq!(p.versions(), [("critical".into(), "1.0.0".into())]);

    // init refuses an empty config: the new version never replaces the old.
    p.put("critical", "critical_clusters", "2.0.0", 0, "");
    let changes = p.follow.reconcile().await;
    assert_eq!(changes.refused.len(), 1, "{changes:?}");
    let e = p.refusal("critical.toml");
    assert!(e.contains("init failed"), "{e}");
    assert_eq!(p.report().refused[0].kept.as_deref(), Some("critical"));
    assert_eq!(p.versions(), [("critical".into(), "1.0.0".into())]);
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
    assert_eq!(p.versions(), [("critical".into(), "1.0.0".into())]);

    // A good version replaces it and clears the refusal.
    p.put("critical", "critical_clusters", "3.0.0", 0, "west");
    p.follow.reconcile().await;
    assert_eq!(
        p.versions(),
        [("critical".into(), "3.0.0".into())],
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
    let p = Plugins::new(TrustPolicy::none().allowing_unsigned());
    p.put("critical", "critical_clusters", "1.0.0", 0, "east");
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
    assert_eq!(host.report().loaded[0].version, "1.0.0");
    put_manifest(
        dir.path(),
        "critical",
        "critical_clusters",
        "2.0.0",
        0,
        "west",
    );
    support::eventually("version 2 loaded", Duration::from_secs(30), || {
        (host.report().loaded.first()?.version == "2.0.0").then_some(())
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
    let digest = weft_plugins::digest_hex(&wasm);
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
    let sync_digest = weft_plugins::digest_hex(&sync);
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
    let plugin = |name: &str| weft_plugins::LoadedPlugin::new(name, component.clone());
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

/// A trust policy with one key allowed to sign `allowed`, and `min` as the minimum
/// version of plugin `p`.
fn policy_with(public: &str, allowed: &str, min: &str) -> TrustPolicy {
    TrustPolicy::parse(&format!(
        "[[keys]]\nname = \"vendor\"\npublic = \"{public}\"\nplugins = [\"{allowed}\"]\n\n[plugins.p]\nmin_version = \"{min}\"\n"
    ))
    .unwrap()
}

#[tokio::test]
async fn a_tampered_manifest_is_refused_naming_the_field() {
    use weft_plugins::{generate_signing_key, read_signing_key};
    let keys = tempfile::tempdir().unwrap();
    let key_path = keys.path().join("vendor.key");
    let public = hex(generate_signing_key(&key_path).unwrap().as_bytes());
    let key = read_signing_key(&key_path).unwrap();
    let mut p = Plugins::new(policy_with(&public, "*", "1.0.0"));
    let path = p.put("p", "critical_clusters", "1.0.0", 0, "east");
    seal(&path, Some(&key)).unwrap();
    p.follow.reconcile().await;
    assert_eq!(p.versions(), [("p".into(), "1.0.0".into())]);
    assert_eq!(p.report().loaded[0].signed_by.as_deref(), Some("vendor"));
    assert_eq!(p.report().trust, "signatures required (1 trusted keys)");
    let signed = std::fs::read_to_string(&path).unwrap();

    // Each edit an attacker with write access to the directory could make.
    for (field, from, to) in [
        ("priority", "priority = 0", "priority = 1000"),
        ("config", "config = \"east\"", "config = \"west\""),
        ("version", "version = \"1.0.0\"", "version = \"1.0.1\""),
        ("shadow", "shadow = false", "shadow = true"),
    ] {
        assert!(signed.contains(from), "{signed}");
        std::fs::write(&path, signed.replace(from, to)).unwrap();
        p.follow.reconcile().await;
        let e = p.refusal("p.toml");
        assert!(
            e.contains(&format!(
                "bad signature: {field} changed since it was signed"
            )),
            "{field}: {e}"
        );
        assert_eq!(p.versions(), [("p".into(), "1.0.0".into())], "kept");
    }
    // A new name is outside what the key may sign only if the policy scopes it; here
    // it is not, so the signature says the name changed.
    std::fs::write(&path, signed.replace("name = \"p\"", "name = \"q\"")).unwrap();
    p.follow.reconcile().await;
    let e = p.refusal("p.toml");
    assert!(e.contains("name changed since it was signed"), "{e}");

    // A correctly signed older version: refused as a downgrade.
    let mut floor = Plugins::new(policy_with(&public, "*", "2.0.0"));
    let old = floor.put("p", "critical_clusters", "1.5.0", 0, "east");
    seal(&old, Some(&key)).unwrap();
    floor.follow.reconcile().await;
    let e = floor.refusal("p.toml");
    assert!(
        e.contains("version 1.5.0 is below the trust policy's min_version 2.0.0"),
        "{e}"
    );

    // A key scoped to other plugins cannot sign this one.
    let mut scoped = Plugins::new(policy_with(&public, "acme-*", "0.0.0"));
    let path = scoped.put("p", "critical_clusters", "1.0.0", 0, "east");
    seal(&path, Some(&key)).unwrap();
    scoped.follow.reconcile().await;
    let e = scoped.refusal("p.toml");
    assert!(
        e.contains("signed by key \"vendor\", which the trust policy does not allow to sign \"p\""),
        "{e}"
    );
}

#[tokio::test]
async fn the_component_must_be_a_small_regular_file_inside_the_directory() {
    let mut p = Plugins::new(TrustPolicy::none().allowing_unsigned());
    let outside = tempfile::tempdir().unwrap();
    std::fs::copy(
        support::plugin_wasm("regeneration_policy"),
        outside.path().join("x.wasm"),
    )
    .unwrap();
    let manifest = |name: &str, wasm: &str| {
        let path = p.dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &path,
            format!("name = {name:?}\nversion = \"1.0.0\"\nwasm = {wasm:?}\nsha256 = \"00\"\n"),
        )
        .unwrap();
    };
    manifest("zero", "/dev/zero");
    manifest("escape", "../../x.wasm");
    std::os::unix::fs::symlink(
        outside.path().join("x.wasm"),
        p.dir.path().join("link.wasm"),
    )
    .unwrap();
    manifest("link", "link.wasm");
    nix::unistd::mkfifo(
        &p.dir.path().join("fifo.wasm"),
        nix::sys::stat::Mode::S_IRWXU,
    )
    .unwrap();
    manifest("fifo", "fifo.wasm");
    // A manifest that leads out of the directory is not read at all.
    let stray = outside.path().join("stray.toml");
    std::fs::write(
        &stray,
        "name = \"stray\"\nversion = \"1.0.0\"\nwasm = \"x.wasm\"\nsha256 = \"00\"\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(&stray, p.dir.path().join("stray.toml")).unwrap();
    // Within a bound: a FIFO must not block the reader.
    support::within(
        "the directory pass",
        Duration::from_secs(30),
        p.follow.reconcile(),
    )
    .await;
    for (name, reason) in [
        ("zero", "must be a path inside the plugin directory"),
        ("escape", "must be a path inside the plugin directory"),
        ("link", "outside the plugin directory"),
        ("fifo", "not a regular file"),
    ] {
        let e = p.refusal(&format!("{name}.toml"));
        assert!(
            e.contains("refused: wasm") && e.contains(reason),
            "{name}: {e}"
        );
    }

    // Over the size limit: refused before it is read whole.
    let runtime = Arc::new(Runtime::new(Config::default()).unwrap());
    let small = Loader::new(runtime, None, TrustPolicy::none().allowing_unsigned())
        .with_max_component_bytes(1024);
    let path = put_manifest(p.dir.path(), "big", "regeneration_policy", "1.0.0", 0, "");
    let e = weft_sys::error_chain(&small.load(&path).err().expect("refused"));
    assert!(
        e.contains("refused: wasm") && e.contains("over the limit of 1024"),
        "{e}"
    );
}

#[tokio::test]
async fn without_keys_unsigned_plugins_load_only_when_allowed_and_a_wrong_wit_is_named() {
    let mut strict = Plugins::new(TrustPolicy::none());
    strict.put("p", "regeneration_policy", "1.0.0", 0, "");
    strict.follow.reconcile().await;
    let e = strict.refusal("p.toml");
    assert!(
        e.contains("unsigned") && e.contains("--plugin-allow-unsigned"),
        "{e}"
    );
    assert_eq!(
        strict.report().trust,
        "no trusted keys: every plugin is refused"
    );

    let mut lax = Plugins::new(TrustPolicy::none().allowing_unsigned());
    lax.put("p", "regeneration_policy", "1.0.0", 0, "");
    let future = lax.put("future", "test_wit_future", "1.0.0", 0, "");
    let text = std::fs::read_to_string(&future).unwrap();
    std::fs::write(&future, text + "wit = \"0.2.0\"\n").unwrap();
    lax.follow.reconcile().await;
    assert_eq!(lax.report().loaded[0].signed_by, None);
    assert!(lax.report().trust.contains("unsigned plugins allowed"));
    let e = lax.refusal("future.toml");
    assert!(
        e.contains("wit: the manifest says 0.2.0, the component exports weft:plugin/hooks@0.99.0"),
        "{e}"
    );
}
