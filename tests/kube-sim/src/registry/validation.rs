//! Validation: names, required fields, immutability after creation, and the
//! events.k8s.io/v1 requirements (422 `Invalid` with the real field paths).

use serde_json::Value;

use super::target;
use crate::error::{ApiError, ApiResult, Cause};
use crate::objects;
use crate::resources::{self, ResourceId, RESOURCES};

pub fn invalid(res: ResourceId, name: &str, errors: Vec<String>) -> ApiError {
    ApiError::Invalid {
        target: target(res, name),
        kind: RESOURCES[res].kind,
        causes: errors.iter().map(|e| Cause::from_field_error(e)).collect(),
    }
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns_subdomain(s)
}

/// PV spec keys that are not the volume source.
const PV_NON_SOURCE: &[&str] = &[
    "accessModes",
    "capacity",
    "claimRef",
    "mountOptions",
    "nodeAffinity",
    "persistentVolumeReclaimPolicy",
    "storageClassName",
    "volumeMode",
    "volumeAttributesClassName",
];

fn pv_source(obj: &Value) -> Vec<(&String, &Value)> {
    obj.get("spec")
        .and_then(Value::as_object)
        .map(|s| {
            s.iter()
                .filter(|(k, _)| !PV_NON_SOURCE.contains(&k.as_str()))
                .collect()
        })
        .unwrap_or_default()
}
pub fn validate(res: ResourceId, obj: &Value, old: Option<&Value>) -> ApiResult<()> {
    let name = objects::name(obj).to_string();
    let mut errs = Vec::new();
    let name_ok = if res == resources::NAMESPACE {
        is_dns_label(&name)
    } else {
        is_dns_subdomain(&name)
    };
    if !name_ok && old.is_none() {
        errs.push(format!(
            "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 {} must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            if res == resources::NAMESPACE { "label" } else { "subdomain" }
        ));
    }
    match res {
        resources::PVC => {
            if objects::path(obj, "spec.accessModes")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            {
                errs.push(
                    "spec.accessModes: Required value: at least 1 access mode is required".into(),
                );
            }
            if objects::path(obj, "spec.resources.requests.storage").is_none() {
                errs.push("spec.resources[storage]: Required value".into());
            }
        }
        resources::PV => {
            if objects::path(obj, "spec.capacity.storage").is_none() {
                errs.push("spec.capacity: Required value".into());
            }
            if objects::path(obj, "spec.accessModes")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            {
                errs.push("spec.accessModes: Required value".into());
            }
            let source = pv_source(obj);
            if source.is_empty() {
                errs.push("spec: Required value: must specify a volume type".into());
            } else if source.len() > 1 {
                errs.push("spec: Forbidden: may not specify more than 1 volume type".into());
            }
            if source.iter().any(|(k, _)| k.as_str() == "local")
                && objects::path(obj, "spec.nodeAffinity").is_none()
            {
                errs.push(
                    "spec.nodeAffinity: Required value: Local volume requires node affinity".into(),
                );
            }
        }
        resources::STORAGE_CLASS
            if objects::path_str(obj, "provisioner").is_none_or(str::is_empty) =>
        {
            errs.push("provisioner: Required value".into());
        }
        resources::CONFIG_MAP => validate_config_map(obj, &mut errs),
        _ => {}
    }
    if let Some(old) = old {
        validate_update(res, obj, old, &mut errs);
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(invalid(res, &name, errs))
    }
}

fn validate_update(res: ResourceId, new: &Value, old: &Value, errs: &mut Vec<String>) {
    if objects::is_deleting(old) {
        let before = objects::finalizers(old);
        if objects::finalizers(new).iter().any(|f| !before.contains(f)) {
            errs.push("metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted".into());
        }
    }
    match res {
        resources::PVC => {
            let strip = |v: &Value| {
                let mut s = v.get("spec").cloned().unwrap_or(Value::Null);
                if let Some(m) = s.as_object_mut() {
                    m.remove("volumeAttributesClassName");
                    if let Some(r) = m.get_mut("resources").and_then(Value::as_object_mut) {
                        r.remove("requests");
                    }
                }
                s
            };
            let (mut a, b) = (strip(old), strip(new));
            // Binding may fill in an empty volumeName.
            if objects::path_str(old, "spec.volumeName").is_none_or(str::is_empty) {
                if let (Some(m), Some(v)) = (a.as_object_mut(), b.get("volumeName")) {
                    m.insert("volumeName".into(), v.clone());
                }
            }
            if a != b {
                errs.push("spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims".into());
            }
        }
        resources::PV if pv_source(old) != pv_source(new) => {
            errs.push("spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation".into());
        }
        resources::STORAGE_CLASS => {
            for f in [
                "parameters",
                "provisioner",
                "reclaimPolicy",
                "volumeBindingMode",
            ] {
                if old.get(f) != new.get(f) {
                    errs.push(format!("{f}: Forbidden: updates to {f} are forbidden."));
                }
            }
        }
        resources::CONFIG_MAP if old.get("immutable") == Some(&Value::Bool(true)) => {
            if old.get("immutable") != new.get("immutable") {
                errs.push(
                    "immutable: Forbidden: field is immutable when `immutable` is set".into(),
                );
            }
            for f in ["data", "binaryData"] {
                if old.get(f) != new.get(f) {
                    errs.push(format!(
                        "{f}: Forbidden: field is immutable when `immutable` is set"
                    ));
                }
            }
        }
        _ => {}
    }
}

/// events.k8s.io/v1 requires what the new event API is about.
pub fn validate_event_v1(obj: &Value) -> ApiResult<()> {
    let mut errs = Vec::new();
    let has = |f: &str| objects::path_str(obj, f).is_some_and(|s| !s.is_empty());
    for f in [
        "eventTime",
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
    ] {
        if !has(f) {
            errs.push(format!("{f}: Required value"));
        }
    }
    match objects::path_str(obj, "type") {
        Some("Normal" | "Warning") => {}
        other => errs.push(format!(
            "type: Unsupported value: \"{}\": supported values: \"Normal\", \"Warning\"",
            other.unwrap_or("")
        )),
    }
    if objects::path_str(obj, "note").is_some_and(|n| n.len() > 1024) {
        errs.push("note: Too long: may not be more than 1024 bytes".into());
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(invalid(resources::EVENT_V1, objects::name(obj), errs))
    }
}

/// What one ConfigMap may hold (`MaxConfigMapSize`): keys plus values of
/// `data` and (decoded) `binaryData`.
pub const MAX_CONFIG_MAP_BYTES: usize = 1024 * 1024;

fn is_config_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 253
        && k != "."
        && k != ".."
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn validate_config_map(obj: &Value, errs: &mut Vec<String>) {
    let mut total = 0usize;
    for field in ["data", "binaryData"] {
        let Some(map) = obj.get(field).and_then(Value::as_object) else {
            continue;
        };
        for (k, v) in map {
            if !is_config_key(k) {
                errs.push(format!(
                    "{field}[{k}]: Invalid value: \"{k}\": a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
                ));
            }
            if field == "binaryData" && obj.get("data").and_then(|d| d.get(k)).is_some() {
                errs.push(format!(
                    "data[{k}]: Invalid value: \"{k}\": duplicate of key present in binaryData"
                ));
            }
            let len = v.as_str().map_or(0, |s| {
                if field == "binaryData" {
                    // base64 on the wire: count the decoded bytes.
                    let pad = s.bytes().rev().take_while(|b| *b == b'=').count();
                    (s.len() / 4 * 3).saturating_sub(pad)
                } else {
                    s.len()
                }
            });
            total += k.len() + len;
        }
    }
    if total > MAX_CONFIG_MAP_BYTES {
        errs.push(format!(
            "[]: Too long: must have at most {MAX_CONFIG_MAP_BYTES} bytes"
        ));
    }
}
