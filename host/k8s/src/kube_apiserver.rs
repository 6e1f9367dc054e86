//! The `default/kubernetes` endpoints as `reserved:kube-apiserver` facts.

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use weft_state::identity::Reserved;
use weft_state::ipcache::{Fact, IpCache, Owner, Prefix, Source};

/// The label that ties EndpointSlices to their service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name=kubernetes";

/// Turns EndpointSlice events into ipcache facts. Kept apart from the watch so it can be
/// driven by any event source.
pub struct KubeApiServerSource {
    ipcache: Arc<IpCache>,
    owner: Owner,
    /// Addresses per slice name.
    slices: BTreeMap<String, BTreeSet<IpAddr>>,
    /// Slices seen since a (re-)list began, replacing `slices` at its end.
    listing: Option<BTreeMap<String, BTreeSet<IpAddr>>>,
    /// The union of every slice's addresses: what the ipcache holds.
    applied: BTreeSet<IpAddr>,
}

impl KubeApiServerSource {
    /// A source writing to `ipcache`.
    pub fn new(ipcache: Arc<IpCache>) -> Self {
        Self {
            ipcache,
            owner: Owner::new(Source::KubeApiServer, "k8s/default/kubernetes"),
            slices: BTreeMap::new(),
            listing: None,
            applied: BTreeSet::new(),
        }
    }

    /// The addresses currently labelled.
    pub fn addresses(&self) -> &BTreeSet<IpAddr> {
        &self.applied
    }

    /// Applies one watcher event.
    pub fn apply(&mut self, event: watcher::Event<EndpointSlice>) {
        match event {
            watcher::Event::Init => self.listing = Some(BTreeMap::new()),
            watcher::Event::InitApply(slice) => {
                let (name, addrs) = addresses(&slice);
                self.listing
                    .get_or_insert_with(BTreeMap::new)
                    .insert(name, addrs);
            }
            watcher::Event::InitDone => {
                // A re-list replaces everything: slices that vanished meanwhile go.
                self.slices = self.listing.take().unwrap_or_default();
                self.sync();
            }
            watcher::Event::Apply(slice) => {
                let (name, addrs) = addresses(&slice);
                self.slices.insert(name, addrs);
                self.sync();
            }
            watcher::Event::Delete(slice) => {
                let (name, _) = addresses(&slice);
                self.slices.remove(&name);
                self.sync();
            }
        }
    }

    /// Brings the ipcache in line with the union of the slices' addresses.
    fn sync(&mut self) {
        let now: BTreeSet<IpAddr> = self.slices.values().flatten().copied().collect();
        for gone in self.applied.difference(&now) {
            self.ipcache.remove(Prefix::host(*gone), &self.owner);
        }
        let labels = Some(Reserved::KubeApiServer.labels());
        for new in now.difference(&self.applied) {
            let fact = Fact {
                labels: labels.clone(),
                ..Fact::default()
            };
            self.ipcache
                .upsert(Prefix::host(*new), self.owner.clone(), fact);
        }
        self.applied = now;
    }
}

fn addresses(slice: &EndpointSlice) -> (String, BTreeSet<IpAddr>) {
    let name = slice.metadata.name.clone().unwrap_or_default();
    let addrs = slice
        .endpoints
        .iter()
        .flat_map(|e| e.addresses.iter())
        .filter_map(|a| match a.parse() {
            Ok(ip) => Some(ip),
            Err(_) => {
                tracing::warn!(slice = %name, address = %a, "skipping a malformed kube-apiserver address");
                None
            }
        })
        .collect();
    (name, addrs)
}

/// Watches the EndpointSlices of `default/kubernetes` until dropped, with back-off on
/// errors.
pub async fn run_kube_apiserver_source(client: kube::Client, ipcache: Arc<IpCache>) {
    let api: Api<EndpointSlice> = Api::namespaced(client, "default");
    let config = watcher::Config::default().labels(SERVICE_NAME_LABEL);
    let mut source = KubeApiServerSource::new(ipcache);
    let mut events = watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => source.apply(event),
            Err(e) => tracing::warn!(error = %e, "watching default/kubernetes endpoint slices"),
        }
    }
}
