//! The list-then-watch stage: one prefix of etcd as a stream of [`Event`]s.

use super::{prefix_range_end, Backoff, Client, Error};
use etcd_client::EventType;
use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// A change under the watched prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `key` was created or changed at `revision` (its mod revision).
    Upsert {
        /// The full key.
        key: String,
        /// The new value.
        value: Vec<u8>,
        /// The key's mod revision.
        revision: i64,
    },
    /// `key` was deleted, or vanished while the watch was broken (stale drain).
    Delete {
        /// The full key.
        key: String,
    },
    /// A watch was (re-)established from `revision`: the connection is healthy again.
    Watching {
        /// The first revision the watch delivers.
        revision: i64,
    },
    /// `key`'s value is larger than the client decodes (`Config::max_response_bytes`):
    /// it is skipped, and what the key held before no longer stands.
    TooLarge {
        /// The full key.
        key: String,
    },
    /// A list starts ([`list_watch_raw`] only): until the next [`Event::InitDone`],
    /// every key that exists is upserted, and what is not upserted is gone. Sent
    /// again when a list is started over.
    Listing,
    /// The list in progress holds `keys` keys at its revision (etcd's count of the
    /// range), sent ([`list_watch_raw`] only) after its first page, before the page's
    /// keys: a consumer may size its record for them rather than grow it key by key.
    ListSize {
        /// The keys of the whole range (the pages are yet to come).
        keys: u64,
    },
    /// A complete list is in: every key that existed at the list's revision was
    /// delivered and (by [`list_watch`]) every key that no longer existed was deleted.
    /// Sent after the first list and again after each re-list (after compaction).
    InitDone {
        /// The revision the list was read at.
        revision: i64,
    },
}

/// Lists `prefix` page by page at one revision, then watches it from that revision + 1.
///
/// The stream never ends on its own: a broken watch is reported as an `Err` item and
/// resumed (with back-off) from the last seen revision; a compacted revision is
/// reported and the prefix listed again, with [`Event::Delete`] for every key that
/// vanished meanwhile. A key is only reported again when its mod revision changed, so
/// a re-list does not repeat unchanged state. The work stops when the stream is dropped.
///
/// # Example
/// ```no_run
/// # async fn f(client: weft_kvstore::Client) {
/// use futures::StreamExt;
/// let mut events = weft_kvstore::list_watch(client, "cilium/state/nodes/v1/".into());
/// while let Some(event) = events.next().await {
///     println!("{event:?}");
/// }
/// # }
/// ```
pub fn list_watch(client: Client, prefix: String) -> Events {
    spawn(client, prefix, true)
}

/// [`list_watch`] without its record of the keys: each list is announced
/// ([`Event::Listing`]) and delivers every key, unchanged or not, and every deleted key
/// is reported. The consumer keeps the keys and drains, at [`Event::InitDone`], what a
/// list did not deliver — a consumer that stores the values anyway (a remote cluster's
/// store) then holds each key once rather than twice.
///
/// # Example
/// ```no_run
/// # async fn f(client: weft_kvstore::Client) {
/// use futures::StreamExt;
/// use weft_kvstore::Event;
/// let mut events = weft_kvstore::list_watch_raw(client, "cilium/state/ip/v1/".into());
/// while let Some(Ok(event)) = events.next().await {
///     if let Event::Listing = event {
///         // Start a new generation: what the list does not upsert again is gone.
///     }
/// }
/// # }
/// ```
pub fn list_watch_raw(client: Client, prefix: String) -> Events {
    spawn(client, prefix, false)
}

/// One item of the stream.
type Item = Result<Event, Error>;

/// The events of one prefix, as [`list_watch`] and [`list_watch_raw`] deliver them.
///
/// They come from the reading task a batch at a time (a list page, a watch response):
/// one hand-over between tasks per page rather than per key, which counted at half a
/// million keys. Dropping it stops the reading task.
///
/// # Example
/// ```no_run
/// # async fn f(client: weft_kvstore::Client) {
/// use futures::StreamExt;
/// let events: weft_kvstore::Events =
///     weft_kvstore::list_watch(client, "cilium/state/identities/v1/".into());
/// // The first ten events, whichever pages they came in.
/// let first: Vec<_> = events.take(10).collect().await;
/// # }
/// ```
#[derive(Debug)]
pub struct Events {
    rx: mpsc::Receiver<Vec<Item>>,
    batch: std::vec::IntoIter<Item>,
}

impl futures::Stream for Events {
    type Item = Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        loop {
            if let Some(item) = self.batch.next() {
                return Poll::Ready(Some(item));
            }
            match std::task::ready!(self.rx.poll_recv(cx)) {
                Some(batch) => self.batch = batch.into_iter(),
                None => return Poll::Ready(None),
            }
        }
    }
}

/// Batches in flight to the consumer: with the page fetched ahead, etcd, the reading
/// task and the consumer each have one page to work on.
const BATCHES_IN_FLIGHT: usize = 2;

fn spawn(client: Client, prefix: String, track: bool) -> Events {
    let (tx, rx) = mpsc::channel(BATCHES_IN_FLIGHT);
    tokio::spawn(async move {
        let driver = Driver {
            client,
            prefix,
            track,
            known: HashMap::new(),
            tx,
        };
        let closed = driver.tx.clone();
        tokio::select! {
            _ = driver.run() => {}
            _ = closed.closed() => {}
        }
    });
    Events {
        rx,
        batch: Vec::new().into_iter(),
    }
}

/// The receiver went away: stop.
struct Closed;

struct Driver {
    client: Client,
    prefix: String,
    /// Whether `known` is kept: re-lists deliver only changes and drain what vanished.
    track: bool,
    /// Every key currently known to the consumer, with its mod revision (kept only when
    /// tracking).
    known: HashMap<String, i64>,
    tx: mpsc::Sender<Vec<Item>>,
}

enum WatchEnd {
    /// The resume revision is gone, or a response was too large to decode: list again
    /// (a list skips values too large to read).
    Relist(Error),
    Broken(Error),
}

/// A list page in flight: where it starts, and the request.
type PageTask = (
    Vec<u8>,
    tokio::task::JoinHandle<Result<etcd_client::GetResponse, Error>>,
);

/// The keys the next page asks for after one of `n` keys and `bytes` bytes: as many as
/// fit `page_bytes` at that page's mean size, at least one, at most `page_size`
/// (0 = no maximum).
fn next_page_limit(page_size: u32, page_bytes: usize, n: usize, bytes: usize) -> u32 {
    let most = if page_size == 0 { u32::MAX } else { page_size };
    if n == 0 || bytes == 0 {
        return page_size;
    }
    let mean = (bytes / n).max(1);
    u32::try_from(page_bytes / mean)
        .unwrap_or(u32::MAX)
        .clamp(1, most)
}

impl Driver {
    async fn run(mut self) -> Result<(), Closed> {
        let mut backoff = Backoff::default();
        // The revision to watch from; `None` means a (re-)list is needed first.
        let mut resume: Option<i64> = None;
        loop {
            let from = match resume {
                Some(rev) => rev,
                None => match self.list().await? {
                    Ok(rev) => {
                        backoff.reset();
                        self.send(Ok(Event::InitDone { revision: rev })).await?;
                        rev + 1
                    }
                    Err(e) => {
                        self.send(Err(e)).await?;
                        tokio::time::sleep(backoff.next_delay()).await;
                        continue;
                    }
                },
            };
            resume = Some(from);
            match self.watch(&mut resume, &mut backoff).await? {
                WatchEnd::Relist(e) => {
                    resume = None;
                    self.send(Err(e)).await?;
                }
                WatchEnd::Broken(e) => {
                    self.send(Err(e)).await?;
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    }

    async fn send(&self, item: Item) -> Result<(), Closed> {
        self.send_all(vec![item]).await
    }

    /// Hands `batch` on at once (nothing when it is empty).
    async fn send_all(&self, batch: Vec<Item>) -> Result<(), Closed> {
        if batch.is_empty() {
            return Ok(());
        }
        self.tx.send(batch).await.map_err(|_| Closed)
    }

    /// One complete paged list at a single revision. Returns that revision, or the
    /// error that broke the list (the next attempt starts over).
    ///
    /// Pages are sized by bytes as well as keys: after a large page the next asks for
    /// fewer keys, and a page too large to decode is asked again with half as many. A
    /// single value too large is named ([`Event::TooLarge`]) and skipped.
    async fn list(&mut self) -> Result<Result<i64, Error>, Closed> {
        let end = prefix_range_end(&self.prefix);
        let config = self.client.config().clone();
        let mut start = self.prefix.as_bytes().to_vec();
        let mut limit = config.page_size;
        let mut revision = 0;
        let mut seen = HashSet::with_capacity(self.known.len());
        if !self.track {
            self.send(Ok(Event::Listing)).await?;
        }
        let mut next: Option<PageTask> = None;
        loop {
            let page = match next.take() {
                Some((from, task)) => {
                    start = from;
                    task.await.expect("page request task panicked")
                }
                None => {
                    self.client
                        .range_page_of(start.clone(), end.clone(), revision, limit)
                        .await
                }
            };
            let mut resp = match page {
                Ok(r) => r,
                Err(Error::TooLarge { .. }) if limit != 1 => {
                    limit = if limit == 0 { 256 } else { limit / 2 };
                    continue;
                }
                Err(Error::TooLarge { .. }) => {
                    // One value alone is too large: name it, skip it.
                    let key = match self
                        .client
                        .first_key(start.clone(), end.clone(), revision)
                        .await
                    {
                        Ok(Some(k)) => k,
                        Ok(None) => break,
                        Err(e) => return Ok(Err(e)),
                    };
                    let name = String::from_utf8_lossy(&key).into_owned();
                    self.known.remove(&name);
                    seen.insert(name.clone());
                    self.send(Ok(Event::TooLarge { key: name })).await?;
                    start = key;
                    start.push(0);
                    continue;
                }
                Err(e) => return Ok(Err(e)),
            };
            // The page goes on as one batch.
            let mut batch = Vec::with_capacity(resp.kvs().len() + 1);
            if revision == 0 {
                revision = resp.header().map_or(0, |h| h.revision());
                if !self.track {
                    let keys = u64::try_from(resp.count()).unwrap_or(0);
                    batch.push(Ok(Event::ListSize { keys }));
                }
            }
            let bytes: usize = resp
                .kvs()
                .iter()
                .map(|kv| kv.key().len() + kv.value().len())
                .sum();
            limit = next_page_limit(config.page_size, config.page_bytes, resp.kvs().len(), bytes);
            // Ask for the next page before handing this one on: etcd reads while the
            // consumer decodes.
            if let Some(last) = resp.kvs().last().filter(|_| resp.more()) {
                let mut from = last.key().to_vec();
                from.push(0);
                let (client, end, at) = (self.client.clone(), end.clone(), from.clone());
                next = Some((
                    from,
                    tokio::spawn(
                        async move { client.range_page_of(at, end, revision, limit).await },
                    ),
                ));
            }
            // The page's keys and values are moved on, not copied: two allocations and
            // copies less a key, which count at half a million keys.
            for kv in resp.take_kvs() {
                let mod_revision = kv.mod_revision();
                let (key, value) = kv.into_key_value();
                let key = match owned_key_string(key) {
                    Ok(k) => k,
                    Err(e) => {
                        batch.push(Err(e));
                        continue;
                    }
                };
                if self.track {
                    if self.known.get(&key) == Some(&mod_revision) {
                        seen.insert(key);
                        continue;
                    }
                    seen.insert(key.clone());
                    self.known.insert(key.clone(), mod_revision);
                }
                batch.push(Ok(Event::Upsert {
                    key,
                    value,
                    revision: mod_revision,
                }));
            }
            self.send_all(batch).await?;
            if next.is_none() {
                break;
            }
        }
        let stale: Vec<String> = self
            .known
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        let mut batch = Vec::with_capacity(stale.len());
        for key in stale {
            self.known.remove(&key);
            batch.push(Ok(Event::Delete { key }));
        }
        self.send_all(batch).await?;
        Ok(Ok(revision))
    }

    /// Watches from `*resume`, advancing it past every delivered event.
    async fn watch(
        &mut self,
        resume: &mut Option<i64>,
        backoff: &mut Backoff,
    ) -> Result<WatchEnd, Closed> {
        let from = resume.unwrap_or(0);
        let mut stream = match self.client.watch(&self.prefix, from).await {
            Ok(s) => s,
            Err(e) => return Ok(WatchEnd::Broken(e)),
        };
        loop {
            let resp = match stream.message().await {
                Ok(Some(resp)) => resp,
                Ok(None) => return Ok(WatchEnd::Broken(self.ended(crate::ServerEnd::Closed))),
                Err(source) => {
                    return Ok(
                        match self.client.request_error("watch", &self.prefix, source) {
                            e @ Error::TooLarge { .. } => WatchEnd::Relist(e),
                            e => WatchEnd::Broken(e),
                        },
                    );
                }
            };
            if resp.created() && !resp.canceled() {
                self.send(Ok(Event::Watching { revision: from })).await?;
            }
            if resp.canceled() {
                if resp.compact_revision() > 0 {
                    return Ok(WatchEnd::Relist(Error::Compacted {
                        prefix: self.prefix.clone(),
                        revision: resume.unwrap_or(from),
                        compact_revision: resp.compact_revision(),
                    }));
                }
                let end = crate::ServerEnd::Cancelled {
                    reason: resp.cancel_reason().to_owned(),
                };
                return Ok(WatchEnd::Broken(self.ended(end)));
            }
            backoff.reset();
            // The response goes on as one batch.
            let mut batch = Vec::with_capacity(resp.events().len());
            for event in resp.events() {
                let Some(kv) = event.kv() else { continue };
                *resume = Some(kv.mod_revision() + 1);
                let key = match key_string(kv.key()) {
                    Ok(k) => k,
                    Err(e) => {
                        batch.push(Err(e));
                        continue;
                    }
                };
                match event.event_type() {
                    EventType::Put => {
                        if self.track {
                            self.known.insert(key.clone(), kv.mod_revision());
                        }
                        batch.push(Ok(Event::Upsert {
                            key,
                            value: kv.value().to_vec(),
                            revision: kv.mod_revision(),
                        }));
                    }
                    EventType::Delete => {
                        if !self.track || self.known.remove(&key).is_some() {
                            batch.push(Ok(Event::Delete { key }));
                        }
                    }
                }
            }
            self.send_all(batch).await?;
        }
    }

    fn ended(&self, end: crate::ServerEnd) -> Error {
        Error::WatchEnded {
            prefix: self.prefix.clone(),
            end,
        }
    }
}

fn owned_key_string(key: Vec<u8>) -> Result<String, Error> {
    String::from_utf8(key).map_err(|e| Error::KeyNotUtf8 {
        key: String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

fn key_string(key: &[u8]) -> Result<String, Error> {
    owned_key_string(key.to_vec())
}

#[cfg(test)]
mod page_tests {
    use super::next_page_limit;

    #[test]
    fn pages_are_sized_by_bytes_within_the_key_limit() {
        // 1 KiB values against a 16 KiB aim: 16 keys.
        assert_eq!(next_page_limit(256, 16 << 10, 32, 32 << 10), 16);
        // Small values: the key limit holds.
        assert_eq!(next_page_limit(256, 16 << 10, 256, 256 * 20), 256);
        // One value over the aim: one key, never none.
        assert_eq!(next_page_limit(256, 16 << 10, 1, 100 << 10), 1);
        // An empty page says nothing: back to the key limit.
        assert_eq!(next_page_limit(256, 16 << 10, 0, 0), 256);
        assert_eq!(next_page_limit(0, 1 << 20, 10, 1000), 10_485);
    }
}
