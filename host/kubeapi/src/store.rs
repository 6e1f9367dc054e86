//! The objects, their resource versions and the history watches replay: one revision
//! counter for every resource (as etcd's behind the real API server), so that a
//! `resourceVersion` from any list or event orders against any other.

use crate::patch::merge_patch;
use crate::resources::{Resource, RESOURCES};
use crate::selector::{FieldSelector, LabelSelector};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// What a request gets wrong, as the API names it (the server renders each as a
/// `Status` with its code and reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 404 `NotFound`.
    #[error("{resource} {name:?} not found")]
    NotFound {
        /// The resource (`pods`, `ciliumnetworkpolicies.cilium.io`).
        resource: String,
        /// The object's name.
        name: String,
    },
    /// 409 `AlreadyExists`.
    #[error("{resource} {name:?} already exists")]
    AlreadyExists {
        /// The resource.
        resource: String,
        /// The object's name.
        name: String,
    },
    /// 409 `Conflict`: a replace with a stale `resourceVersion`.
    #[error("Operation cannot be fulfilled on {resource} {name:?}: the object has been modified; please apply your changes to the latest version and try again")]
    Conflict {
        /// The resource.
        resource: String,
        /// The object's name.
        name: String,
    },
    /// 400 `BadRequest`.
    #[error("{0}")]
    BadRequest(String),
    /// 422 `Invalid`.
    #[error("{resource} {name:?} is invalid: {message}")]
    Invalid {
        /// The resource.
        resource: String,
        /// The object's name (may be empty).
        name: String,
        /// What is invalid.
        message: String,
    },
    /// 410 `Expired`: a watch from a revision whose history is compacted.
    #[error("too old resource version: {requested} ({oldest})")]
    Gone {
        /// The revision asked for.
        requested: u64,
        /// The oldest revision a watch may start from.
        oldest: u64,
    },
}

/// The kind of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
}

impl EventType {
    /// The watch event's `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, at one revision.
#[derive(Debug)]
pub struct Event {
    /// The revision the change made.
    pub revision: u64,
    resource: usize,
    kind: EventType,
    /// The object after the change (for a deletion, as it was, at this revision).
    object: Value,
    /// The object before the change (none for a creation).
    previous: Option<Value>,
}

/// Which objects a list or watch sees.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this namespace (none: every namespace, or a cluster-scoped resource).
    pub namespace: Option<String>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
}

impl Filter {
    fn matches(&self, object: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| object["metadata"]["namespace"] == ns)
            && self.labels.matches(object)
            && self.fields.matches(object)
    }
}

/// A change as one watch sees it: a modification that moves an object into the
/// watch's selection is an addition, one that moves it out a deletion (of the object
/// as it was), as the API server's watch cache does.
pub fn view(event: &Event, resource: &Resource, filter: &Filter) -> Option<(EventType, Value)> {
    if !std::ptr::eq(&RESOURCES[event.resource], resource) {
        return None;
    }
    let now = event.kind != EventType::Deleted && filter.matches(&event.object);
    let before = event.previous.as_ref().is_some_and(|p| filter.matches(p));
    let with_revision = |mut o: Value| {
        o["metadata"]["resourceVersion"] = event.revision.to_string().into();
        o
    };
    match (event.kind, before, now) {
        (EventType::Deleted, true, _) => Some((EventType::Deleted, event.object.clone())),
        (_, false, true) => Some((EventType::Added, event.object.clone())),
        (_, true, true) => Some((EventType::Modified, event.object.clone())),
        (_, true, false) => Some((
            EventType::Deleted,
            with_revision(event.previous.clone().expect("before")),
        )),
        _ => None,
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    resource: usize,
    namespace: String,
    name: String,
}

struct State {
    revision: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<Event>>,
    /// A watch may start from this revision or a later one.
    oldest: u64,
    uids: u64,
}

/// A started watch: what happened since its revision, then the live changes.
pub struct Watch {
    /// The changes after the requested revision (or the current objects as
    /// additions, when none was given), in order.
    pub backlog: Vec<Arc<Event>>,
    /// Every later change, of every resource (filter with [`view`]).
    pub live: broadcast::Receiver<Arc<Event>>,
    /// The revision the backlog reaches.
    pub revision: u64,
}

/// The store: objects of every resource, one revision counter, a bounded history.
pub struct Store {
    state: Mutex<State>,
    events: broadcast::Sender<Arc<Event>>,
    history: usize,
}

fn index(resource: &Resource) -> usize {
    RESOURCES
        .iter()
        .position(|r| std::ptr::eq(r, resource))
        .expect("a resource of the table")
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

impl Store {
    /// An empty store keeping the last `history` changes for watches to replay.
    pub fn new(history: usize) -> Self {
        let (events, _) = broadcast::channel(history.max(16));
        Store {
            state: Mutex::new(State {
                revision: 1,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                oldest: 1,
                uids: 0,
            }),
            events,
            history,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current revision.
    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    /// Forgets the history: every watch from an older revision gets `410 Gone`.
    pub fn compact(&self) {
        let mut s = self.lock();
        s.history.clear();
        s.oldest = s.revision;
    }

    fn record(
        &self,
        s: &mut State,
        resource: usize,
        kind: EventType,
        object: Value,
        previous: Option<Value>,
    ) {
        let event = Arc::new(Event {
            revision: s.revision,
            resource,
            kind,
            object,
            previous,
        });
        s.history.push_back(event.clone());
        while s.history.len() > self.history {
            let dropped = s.history.pop_front().expect("longer than the bound");
            s.oldest = dropped.revision;
        }
        // No receiver is fine: nobody watches.
        let _ = self.events.send(event);
    }

    fn key(resource: &Resource, namespace: Option<&str>, name: &str) -> Key {
        Key {
            resource: index(resource),
            namespace: if resource.namespaced {
                namespace.unwrap_or_default().to_owned()
            } else {
                String::new()
            },
            name: name.to_owned(),
        }
    }

    /// The object, or `NotFound`.
    pub fn get(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.lock()
            .objects
            .get(&Self::key(resource, namespace, name))
            .cloned()
            .ok_or_else(|| ApiError::NotFound {
                resource: resource.qualified(),
                name: name.to_owned(),
            })
    }

    /// The objects the filter selects, in key order, and the revision they are at.
    pub fn list(&self, resource: &Resource, filter: &Filter) -> (Vec<Value>, u64) {
        let s = self.lock();
        let r = index(resource);
        let items = s
            .objects
            .iter()
            .filter(|(k, v)| k.resource == r && filter.matches(v))
            .map(|(_, v)| v.clone())
            .collect();
        (items, s.revision)
    }

    /// Starts a watch after `from` (none: the current objects as additions first).
    ///
    /// # Errors
    /// [`ApiError::Gone`] when `from` is older than the history.
    pub fn watch(
        &self,
        resource: &Resource,
        filter: &Filter,
        from: Option<u64>,
    ) -> Result<Watch, ApiError> {
        let s = self.lock();
        // Subscribed under the lock: nothing falls between the backlog and `live`.
        let live = self.events.subscribe();
        let backlog = match from {
            Some(from) if from < s.oldest => {
                return Err(ApiError::Gone {
                    requested: from,
                    oldest: s.oldest,
                })
            }
            Some(from) => s
                .history
                .iter()
                .filter(|e| e.revision > from)
                .cloned()
                .collect(),
            None => {
                let r = index(resource);
                s.objects
                    .iter()
                    .filter(|(k, v)| k.resource == r && filter.matches(v))
                    .map(|(_, v)| {
                        Arc::new(Event {
                            revision: s.revision,
                            resource: r,
                            kind: EventType::Added,
                            object: v.clone(),
                            previous: None,
                        })
                    })
                    .collect()
            }
        };
        Ok(Watch {
            backlog,
            live,
            revision: s.revision,
        })
    }

    fn check_namespace(
        s: &State,
        resource: &Resource,
        namespace: Option<&str>,
    ) -> Result<(), ApiError> {
        if !resource.namespaced {
            return Ok(());
        }
        let ns = namespace.unwrap_or_default();
        let namespaces = crate::resources::find("", "v1", "namespaces").expect("served");
        if s.objects.contains_key(&Self::key(namespaces, None, ns)) {
            Ok(())
        } else {
            Err(ApiError::NotFound {
                resource: "namespaces".into(),
                name: ns.to_owned(),
            })
        }
    }

    /// Checks the body's kind, apiVersion and namespace against the request's, and
    /// fills them in when missing.
    fn conform(
        resource: &Resource,
        namespace: Option<&str>,
        object: &mut Value,
    ) -> Result<String, ApiError> {
        if !object.is_object() {
            return Err(ApiError::BadRequest("the body is not a JSON object".into()));
        }
        let kind = object["kind"].as_str().unwrap_or(resource.kind).to_owned();
        let api_version = object["apiVersion"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| resource.api_version());
        if kind != resource.kind || api_version != resource.api_version() {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({api_version}) and kind ({kind}) do not match the {} endpoint ({})",
                resource.qualified(),
                resource.api_version()
            )));
        }
        object["kind"] = resource.kind.into();
        object["apiVersion"] = resource.api_version().into();
        if !object["metadata"].is_object() {
            object["metadata"] = json!({});
        }
        if resource.namespaced {
            let ns = namespace.unwrap_or_default();
            match object["metadata"]["namespace"].as_str() {
                Some(given) if given != ns => {
                    return Err(ApiError::BadRequest(
                        "the namespace of the provided object does not match the namespace sent on the request".into(),
                    ))
                }
                _ => object["metadata"]["namespace"] = ns.into(),
            }
        } else if let Some(m) = object["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            return Err(ApiError::Invalid {
                resource: resource.qualified(),
                name: String::new(),
                message: "metadata.name: Required value: name or generateName is required".into(),
            });
        }
        Ok(name.to_owned())
    }

    /// Creates the object (`POST` to the collection).
    ///
    /// # Errors
    /// `AlreadyExists`, `NotFound` (the namespace), `BadRequest`, `Invalid`.
    pub fn create(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        mut object: Value,
    ) -> Result<Value, ApiError> {
        let mut s = self.lock();
        if object["metadata"]["name"]
            .as_str()
            .is_none_or(str::is_empty)
        {
            if let Some(prefix) = object["metadata"]["generateName"].as_str() {
                let name = format!("{prefix}{:05x}", s.uids + 1);
                object["metadata"]["name"] = name.into();
            }
        }
        let name = Self::conform(resource, namespace, &mut object)?;
        Self::check_namespace(&s, resource, namespace)?;
        let key = Self::key(resource, namespace, &name);
        if s.objects.contains_key(&key) {
            return Err(ApiError::AlreadyExists {
                resource: resource.qualified(),
                name,
            });
        }
        s.revision += 1;
        s.uids += 1;
        let meta = &mut object["metadata"];
        meta["uid"] = format!("00000000-0000-4000-8000-{:012x}", s.uids).into();
        meta["creationTimestamp"] = now_rfc3339().into();
        meta["resourceVersion"] = s.revision.to_string().into();
        meta["generation"] = 1.into();
        if let Some(m) = meta.as_object_mut() {
            m.remove("deletionTimestamp");
        }
        // What the real API server's admission and defaulting add, where weft reads it.
        match resource.kind {
            "Namespace" => {
                object["metadata"]["labels"]["kubernetes.io/metadata.name"] = name.clone().into();
                object["status"] = json!({"phase": "Active"});
            }
            "Pod" => {
                if object["status"]["phase"].is_null() {
                    object["status"]["phase"] = "Pending".into();
                }
                if object["spec"]["serviceAccountName"].is_null() {
                    object["spec"]["serviceAccountName"] = "default".into();
                }
            }
            _ => {}
        }
        s.objects.insert(key, object.clone());
        self.record(
            &mut s,
            index(resource),
            EventType::Added,
            object.clone(),
            None,
        );
        Ok(object)
    }

    fn update(
        &self,
        s: &mut State,
        resource: &Resource,
        key: Key,
        previous: Value,
        mut object: Value,
    ) -> Value {
        s.revision += 1;
        let meta = &mut object["metadata"];
        for kept in ["uid", "creationTimestamp", "name", "namespace"] {
            meta[kept] = previous["metadata"][kept].clone();
        }
        if let Some(m) = meta.as_object_mut() {
            m.retain(|_, v| !v.is_null());
        }
        let generation = previous["metadata"]["generation"].as_u64().unwrap_or(1);
        let spec_changed = object["spec"] != previous["spec"];
        object["metadata"]["generation"] = (generation + u64::from(spec_changed)).into();
        object["metadata"]["resourceVersion"] = s.revision.to_string().into();
        if resource.kind == "Namespace" {
            object["metadata"]["labels"]["kubernetes.io/metadata.name"] =
                previous["metadata"]["name"].clone();
        }
        s.objects.insert(key, object.clone());
        self.record(
            s,
            index(resource),
            EventType::Modified,
            object.clone(),
            Some(previous),
        );
        object
    }

    /// Replaces the object (`PUT`), or only its status. A `metadata.resourceVersion`
    /// in the body must be the current one; without it the replace is unconditional.
    /// Where the resource has a status subresource, a replace of the object keeps the
    /// status and one of the status keeps the rest, as the API does.
    ///
    /// # Errors
    /// `NotFound`, `Conflict`, `BadRequest`, `Invalid`.
    pub fn replace(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
        mut object: Value,
        status: bool,
    ) -> Result<Value, ApiError> {
        let given = Self::conform(resource, namespace, &mut object)?;
        if given != name {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({given}) does not match the name on the URL ({name})"
            )));
        }
        let mut s = self.lock();
        let key = Self::key(resource, namespace, name);
        let previous = s
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::NotFound {
                resource: resource.qualified(),
                name: name.to_owned(),
            })?;
        if let Some(rv) = object["metadata"]["resourceVersion"].as_str() {
            if rv != previous["metadata"]["resourceVersion"] {
                return Err(ApiError::Conflict {
                    resource: resource.qualified(),
                    name: name.to_owned(),
                });
            }
        }
        if status {
            let mut whole = previous.clone();
            whole["status"] = object["status"].take();
            object = whole;
        } else if resource.status {
            object["status"] = previous["status"].clone();
        }
        Ok(self.update(&mut s, resource, key, previous, object))
    }

    /// Applies a merge patch (`PATCH`) to the object, or only to its status.
    ///
    /// # Errors
    /// `NotFound`, `BadRequest`.
    pub fn patch(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
        status: bool,
    ) -> Result<Value, ApiError> {
        if !patch.is_object() {
            return Err(ApiError::BadRequest(
                "a merge patch must be a JSON object".into(),
            ));
        }
        let mut s = self.lock();
        let key = Self::key(resource, namespace, name);
        let previous = s
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::NotFound {
                resource: resource.qualified(),
                name: name.to_owned(),
            })?;
        let mut object = previous.clone();
        if status {
            merge_patch(&mut object["status"], &patch["status"]);
        } else {
            merge_patch(&mut object, patch);
            if resource.status {
                object["status"] = previous["status"].clone();
            }
        }
        if let Some(rv) = patch["metadata"]["resourceVersion"].as_str() {
            if rv != previous["metadata"]["resourceVersion"] {
                return Err(ApiError::Conflict {
                    resource: resource.qualified(),
                    name: name.to_owned(),
                });
            }
        }
        if object["kind"] != resource.kind || object["metadata"]["name"] != name {
            return Err(ApiError::BadRequest(
                "a patch may not change the kind or name".into(),
            ));
        }
        Ok(self.update(&mut s, resource, key, previous, object))
    }

    /// Deletes the object at once (as with a zero grace period: no kubelet here
    /// confirms), and a namespace's objects with it. Returns the object as it was.
    ///
    /// # Errors
    /// `NotFound`.
    pub fn delete(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let mut s = self.lock();
        let key = Self::key(resource, namespace, name);
        let object = s.objects.remove(&key).ok_or_else(|| ApiError::NotFound {
            resource: resource.qualified(),
            name: name.to_owned(),
        })?;
        if resource.kind == "Namespace" {
            let inside: Vec<Key> = s
                .objects
                .keys()
                .filter(|k| RESOURCES[k.resource].namespaced && k.namespace == name)
                .cloned()
                .collect();
            for k in inside {
                let o = s.objects.remove(&k).expect("listed");
                self.deleted(&mut s, k.resource, o);
            }
        }
        Ok(self.deleted(&mut s, key.resource, object))
    }

    fn deleted(&self, s: &mut State, resource: usize, mut object: Value) -> Value {
        s.revision += 1;
        let previous = object.clone();
        object["metadata"]["resourceVersion"] = s.revision.to_string().into();
        self.record(
            s,
            resource,
            EventType::Deleted,
            object.clone(),
            Some(previous),
        );
        object
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;

    fn pods() -> &'static Resource {
        find("", "v1", "pods").unwrap()
    }
    fn namespaces() -> &'static Resource {
        find("", "v1", "namespaces").unwrap()
    }
    fn pod(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": {"nodeName": "n1"}})
    }
    fn store() -> Store {
        let s = Store::new(100);
        s.create(namespaces(), None, json!({"metadata": {"name": "shop"}}))
            .unwrap();
        s
    }

    #[test]
    fn create_stamps_what_the_api_server_stamps() {
        let s = store();
        let ns = s.get(namespaces(), None, "shop").unwrap();
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "shop"
        );
        let p = s
            .create(pods(), Some("shop"), pod("a", json!({"app": "web"})))
            .unwrap();
        assert_eq!(p["metadata"]["namespace"], "shop");
        assert_eq!(p["metadata"]["resourceVersion"], s.revision().to_string());
        assert_eq!(p["spec"]["serviceAccountName"], "default");
        assert!(p["metadata"]["uid"].as_str().is_some());
        assert!(matches!(
            s.create(pods(), Some("shop"), pod("a", json!({}))),
            Err(ApiError::AlreadyExists { .. })
        ));
        assert!(matches!(
            s.create(pods(), Some("nowhere"), pod("b", json!({}))),
            Err(ApiError::NotFound { resource, .. }) if resource == "namespaces"
        ));
        let policies = find("networking.k8s.io", "v1", "networkpolicies").unwrap();
        assert!(matches!(
            s.create(policies, Some("shop"), pod("c", json!({}))),
            Err(ApiError::BadRequest(_))
        ));
    }

    #[test]
    fn a_stale_replace_conflicts_and_a_patch_keeps_the_status() {
        let s = store();
        let p = s
            .create(pods(), Some("shop"), pod("a", json!({"app": "web"})))
            .unwrap();
        let mut newer = p.clone();
        newer["metadata"]["labels"]["tier"] = "front".into();
        s.replace(pods(), Some("shop"), "a", newer, false).unwrap();
        let mut stale = p.clone();
        stale["metadata"]["labels"]["tier"] = "back".into();
        assert!(matches!(
            s.replace(pods(), Some("shop"), "a", stale, false),
            Err(ApiError::Conflict { .. })
        ));
        s.patch(
            pods(),
            Some("shop"),
            "a",
            &json!({"status": {"phase": "Running"}}),
            true,
        )
        .unwrap();
        let patched = s
            .patch(
                pods(),
                Some("shop"),
                "a",
                &json!({"metadata": {"labels": {"app": null}}, "status": {"phase": "Failed"}}),
                false,
            )
            .unwrap();
        assert_eq!(patched["metadata"]["labels"], json!({"tier": "front"}));
        assert_eq!(
            patched["status"]["phase"], "Running",
            "the status subresource owns it"
        );
    }

    /// A watch from a revision replays what came after it, in order, and sees an object
    /// that leaves its selection as deleted; one from a compacted revision is refused.
    #[test]
    fn watches_replay_history_and_see_objects_leave_their_selection() {
        let s = store();
        let from = s.revision();
        s.create(pods(), Some("shop"), pod("a", json!({"app": "web"})))
            .unwrap();
        s.patch(
            pods(),
            Some("shop"),
            "a",
            &json!({"metadata": {"labels": {"app": "db"}}}),
            false,
        )
        .unwrap();
        s.patch(
            pods(),
            Some("shop"),
            "a",
            &json!({"metadata": {"labels": {"app": "web"}}}),
            false,
        )
        .unwrap();
        s.delete(pods(), Some("shop"), "a").unwrap();
        let filter = Filter {
            labels: LabelSelector::parse("app=web").unwrap(),
            ..Filter::default()
        };
        let w = s.watch(pods(), &filter, Some(from)).unwrap();
        let seen: Vec<&str> = w
            .backlog
            .iter()
            .filter_map(|e| view(e, pods(), &filter))
            .map(|(t, _)| t.as_str())
            .collect();
        assert_eq!(seen, ["ADDED", "DELETED", "ADDED", "DELETED"]);
        s.compact();
        assert!(matches!(
            s.watch(pods(), &filter, Some(from)),
            Err(ApiError::Gone { .. })
        ));
        assert!(s.watch(pods(), &filter, Some(s.revision())).is_ok());
    }

    #[test]
    fn deleting_a_namespace_deletes_its_objects() {
        let s = store();
        s.create(pods(), Some("shop"), pod("a", json!({}))).unwrap();
        let from = s.revision();
        s.delete(namespaces(), None, "shop").unwrap();
        assert!(s.list(pods(), &Filter::default()).0.is_empty());
        let w = s.watch(pods(), &Filter::default(), Some(from)).unwrap();
        assert_eq!(w.backlog.len(), 2, "the pod's deletion and the namespace's");
    }
}
