//! StorageClass (`ValidateStorageClass`, and the declarative checks the
//! real server runs after it: `provisioner` required, four fields
//! immutable, those errors last).

use serde_json::Value;

use super::{field, names};
use crate::objects;

const RECLAIM_POLICIES: &[&str] = &["Delete", "Retain"];
const BINDING_MODES: &[&str] = &["Immediate", "WaitForFirstConsumer"];
const MAX_PARAMETERS: usize = 512;
const MAX_PARAMETERS_BYTES: usize = 256 * 1024;

pub fn validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<String>) {
    let provisioner = objects::path_str(obj, "provisioner").unwrap_or_default();
    if !provisioner.is_empty() {
        let lower = provisioner.to_lowercase();
        errs.extend(field::invalid_each(
            "provisioner",
            &lower,
            names::qualified_name(&lower),
        ));
    }
    if let Some(parameters) = obj.get("parameters").and_then(Value::as_object) {
        if parameters.len() > MAX_PARAMETERS {
            errs.push(field::too_long("parameters", MAX_PARAMETERS));
        } else {
            let mut total = 0;
            for (key, value) in parameters {
                if key.is_empty() {
                    errs.push(field::invalid("parameters", "", "field can not be empty."));
                }
                total += key.len() + value.as_str().map_or(0, str::len);
            }
            if total > MAX_PARAMETERS_BYTES {
                errs.push(field::too_long("parameters", MAX_PARAMETERS_BYTES));
            }
        }
    }
    for (path, supported) in [
        ("reclaimPolicy", RECLAIM_POLICIES),
        ("volumeBindingMode", BINDING_MODES),
    ] {
        if let Some(value) = obj.get(path).filter(|v| !v.is_null() && *v != "") {
            if !value.as_str().is_some_and(|v| supported.contains(&v)) {
                errs.push(field::not_supported(path, value, supported));
            }
        }
    }
    if provisioner.is_empty() {
        errs.push(field::required("provisioner", ""));
    }
    if let Some(old) = old {
        for path in [
            "provisioner",
            "parameters",
            "reclaimPolicy",
            "volumeBindingMode",
        ] {
            let empty_is_none = |v: Option<&Value>| {
                v.filter(|v| !v.is_null() && v.as_object().is_none_or(|m| !m.is_empty()))
                    .cloned()
            };
            if empty_is_none(old.get(path)) != empty_is_none(obj.get(path)) {
                errs.push(field::invalid_value(
                    path,
                    &Value::Null,
                    "field is immutable",
                ));
            }
        }
    }
}
