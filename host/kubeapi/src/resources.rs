//! The resources the stand-in serves and their discovery documents: exactly the kinds
//! weft watches (and the lab writes), each as the real API names it.

use serde_json::{json, Value};

/// One resource type: where it lives in the API and what its objects are called.
#[derive(Debug, PartialEq, Eq)]
pub struct Resource {
    /// The API group, empty for the core group (`/api/v1`).
    pub group: &'static str,
    /// The version (`v1`, `v2`).
    pub version: &'static str,
    /// The plural path segment (`pods`).
    pub plural: &'static str,
    /// The singular name (`pod`).
    pub singular: &'static str,
    /// The object kind (`Pod`).
    pub kind: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// kubectl's short names (`cnp`).
    pub short_names: &'static [&'static str],
    /// Whether the resource has a `status` subresource.
    pub status: bool,
}

impl Resource {
    /// `v1` or `group/version`, the objects' `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods` or `ciliumnetworkpolicies.cilium.io`, as errors name a resource.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_owned()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// Every resource served.
pub static RESOURCES: &[Resource] = &[
    Resource {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        status: true,
    },
    Resource {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        status: true,
    },
    Resource {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        status: true,
    },
    Resource {
        group: "",
        version: "v1",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        short_names: &["svc"],
        status: true,
    },
    Resource {
        group: "discovery.k8s.io",
        version: "v1",
        plural: "endpointslices",
        singular: "endpointslice",
        kind: "EndpointSlice",
        namespaced: true,
        short_names: &[],
        status: false,
    },
    Resource {
        group: "networking.k8s.io",
        version: "v1",
        plural: "networkpolicies",
        singular: "networkpolicy",
        kind: "NetworkPolicy",
        namespaced: true,
        short_names: &["netpol"],
        status: false,
    },
    Resource {
        group: "cilium.io",
        version: "v2",
        plural: "ciliumnetworkpolicies",
        singular: "ciliumnetworkpolicy",
        kind: "CiliumNetworkPolicy",
        namespaced: true,
        short_names: &["cnp", "ciliumnp"],
        status: true,
    },
    Resource {
        group: "cilium.io",
        version: "v2",
        plural: "ciliumclusterwidenetworkpolicies",
        singular: "ciliumclusterwidenetworkpolicy",
        kind: "CiliumClusterwideNetworkPolicy",
        namespaced: false,
        short_names: &["ccnp"],
        status: true,
    },
];

/// The resource at `group`/`version`/`plural`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

const VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// `GET /api`: the core group's versions.
pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [],
    })
}

fn groups() -> Vec<(&'static str, &'static str)> {
    let mut gv: Vec<(&str, &str)> = RESOURCES
        .iter()
        .filter(|r| !r.group.is_empty())
        .map(|r| (r.group, r.version))
        .collect();
    gv.dedup();
    gv
}

/// `GET /apis`: the named groups.
pub fn group_list() -> Value {
    let groups: Vec<Value> = groups()
        .into_iter()
        .map(|(group, version)| {
            let gv = json!({ "groupVersion": format!("{group}/{version}"), "version": version });
            json!({ "name": group, "versions": [gv.clone()], "preferredVersion": gv })
        })
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

/// `GET /apis/<group>` (one group).
pub fn group(group: &str) -> Option<Value> {
    let list = group_list();
    list["groups"]
        .as_array()?
        .iter()
        .find(|g| g["name"] == group)
        .map(|g| {
            let mut g = g.clone();
            g["kind"] = "APIGroup".into();
            g["apiVersion"] = "v1".into();
            g
        })
}

/// `GET /api/v1` or `GET /apis/<group>/<version>`: its resources, `None` when the
/// group version is not served.
pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        resources.push(json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": VERBS,
            "shortNames": r.short_names,
        }));
        if r.status {
            resources.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }))
}

/// `/openapi/v3`: where each group version's document is. kubectl reads it to learn
/// whether the server validates fields itself (`fieldValidation`); told yes, it sends
/// `?fieldValidation=Strict` instead of validating against schemas the stand-in lacks.
pub fn openapi_root() -> Value {
    let mut paths = serde_json::Map::new();
    let mut gvs = vec![(String::new(), "v1")];
    gvs.extend(groups().into_iter().map(|(g, v)| (g.to_owned(), v)));
    for (group, version) in gvs {
        let path = if group.is_empty() {
            format!("api/{version}")
        } else {
            format!("apis/{group}/{version}")
        };
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}")}),
        );
    }
    json!({ "paths": paths })
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/<group>/<version>`: per resource, the
/// object's PATCH with its group-version-kind and the `fieldValidation` parameter,
/// which is what kubectl looks for. No schemas.
pub fn openapi_group_version(group: &str, version: &str) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let base = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let object = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{base}/{}/{{name}}", r.plural)
        };
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let validation =
            json!({"name": "fieldValidation", "in": "query", "schema": {"type": "string"}});
        let operation = json!({
            "x-kubernetes-group-version-kind": gvk,
            "parameters": [validation],
            "responses": {"200": {"description": "OK"}},
        });
        paths.insert(object, json!({"patch": operation, "put": operation}));
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (weft's stand-in)", "version": "v1.32.0"},
        "paths": paths,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_version_has_a_resource_list() {
        assert!(resource_list("", "v1").is_some());
        for (g, v) in groups() {
            let list = resource_list(g, v).unwrap();
            assert_eq!(list["groupVersion"], format!("{g}/{v}"));
            assert!(group(g).is_some());
        }
        assert!(resource_list("apps", "v1").is_none());
        assert_eq!(
            find("cilium.io", "v2", "ciliumnetworkpolicies")
                .unwrap()
                .kind,
            "CiliumNetworkPolicy"
        );
    }
}
