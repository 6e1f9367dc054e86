//! Plugin benchmark: the shipped `regeneration-policy` on a warm instance, per call
//! (p50, p99), next to the same decision as a native Rust call in the same run; the
//! time to instantiate (with `init`), pooled and on demand; the policy through the
//! plugin host, plain, recorded and shadowed; the time to load a component from the
//! compile cache next to compiling it. `cargo bench -p weft-plugins --bench plugins`.

use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_hooks::{ClusterSync, Endpoint, EndpointKind, RegenerationReason, RegenerationRequest};
use weft_plugins::wit::{Barrier, Decision, Wait};
use weft_plugins::{
    digest_hex, enforce, CompileCache, Config, Isolation, LoadedPlugin, PluginHost, PluginSet,
    Recorder, Runtime,
};

const CALLS: usize = 200_000;
/// Calls through the plugin host (a thread hop each).
const HOST_CALLS: usize = 20_000;
const INSTANCES: usize = 2_000;
const LOADS: usize = 50;

/// The shipped plugin's rule, natively: the baseline.
#[inline(never)]
fn native_policy(request: &RegenerationRequest) -> Decision {
    let mut timeout_ms = request.default_timeout_ms;
    if request.endpoint.kind == EndpointKind::Host && request.ipsec {
        timeout_ms = timeout_ms.min(5_000);
    }
    Decision::Wait(Wait {
        timeout_ms,
        barriers: vec![Barrier::Ipcache, Barrier::Identities],
        clusters: vec![],
    })
}

/// The question for a workload (`pod`) or, as the agent asks it today, the host
/// endpoint (`weft_hooks::Endpoint::host`).
fn request(pod: bool) -> RegenerationRequest {
    let endpoint = if pod {
        Endpoint {
            kind: EndpointKind::Workload,
            identity: 70_000,
            namespace: "default".into(),
            name: "web-0".into(),
            labels: vec![
                "k8s:app=web".into(),
                "k8s:io.kubernetes.pod.namespace=default".into(),
            ],
        }
    } else {
        weft_hooks::Endpoint::host()
    };
    RegenerationRequest {
        endpoint,
        reason: RegenerationReason::Restore,
        ipsec: false,
        wireguard: false,
        default_timeout_ms: 60_000,
        clusters: (0..3)
            .map(|i| ClusterSync {
                name: format!("cluster-{i}"),
                connected: true,
                nodes_synced: true,
                ipcache_synced: i != 0,
                identities_synced: true,
                services_synced: true,
            })
            .collect(),
    }
}

/// Per-call durations of `f`, sorted.
fn sample(n: usize, mut f: impl FnMut()) -> Vec<Duration> {
    for _ in 0..n / 10 {
        f(); // warm-up
    }
    let mut d: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    d.sort();
    d
}

fn pct(d: &[Duration], p: f64) -> Duration {
    d[((d.len() - 1) as f64 * p) as usize]
}

fn us(d: Duration) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6)
}

/// The plugin's component, built by the shared test support (as the tests build it).
fn wasm(name: &str) -> Vec<u8> {
    std::fs::read(weft_testkit::plugin_wasm(name)).expect("the plugin is built")
}

fn main() {
    let rt = Arc::new(Runtime::new(Config::default()).unwrap());
    let bytes = wasm("regeneration_policy");
    let component = rt.compile(&bytes).unwrap();
    let req = request(false);
    let pod = request(true);

    // Per call: the hook on a warm instance, then through the whole set (contract
    // enforcement, isolation bookkeeping), each next to native.
    let mut instance = rt
        .instantiate("regeneration-policy", &component, "", Arc::new(Vec::new))
        .unwrap();
    // The first measure of a run pays for the CPU's warm-up: one discarded run first.
    sample(CALLS, || {
        std::hint::black_box(instance.regeneration_policy(&req).unwrap());
    });
    let wasm_calls = sample(CALLS, || {
        std::hint::black_box(
            instance
                .regeneration_policy(std::hint::black_box(&req))
                .unwrap(),
        );
    });
    let pod_calls = sample(CALLS, || {
        std::hint::black_box(
            instance
                .regeneration_policy(std::hint::black_box(&pod))
                .unwrap(),
        );
    });
    let native_pod = sample(CALLS, || {
        std::hint::black_box(native_policy(std::hint::black_box(&pod)));
    });
    let native_calls = sample(CALLS, || {
        std::hint::black_box(native_policy(std::hint::black_box(&req)));
    });
    let mut set = PluginSet::new(rt.clone(), Arc::new(Vec::new), Isolation::default());
    set.insert(LoadedPlugin {
        digest: digest_hex(&bytes),
        ..LoadedPlugin::new("regeneration-policy", component.clone())
    })
    .unwrap();
    let set_calls = sample(CALLS, || {
        std::hint::black_box(set.regeneration_policy(std::hint::black_box(&req)));
    });
    let max_wait = rt.config().max_wait;
    let native_enforced = sample(CALLS, || {
        let d = native_policy(std::hint::black_box(&req));
        std::hint::black_box(enforce(d, max_wait));
    });
    // The clock's own cost, included in every sample above.
    let clock = sample(CALLS, || {});

    // Instantiation, `init` included: of a prepared plugin (what the set does, and
    // again after a failed call), and from the component (with the contract check).
    let prepared = rt.prepare("regeneration-policy", &component).unwrap();
    let instantiate = sample(INSTANCES, || {
        std::hint::black_box(
            rt.instantiate_prepared(&prepared, "", Arc::new(Vec::new))
                .unwrap(),
        );
    });
    // The same without the pooling allocator, in the same run: the baseline.
    let on_demand = Runtime::new(Config {
        pooled_instances: 0,
        ..Config::default()
    })
    .unwrap();
    let prepared_on_demand = on_demand
        .prepare("regeneration-policy", &on_demand.compile(&bytes).unwrap())
        .unwrap();
    let instantiate_on_demand = sample(INSTANCES, || {
        std::hint::black_box(
            on_demand
                .instantiate_prepared(&prepared_on_demand, "", Arc::new(Vec::new))
                .unwrap(),
        );
    });
    let mut od_instance = on_demand
        .instantiate_prepared(&prepared_on_demand, "", Arc::new(Vec::new))
        .unwrap();
    let od_calls = sample(CALLS, || {
        std::hint::black_box(
            od_instance
                .regeneration_policy(std::hint::black_box(&req))
                .unwrap(),
        );
    });
    let instantiate_checked = sample(INSTANCES, || {
        std::hint::black_box(
            rt.instantiate("regeneration-policy", &component, "", Arc::new(Vec::new))
                .unwrap(),
        );
    });

    // Through the plugin host, the agent's path: a thread per plugin, every wait
    // bounded. The same question with every hook recorded, and with a shadow beside
    // the live plugin, against the plain host in the same run.
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let live = LoadedPlugin {
        digest: digest_hex(&bytes),
        ..LoadedPlugin::new("regeneration-policy", component.clone())
    };
    let host_with = |setup: &dyn Fn(&PluginHost)| {
        let host = PluginHost::new(rt.clone(), Arc::new(Vec::new), Isolation::default());
        setup(&host);
        tokio.block_on(host.install(live.clone())).unwrap();
        let calls = sample(HOST_CALLS, || {
            std::hint::black_box(tokio.block_on(host.regeneration_policy(req.clone())));
        });
        (calls, host)
    };
    let (host_plain, _) = host_with(&|_| {});
    let record_dir = tempfile::tempdir().unwrap();
    let (host_recorded, recorded) = host_with(&|h| {
        h.record_to(Arc::new(
            Recorder::start(record_dir.path(), 256 << 20).unwrap(),
        ))
    });
    let (host_shadowed, shadowed) = host_with(&|h| {
        let shadow = LoadedPlugin {
            shadow: true,
            ..live.clone()
        };
        tokio.block_on(h.install(shadow)).unwrap();
    });
    tokio.block_on(shadowed.flush());
    let compared = shadowed.report().shadows[0].compared;
    let dropped = recorded.report().recording.map_or(0, |r| r.dropped);

    // Load: compile (cache miss) next to a cache hit.
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::open(dir.path()).unwrap();
    let digest = digest_hex(&bytes);
    let entry = cache.entry_path(&rt, &digest);
    let miss = sample(LOADS, || {
        let _ = std::fs::remove_file(&entry);
        std::hint::black_box(cache.load(&rt, &digest, &bytes).unwrap());
    });
    cache.load(&rt, &digest, &bytes).unwrap();
    let hit = sample(LOADS, || {
        let (c, outcome) = cache.load(&rt, &digest, &bytes).unwrap();
        assert_eq!(outcome, weft_plugins::CacheOutcome::Hit);
        std::hint::black_box(c);
    });

    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "component: regeneration_policy.wasm, {} bytes; request with 3 clusters",
        bytes.len()
    );
    println!("clock overhead per sample: p50 {}", us(pct(&clock, 0.5)));
    println!("| measure | p50 | p99 | baseline p50 | ratio (p50) | target |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| policy hook, warm instance | {} | {} | native {} | {:.1}× | p50 < 1 µs |",
        us(pct(&wasm_calls, 0.5)),
        us(pct(&wasm_calls, 0.99)),
        us(pct(&native_calls, 0.5)),
        ratio(pct(&wasm_calls, 0.5), pct(&native_calls, 0.5)),
    );
    println!(
        "| … on an instance allocated on demand | {} | {} | pooled {} | {:.2}× | — |",
        us(pct(&od_calls, 0.5)),
        us(pct(&od_calls, 0.99)),
        us(pct(&wasm_calls, 0.5)),
        ratio(pct(&od_calls, 0.5), pct(&wasm_calls, 0.5)),
    );
    println!(
        "| … for a workload (labels, namespace, name) | {} | {} | native {} | {:.1}× | — |",
        us(pct(&pod_calls, 0.5)),
        us(pct(&pod_calls, 0.99)),
        us(pct(&native_pod, 0.5)),
        ratio(pct(&pod_calls, 0.5), pct(&native_pod, 0.5)),
    );
    println!(
        "| policy through the plugin set (enforced) | {} | {} | native + enforce {} | {:.1}× | — |",
        us(pct(&set_calls, 0.5)),
        us(pct(&set_calls, 0.99)),
        us(pct(&native_enforced, 0.5)),
        ratio(pct(&set_calls, 0.5), pct(&native_enforced, 0.5)),
    );
    println!(
        "| instantiate + init (prepared, pooled) | {} | {} | on demand {} | {:.2}× | < 20 µs |",
        us(pct(&instantiate, 0.5)),
        us(pct(&instantiate, 0.99)),
        us(pct(&instantiate_on_demand, 0.5)),
        ratio(pct(&instantiate, 0.5), pct(&instantiate_on_demand, 0.5)),
    );
    println!(
        "| check + instantiate + init (first load) | {} | {} | — | — | — |",
        us(pct(&instantiate_checked, 0.5)),
        us(pct(&instantiate_checked, 0.99)),
    );
    println!(
        "| policy through the plugin host | {} | {} | the set {} | {:.1}× | — |",
        us(pct(&host_plain, 0.5)),
        us(pct(&host_plain, 0.99)),
        us(pct(&set_calls, 0.5)),
        ratio(pct(&host_plain, 0.5), pct(&set_calls, 0.5)),
    );
    println!(
        "| … with every hook recorded | {} | {} | the host {} | {:.2}× | — |",
        us(pct(&host_recorded, 0.5)),
        us(pct(&host_recorded, 0.99)),
        us(pct(&host_plain, 0.5)),
        ratio(pct(&host_recorded, 0.5), pct(&host_plain, 0.5)),
    );
    println!(
        "| … with one shadow plugin | {} | {} | the host {} | {:.2}× | — |",
        us(pct(&host_shadowed, 0.5)),
        us(pct(&host_shadowed, 0.99)),
        us(pct(&host_plain, 0.5)),
        ratio(pct(&host_shadowed, 0.5), pct(&host_plain, 0.5)),
    );
    println!(
        "(recording: {dropped} of {} events dropped by the writer; shadow: {compared} answers compared)",
        HOST_CALLS + HOST_CALLS / 10
    );
    println!(
        "| load from the compile cache (hit) | {} | {} | compile (miss) {} | {:.3}× | < 5 ms |",
        us(pct(&hit, 0.5)),
        us(pct(&hit, 0.99)),
        us(pct(&miss, 0.5)),
        ratio(pct(&hit, 0.5), pct(&miss, 0.5)),
    );
}
