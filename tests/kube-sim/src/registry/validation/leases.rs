//! Lease (`ValidateLease`): durations positive, transitions not negative.
//! Nothing in a Lease's spec is immutable.

use serde_json::Value;

use super::field;
use crate::objects;

pub fn validate(obj: &Value, errs: &mut Vec<String>) {
    if let Some(seconds) = objects::path(obj, "spec.leaseDurationSeconds").filter(|v| !v.is_null())
    {
        if seconds.as_i64().is_some_and(|s| s <= 0) {
            errs.push(field::invalid_value(
                "spec.leaseDurationSeconds",
                seconds,
                "must be greater than 0",
            ));
        }
    }
    if let Some(transitions) = objects::path(obj, "spec.leaseTransitions").filter(|v| !v.is_null())
    {
        if transitions.as_i64().is_some_and(|t| t < 0) {
            errs.push(field::invalid_value(
                "spec.leaseTransitions",
                transitions,
                "must be greater than or equal to 0",
            ));
        }
    }
}
