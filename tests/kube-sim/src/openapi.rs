//! A small `/openapi/v3`: enough for kubectl to see that the server validates
//! fields itself (`fieldValidation` on PATCH) and to find each kind's schema,
//! so `kubectl create/apply` work without `--validate=false`.

use serde_json::{json, Map, Value};

use crate::resources::RESOURCES;

/// Changes whenever the documents change (clients cache by it).
const HASH: &str = "6b7562652d73696d2d7631";

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

pub fn root() -> Value {
    let mut paths = Map::new();
    for r in RESOURCES {
        let p = gv_path(r.group, r.version);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={HASH}")}),
        );
    }
    json!({ "paths": paths })
}

fn schema_name(group: &str, version: &str, kind: &str) -> String {
    let prefix = if group.is_empty() {
        "io.k8s.api.core".to_string()
    } else {
        let short = group.split('.').next().unwrap_or(group);
        format!("io.k8s.api.{short}")
    };
    format!("{prefix}.{version}.{kind}")
}

fn param(name: &str, location: &str) -> Value {
    json!({"name": name, "in": location, "schema": {"type": "string", "uniqueItems": true}})
}

/// The document for one group version (`api/v1`, `apis/storage.k8s.io/v1`), if served.
pub fn group_version(path: &str) -> Option<Value> {
    let defs: Vec<_> = RESOURCES
        .iter()
        .filter(|r| gv_path(r.group, r.version) == path)
        .collect();
    if defs.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let mut schemas = Map::new();
    schemas.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".into(),
        json!({"type": "object", "description": "ObjectMeta is metadata that all persisted resources must have.", "x-kubernetes-preserve-unknown-fields": true}),
    );
    for r in defs {
        let gvk = json!([{"group": r.group, "version": r.version, "kind": r.kind}]);
        let name = schema_name(r.group, r.version, r.kind);
        let reference = json!({"$ref": format!("#/components/schemas/{name}")});
        let body = json!({"content": {"application/json": {"schema": reference}}});
        let ok = json!({"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}});
        let write_params = json!([
            param("dryRun", "query"),
            param("fieldManager", "query"),
            param("fieldValidation", "query")
        ]);
        let base = format!("/{path}");
        let collection = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{base}/{}", r.plural)
        };
        let item = format!("{collection}/{{name}}");
        let op = |id: &str, extra: Value| {
            let mut o = json!({
                "operationId": format!("{id}{}", r.kind),
                "x-kubernetes-group-version-kind": gvk[0],
                "responses": ok,
            });
            if let (Some(m), Value::Object(e)) = (o.as_object_mut(), extra) {
                m.extend(e);
            }
            o
        };
        paths.insert(
            collection,
            json!({
                "get": op("list", json!({"x-kubernetes-action": "list"})),
                "post": op("create", json!({"x-kubernetes-action": "post", "parameters": write_params, "requestBody": body})),
            }),
        );
        let patch_body = json!({"content": {
            "application/json-patch+json": {"schema": {"type": "object"}},
            "application/merge-patch+json": {"schema": {"type": "object"}},
            "application/strategic-merge-patch+json": {"schema": {"type": "object"}},
            "application/apply-patch+yaml": {"schema": {"type": "object"}}
        }});
        let patch_params = json!([
            param("dryRun", "query"),
            param("fieldManager", "query"),
            param("fieldValidation", "query"),
            param("force", "query")
        ]);
        let mut item_ops = json!({
            "get": op("read", json!({"x-kubernetes-action": "get"})),
            "put": op("replace", json!({"x-kubernetes-action": "put", "parameters": write_params, "requestBody": body})),
            "patch": op("patch", json!({"x-kubernetes-action": "patch", "parameters": patch_params, "requestBody": patch_body})),
            "delete": op("delete", json!({"x-kubernetes-action": "delete"})),
        });
        item_ops["parameters"] = json!([param("name", "path")]);
        paths.insert(item, item_ops);
        schemas.insert(
            name,
            json!({
                "description": format!("{} (schema abbreviated by kube-sim)", r.kind),
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}], "default": {}},
                },
                "x-kubernetes-preserve-unknown-fields": true,
                "x-kubernetes-group-version-kind": gvk,
            }),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas}
    }))
}
