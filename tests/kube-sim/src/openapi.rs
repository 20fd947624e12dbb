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

/// Minimal protobuf writer for the OpenAPI v2 document below.
mod pb {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// A length-delimited field (strings and sub-messages).
    pub fn field(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
        varint(out, u64::from(number) << 3 | 2);
        varint(out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    }

    pub fn message(fields: &[(u32, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (n, b) in fields {
            field(&mut out, *n, b);
        }
        out
    }
}

/// `/openapi/v2` as protobuf (gnostic `openapi.v2.Document`), for kubectl 1.27
/// and 1.28: only PATCH operations with their GVK and the `fieldValidation`
/// query parameter, which is what kubectl checks before letting the server
/// validate (`fieldValidation=Strict`). No schema definitions.
pub fn v2_protobuf() -> Vec<u8> {
    let s = |v: &str| v.as_bytes().to_vec();
    // Document.paths(8) → Paths.path(2) → NamedPathItem{name(1), value(2): PathItem.patch(8)}
    let mut paths = Vec::new();
    for r in RESOURCES {
        let base = format!("/{}", gv_path(r.group, r.version));
        let item = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{base}/{}/{{name}}", r.plural)
        };
        let query = |name: &str| {
            // ParametersItem.parameter(1) → Parameter.non_body_parameter(2)
            // → NonBodyParameter.query_parameter_sub_schema(3) → {in(2), name(4), type(6)}
            let qp = pb::message(&[(2, s("query")), (4, s(name)), (6, s("string"))]);
            let nbp = pb::message(&[(3, qp)]);
            let param = pb::message(&[(2, nbp)]);
            pb::message(&[(1, param)])
        };
        let ext = |name: &str, yaml: String| {
            // NamedAny{name(1), value(2): Any.yaml(2)}
            pb::message(&[(1, s(name)), (2, pb::message(&[(2, yaml.into_bytes())]))])
        };
        let gvk = format!(
            "group: \"{}\"\nkind: {}\nversion: {}\n",
            r.group, r.kind, r.version
        );
        let mut op = Vec::new();
        pb::field(&mut op, 5, format!("patch{}", r.kind).as_bytes());
        for p in ["dryRun", "fieldManager", "fieldValidation", "force"] {
            pb::field(&mut op, 8, &query(p));
        }
        pb::field(&mut op, 13, &ext("x-kubernetes-action", "patch\n".into()));
        pb::field(&mut op, 13, &ext("x-kubernetes-group-version-kind", gvk));
        let path_item = pb::message(&[(8, op)]);
        pb::field(
            &mut paths,
            2,
            &pb::message(&[(1, s(&item)), (2, path_item)]),
        );
    }
    let info = pb::message(&[(1, s("Kubernetes")), (2, s("v1.33.0"))]);
    pb::message(&[(1, s("2.0")), (2, info), (8, paths)])
}
