//! Validation as kube-apiserver does it, kind by kind: the same verdict,
//! the same field paths, the same messages and the same order, for create
//! and for every way of updating (PUT, the three patches, server-side
//! apply all end in `validate`). What is not modelled is said where it
//! would be; the rules were read from Kubernetes 1.37's
//! `pkg/apis/*/validation`, and `tests/differential.rs` holds the
//! simulator to the real server's answers for a table of invalid objects.

use serde_json::Value;

use super::target;
use crate::error::{ApiError, ApiResult, Cause};
use crate::objects;
use crate::resources::{self, ResourceId, RESOURCES};

mod claims;
mod classes;
mod config_maps;
mod events;
mod field;
mod leases;
mod meta;
mod names;
mod nodes;
mod volumes;

/// The 422 for `errors` (`path: Type: detail` each), listed once each as
/// the real server's aggregate does.
pub fn invalid(res: ResourceId, name: &str, errors: Vec<String>) -> ApiError {
    let mut seen = std::collections::HashSet::new();
    ApiError::Invalid {
        target: target(res, name),
        kind: RESOURCES[res].kind,
        causes: errors
            .iter()
            .filter(|e| seen.insert(e.to_string()))
            .map(|e| Cause::from_field_error(e))
            .collect(),
    }
}

/// Checks `obj` (the new version of `old`, on an update) as the real
/// server checks objects of its kind.
pub fn validate(res: ResourceId, obj: &Value, old: Option<&Value>) -> ApiResult<()> {
    let mut errs = Vec::new();
    meta::validate(res, obj, old, &mut errs);
    match res {
        resources::PVC => claims::validate(obj, old, &mut errs),
        resources::PV => volumes::validate(obj, old, &mut errs),
        resources::STORAGE_CLASS => classes::validate(obj, old, &mut errs),
        resources::LEASE => leases::validate(obj, &mut errs),
        resources::CONFIG_MAP => config_maps::validate(obj, old, &mut errs),
        resources::NODE => nodes::validate(obj, old, &mut errs),
        resources::EVENT => events::validate_core(obj, &mut errs),
        _ => {}
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(invalid(res, objects::name(obj), errs))
    }
}

/// An events.k8s.io/v1 Event being created, in its stored (core/v1) shape
/// with its namespace set.
pub fn validate_event_v1(core: &Value) -> ApiResult<()> {
    let mut meta = Vec::new();
    meta::validate(resources::EVENT_V1, core, None, &mut meta);
    let mut errs = Vec::new();
    events::validate_v1(core, meta, &mut errs);
    if errs.is_empty() {
        Ok(())
    } else {
        // Both APIs store core Events: the real server names the core kind.
        Err(invalid(resources::EVENT, objects::name(core), errs))
    }
}

/// Why a quantity of `obj` would not decode on the real server (its
/// `resource.Quantity` parser runs before validation: a 400, not a 422).
pub fn bad_quantity(res: ResourceId, obj: &Value) -> Option<&'static str> {
    let maps: &[&str] = match res {
        resources::PVC => &["spec.resources.requests", "spec.resources.limits"],
        resources::PV => &["spec.capacity"],
        resources::NODE => &["status.capacity", "status.allocatable"],
        _ => &[],
    };
    maps.iter()
        .filter_map(|m| objects::path(obj, m).and_then(Value::as_object))
        .flat_map(|m| m.values())
        .find_map(|q| field::quantity_error(q.as_str().unwrap_or_default()))
}
