//! Object metadata (apimachinery's `ValidateObjectMeta` and its update
//! checks): the name, labels, annotations and finalizers.

use serde_json::Value;

use super::{field, names};
use crate::objects;
use crate::resources::{self, ResourceId};

/// The largest total of annotation keys and values.
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Finalizers a core object may carry without a `/`.
const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

pub fn validate(res: ResourceId, obj: &Value, old: Option<&Value>, errs: &mut Vec<String>) {
    if let Some(old) = old {
        update(obj, old, errs);
    }
    let name = objects::name(obj);
    if old.is_none() && !name.is_empty() {
        let problems = match res {
            resources::NAMESPACE => names::dns_label(name),
            // core/v1 Events have no name rule but the path-segment one.
            resources::EVENT => Vec::new(),
            _ => names::dns_subdomain(name),
        };
        errs.extend(field::invalid_each("metadata.name", name, problems));
    }
    if let Some(labels) = objects::labels(obj) {
        for (key, value) in labels {
            let value = value.as_str().unwrap_or_default();
            errs.extend(field::invalid_each(
                "metadata.labels",
                key,
                names::qualified_name(key),
            ));
            errs.extend(field::invalid_each(
                "metadata.labels",
                value,
                names::label_value(value),
            ));
        }
    }
    if let Some(annotations) = objects::meta(obj)
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    {
        let mut total = 0;
        for (key, value) in annotations {
            errs.extend(field::invalid_each(
                "metadata.annotations",
                key,
                names::qualified_name(&key.to_lowercase()),
            ));
            total += key.len() + value.as_str().map_or(0, str::len);
        }
        if total > MAX_ANNOTATIONS_BYTES {
            errs.push(field::too_long(
                "metadata.annotations",
                MAX_ANNOTATIONS_BYTES,
            ));
        }
    }
    let finalizers = objects::finalizers(obj);
    for finalizer in &finalizers {
        errs.extend(field::invalid_each(
            "metadata.finalizers",
            finalizer,
            names::qualified_name(finalizer),
        ));
    }
    if finalizers.iter().any(|f| f == "orphan")
        && finalizers.iter().any(|f| f == "foregroundDeletion")
    {
        errs.push(field::invalid_value(
            "metadata.finalizers",
            &Value::from(finalizers.clone()),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    if matches!(
        res,
        resources::PVC
            | resources::PV
            | resources::CONFIG_MAP
            | resources::NODE
            | resources::STORAGE_CLASS
            | resources::EVENT_V1
    ) {
        for (i, finalizer) in finalizers.iter().enumerate() {
            if !finalizer.contains('/') && !STANDARD_FINALIZERS.contains(&finalizer.as_str()) {
                errs.push(field::invalid(
                    &format!("metadata.finalizers[{i}]"),
                    finalizer,
                    "name is neither a standard finalizer name nor is it fully qualified",
                ));
            }
        }
    }
}

/// What may not change on an update.
fn update(obj: &Value, old: &Value, errs: &mut Vec<String>) {
    if objects::is_deleting(old) {
        let before = objects::finalizers(old);
        let added: Vec<String> = objects::finalizers(obj)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            let listed: Vec<String> = added.iter().map(|f| field::quoted(f)).collect();
            errs.push(field::forbidden(
                "metadata.finalizers",
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new \
                     finalizers []string{{{}}}",
                    listed.join(", ")
                ),
            ));
        }
    }
}
