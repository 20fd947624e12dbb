//! ConfigMap (`ValidateConfigMap`, `ValidateConfigMapUpdate`): keys, the
//! 1 MiB of values, and what `immutable: true` freezes.

use serde_json::Value;

use super::{field, names};

/// What one ConfigMap may hold (`MaxConfigMapSize`): the values of `data`
/// and (decoded) `binaryData`; keys are not counted.
pub const MAX_CONFIG_MAP_BYTES: usize = 1024 * 1024;

pub fn validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<String>) {
    if let Some(old) = old {
        update(obj, old, errs);
    }
    let data = obj.get("data").and_then(Value::as_object);
    let binary = obj.get("binaryData").and_then(Value::as_object);
    let mut total = 0usize;
    for (key, value) in data.into_iter().flatten() {
        errs.extend(field::invalid_each(
            &format!("data[{key}]"),
            key,
            names::config_map_key(key),
        ));
        if binary.is_some_and(|b| b.contains_key(key)) {
            errs.push(field::invalid(
                &format!("data[{key}]"),
                key,
                "duplicate of key present in binaryData",
            ));
        }
        total += value.as_str().map_or(0, str::len);
    }
    for (key, value) in binary.into_iter().flatten() {
        errs.extend(field::invalid_each(
            &format!("binaryData[{key}]"),
            key,
            names::config_map_key(key),
        ));
        // base64 on the wire: count the decoded bytes.
        total += value.as_str().map_or(0, |s| {
            let pad = s.bytes().rev().take_while(|b| *b == b'=').count();
            (s.len() / 4 * 3).saturating_sub(pad)
        });
    }
    if total > MAX_CONFIG_MAP_BYTES {
        errs.push(field::too_long("[]", MAX_CONFIG_MAP_BYTES));
    }
}

fn update(obj: &Value, old: &Value, errs: &mut Vec<String>) {
    if old.get("immutable") != Some(&Value::Bool(true)) {
        return;
    }
    let frozen = "field is immutable when `immutable` is set";
    if obj.get("immutable") != Some(&Value::Bool(true)) {
        errs.push(field::forbidden("immutable", frozen));
    }
    for key in ["data", "binaryData"] {
        if old.get(key) != obj.get(key) {
            errs.push(field::forbidden(key, frozen));
        }
    }
}
