//! Node (`ValidateNode`, `ValidateNodeUpdate`): what a user creating or
//! editing a Node by hand meets: taints, pod CIDRs, the provider ID.

use serde_json::Value;

use super::{field, names};
use crate::objects;

const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

pub fn validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<String>) {
    let taints = objects::path(obj, "spec.taints").and_then(Value::as_array);
    let mut seen: Vec<(String, String)> = Vec::new();
    for (i, taint) in taints.into_iter().flatten().enumerate() {
        let at = format!("metadata.taints[{i}]");
        let key = taint["key"].as_str().unwrap_or_default();
        errs.extend(field::invalid_each(
            &format!("{at}.key"),
            key,
            names::qualified_name(key),
        ));
        if let Some(value) = taint["value"].as_str() {
            let problems = names::label_value(value);
            if !problems.is_empty() {
                errs.push(field::invalid(
                    &format!("{at}.value"),
                    value,
                    &problems.join(";"),
                ));
            }
        }
        let effect = taint["effect"].as_str().unwrap_or_default();
        if effect.is_empty() {
            errs.push(field::required(&format!("{at}.effect"), ""));
        } else if !TAINT_EFFECTS.contains(&effect) {
            errs.push(field::not_supported(
                &format!("{at}.effect"),
                &taint["effect"],
                TAINT_EFFECTS,
            ));
        }
        let pair = (key.to_owned(), effect.to_owned());
        if seen.contains(&pair) {
            let value = serde_json::json!({
                "Key": key, "Value": taint["value"].as_str().unwrap_or_default(),
                "Effect": effect, "TimeAdded": null,
            });
            errs.push(field::duplicate(
                &at,
                &value,
                "taints must be unique by key and effect pair",
            ));
        }
        seen.push(pair);
    }
    let cidrs = pod_cidrs(obj);
    for (i, cidr) in cidrs.iter().enumerate() {
        if let Some(problem) = cidr_problem(cidr) {
            errs.push(field::invalid(
                &format!("spec.podCIDRs[{i}]"),
                cidr,
                problem,
            ));
        }
    }
    if let Some(old) = old {
        let before = pod_cidrs(old);
        if !before.is_empty() && before != cidrs {
            errs.push(field::forbidden(
                "spec.podCIDRs",
                "node updates may not change podCIDR except from \"\" to valid",
            ));
        }
        let provider = |v: &Value| {
            objects::path_str(v, "spec.providerID")
                .unwrap_or_default()
                .to_owned()
        };
        let (was, is) = (provider(old), provider(obj));
        if !was.is_empty() && was != is {
            let detail = if is.is_empty() {
                "field cannot be cleared once set"
            } else {
                "field cannot be modified once set"
            };
            errs.push(field::invalid_value(
                "spec.providerID",
                &Value::Null,
                detail,
            ));
        }
    }
}

/// `spec.podCIDRs`, or `[spec.podCIDR]` as the real server converts it.
fn pod_cidrs(obj: &Value) -> Vec<String> {
    let list: Vec<String> = objects::path(obj, "spec.podCIDRs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str().map(str::to_owned))
        .collect();
    match objects::path_str(obj, "spec.podCIDR").filter(|c| !c.is_empty()) {
        Some(first) if list.first().map(String::as_str) != Some(first) => vec![first.to_owned()],
        _ => list,
    }
}

/// Why `cidr` is not a CIDR the real server takes (IPv4 only is checked
/// beyond parsing).
fn cidr_problem(cidr: &str) -> Option<&'static str> {
    const NOT_CIDR: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";
    let Some((address, prefix)) = cidr.split_once('/') else {
        return Some(NOT_CIDR);
    };
    let Ok(prefix_len) = prefix.parse::<u8>() else {
        return Some(NOT_CIDR);
    };
    if let Ok(v6) = address.parse::<std::net::Ipv6Addr>() {
        return (prefix_len > 128).then_some(NOT_CIDR).or_else(|| {
            v6.to_ipv4_mapped()
                .map(|_| "must not have an IPv4-mapped IPv6 address")
        });
    }
    let parts: Vec<&str> = address.split('.').collect();
    if parts.len() != 4 || prefix_len > 32 || parts.iter().any(|p| p.parse::<u8>().is_err()) {
        return Some(NOT_CIDR);
    }
    if parts
        .iter()
        .chain([&prefix])
        .any(|p| p.len() > 1 && p.starts_with('0'))
    {
        return Some("must not have leading 0s in IP or prefix length");
    }
    let address: std::net::Ipv4Addr = address.parse().ok()?;
    let mask = u32::MAX
        .checked_shl(32 - u32::from(prefix_len))
        .unwrap_or(0);
    (u32::from(address) & !mask != 0).then_some("must not have bits set beyond the prefix length")
}
