//! Kubernetes objects → the plugin's request types.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::provisioner::{
    annotations, DeleteError, ProvisionError, ProvisionOptions, ProvisionState, PLUGIN_PARAMETER,
};
use crate::quantity;
use crate::runtime::bindings::{types as wit, CapacityRequest};

use super::source;

type Map = Vec<(String, String)>;

fn to_list(map: Option<&BTreeMap<String, String>>) -> Map {
    map.map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

pub(super) fn claim_name(claim: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The class parameters a plugin receives: all but the host's own (`plugin`
/// and those starting with `wasmprov.io/`).
pub fn plugin_parameters(class: &StorageClass) -> BTreeMap<String, String> {
    let mut params = class.parameters.clone().unwrap_or_default();
    params.remove(PLUGIN_PARAMETER);
    params.retain(|k, _| !k.starts_with(super::access::HOST_PARAMETER_PREFIX));
    params
}

/// Builds the plugin's `provision-request`, rejecting claims the host itself
/// can tell are invalid.
pub fn provision_request(opts: &ProvisionOptions) -> Result<wit::ProvisionRequest, ProvisionError> {
    let claim = &opts.claim;
    let invalid = |msg: String| ProvisionError::new(ProvisionState::InvalidArgument, msg);
    let spec = claim.spec.as_ref();
    let resources = spec.and_then(|s| s.resources.as_ref());
    let storage = |m: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| { m.and_then(|m| m.get("storage")).map(|q| q.0.clone()) };
    let Some(requested) = storage(resources.and_then(|r| r.requests.as_ref())) else {
        return Err(invalid(format!(
            "claim {} has no spec.resources.requests.storage; set the size of the volume it needs",
            claim_name(claim)
        )));
    };
    let requested_bytes = quantity::parse_bytes(&requested).map_err(|e| {
        invalid(format!(
            "claim {}: spec.resources.requests.storage: {e}",
            claim_name(claim)
        ))
    })?;
    let limit_bytes = match storage(resources.and_then(|r| r.limits.as_ref())) {
        Some(limit) => Some(quantity::parse_bytes(&limit).map_err(|e| {
            invalid(format!(
                "claim {}: spec.resources.limits.storage: {e}",
                claim_name(claim)
            ))
        })?),
        None => None,
    };
    let mut access_modes = Vec::new();
    for mode in spec
        .and_then(|s| s.access_modes.as_ref())
        .into_iter()
        .flatten()
    {
        access_modes.push(match mode.as_str() {
            "ReadWriteOnce" => wit::AccessMode::ReadWriteOnce,
            "ReadOnlyMany" => wit::AccessMode::ReadOnlyMany,
            "ReadWriteMany" => wit::AccessMode::ReadWriteMany,
            "ReadWriteOncePod" => wit::AccessMode::ReadWriteOncePod,
            other => {
                return Err(invalid(format!(
                    "claim {}: unknown access mode {other:?} (expected ReadWriteOnce, ReadOnlyMany, ReadWriteMany or ReadWriteOncePod)",
                    claim_name(claim)
                )))
            }
        });
    }
    let volume_mode = match spec.and_then(|s| s.volume_mode.as_deref()) {
        None | Some("Filesystem") => wit::VolumeMode::Filesystem,
        Some("Block") => wit::VolumeMode::Block,
        Some(other) => {
            return Err(invalid(format!(
                "claim {}: unknown volumeMode {other:?} (expected Filesystem or Block)",
                claim_name(claim)
            )))
        }
    };
    let data_source = spec.and_then(|s| {
        s.data_source_ref
            .as_ref()
            .map(|r| wit::DataSource {
                api_group: r.api_group.clone().unwrap_or_default(),
                kind: r.kind.clone(),
                name: r.name.clone(),
                namespace: r.namespace.clone(),
            })
            .or_else(|| {
                s.data_source.as_ref().map(|r| wit::DataSource {
                    api_group: r.api_group.clone().unwrap_or_default(),
                    kind: r.kind.clone(),
                    name: r.name.clone(),
                    namespace: None,
                })
            })
    });
    Ok(wit::ProvisionRequest {
        pv_name: opts.pv_name.clone(),
        claim: wit::Claim {
            name: claim.metadata.name.clone().unwrap_or_default(),
            namespace: claim.metadata.namespace.clone().unwrap_or_default(),
            uid: claim.metadata.uid.clone().unwrap_or_default(),
            requested_bytes,
            limit_bytes,
            access_modes,
            volume_mode,
            selector: spec.and_then(|s| s.selector.as_ref()).map(label_selector),
            labels: to_list(claim.metadata.labels.as_ref()),
            annotations: to_list(claim.metadata.annotations.as_ref()),
            data_source,
        },
        storage_class: storage_class(&opts.class)?,
        selected_node: opts.selected_node.as_ref().map(node),
    })
}

fn label_selector(s: &LabelSelector) -> wit::LabelSelector {
    wit::LabelSelector {
        match_labels: to_list(s.match_labels.as_ref()),
        match_expressions: s
            .match_expressions
            .iter()
            .flatten()
            .map(|e| wit::LabelSelectorRequirement {
                key: e.key.clone(),
                operator: e.operator.clone(),
                values: e.values.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

fn storage_class(class: &StorageClass) -> Result<wit::StorageClass, ProvisionError> {
    let name = class.metadata.name.clone().unwrap_or_default();
    let invalid = |field: &str, value: &str, expected: &str| {
        ProvisionError::new(
            ProvisionState::InvalidArgument,
            format!("StorageClass {name}: unknown {field} {value:?} (expected {expected})"),
        )
    };
    let reclaim_policy = match class.reclaim_policy.as_deref() {
        None | Some("Delete") => wit::ReclaimPolicy::Delete,
        Some("Retain") => wit::ReclaimPolicy::Retain,
        Some(other) => return Err(invalid("reclaimPolicy", other, "Delete or Retain")),
    };
    let volume_binding_mode = match class.volume_binding_mode.as_deref() {
        None | Some("Immediate") => wit::VolumeBindingMode::Immediate,
        Some("WaitForFirstConsumer") => wit::VolumeBindingMode::WaitForFirstConsumer,
        Some(other) => {
            return Err(invalid(
                "volumeBindingMode",
                other,
                "Immediate or WaitForFirstConsumer",
            ))
        }
    };
    Ok(wit::StorageClass {
        name,
        provisioner: class.provisioner.clone(),
        parameters: plugin_parameters(class).into_iter().collect(),
        reclaim_policy,
        mount_options: class.mount_options.clone().unwrap_or_default(),
        volume_binding_mode,
        allowed_topologies: class
            .allowed_topologies
            .iter()
            .flatten()
            .map(|t| wit::TopologyTerm {
                match_label_expressions: t
                    .match_label_expressions
                    .iter()
                    .flatten()
                    .map(|r| wit::TopologyRequirement {
                        key: r.key.clone(),
                        values: r.values.clone(),
                    })
                    .collect(),
            })
            .collect(),
    })
}

/// The plugin's `capacity-request` for new volumes of `class` on `node`.
pub(super) fn capacity_request(
    class: &StorageClass,
    node: &Node,
) -> Result<CapacityRequest, String> {
    Ok(CapacityRequest {
        storage_class: storage_class(class).map_err(|e| e.message)?,
        node: self::node(node),
    })
}

fn node(n: &Node) -> wit::Node {
    wit::Node {
        name: n.metadata.name.clone().unwrap_or_default(),
        labels: to_list(n.metadata.labels.as_ref()),
    }
}

/// Builds the plugin's `delete-request` from a saved PersistentVolume.
pub fn delete_request(pv: &PersistentVolume) -> Result<wit::DeleteRequest, DeleteError> {
    let name = pv.metadata.name.clone().unwrap_or_default();
    let spec = pv.spec.as_ref().ok_or_else(|| {
        DeleteError::failed(format!(
            "PersistentVolume {name} has no spec; nothing to delete"
        ))
    })?;
    let source = source::extract(spec)
        .map_err(|e| DeleteError::failed(format!("PersistentVolume {name}: {e}")))?;
    let capacity_bytes = match spec.capacity.as_ref().and_then(|c| c.get("storage")) {
        Some(q) => quantity::parse_bytes(&q.0).map_err(|e| {
            DeleteError::failed(format!(
                "PersistentVolume {name}: spec.capacity.storage: {e}"
            ))
        })?,
        None => 0,
    };
    let annotations_map = pv.metadata.annotations.as_ref();
    let parameters: BTreeMap<String, String> =
        match annotations_map.and_then(|a| a.get(annotations::PARAMETERS)) {
            Some(json) => serde_json::from_str(json).map_err(|e| {
                DeleteError::failed(format!(
                    "PersistentVolume {name}: annotation {} is not a JSON object of strings ({e}); restore it from the StorageClass parameters",
                    annotations::PARAMETERS
                ))
            })?,
            None => BTreeMap::new(),
        };
    let claim = spec.claim_ref.as_ref();
    Ok(wit::DeleteRequest {
        pv_name: name,
        source,
        capacity_bytes,
        parameters: parameters.into_iter().collect(),
        claim_namespace: claim.and_then(|c| c.namespace.clone()).unwrap_or_default(),
        claim_name: claim.and_then(|c| c.name.clone()).unwrap_or_default(),
        labels: to_list(pv.metadata.labels.as_ref()),
        annotations: to_list(annotations_map),
    })
}

/// The delete request for a volume the plugin made but the host refused to
/// save: built from the plugin's own answer, so it can remove what it made.
pub fn rejected_volume_request(
    opts: &ProvisionOptions,
    volume: &wit::Volume,
) -> wit::DeleteRequest {
    wit::DeleteRequest {
        pv_name: opts.pv_name.clone(),
        source: volume.source.clone(),
        capacity_bytes: volume.capacity_bytes,
        parameters: plugin_parameters(&opts.class).into_iter().collect(),
        claim_namespace: opts.claim.metadata.namespace.clone().unwrap_or_default(),
        claim_name: opts.claim.metadata.name.clone().unwrap_or_default(),
        labels: volume.labels.clone(),
        annotations: volume.annotations.clone(),
    }
}
