//! ipcache benchmark: 100,000 prefixes from mixed sources with a listener attached, then
//! 10% updated and 10% deleted. Reports resolved upserts per second next to a baseline
//! of plain `HashMap` inserts of the same entries in the same run, and resident memory
//! per entry. `cargo bench -p weft-state --bench ipcache`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_model::layout;
use weft_model::Labels;
use weft_state::ipcache::{Change, Entry, Fact, IpCache, Listener, Owner, Prefix, Source};

const N: u32 = 100_000;

/// Counts live heap bytes, for the memory per entry.
struct CountingAlloc;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only counts sizes.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// A listener that does what a map writer does at least: look at every change.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Listener for Counting {
    fn on_change(&self, c: &Change<'_>) {
        if c.new.is_some_and(|e| e.identity != 0) || c.old.is_some() {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn addr(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0A00_0000 + i))
}

/// The i-th fact: mostly remote pods (clustermesh, explicit identity, tunnel), some
/// local kvstore entries, some node IPs (labels, key), some CIDRs (labels only).
fn fact(i: u32, node_labels: &Arc<Labels>, cidr_labels: &[Arc<Labels>]) -> (Prefix, Owner, Fact) {
    let tunnel = Some(IpAddr::V4(Ipv4Addr::new(172, 18, (i % 200) as u8, 1)));
    match i % 10 {
        0..=5 => (
            Prefix::host(addr(i)),
            Owner::new(Source::ClusterMesh, format!("c2/{}", layout::ip(addr(i)))),
            Fact {
                identity: Some(0x20000 + i % 5000),
                tunnel_peer: tunnel,
                encrypt_key: 0xFF,
                ..Fact::default()
            },
        ),
        6 | 7 => (
            Prefix::host(addr(i)),
            Owner::new(Source::KvStore, layout::ip(addr(i))),
            Fact {
                identity: Some(0x10000 + i % 5000),
                ..Fact::default()
            },
        ),
        8 => (
            Prefix::host(addr(i)),
            Owner::new(Source::ClusterMesh, format!("node/c2/node-{i}")),
            Fact {
                labels: Some(node_labels.clone()),
                tunnel_peer: tunnel,
                encrypt_key: 7,
                ..Fact::default()
            },
        ),
        _ => (
            Prefix::new(IpAddr::V4(Ipv4Addr::from(0x0B00_0000 + i * 16)), 28).unwrap(),
            Owner::new(Source::Directory, format!("cidr/{i}")),
            Fact {
                labels: Some(cidr_labels[(i % 64) as usize].clone()),
                ..Fact::default()
            },
        ),
    }
}

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let node_labels: Arc<Labels> = Arc::new("reserved:remote-node=;".parse().unwrap());
    let cidr_labels: Vec<Arc<Labels>> = (0..64)
        .map(|i| Arc::new(format!("cidr:10.{i}.0.0/16=;").parse().unwrap()))
        .collect();
    let facts: Vec<(Prefix, Owner, Fact)> = (0..N)
        .map(|i| fact(i, &node_labels, &cidr_labels))
        .collect();

    // Baseline: the resolved entries put straight into a HashMap, no facts, no listener.
    let entries: Vec<(Prefix, Entry)> = facts
        .iter()
        .map(|(p, o, f)| {
            let e = Entry {
                identity: f.identity.unwrap_or(6),
                tunnel_endpoint: f.tunnel_peer,
                encrypt_key: f.encrypt_key,
                source: o.source,
                k8s: None,
            };
            (*p, e)
        })
        .collect();
    let start = Instant::now();
    let mut map = HashMap::new();
    for (p, e) in entries.iter().cloned() {
        map.insert(p, e);
    }
    let baseline = start.elapsed();
    assert_eq!(map.len(), N as usize);
    drop(map);

    // Each owner's resource name is its own allocation, as it is when facts come from
    // etcd keys: copy them so none is shared with `facts`.
    let input: Vec<(Prefix, Owner, Fact)> = facts
        .iter()
        .map(|(p, o, f)| (*p, Owner::new(o.source, &*o.resource), f.clone()))
        .collect();
    let (rss_before, heap_before) = (rss_bytes(), LIVE.load(Ordering::Relaxed));
    let cache = IpCache::default();
    let listener = Arc::new(Counting::default());
    cache.add_listener(listener.clone());
    let start = Instant::now();
    for (p, o, f) in input {
        cache.upsert(p, o, f);
    }
    let insert = start.elapsed();
    assert_eq!(cache.len(), N as usize);
    // The input vector's own buffer was freed meanwhile: count it back out.
    let input_buffer = N as usize * std::mem::size_of::<(Prefix, Owner, Fact)>();
    let heap_per_entry =
        (LIVE.load(Ordering::Relaxed) + input_buffer).saturating_sub(heap_before) / N as usize;
    let rss_per_entry = rss_bytes().saturating_sub(rss_before) / N as usize;

    // 10% updated: a stronger kvstore fact on remote pods (a new identity, fallbacks kept).
    let start = Instant::now();
    for i in (0..N).step_by(10) {
        let (p, _, _) = &facts[i as usize];
        let owner = Owner::new(Source::KvStore, format!("update/{i}"));
        cache.upsert(
            *p,
            owner,
            Fact {
                identity: Some(0x10000 + i % 777),
                ..Fact::default()
            },
        );
    }
    let update = start.elapsed();

    // 10% deleted.
    let start = Instant::now();
    for i in (1..N).step_by(10) {
        let (p, o, _) = &facts[i as usize];
        assert!(cache.remove(*p, o));
    }
    let delete = start.elapsed();

    let upserts = rate(N as usize, insert);
    println!(
        "ipcache: {N} prefixes, mixed sources (clustermesh, kvstore, node, CIDR), one listener"
    );
    println!(
        "  baseline HashMap inserts   {:>12.0} /s",
        rate(N as usize, baseline)
    );
    println!(
        "  resolved upserts           {:>12.0} /s  (target >= 300000)",
        upserts
    );
    println!(
        "  ratio to baseline          {:>12.2}x",
        baseline.as_secs_f64() / insert.as_secs_f64()
    );
    println!(
        "  updates (10%)              {:>12.0} /s",
        rate(N as usize / 10, update)
    );
    println!(
        "  deletes (10%)              {:>12.0} /s",
        rate(N as usize / 10, delete)
    );
    println!(
        "  heap bytes per entry       {:>12} B   (target < 300)",
        heap_per_entry
    );
    println!(
        "  RSS growth per entry       {:>12} B   (allocator noise included)",
        rss_per_entry
    );
    println!(
        "  listener changes seen      {:>12}",
        listener.0.load(Ordering::Relaxed)
    );
}
