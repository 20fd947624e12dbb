//! The plugin's returned volume → a validated PersistentVolume.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference, PersistentVolume,
    PersistentVolumeClaimSpec, VolumeNodeAffinity,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::policy::OutputPolicy;
use crate::provisioner::{annotations, ProvisionOptions};
use crate::quantity::{self, Bytes};
use crate::runtime::bindings::types as wit;

use super::request::plugin_parameters;
use super::source;

/// What identifies the plugin on the volumes it makes, and what of the
/// class is recorded with them.
pub struct Provenance<'a> {
    pub plugin: &'a str,
    pub digest: &'a str,
    /// Says which class parameters to record (`recordParameters` less
    /// `secretParameters`).
    pub output: &'a OutputPolicy,
}

/// Builds the PersistentVolume for `opts` from the plugin's answer. Every
/// problem is reported as one message naming the field; nothing is saved.
pub fn build(
    opts: &ProvisionOptions,
    volume: &wit::Volume,
    provenance: &Provenance<'_>,
) -> Result<PersistentVolume, String> {
    let claim = &opts.claim;
    let class = &opts.class;
    let no_spec = PersistentVolumeClaimSpec::default();
    let claim_spec = claim.spec.as_ref().unwrap_or(&no_spec);

    check_sizes(volume)?;
    if volume.capacity_bytes == 0 {
        return Err("capacity-bytes is 0; a volume must have a size".into());
    }
    let requested = claim_spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| quantity::parse_bytes(&q.0).ok())
        .unwrap_or(0);
    if volume.capacity_bytes < requested {
        return Err(format!(
            "capacity-bytes {} is smaller than the {} the claim requested; Kubernetes would not bind it",
            volume.capacity_bytes, requested
        ));
    }

    let mut spec = source::parse(&volume.source)?;

    let mut labels = BTreeMap::new();
    for (k, v) in &volume.labels {
        check_qualified_name(k).map_err(|e| format!("label key {k:?}: {e}"))?;
        check_label_value(v).map_err(|e| format!("label {k:?} value {v:?}: {e}"))?;
        labels.insert(k.clone(), v.clone());
    }
    let mut annotations_map = BTreeMap::new();
    for (k, v) in &volume.annotations {
        check_qualified_name(k).map_err(|e| format!("annotation key {k:?}: {e}"))?;
        if k.starts_with(annotations::RESERVED_PREFIX) {
            return Err(format!(
                "annotation {k:?} uses the prefix {} reserved for the host",
                annotations::RESERVED_PREFIX
            ));
        }
        annotations_map.insert(k.clone(), v.clone());
    }
    // Only what the operator granted: the rest stays on the class, and
    // delete and resize get it from there.
    let mut parameters = plugin_parameters(class);
    parameters.retain(|key, _| provenance.output.records(key));
    let parameters = serde_json::to_string(&parameters).map_err(|e| e.to_string())?;
    annotations_map.insert(
        annotations::PROVISIONED_BY.to_owned(),
        class.provisioner.clone(),
    );
    annotations_map.insert(annotations::PLUGIN.to_owned(), provenance.plugin.to_owned());
    annotations_map.insert(
        annotations::PLUGIN_DIGEST.to_owned(),
        provenance.digest.to_owned(),
    );
    annotations_map.insert(annotations::PARAMETERS.to_owned(), parameters);

    let mut mount_options = class.mount_options.clone().unwrap_or_default();
    for option in &volume.mount_options {
        if option.trim().is_empty() {
            return Err("mount-options contains an empty option".into());
        }
        if !mount_options.contains(option) {
            mount_options.push(option.clone());
        }
    }

    spec.capacity = Some(BTreeMap::from([(
        "storage".to_owned(),
        Quantity(Bytes(volume.capacity_bytes).to_string()),
    )]));
    spec.access_modes = claim_spec.access_modes.clone();
    spec.volume_mode = Some(
        claim_spec
            .volume_mode
            .clone()
            .unwrap_or_else(|| "Filesystem".to_owned()),
    );
    spec.persistent_volume_reclaim_policy = Some(
        class
            .reclaim_policy
            .clone()
            .unwrap_or_else(|| "Delete".to_owned()),
    );
    spec.mount_options = (!mount_options.is_empty()).then_some(mount_options);
    spec.storage_class_name = class.metadata.name.clone();
    spec.claim_ref = Some(ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("PersistentVolumeClaim".to_owned()),
        namespace: claim.metadata.namespace.clone(),
        name: claim.metadata.name.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        ..Default::default()
    });
    spec.node_affinity = volume
        .node_affinity
        .as_ref()
        .map(node_affinity)
        .transpose()?;

    let pv = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(opts.pv_name.clone()),
            labels: (!labels.is_empty()).then_some(labels),
            annotations: Some(annotations_map),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    };
    let size = serde_json::to_vec(&pv).map_err(|e| e.to_string())?.len();
    if size > MAX_VOLUME_BYTES {
        return Err(format!(
            "the PersistentVolume would be {size} bytes, above the host's limit of {MAX_VOLUME_BYTES} (the API server's is 1.5 MiB); return fewer or shorter fields"
        ));
    }
    Ok(pv)
}

/// Limits on what a plugin may return, far above what a real volume needs
/// and well under the API server's 1.5 MiB per object, so one plugin cannot
/// make the host hold or send huge objects.
pub const MAX_SOURCE_BYTES: usize = 64 << 10;
pub const MAX_LABELS: usize = 64;
pub const MAX_ANNOTATIONS: usize = 64;
/// Keys and values of the plugin's annotations together (Kubernetes allows
/// 256 KiB for all of an object's annotations).
pub const MAX_ANNOTATION_BYTES: usize = 64 << 10;
pub const MAX_MOUNT_OPTIONS: usize = 32;
pub const MAX_VOLUME_BYTES: usize = 256 << 10;

/// Refuses oversized answers before any of them is parsed or copied.
fn check_sizes(volume: &wit::Volume) -> Result<(), String> {
    let too_many = |what: &str, n: usize, max: usize| {
        Err(format!("it returned {n} {what}; at most {max} are allowed"))
    };
    if volume.source.len() > MAX_SOURCE_BYTES {
        return Err(format!(
            "source is {} bytes; at most {MAX_SOURCE_BYTES} are allowed",
            volume.source.len()
        ));
    }
    if volume.labels.len() > MAX_LABELS {
        return too_many("labels", volume.labels.len(), MAX_LABELS);
    }
    if volume.annotations.len() > MAX_ANNOTATIONS {
        return too_many("annotations", volume.annotations.len(), MAX_ANNOTATIONS);
    }
    if volume.mount_options.len() > MAX_MOUNT_OPTIONS {
        return too_many(
            "mount options",
            volume.mount_options.len(),
            MAX_MOUNT_OPTIONS,
        );
    }
    let annotation_bytes: usize = volume
        .annotations
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    if annotation_bytes > MAX_ANNOTATION_BYTES {
        return Err(format!(
            "its annotations hold {annotation_bytes} bytes; at most {MAX_ANNOTATION_BYTES} are allowed"
        ));
    }
    Ok(())
}

fn node_affinity(affinity: &wit::NodeAffinity) -> Result<VolumeNodeAffinity, String> {
    if affinity.terms.is_empty() {
        return Err("node-affinity has no terms; omit it to allow every node".into());
    }
    let mut terms = Vec::new();
    for (i, term) in affinity.terms.iter().enumerate() {
        if term.match_expressions.is_empty() {
            return Err(format!("node-affinity term {i} has no match expressions"));
        }
        let mut exprs = Vec::new();
        for req in &term.match_expressions {
            check_qualified_name(&req.key)
                .map_err(|e| format!("node-affinity term {i}: key {:?}: {e}", req.key))?;
            use wit::NodeSelectorOperator as Op;
            let (op, arity_ok) = match req.operator {
                Op::In => ("In", !req.values.is_empty()),
                Op::NotIn => ("NotIn", !req.values.is_empty()),
                Op::Exists => ("Exists", req.values.is_empty()),
                Op::DoesNotExist => ("DoesNotExist", req.values.is_empty()),
                Op::Gt | Op::Lt => (
                    if req.operator == Op::Gt { "Gt" } else { "Lt" },
                    req.values.len() == 1 && req.values[0].parse::<i64>().is_ok(),
                ),
            };
            if !arity_ok {
                return Err(format!(
                    "node-affinity term {i}: {op} on {:?} has values {:?}: In/NotIn need one or more, Exists/DoesNotExist none, Gt/Lt exactly one integer",
                    req.key, req.values
                ));
            }
            exprs.push(NodeSelectorRequirement {
                key: req.key.clone(),
                operator: op.to_owned(),
                values: (!req.values.is_empty()).then(|| req.values.clone()),
            });
        }
        terms.push(NodeSelectorTerm {
            match_expressions: Some(exprs),
            match_fields: None,
        });
    }
    Ok(VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: terms,
        }),
    })
}

/// A Kubernetes qualified name: `[prefix/]name`, prefix a DNS subdomain.
fn check_qualified_name(key: &str) -> Result<(), &'static str> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !ok {
            return Err(
                "the prefix must be a DNS subdomain (lowercase letters, digits, '-' and '.')",
            );
        }
    }
    if name.is_empty() || name.len() > 63 || !is_name(name) {
        return Err("the name must be 1-63 characters of letters, digits, '-', '_' or '.', starting and ending alphanumeric");
    }
    Ok(())
}

fn check_label_value(v: &str) -> Result<(), &'static str> {
    if v.is_empty() || (v.len() <= 63 && is_name(v)) {
        Ok(())
    } else {
        Err("a label value must be empty or 1-63 characters of letters, digits, '-', '_' or '.', starting and ending alphanumeric")
    }
}

fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}
