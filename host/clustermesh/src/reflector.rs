//! The reflector stage: one cluster's resources as its etcd lists and watches them
//! ([`weft_kvstore::list_watch_raw`]) — decoded, stored, and turned into the changes
//! its [`Observer`] is told. A remote cluster and this cluster's own kvstore
//! (`local_cluster.rs`) are read by the same one.
//!
//! [`Reflector::apply`] takes no lock and calls no one: it returns a [`Change`], which
//! the caller hands to the observer ([`Change::tell`]) once it holds no lock of its own.

use super::resource::{decode, Owner, Store, Stored};
use super::Resource;
use std::sync::Arc;
use weft_kvstore::Event;
use weft_model::remote::{ClusterEvent, Kept, Observer, Value};

/// The stores of one cluster's four resources: the one record of its keys.
#[derive(Debug)]
pub(crate) struct Reflector {
    stores: [Store; 4],
    /// The most keys the cluster may hold, all resources together.
    max_keys: usize,
}

/// What one event changed, for the observer (and, for a remote cluster, its status).
#[derive(Debug)]
pub(crate) enum Change {
    /// Nothing to tell: the value is the one held, or the key was never held.
    Nothing,
    /// A watch was (re-)established: the stream is healthy.
    Watching,
    /// A list of about `keys` values starts.
    Expect(usize),
    /// A value was added or changed.
    Upsert {
        key: Arc<str>,
        value: Value,
        old: Option<Kept>,
    },
    /// A key was deleted.
    Delete { key: Arc<str>, old: Kept },
    /// A value was refused (malformed, too large, past the key limit); what its key
    /// held before goes, since its current value is unknown.
    Refused {
        error: String,
        old: Option<(Arc<str>, Kept)>,
    },
    /// A complete list is in; `stale` is what it did not deliver again.
    Listed { stale: Vec<(Arc<str>, Kept)> },
}

impl Reflector {
    pub fn new(max_keys: usize) -> Self {
        Self {
            stores: Default::default(),
            max_keys,
        }
    }

    /// Values held of `r`.
    pub fn len(&self, r: Resource) -> usize {
        self.stores[r.index()].len()
    }

    /// Applies one event of resource `r`, watched under `prefix`, of the cluster
    /// `owner` (whose values must name it).
    pub fn apply(&mut self, r: Resource, owner: Owner<'_>, prefix: &str, event: Event) -> Change {
        let store = r.index();
        match event {
            Event::Listing => {
                self.stores[store].begin_listing();
                Change::Nothing
            }
            Event::ListSize { keys } => {
                // What the cluster may hold at most, not what it says it has.
                let keys = usize::try_from(keys).map_or(self.max_keys, |k| k.min(self.max_keys));
                self.stores[store].reserve(keys);
                Change::Expect(keys)
            }
            Event::Upsert {
                key,
                value,
                revision,
            } => {
                if self.stores[store].unchanged_at(&key, revision) {
                    return Change::Nothing;
                }
                let held: usize = self.stores.iter().map(Store::len).sum();
                if held >= self.max_keys && !self.stores[store].contains(&key) {
                    let error = format!(
                        "{key}: cluster {} already holds its limit of {} keys (--clustermesh-max-keys-per-cluster)",
                        owner.name, self.max_keys
                    );
                    return self.refuse(r, &key, error);
                }
                match decode(r, owner, prefix, &key, &value) {
                    Ok(value) => {
                        let kept = Kept::of(&value, weft_sys::seeded::digest);
                        match self.stores[store].upsert(&key, revision, kept) {
                            (_, Stored::Unchanged) => Change::Nothing,
                            (key, Stored::Changed { old }) => Change::Upsert { key, value, old },
                        }
                    }
                    Err(e) => self.refuse(r, &key, e.to_string()),
                }
            }
            Event::TooLarge { key } => {
                let error = format!("{key}: value too large to read (over the response limit)");
                self.refuse(r, &key, error)
            }
            Event::Delete { key } => match self.stores[store].remove(&key) {
                Some((key, old)) => Change::Delete { key, old },
                None => Change::Nothing,
            },
            Event::Watching { .. } => Change::Watching,
            Event::InitDone { .. } => Change::Listed {
                stale: self.stores[store].finish_listing(),
            },
        }
    }

    fn refuse(&mut self, r: Resource, key: &str, error: String) -> Change {
        Change::Refused {
            error,
            old: self.stores[r.index()].remove(key),
        }
    }

    /// Removes everything (the cluster was removed): what the observer must be told.
    pub fn drain(&mut self) -> Vec<(Arc<str>, Kept)> {
        self.stores.iter_mut().flat_map(Store::drain).collect()
    }
}

impl Change {
    /// Tells `observer` what changed in `resource` of `cluster` (ID `cluster_id`).
    pub fn tell(
        &self,
        observer: &dyn Observer,
        cluster: &str,
        cluster_id: Option<u32>,
        resource: Resource,
    ) {
        match self {
            Change::Nothing | Change::Watching => {}
            Change::Expect(keys) => observer.on_event(ClusterEvent::Expect {
                cluster,
                resource,
                keys: *keys,
            }),
            Change::Upsert { key, value, old } => observer.on_event(ClusterEvent::Upsert {
                cluster,
                cluster_id,
                key,
                value,
                old: old.as_ref(),
            }),
            Change::Delete { key, old } => {
                observer.on_event(ClusterEvent::Delete { cluster, key, old })
            }
            Change::Refused { error, old } => {
                if let Some((key, old)) = old {
                    observer.on_event(ClusterEvent::Delete { cluster, key, old });
                }
                observer.on_refused(cluster, error);
            }
            Change::Listed { stale } => tell_deletes(observer, cluster, stale),
        }
    }
}

/// Tells `observer` that each of `gone` was deleted.
pub(crate) fn tell_deletes(observer: &dyn Observer, cluster: &str, gone: &[(Arc<str>, Kept)]) {
    for (key, old) in gone {
        observer.on_event(ClusterEvent::Delete { cluster, key, old });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    const OWNER: Owner<'static> = Owner {
        name: "c3",
        id: Some(3),
    };

    fn upsert(key: &str, value: &str, revision: i64) -> Event {
        Event::Upsert {
            key: key.into(),
            value: value.into(),
            revision,
        }
    }

    /// Every event and refusal, as one line each.
    #[derive(Default)]
    struct Lines(Mutex<Vec<String>>);

    impl Observer for Lines {
        fn on_event(&self, event: ClusterEvent<'_>) {
            let line = match event {
                ClusterEvent::Upsert { key, old, .. } => {
                    format!("upsert {key} old={}", old.is_some())
                }
                ClusterEvent::Delete { key, .. } => format!("delete {key}"),
                ClusterEvent::Expect { keys, .. } => format!("expect {keys}"),
            };
            self.0.lock().unwrap().push(line);
        }
        fn on_refused(&self, cluster: &str, error: &str) {
            self.0
                .lock()
                .unwrap()
                .push(format!("refused {cluster}: {error}"));
        }
    }

    fn run(reflector: &mut Reflector, events: Vec<Event>) -> Vec<String> {
        let lines = Lines::default();
        for event in events {
            let r = Resource::Nodes;
            reflector
                .apply(r, OWNER, "n/", event)
                .tell(&lines, "c3", Some(3), r);
        }
        lines.0.into_inner().unwrap()
    }

    const N1: &str = r#"{"Name":"n1","Cluster":"c3"}"#;
    const N2: &str = r#"{"Name":"n2","Cluster":"c3"}"#;

    #[test]
    fn a_refused_value_withdraws_what_its_key_held_and_names_it() {
        let mut reflector = Reflector::new(100);
        let lines = run(
            &mut reflector,
            vec![
                upsert("n/n1", N1, 1),
                upsert("n/n1", r#"{"Name":"n1","Cluster":"c4"}"#, 2),
                Event::TooLarge { key: "n/n2".into() },
            ],
        );
        assert_eq!(lines[0], "upsert n/n1 old=false");
        assert_eq!(lines[1], "delete n/n1", "{lines:?}");
        let names = |line: &str, key, fault| {
            line.starts_with("refused c3: ") && line.contains(key) && line.contains(fault)
        };
        assert!(names(&lines[2], "n/n1", "c4"), "{lines:?}");
        assert!(names(&lines[3], "n/n2", "too large"), "{lines:?}");
        assert_eq!(lines.len(), 4, "n2 held nothing to withdraw: {lines:?}");
        assert_eq!(reflector.len(Resource::Nodes), 0);
    }

    #[test]
    fn a_relist_tells_only_what_changed_and_what_went() {
        let mut reflector = Reflector::new(100);
        let first = run(
            &mut reflector,
            vec![
                Event::Listing,
                Event::ListSize { keys: 2 },
                upsert("n/n1", N1, 1),
                upsert("n/n2", N2, 2),
                Event::InitDone { revision: 2 },
            ],
        );
        assert_eq!(
            first,
            ["expect 2", "upsert n/n1 old=false", "upsert n/n2 old=false"]
        );
        // Compaction: listed again; n1 unchanged, n2 gone meanwhile, n1 rewritten alike.
        let again = run(
            &mut reflector,
            vec![
                Event::Listing,
                Event::ListSize { keys: 1 },
                upsert("n/n1", N1, 1),
                Event::InitDone { revision: 9 },
                upsert("n/n1", N1, 10),
                upsert("n/n1", r#"{"Name":"n1","Cluster":"c3","ClusterID":3}"#, 11),
            ],
        );
        assert_eq!(
            again,
            ["expect 1", "delete n/n2", "upsert n/n1 old=true"],
            "an unchanged revision and an equal value tell nothing"
        );
    }

    #[test]
    fn the_key_limit_counts_every_resource_and_spares_held_keys() {
        let mut reflector = Reflector::new(2);
        let ip = r#"{"IP":"10.0.0.1","ID":5}"#;
        let r = Resource::IpCache;
        assert!(matches!(
            reflector.apply(r, OWNER, "i/", upsert("i/10.0.0.1", ip, 1)),
            Change::Upsert { .. }
        ));
        let _ = run(&mut reflector, vec![upsert("n/n1", N1, 2)]);
        let past = run(&mut reflector, vec![upsert("n/n2", N2, 3)]);
        assert!(
            past.len() == 1 && past[0].contains("limit of 2 keys"),
            "{past:?}"
        );
        let held = run(
            &mut reflector,
            vec![upsert(
                "n/n1",
                r#"{"Name":"n1","Cluster":"c3","ClusterID":3}"#,
                4,
            )],
        );
        assert_eq!(held, ["upsert n/n1 old=true"], "a held key may change");
        assert_eq!(reflector.drain().len(), 2);
    }
}
