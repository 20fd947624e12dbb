//! The `PersistentVolumeSource` a plugin returns as JSON: parsed strictly into
//! the Kubernetes type, so a typo or garbage is a plugin error, never a
//! half-valid PersistentVolume.

use k8s_openapi::api::core::v1::PersistentVolumeSpec;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::policy::output::SOURCE_KINDS as VOLUME_TYPES;

/// Parses a plugin's source JSON into a spec that has only that source set.
pub fn parse(json: &str) -> Result<PersistentVolumeSpec, String> {
    let value: Value =
        serde_json::from_str(json).map_err(|e| format!("source is not valid JSON: {e}"))?;
    let Value::Object(object) = &value else {
        return Err(format!(
            "source must be a JSON object with one volume type, e.g. {{\"hostPath\":{{\"path\":\"/data\"}}}}; got {}",
            short(json)
        ));
    };
    let kind = single_type(object)?;
    let spec = PersistentVolumeSpec::deserialize(&value)
        .map_err(|e| format!("source.{kind} is not a valid Kubernetes {kind} source: {e}"))?;
    let understood = serde_json::to_value(&spec).map_err(|e| e.to_string())?;
    let mut unknown = Vec::new();
    unknown_fields(&value, &understood, &mut "source".to_owned(), &mut unknown);
    if !unknown.is_empty() {
        return Err(format!(
            "source has fields that Kubernetes does not define (typos?): {}",
            unknown.join(", ")
        ));
    }
    check_semantics(kind, &value[kind])?;
    Ok(spec)
}

/// The source of a saved PersistentVolume as JSON (what `parse` accepts).
pub fn extract(spec: &PersistentVolumeSpec) -> Result<String, String> {
    let Value::Object(all) = serde_json::to_value(spec).map_err(|e| e.to_string())? else {
        return Err("spec is not an object".into());
    };
    let sources: Map<String, Value> = all
        .into_iter()
        .filter(|(k, _)| VOLUME_TYPES.contains(&k.as_str()))
        .collect();
    single_type(&sources)?;
    Ok(Value::Object(sources).to_string())
}

fn single_type(object: &Map<String, Value>) -> Result<&'static str, String> {
    let mut kinds = Vec::new();
    for key in object.keys() {
        match VOLUME_TYPES.iter().find(|t| **t == key) {
            Some(t) => kinds.push(*t),
            None => {
                return Err(format!(
                    "source has unknown volume type {key:?} (expected one of {})",
                    VOLUME_TYPES.join(", ")
                ))
            }
        }
    }
    match kinds.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "source names no volume type (expected exactly one of {})",
            VOLUME_TYPES.join(", ")
        )),
        many => Err(format!(
            "source names {} volume types ({}); a volume has exactly one",
            many.len(),
            many.join(", ")
        )),
    }
}

/// Collects paths of keys present in `given` but dropped by the typed parse.
/// `path` is where `given` is; it is extended in place while descending.
fn unknown_fields(given: &Value, understood: &Value, path: &mut String, out: &mut Vec<String>) {
    let len = path.len();
    match (given, understood) {
        (Value::Object(g), Value::Object(u)) => {
            for (k, v) in g {
                match u.get(k) {
                    Some(uv) => {
                        path.push('.');
                        path.push_str(k);
                        unknown_fields(v, uv, path, out);
                        path.truncate(len);
                    }
                    None if !v.is_null() => out.push(format!("{path}.{k}")),
                    None => {}
                }
            }
        }
        (Value::Array(g), Value::Array(u)) => {
            for (i, (gv, uv)) in g.iter().zip(u).enumerate() {
                use std::fmt::Write;
                let _ = write!(path, "[{i}]");
                unknown_fields(gv, uv, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

fn check_semantics(kind: &str, source: &Value) -> Result<(), String> {
    let text = |field: &str| {
        source
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let absolute = |field: &str| {
        let p = text(field);
        if p.is_empty() {
            Err(format!("source.{kind}.{field} is required"))
        } else if !p.starts_with('/') {
            Err(format!(
                "source.{kind}.{field} must be an absolute path, got {p:?}"
            ))
        } else if p.split('/').any(|c| c == "..") {
            Err(format!(
                "source.{kind}.{field} must not contain \"..\", got {p:?}"
            ))
        } else {
            Ok(())
        }
    };
    let non_empty = |field: &str| {
        if text(field).trim().is_empty() {
            Err(format!("source.{kind}.{field} must not be empty"))
        } else {
            Ok(())
        }
    };
    match kind {
        "hostPath" | "local" => absolute("path"),
        "nfs" => non_empty("server").and_then(|()| absolute("path")),
        "csi" => non_empty("driver").and_then(|()| non_empty("volumeHandle")),
        "iscsi" => non_empty("targetPortal").and_then(|()| non_empty("iqn")),
        _ => Ok(()),
    }
}

fn short(s: &str) -> String {
    crate::text::untrusted(s, 200).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_real_sources() {
        for json in [
            r#"{"hostPath":{"path":"/var/lib/x","type":"DirectoryOrCreate"}}"#,
            r#"{"nfs":{"server":"10.0.0.1","path":"/exports/a","readOnly":true}}"#,
            r#"{"csi":{"driver":"ebs.csi.aws.com","volumeHandle":"vol-1","volumeAttributes":{"a":"b"}}}"#,
            r#"{"local":{"path":"/mnt/disks/ssd1"}}"#,
        ] {
            let spec = parse(json).unwrap_or_else(|e| panic!("{json}: {e}"));
            assert_eq!(
                serde_json::from_str::<Value>(&extract(&spec).unwrap()).unwrap(),
                serde_json::from_str::<Value>(json).unwrap(),
                "round trip"
            );
        }
    }

    #[test]
    fn rejects_garbage_with_a_precise_reason() {
        let cases = [
            ("not json", "not valid JSON"),
            ("[1]", "must be a JSON object"),
            ("{}", "names no volume type"),
            (
                r#"{"hostPath":{"path":"/a"},"nfs":{"server":"s","path":"/b"}}"#,
                "2 volume types",
            ),
            (
                r#"{"hostpath":{"path":"/a"}}"#,
                "unknown volume type \"hostpath\"",
            ),
            (r#"{"hostPath":{}}"#, "source.hostPath.path is required"),
            (
                r#"{"hostPath":{"path":"/a","tpye":"Directory"}}"#,
                "source.hostPath.tpye",
            ),
            (r#"{"hostPath":{"path":"relative/dir"}}"#, "absolute path"),
            (
                r#"{"hostPath":{"path":"/a/../../etc"}}"#,
                "must not contain",
            ),
            (
                r#"{"nfs":{"server":"","path":"/x"}}"#,
                "server must not be empty",
            ),
            (
                r#"{"csi":{"driver":"d","volumeHandle":" "}}"#,
                "volumeHandle must not be empty",
            ),
            (
                r#"{"hostPath":{"path":42}}"#,
                "not a valid Kubernetes hostPath source",
            ),
        ];
        for (json, want) in cases {
            let err = parse(json).expect_err(json);
            assert!(err.contains(want), "{json}: {err}");
        }
    }
}
