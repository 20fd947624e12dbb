//! A returned volume checked against what the operator lets its plugin
//! return ([`OutputPolicy`]): the source kind and where it points, that the
//! location is this claim's own, secret references, node files, mount
//! options, node affinity, size, label and annotation keys.

use serde_json::Value;

use crate::policy::output::{one_option, reserved_domain, NODE_FILE_FIELDS};
use crate::policy::{OutputPolicy, Preopen};
use crate::provisioner::ProvisionOptions;
use crate::quantity::Bytes;
use crate::runtime::bindings::types as wit;
use crate::text::escape_control;

mod location;
mod node_affinity;

use location::{check_csi, check_export, check_path, outside_preopens, Owner};
use node_affinity::check_node_affinity;

/// Every reason `policy` refuses `volume`, made for the request `opts`, each
/// with the grant that would allow it. `source` is the volume's source,
/// already parsed and known to name exactly one kind; `preopens` are the
/// directories the plugin was given, to explain a path it cannot have made.
pub fn check(
    policy: &OutputPolicy,
    preopens: &[Preopen],
    opts: &ProvisionOptions,
    volume: &wit::Volume,
    source: &Value,
) -> Vec<String> {
    let mut refusals = Vec::new();
    let Some((kind, fields)) = source.as_object().and_then(|o| o.iter().next()) else {
        // The volume was validated first; refuse rather than wave through.
        refusals.push("its source names no volume type".to_owned());
        return refusals;
    };
    let owner = Owner {
        volume_name: &opts.pv_name,
        required: policy.require_volume_name,
    };
    if !policy.sources.contains(kind) {
        refusals.push(format!(
            "it returned a {kind} source, and the policy grants {} (grant: output.sources: [{kind}])",
            listed(policy.sources.iter())
        ));
    } else {
        let location = match kind.as_str() {
            "hostPath" | "local" => {
                let path = fields["path"].as_str().unwrap_or_default();
                shown_as_is(path)
                    .and_then(|()| check_path(path, policy, &owner))
                    .map_err(|e| match outside_preopens(path, preopens) {
                        Some(cause) => format!("{kind}.path {e}; {cause}"),
                        None => format!("{kind}.path {e}"),
                    })
            }
            "nfs" => {
                let server = fields["server"].as_str().unwrap_or_default();
                let path = fields["path"].as_str().unwrap_or_default();
                shown_as_is(server)
                    .map_err(|e| format!("nfs.server {e}"))
                    .and_then(|()| shown_as_is(path).map_err(|e| format!("nfs.path {e}")))
                    .and_then(|()| check_export(server, path, policy, &owner))
            }
            "csi" => check_csi(fields, policy, &owner),
            // Granted under uncheckedSources: nothing the host can check.
            _ => Ok(()),
        };
        if let Err(e) = location {
            refusals.push(e);
        }
    }
    for (source_kind, field) in NODE_FILE_FIELDS {
        if kind == source_kind && fields.get(*field).is_some_and(|v| !v.is_null()) {
            refusals.push(format!(
                "{kind}.{field} names a file on the node as credentials; no plugin may choose which node file a pod's mount reads: use a secretRef"
            ));
        }
    }
    let mut secrets = Vec::new();
    secret_references(kind, fields, &mut kind.clone(), &mut secrets);
    for (at, namespace) in secrets {
        match namespace {
            Some(ns) if policy.secret_namespaces.contains(&ns) => {}
            Some(ns) => refusals.push(format!(
                "{at} refers to a Secret in namespace {ns:?}, and the policy lets secret references name {} (grant: output.secretNamespaces)",
                listed(policy.secret_namespaces.iter())
            )),
            None => refusals.push(format!(
                "{at} refers to a Secret without naming its namespace; a volume's secret reference must name a granted namespace"
            )),
        }
    }
    for option in &volume.mount_options {
        if let Err(e) = one_option(option) {
            refusals.push(format!("mount option {e}"));
        } else if !pair_granted(option, &policy.mount_options) {
            refusals.push(format!(
                "mount option {option:?} is not granted ({}) (grant: output.mountOptions)",
                listed(policy.mount_options.iter())
            ));
        }
    }
    if let Some(affinity) = &volume.node_affinity {
        if let Err(e) = check_node_affinity(affinity, opts, policy.any_node_affinity) {
            refusals.push(e);
        }
    }
    if volume.capacity_bytes > policy.max_capacity_bytes {
        refusals.push(too_large(volume.capacity_bytes, policy.max_capacity_bytes));
    }
    for (what, pairs, prefixes, grant) in [
        (
            "label",
            &volume.labels,
            &policy.label_prefixes,
            "labelPrefixes",
        ),
        (
            "annotation",
            &volume.annotations,
            &policy.annotation_prefixes,
            "annotationPrefixes",
        ),
    ] {
        for (key, _) in pairs {
            if let Some(domain) = reserved_domain(key) {
                refusals.push(format!(
                    "{what} {key:?} is under {domain}, which belongs to Kubernetes or to wasmprov; no plugin may set it"
                ));
            } else if !prefixes.iter().any(|p| key.starts_with(p.as_str())) {
                refusals.push(format!(
                    "{what} {key:?} is not under a granted prefix ({}) (grant: output.{grant})",
                    listed(prefixes.iter())
                ));
            }
        }
    }
    refusals
}

/// A location holds no control or invisible character: `nfs.path` ending
/// in `\n,exec` or a directory name with an escape sequence reads as
/// something else in `kubectl`, logs and mount tables.
fn shown_as_is(value: &str) -> Result<(), String> {
    match value.chars().find(|c| crate::text::needs_escape(*c)) {
        Some(c) => Err(format!(
            "\"{}\" holds the character U+{:04X}, which shows as something else or nothing; a location may hold none",
            escape_control(value),
            c as u32
        )),
        None => Ok(()),
    }
}

/// Why a capacity is refused: above the plugin's `maxCapacity`.
pub fn too_large(bytes: u64, max: u64) -> String {
    format!(
        "a capacity of {} ({bytes} bytes) is above the largest volume the policy lets this plugin make, {} (grant: output.maxCapacity)",
        Bytes(bytes),
        Bytes(max)
    )
}

/// Collects `(where, namespace)` of every secret reference in a source:
/// fields named `secretRef` or `…SecretRef`, and azureFile's `secretName`.
fn secret_references(
    key: &str,
    value: &Value,
    at: &mut String,
    out: &mut Vec<(String, Option<String>)>,
) {
    let Value::Object(fields) = value else {
        return;
    };
    if key == "secretRef" || key.ends_with("SecretRef") {
        let ns = fields.get("namespace").and_then(Value::as_str);
        out.push((at.clone(), ns.filter(|n| !n.is_empty()).map(str::to_owned)));
        return;
    }
    if fields.contains_key("secretName") && key == "azureFile" {
        let ns = fields.get("secretNamespace").and_then(Value::as_str);
        out.push((
            format!("{at}.secretName"),
            // Kubernetes reads azureFile's secret from "default" when unset.
            Some(ns.filter(|n| !n.is_empty()).unwrap_or("default").to_owned()),
        ));
    }
    for (k, v) in fields {
        let len = at.len();
        at.push('.');
        at.push_str(k);
        secret_references(k, v, at, out);
        at.truncate(len);
    }
}

/// `option` is granted exactly, or by a `key=*` grant.
fn pair_granted(option: &str, grants: &[String]) -> bool {
    grants.iter().any(|g| match g.strip_suffix('*') {
        Some(key) if key.ends_with('=') => option.starts_with(key),
        _ => g == option,
    })
}

fn listed<T: std::fmt::Display>(items: impl Iterator<Item = T>) -> String {
    let all: Vec<String> = items.map(|i| i.to_string()).collect();
    if all.is_empty() {
        "none".to_owned()
    } else {
        all.join(", ")
    }
}

#[cfg(test)]
mod tests;
