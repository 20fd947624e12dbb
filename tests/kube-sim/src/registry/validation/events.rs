//! Events (`ValidateEventCreate`): one store serves `/api/v1` and
//! events.k8s.io/v1, and the errors name core/v1's fields either way
//! (`involvedObject`, `message`), but for the reporting controller.

use serde_json::Value;

use super::{field, names};
use crate::objects;

const MAX_SHORT: usize = 128;
const MAX_MESSAGE: usize = 1024;

/// The checks every Event meets, on its core/v1 shape (`reporting` is the
/// name its API gives the reporting controller field).
fn legacy(obj: &Value, event_ns: &str, reporting: &str, errs: &mut Vec<String>) {
    let involved_ns = objects::path_str(obj, "involvedObject.namespace").unwrap_or_default();
    let set = |f: &str| objects::path_str(obj, f).is_some_and(|s| !s.is_empty());
    if !set("eventTime") {
        let mismatch = if involved_ns.is_empty() {
            !matches!(event_ns, "" | "default")
        } else {
            involved_ns != event_ns
        };
        if mismatch {
            errs.push(field::invalid(
                "involvedObject.namespace",
                involved_ns,
                "does not match event.namespace",
            ));
        }
        return;
    }
    if involved_ns.is_empty() && !matches!(event_ns, "default" | "kube-system") {
        errs.push(field::invalid(
            "involvedObject.namespace",
            "",
            "does not match event.namespace",
        ));
    }
    let controller = objects::path_str(obj, "reportingComponent").unwrap_or_default();
    if controller.is_empty() {
        errs.push(field::required(reporting, ""));
    }
    errs.extend(field::invalid_each(
        reporting,
        controller,
        names::qualified_name(controller),
    ));
    for (path, limit) in [
        ("reportingInstance", MAX_SHORT),
        ("action", MAX_SHORT),
        ("reason", MAX_SHORT),
    ] {
        let value = objects::path_str(obj, path).unwrap_or_default();
        if value.is_empty() {
            errs.push(field::required(path, ""));
        } else if value.len() > limit {
            errs.push(field::invalid(
                path,
                "",
                &format!("can have at most {limit} characters"),
            ));
        }
    }
    if objects::path_str(obj, "message").is_some_and(|m| m.len() > MAX_MESSAGE) {
        errs.push(field::invalid(
            "message",
            "",
            &format!("can have at most {MAX_MESSAGE} characters"),
        ));
    }
}

/// A core/v1 Event.
pub fn validate_core(obj: &Value, errs: &mut Vec<String>) {
    legacy(obj, objects::namespace(obj), "reportingComponent", errs);
}

/// An events.k8s.io/v1 Event being created, given in its core/v1 shape
/// (`crate::convert`); `meta` the metadata errors, which come after the
/// checks all Events meet.
pub fn validate_v1(core: &Value, meta: Vec<String>, errs: &mut Vec<String>) {
    legacy(core, objects::namespace(core), "reportingController", errs);
    errs.extend(meta);
    if let Some(series) = core.get("series").filter(|s| !s.is_null()) {
        if series["count"].as_i64().unwrap_or(0) < 2 {
            errs.push(field::invalid("series.count", "", "should be at least 2"));
        }
        if series["lastObservedTime"]
            .as_str()
            .is_none_or(str::is_empty)
        {
            errs.push(field::required("series.lastObservedTime", ""));
        }
    }
    if objects::path_str(core, "eventTime").is_none_or(str::is_empty) {
        errs.push(field::required("eventTime", ""));
    }
    let kind = objects::path_str(core, "type").unwrap_or_default();
    if !matches!(kind, "Normal" | "Warning") {
        errs.push(field::invalid(
            "type",
            "",
            &format!("has invalid value: {kind}"),
        ));
    }
    let set = |f: &str| {
        core.get(f)
            .is_some_and(|v| !v.is_null() && *v != 0 && *v != "")
    };
    for deprecated in ["firstTimestamp", "lastTimestamp", "count"] {
        if set(deprecated) {
            errs.push(field::invalid(deprecated, "", "needs to be unset"));
        }
    }
    let source = |f: &str| objects::path_str(core, f).is_some_and(|s| !s.is_empty());
    if source("source.component") || source("source.host") {
        errs.push(field::invalid("source", "", "needs to be unset"));
    }
}
