//! PersistentVolumeClaim (`ValidatePersistentVolumeClaim` and its update).

use serde_json::Value;

use super::{field, names};
use crate::objects;

pub const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
pub const VOLUME_MODES: &[&str] = &["Block", "Filesystem"];

pub fn validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<String>) {
    let modes = objects::path(obj, "spec.accessModes").and_then(Value::as_array);
    if modes.is_none_or(Vec::is_empty) {
        errs.push(field::required(
            "spec.accessModes",
            "at least 1 access mode is required",
        ));
    }
    access_modes(modes, errs);
    match objects::path(obj, "spec.resources.requests.storage") {
        None => errs.push(field::required("spec.resources[storage]", "")),
        Some(storage) => positive("spec.resources[storage]", storage, errs),
    }
    if let Some(class) = objects::path_str(obj, "spec.storageClassName").filter(|c| !c.is_empty()) {
        errs.extend(field::invalid_each(
            "spec.storageClassName",
            class,
            names::dns_subdomain(class),
        ));
    }
    volume_mode(obj, errs);
    if let Some(old) = old {
        update(obj, old, errs);
    }
}

/// One error per access mode that is not one, and ReadWriteOncePod alone.
pub fn access_modes(modes: Option<&Vec<Value>>, errs: &mut Vec<String>) {
    let modes = modes.map(Vec::as_slice).unwrap_or_default();
    for mode in modes {
        if !mode.as_str().is_some_and(|m| ACCESS_MODES.contains(&m)) {
            errs.push(field::not_supported("spec.accessModes", mode, ACCESS_MODES));
        }
    }
    if modes.len() > 1 && modes.iter().any(|m| m == "ReadWriteOncePod") {
        errs.push(field::forbidden(
            "spec.accessModes",
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

/// `spec.volumeMode`, if given, is one (claims and volumes alike).
pub fn volume_mode(obj: &Value, errs: &mut Vec<String>) {
    if let Some(mode) = objects::path(obj, "spec.volumeMode") {
        if !mode.as_str().is_some_and(|m| VOLUME_MODES.contains(&m)) {
            errs.push(field::not_supported("spec.volumeMode", mode, VOLUME_MODES));
        }
    }
}

/// A quantity that must be greater than zero.
pub fn positive(path: &str, quantity: &Value, errs: &mut Vec<String>) {
    let text = quantity
        .as_str()
        .map(str::to_owned)
        .unwrap_or(quantity.to_string());
    if field::quantity(&text).is_some_and(|v| v <= 0.0) {
        errs.push(field::invalid(
            path,
            &field::canonical_non_positive(&text),
            "must be greater than zero",
        ));
    }
}

fn update(obj: &Value, old: &Value, errs: &mut Vec<String>) {
    let spec = |v: &Value| {
        v.get("spec")
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default()))
    };
    let (mut before, mut after) = (spec(old), spec(obj));
    let bound = objects::path_str(old, "status.phase") == Some("Bound");
    for each in [&mut before, &mut after] {
        let Some(m) = each.as_object_mut() else {
            continue;
        };
        // Set once: binding fills in volumeName, a class may be given to
        // a claim that had none.
        for once in ["volumeName", "storageClassName"] {
            if old["spec"][once].as_str().is_none_or(str::is_empty) {
                m.remove(once);
            }
        }
        // A bound claim may be resized, and change its attributes class.
        if bound {
            m.remove("volumeAttributesClassName");
            if let Some(requests) = m
                .get_mut("resources")
                .and_then(|r| r.get_mut("requests"))
                .and_then(Value::as_object_mut)
            {
                requests.remove("storage");
            }
        }
        m.retain(|_, v| !v.is_null());
    }
    if before != after {
        errs.push(field::forbidden(
            "spec",
            "spec is immutable after creation except resources.requests and \
             volumeAttributesClassName for bound claims\n(the real API server shows a diff of \
             the spec here; the simulator does not)",
        ));
    }
    volume_mode_kept(obj, old, errs);
}

/// A claim's or volume's volumeMode never changes (its path is reported
/// without `spec.`, as the real server does).
pub fn volume_mode_kept(obj: &Value, old: &Value, errs: &mut Vec<String>) {
    let mode = |v: &Value| objects::path(v, "spec.volumeMode").cloned();
    if mode(old) != mode(obj) {
        errs.push(field::invalid_value(
            "volumeMode",
            &mode(obj).unwrap_or(Value::Null),
            "field is immutable",
        ));
    }
}
