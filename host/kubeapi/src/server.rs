//! The HTTP side: the real API's paths, verbs, query parameters, `Status` errors,
//! watch streams (newline-delimited events, bookmarks, `410 Gone` as an `ERROR` event)
//! and the `Table` form `kubectl get` asks for.

use crate::resources::{self, Resource};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{view, ApiError, Filter, Store};
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, watch};

/// What every request handler shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub store: Arc<Store>,
    /// Flips to true when the server stops: open watches end.
    pub stopping: watch::Receiver<bool>,
    pub bookmark_interval: Duration,
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(body).expect("JSON values serialise"),
    )
        .into_response()
}

fn status_body(code: StatusCode, reason: &str, message: &str, details: Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code.as_u16(),
    })
}

fn error(e: &ApiError) -> Response {
    let (code, reason, details) = match e {
        ApiError::NotFound { resource, name } => (
            StatusCode::NOT_FOUND,
            "NotFound",
            json!({"name": name, "kind": resource}),
        ),
        ApiError::AlreadyExists { resource, name } => (
            StatusCode::CONFLICT,
            "AlreadyExists",
            json!({"name": name, "kind": resource}),
        ),
        ApiError::Conflict { resource, name } => (
            StatusCode::CONFLICT,
            "Conflict",
            json!({"name": name, "kind": resource}),
        ),
        ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest", json!({})),
        ApiError::Invalid { resource, name, .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            json!({"name": name, "kind": resource}),
        ),
        ApiError::Gone { .. } => (StatusCode::GONE, "Expired", json!({})),
    };
    json_response(code, &status_body(code, reason, &e.to_string(), details))
}

fn plain_error(code: StatusCode, reason: &str, message: &str) -> Response {
    json_response(code, &status_body(code, reason, message, json!({})))
}

/// Where a request points, from its path.
enum Target<'a> {
    Collection {
        resource: &'static Resource,
        namespace: Option<&'a str>,
    },
    Object {
        resource: &'static Resource,
        namespace: Option<&'a str>,
        name: &'a str,
        status: bool,
    },
}

/// Reads `/api/v1/...` and `/apis/<group>/<version>/...` (paths are the API's own:
/// axum routes by prefix, the segments after it are read here).
fn target<'a>(group: &str, version: &str, rest: &[&'a str]) -> Option<Target<'a>> {
    let find = |plural: &str| resources::find(group, version, plural);
    Some(match rest {
        [plural] => Target::Collection {
            resource: find(plural)?,
            namespace: None,
        },
        ["namespaces", name, "status"] if group.is_empty() => Target::Object {
            resource: find("namespaces")?,
            namespace: None,
            name,
            status: true,
        },
        ["namespaces", ns, plural] => Target::Collection {
            resource: find(plural).filter(|r| r.namespaced)?,
            namespace: Some(ns),
        },
        [plural, name] => Target::Object {
            resource: find(plural).filter(|r| !r.namespaced)?,
            namespace: None,
            name,
            status: false,
        },
        [plural, name, "status"] => Target::Object {
            resource: find(plural).filter(|r| !r.namespaced && r.status)?,
            namespace: None,
            name,
            status: true,
        },
        ["namespaces", ns, plural, name] => Target::Object {
            resource: find(plural).filter(|r| r.namespaced)?,
            namespace: Some(ns),
            name,
            status: false,
        },
        ["namespaces", ns, plural, name, "status"] => Target::Object {
            resource: find(plural).filter(|r| r.namespaced && r.status)?,
            namespace: Some(ns),
            name,
            status: true,
        },
        _ => return None,
    })
}

/// Every request: discovery, then the resources.
pub(crate) async fn handle(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().trim_end_matches('/');
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let get = method == Method::GET;
    let not_found = || {
        plain_error(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        )
    };
    let (group, version, rest) = match segments.as_slice() {
        ["api"] if get => return json_response(StatusCode::OK, &resources::core_versions()),
        ["apis"] if get => return json_response(StatusCode::OK, &resources::group_list()),
        ["apis", g] if get => {
            return resources::group(g)
                .map_or_else(not_found, |v| json_response(StatusCode::OK, &v))
        }
        ["api", "v1"] if get => {
            return json_response(
                StatusCode::OK,
                &resources::resource_list("", "v1").expect("served"),
            )
        }
        ["apis", g, v] if get => {
            return resources::resource_list(g, v)
                .map_or_else(not_found, |l| json_response(StatusCode::OK, &l))
        }
        ["version"] if get => {
            return json_response(
                StatusCode::OK,
                &json!({"major": "1", "minor": "32", "gitVersion": "v1.32.0-weft-kubeapi", "platform": "linux/amd64"}),
            )
        }
        ["openapi", "v3"] if get => {
            return json_response(StatusCode::OK, &resources::openapi_root())
        }
        ["openapi", "v3", "api", v] if get => {
            return resources::openapi_group_version("", v)
                .map_or_else(not_found, |d| json_response(StatusCode::OK, &d))
        }
        ["openapi", "v3", "apis", g, v] if get => {
            return resources::openapi_group_version(g, v)
                .map_or_else(not_found, |d| json_response(StatusCode::OK, &d))
        }
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return not_found(),
    };
    let Some(target) = target(group, version, rest) else {
        return not_found();
    };
    // JSON only: a client that sends protobuf or CBOR is told so (client-go then
    // sends JSON, as it does to any server that answers 415).
    let body_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if !body.is_empty() && !body_type.contains("json") {
        return plain_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!("the stand-in reads JSON bodies only, not {body_type:?}"),
        );
    }
    let store = &shared.store;
    match (target, method) {
        (
            Target::Collection {
                resource,
                namespace,
            },
            Method::GET,
        ) => {
            let filter = match filter(namespace, &query) {
                Ok(f) => f,
                Err(e) => return error(&e),
            };
            if matches!(query.get("watch").map(String::as_str), Some("1" | "true")) {
                return watch_stream(&shared, resource, filter, &query);
            }
            let (items, revision) = store.list(resource, &filter);
            if wants_table(&headers) {
                return json_response(StatusCode::OK, &table(resource, &items, revision, &query));
            }
            json_response(
                StatusCode::OK,
                &json!({
                    "kind": format!("{}List", resource.kind),
                    "apiVersion": resource.api_version(),
                    "metadata": {"resourceVersion": revision.to_string()},
                    "items": items,
                }),
            )
        }
        (
            Target::Collection {
                resource,
                namespace,
            },
            Method::POST,
        ) => {
            if resource.namespaced && namespace.is_none() {
                return plain_error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "MethodNotAllowed",
                    "create in a namespace's collection",
                );
            }
            let object = match parse_body(&body) {
                Ok(o) => o,
                Err(e) => return error(&e),
            };
            match store.create(resource, namespace, object) {
                Ok(o) => json_response(StatusCode::CREATED, &o),
                Err(e) => error(&e),
            }
        }
        (
            Target::Object {
                resource,
                namespace,
                name,
                status,
            },
            method,
        ) => {
            let result = match method {
                Method::GET => store.get(resource, namespace, name),
                Method::PUT => match parse_body(&body) {
                    Ok(o) => store.replace(resource, namespace, name, o, status),
                    Err(e) => return error(&e),
                },
                Method::PATCH => {
                    let kind = headers
                        .get(header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default();
                    if !(kind.starts_with("application/merge-patch+json")
                        || kind.starts_with("application/strategic-merge-patch+json"))
                    {
                        return plain_error(
                            StatusCode::UNSUPPORTED_MEDIA_TYPE,
                            "UnsupportedMediaType",
                            &format!("the stand-in applies merge patches only, not {kind:?}"),
                        );
                    }
                    match parse_body(&body) {
                        Ok(p) => store.patch(resource, namespace, name, &p, status),
                        Err(e) => return error(&e),
                    }
                }
                Method::DELETE if !status => store.delete(resource, namespace, name),
                _ => {
                    return plain_error(
                        StatusCode::METHOD_NOT_ALLOWED,
                        "MethodNotAllowed",
                        "method not allowed",
                    )
                }
            };
            match result {
                Ok(o) => json_response(StatusCode::OK, &o),
                Err(e) => error(&e),
            }
        }
        _ => plain_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "method not allowed",
        ),
    }
}

fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("the body is not JSON: {e}")))
}

fn filter(namespace: Option<&str>, query: &HashMap<String, String>) -> Result<Filter, ApiError> {
    let bad = |e: crate::selector::SelectorError| ApiError::BadRequest(e.to_string());
    let param = |name: &str| query.get(name).map_or("", String::as_str);
    Ok(Filter {
        namespace: namespace.map(str::to_owned),
        labels: LabelSelector::parse(param("labelSelector")).map_err(bad)?,
        fields: FieldSelector::parse(param("fieldSelector")).map_err(bad)?,
    })
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("as=Table"))
}

fn watch_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).expect("JSON");
    line.push(b'\n');
    Bytes::from(line)
}

/// A watch: the backlog, then live changes, bookmarks when asked for, until the
/// client goes, `timeoutSeconds` passes or the server stops. A watch that falls too
/// far behind ends (the client watches again from its last revision).
fn watch_stream(
    shared: &Shared,
    resource: &'static Resource,
    filter: Filter,
    query: &HashMap<String, String>,
) -> Response {
    let initial_events = query.get("sendInitialEvents").is_some_and(|v| v == "true");
    let from = match query.get("resourceVersion").map(String::as_str) {
        _ if initial_events => None,
        None | Some("" | "0") => None,
        Some(rv) => match rv.parse::<u64>() {
            Ok(rv) => Some(rv),
            Err(_) => {
                return plain_error(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!("resourceVersion {rv:?} is not a number"),
                )
            }
        },
    };
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true");
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map_or(Duration::from_secs(1800), Duration::from_secs);
    let bookmark = move |revision: u64, initial_end: bool| {
        let mut metadata = json!({"resourceVersion": revision.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        watch_line(
            "BOOKMARK",
            &json!({"kind": resource.kind, "apiVersion": resource.api_version(), "metadata": metadata}),
        )
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::convert::Infallible>>(64);
    let started = shared.store.watch(resource, &filter, from);
    let mut stopping = shared.stopping.clone();
    let interval = shared.bookmark_interval;
    tokio::spawn(async move {
        let mut watch = match started {
            Ok(w) => w,
            Err(e) => {
                let status = status_body(StatusCode::GONE, "Expired", &e.to_string(), json!({}));
                let _ = tx.send(Ok(watch_line("ERROR", &status))).await;
                return;
            }
        };
        let mut last = watch.revision;
        for event in std::mem::take(&mut watch.backlog) {
            last = last.max(event.revision);
            if let Some((kind, object)) = view(&event, resource, &filter) {
                if tx
                    .send(Ok(watch_line(kind.as_str(), &object)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
        if initial_events && tx.send(Ok(bookmark(last, true))).await.is_err() {
            return;
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut ticks = tokio::time::interval(interval);
        ticks.tick().await;
        loop {
            let line = tokio::select! {
                event = watch.live.recv() => match event {
                    Ok(event) => {
                        last = last.max(event.revision);
                        match view(&event, resource, &filter) {
                            Some((kind, object)) => watch_line(kind.as_str(), &object),
                            None => continue,
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = ticks.tick(), if bookmarks => bookmark(last, false),
                _ = &mut deadline => return,
                _ = stopping.wait_for(|s| *s) => return,
                _ = tx.closed() => return,
            };
            if tx.send(Ok(line)).await.is_err() {
                return;
            }
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// `1h`, `5m`, `42s` since an RFC 3339 timestamp, as kubectl's AGE column.
fn age(created: &Value) -> String {
    let Some(at) = created
        .as_str()
        .and_then(|t| humantime::parse_rfc3339(t).ok())
    else {
        return "<unknown>".into();
    };
    let secs = std::time::SystemTime::now()
        .duration_since(at)
        .unwrap_or_default()
        .as_secs();
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// The `meta.k8s.io/v1` `Table` that `kubectl get` prints: the name, a few columns
/// per kind, the age.
fn table(
    resource: &Resource,
    items: &[Value],
    revision: u64,
    query: &HashMap<String, String>,
) -> Value {
    let columns: &[(&str, &str)] = match resource.kind {
        "Pod" => &[
            ("Status", "status.phase"),
            ("IP", "status.podIP"),
            ("Node", "spec.nodeName"),
        ],
        "Namespace" => &[("Status", "status.phase")],
        "Service" => &[("Type", "spec.type"), ("Cluster-IP", "spec.clusterIP")],
        _ => &[],
    };
    let mut definitions = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0}),
    ];
    for (name, _) in columns {
        definitions.push(
            json!({"name": name, "type": "string", "format": "", "description": "", "priority": 0}),
        );
    }
    definitions.push(
        json!({"name": "Age", "type": "string", "format": "", "description": "", "priority": 0}),
    );
    let whole = query.get("includeObject").is_some_and(|v| v == "Object");
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let mut cells = vec![o["metadata"]["name"].clone()];
            for (_, path) in columns {
                let v = path.split('.').try_fold(o, |v, p| v.get(p)).and_then(Value::as_str);
                cells.push(v.unwrap_or("<none>").into());
            }
            cells.push(age(&o["metadata"]["creationTimestamp"]).into());
            let object = if whole {
                o.clone()
            } else {
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]})
            };
            json!({"cells": cells, "object": object})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": revision.to_string()},
        "columnDefinitions": definitions,
        "rows": rows,
    })
}
