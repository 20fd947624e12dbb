//! Discovery documents: `/version`, `/api`, `/apis`, `/api/v1`,
//! `/apis/<group>/<version>`, plain and aggregated (`apidiscovery.k8s.io`).

use serde_json::{json, Value};

use crate::resources::{self, ResourceDef, RESOURCES};

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `/version` for the Kubernetes release this server imitates.
pub fn version(minor: u32) -> Value {
    json!({
        "major": "1",
        "minor": minor.to_string(),
        "emulationMajor": "1",
        "emulationMinor": minor.to_string(),
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": (minor - 1).to_string(),
        "gitVersion": format!("v1.{minor}.0-kube-sim"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]
    })
}

fn group_json(group: &str, version: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
}

pub fn group_list() -> Value {
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": resources::api_groups().into_iter().map(|(g, v)| group_json(g, v)).collect::<Vec<_>>()
    })
}

pub fn group(name: &str) -> Option<Value> {
    resources::api_groups()
        .into_iter()
        .find(|(g, _)| *g == name)
        .map(|(g, v)| {
            let mut doc = group_json(g, v);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            doc
        })
}

/// `kubectl get all` expands the `all` category; of the served types only pods are in it.
fn categories(r: &ResourceDef) -> Option<&'static [&'static str]> {
    (r.group.is_empty() && r.plural == "pods").then_some(&["all"][..])
}

fn in_gv<'a>(group: &'a str, version: &'a str) -> impl Iterator<Item = &'static ResourceDef> + 'a {
    RESOURCES
        .iter()
        .filter(move |r| r.group == group && r.version == version)
}

pub fn resource_list(group: &str, version: &str) -> Value {
    let mut list = Vec::new();
    for r in in_gv(group, version) {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": VERBS,
            "storageVersionHash": "",
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if let Some(c) = categories(r) {
            entry["categories"] = json!(c);
        }
        list.push(entry);
        if r.status_subresource {
            list.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list})
}

/// Aggregated discovery for `/api` (core) or `/apis` (groups).
pub fn aggregated(core: bool, version: &str) -> Value {
    let gvs: Vec<(&str, &str)> = if core {
        vec![("", "v1")]
    } else {
        resources::api_groups()
    };
    let items: Vec<Value> = gvs
        .into_iter()
        .map(|(g, v)| {
            let res: Vec<Value> = in_gv(g, v)
                .map(|r| {
                    let kind = json!({"group": g, "version": v, "kind": r.kind});
                    let mut e = json!({
                        "resource": r.plural,
                        "responseKind": kind,
                        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": r.singular,
                        "verbs": VERBS,
                    });
                    if !r.short_names.is_empty() {
                        e["shortNames"] = json!(r.short_names);
                    }
                    if let Some(c) = categories(r) {
                        e["categories"] = json!(c);
                    }
                    if r.status_subresource {
                        e["subresources"] = json!([{
                            "subresource": "status",
                            "responseKind": kind,
                            "verbs": ["get", "patch", "update"],
                        }]);
                    }
                    e
                })
                .collect();
            let metadata = if g.is_empty() {
                json!({})
            } else {
                json!({"name": g})
            };
            json!({
                "metadata": metadata,
                "versions": [{"version": v, "resources": res, "freshness": "Current"}]
            })
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items
    })
}
