//! `kvstore::list_watch` (and `list_watch_raw`) against real etcd: paging, resume,
//! compaction, restarts.

use weft_testkit as support;

use futures::StreamExt;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;
use support::{within, Etcd, Proxy};
use weft_kvstore::{self as kvstore, list_watch, list_watch_raw, Client, Endpoints, Event};

const PREFIX: &str = "cilium/state/ip/v1/default/";
const LIMIT: Duration = Duration::from_secs(60);

/// What a consumer of the stream holds, and what it was told.
#[derive(Default)]
struct Mirror {
    state: BTreeMap<String, Vec<u8>>,
    seen: HashSet<(String, i64)>,
    duplicates: usize,
    init_done: usize,
    watching: usize,
    errors: Vec<String>,
    deletes: usize,
    too_large: Vec<String>,
    /// Lists announced (`list_watch_raw` only).
    listings: usize,
    /// The size the list in progress announced (`list_watch_raw` only).
    size: Option<u64>,
    /// The sizes complete lists announced.
    sizes: Vec<u64>,
    /// For `list_watch_raw`: the keys the list in progress delivered; the mirror drains
    /// the rest itself at its end.
    listed: Option<HashSet<String>>,
    /// Keys the mirror drained so.
    drained: usize,
}

impl Mirror {
    fn apply(&mut self, item: Result<Event, kvstore::Error>) {
        match item {
            Ok(Event::Upsert {
                key,
                value,
                revision,
            }) => {
                if !self.seen.insert((key.clone(), revision)) {
                    self.duplicates += 1;
                }
                if let Some(listed) = &mut self.listed {
                    listed.insert(key.clone());
                }
                self.state.insert(key, value);
            }
            Ok(Event::Delete { key }) => {
                // The raw stream reports deletes of keys it never delivered, too.
                let known = self.state.remove(&key).is_some();
                assert!(known || self.listings > 0, "delete of unknown {key}");
                self.deletes += usize::from(known);
            }
            Ok(Event::TooLarge { key }) => {
                self.state.remove(&key);
                self.too_large.push(key);
            }
            Ok(Event::Listing) => {
                self.listings += 1;
                self.listed = Some(HashSet::new());
                // A list started over announces its size again.
                self.size = None;
            }
            Ok(Event::ListSize { keys }) => {
                assert!(self.listed.is_some(), "a size outside a list");
                assert!(self.size.is_none(), "one size per list");
                self.size = Some(keys);
            }
            Ok(Event::InitDone { .. }) => {
                self.init_done += 1;
                if let Some(size) = self.size.take() {
                    // etcd's count at the list's revision: every key the list
                    // delivered, and those too large to read.
                    let listed = self.listed.as_ref().map_or(0, HashSet::len) as u64;
                    let too_large = self.too_large.len() as u64;
                    assert!(
                        listed <= size && size <= listed + too_large,
                        "list of {listed} keys ({too_large} too large) announced {size}"
                    );
                    self.sizes.push(size);
                }
                if let Some(listed) = self.listed.take() {
                    let before = self.state.len();
                    self.state.retain(|k, _| listed.contains(k));
                    self.drained += before - self.state.len();
                }
            }
            Ok(Event::Watching { .. }) => self.watching += 1,
            Err(e) => self.errors.push(e.to_string()),
        }
    }

    /// Applies events until `done` holds.
    async fn until(&mut self, s: &mut kvstore::Events, what: &str, done: impl Fn(&Mirror) -> bool) {
        within(what, LIMIT, async {
            while !done(self) {
                let item = s.next().await.expect("the stream never ends");
                self.apply(item);
            }
        })
        .await
    }
}

async fn contents(etcd: &Etcd) -> BTreeMap<String, Vec<u8>> {
    let mut c = etcd.client().await;
    let resp = c
        .get(PREFIX, Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .unwrap();
    resp.kvs()
        .iter()
        .map(|kv| (kv.key_str().unwrap().to_owned(), kv.value().to_vec()))
        .collect()
}

async fn client(url: String, config: kvstore::Config) -> Client {
    let endpoints = Endpoints {
        urls: vec![url],
        ..Default::default()
    };
    Client::connect(&endpoints, &config).await.unwrap()
}

fn fast_config(page_size: u32) -> kvstore::Config {
    kvstore::Config {
        page_size,
        keep_alive: (Duration::from_secs(1), Duration::from_secs(2)),
        ..kvstore::Config::default().unlimited()
    }
}

async fn seed(etcd: &Etcd, range: std::ops::Range<usize>) {
    let kv: Vec<(String, String)> = range
        .map(|i| (format!("{PREFIX}k{i:05}"), format!("v{i}")))
        .collect();
    etcd.put_all(&kv).await;
}

#[tokio::test]
async fn paged_list_delivers_every_key_once_then_watches() {
    let etcd = Etcd::start().await;
    seed(&etcd, 0..1000).await;
    etcd.put("cilium/state/ip/v1/defaultX", "outside the prefix")
        .await;
    let mut s = list_watch(client(etcd.url(), fast_config(64)).await, PREFIX.into());
    let mut m = Mirror::default();
    m.until(&mut s, "initial list", |m| m.init_done == 1).await;
    assert_eq!(m.state.len(), 1000, "every key of the prefix, nothing else");
    etcd.put(&format!("{PREFIX}new"), "x").await;
    etcd.delete(&format!("{PREFIX}k00000")).await;
    m.until(&mut s, "watch events", |m| {
        m.deletes == 1 && m.state.contains_key(&format!("{PREFIX}new"))
    })
    .await;
    assert_eq!(m.state, contents(&etcd).await);
    assert_eq!(m.duplicates, 0);
}

#[tokio::test]
async fn writes_during_a_paged_list_are_neither_lost_nor_repeated() {
    let etcd = Etcd::start().await;
    seed(&etcd, 0..500).await;
    // A slow list (2 keys a page, 50 pages a second) while a writer changes the range.
    let config = kvstore::Config {
        qps: 50.0,
        ..fast_config(2)
    };
    let mut s = list_watch(client(etcd.url(), config).await, PREFIX.into());
    let writer = async {
        for i in 0..100 {
            etcd.put(&format!("{PREFIX}k{:05}", i * 5), "changed").await;
            etcd.put(&format!("{PREFIX}w{i:03}"), "added").await;
        }
    };
    let mut m = Mirror::default();
    let reader = m.until(&mut s, "initial list", |m| m.init_done == 1);
    tokio::join!(writer, reader);
    let want = contents(&etcd).await;
    m.until(&mut s, "caught up with the writer", |m| m.state == want)
        .await;
    assert_eq!(m.duplicates, 0, "no (key, revision) delivered twice");
}

#[tokio::test]
async fn etcd_killed_mid_list_and_mid_watch_loses_nothing() {
    let mut etcd = Etcd::start().await;
    seed(&etcd, 0..300).await;
    // 10 keys a page at 5 pages a second: the list takes seconds, long enough to kill
    // etcd in the middle of it.
    let config = kvstore::Config {
        qps: 5.0,
        ..fast_config(10)
    };
    let mut s = list_watch(client(etcd.url(), config).await, PREFIX.into());
    let mut m = Mirror::default();
    m.until(&mut s, "first pages", |m| m.state.len() >= 50)
        .await;
    assert_eq!(m.init_done, 0, "still listing");
    etcd.restart().await;
    m.until(&mut s, "initial list after restart", |m| m.init_done == 1)
        .await;
    // The list either failed and started over or continued at its revision once etcd
    // was back; either way nothing is missing or repeated.
    assert_eq!(m.state, contents(&etcd).await);

    // Mid-watch: restart, then change things; the watch resumes from the last revision.
    m.until(&mut s, "watch established", |m| m.watching == 1)
        .await;
    etcd.restart().await;
    seed(&etcd, 300..320).await;
    etcd.delete(&format!("{PREFIX}k00001")).await;
    let want = contents(&etcd).await;
    m.until(&mut s, "watch resumed", |m| m.state == want).await;
    assert_eq!(
        m.init_done, 1,
        "resumed from the last revision, not listed again"
    );
    assert!(
        !m.errors.is_empty(),
        "the broken watch was reported: {:?}",
        m.errors
    );
    assert_eq!(m.duplicates, 0);
}

#[tokio::test]
async fn compaction_during_a_disconnect_lists_again_and_drains_stale_keys() {
    let etcd = Etcd::start().await;
    seed(&etcd, 0..50).await;
    let proxy = Proxy::start(etcd.client_port).await;
    let mut s = list_watch(client(proxy.url(), fast_config(16)).await, PREFIX.into());
    let mut m = Mirror::default();
    m.until(&mut s, "initial list and watch", |m| {
        m.init_done == 1 && m.watching == 1
    })
    .await;

    proxy.cut();
    for i in 0..10 {
        etcd.delete(&format!("{PREFIX}k{i:05}")).await;
    }
    seed(&etcd, 50..60).await;
    etcd.compact().await;
    proxy.restore();

    let want = contents(&etcd).await;
    m.until(&mut s, "re-list after compaction", |m| {
        m.init_done == 2 && m.state == want
    })
    .await;
    assert_eq!(
        m.deletes, 10,
        "one delete per key that vanished while disconnected"
    );
    assert!(
        m.errors.iter().any(|e| e.contains("compaction")),
        "compaction reported: {:?}",
        m.errors
    );
    assert_eq!(m.duplicates, 0, "unchanged keys are not delivered again");
    assert_eq!(
        m.listings, 0,
        "list_watch announces no list: it drains itself"
    );
}

/// The raw stream keeps no record of the keys: each list is announced and delivers
/// every key again, and what vanished is left for the consumer to drain.
#[tokio::test]
async fn raw_lists_are_announced_and_leave_the_stale_drain_to_the_consumer() {
    let etcd = Etcd::start().await;
    seed(&etcd, 0..50).await;
    let proxy = Proxy::start(etcd.client_port).await;
    let mut s = list_watch_raw(client(proxy.url(), fast_config(16)).await, PREFIX.into());
    let mut m = Mirror::default();
    m.until(&mut s, "initial list and watch", |m| {
        m.init_done == 1 && m.watching == 1
    })
    .await;
    assert_eq!(m.listings, 1);

    proxy.cut();
    for i in 0..10 {
        etcd.delete(&format!("{PREFIX}k{i:05}")).await;
    }
    seed(&etcd, 50..60).await;
    etcd.compact().await;
    proxy.restore();

    let want = contents(&etcd).await;
    m.until(&mut s, "re-list after compaction", |m| {
        m.init_done == 2 && m.state == want
    })
    .await;
    assert_eq!(m.listings, 2, "the re-list was announced");
    assert_eq!(
        m.sizes,
        [50, 50],
        "each list announced etcd's count of the range (50 keys, then 40 + 10)"
    );
    assert_eq!(m.deletes, 0, "the stream drained nothing itself");
    assert_eq!(m.drained, 10, "the consumer drained the keys that vanished");
    assert_eq!(
        m.duplicates, 40,
        "the 40 unchanged keys were delivered again, at the same revision"
    );
}

/// A page or watch response over the decode limit used to fail and be retried at the
/// same revision forever, so the prefix never synced. Now pages shrink to fit, and a
/// value too large alone is named and skipped, in a list and in a watch.
#[tokio::test]
async fn responses_over_the_size_limit_shrink_the_pages_and_skip_a_value_too_large() {
    let etcd = Etcd::start().await;
    let kv: Vec<(String, String)> = (0..200)
        .map(|i| (format!("{PREFIX}k{i:05}"), format!("{i:01024}")))
        .collect();
    etcd.put_all(&kv).await;
    let huge = "x".repeat(100 << 10);
    etcd.put(&format!("{PREFIX}k00100big"), &huge).await;
    // 64 KiB decoded at most: a page of 256 one-KiB values is over it, and so is the
    // 100 KiB value alone.
    let config = kvstore::Config {
        max_response_bytes: 64 << 10,
        page_bytes: 16 << 10,
        ..fast_config(256)
    };
    let mut s = list_watch(client(etcd.url(), config).await, PREFIX.into());
    let mut m = Mirror::default();
    m.until(&mut s, "the list completes", |m| m.init_done == 1)
        .await;
    assert_eq!(m.state.len(), 200, "every value that fits");
    assert_eq!(m.too_large, [format!("{PREFIX}k00100big")]);
    // In the watch: a value too large, then ordinary writes after it.
    etcd.put(&format!("{PREFIX}k00003"), &huge).await;
    etcd.put(&format!("{PREFIX}zafter"), "fine").await;
    // The watch response too large is read again as a list.
    m.until(&mut s, "the watch goes on past it", |m| {
        m.init_done == 2 && m.state.contains_key(&format!("{PREFIX}zafter"))
    })
    .await;
    assert!(
        m.too_large.contains(&format!("{PREFIX}k00003")),
        "{:?} {:?}",
        m.too_large,
        m.errors
    );
    assert!(
        !m.state.contains_key(&format!("{PREFIX}k00003")),
        "its old value went"
    );
    let mut want = contents(&etcd).await;
    want.retain(|_, v| v.len() < 64 << 10);
    assert_eq!(m.state, want, "everything else as etcd has it");
}

/// Dropping the stream mid-list stops its reading task, and with it the client's
/// connection: nothing keeps reading for a consumer that went away (a removed
/// cluster, a reconnect).
#[tokio::test]
async fn dropping_the_stream_stops_the_reading_task() {
    let etcd = Etcd::start().await;
    seed(&etcd, 0..50).await;
    // The test's runtime has no task of its own: what runs is the stream's (and, for a
    // moment, the seeding client's).
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    // Pages of 4 keys, two batches in flight: the list is far from done when the
    // consumer goes.
    let mut s = list_watch_raw(client(etcd.url(), fast_config(4)).await, PREFIX.into());
    let first = within("a first event", LIMIT, s.next()).await;
    assert!(matches!(first, Some(Ok(Event::Listing))), "{first:?}");
    assert!(alive() > 0, "the reading task runs");
    drop(s);
    within("every task of the stream ends", LIMIT, async {
        while alive() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}
