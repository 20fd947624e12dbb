//! Which nodes a volume may be pinned to.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;

use crate::provisioner::ProvisionOptions;
use crate::runtime::bindings::types as wit;

/// The node label the scheduler's hostname topology uses; a node without it
/// is taken to carry its own name there, as kubelets label it.
pub(super) const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The volume's node affinity may only keep it on nodes the request allows:
/// the node the scheduler selected (every term must select it), or, with
/// no selected node, the class's allowed topologies (every term must stay
/// within one of them). With neither, only a plugin granted
/// `anyNodeAffinity` may choose: otherwise it would choose which nodes the
/// claim's pods run on.
pub(super) fn check_node_affinity(
    affinity: &wit::NodeAffinity,
    opts: &ProvisionOptions,
    any_granted: bool,
) -> Result<(), String> {
    if let Some(node) = &opts.selected_node {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let labels = node_labels(node);
        for (i, term) in affinity.terms.iter().enumerate() {
            if !term.match_expressions.iter().all(|r| selects(r, &labels)) {
                return Err(format!(
                    "node-affinity term {i} does not select node {name}, which the scheduler picked for the claim; a plugin may not pin a volume to another node"
                ));
            }
        }
        return Ok(());
    }
    let allowed = opts.class.allowed_topologies.as_deref().unwrap_or_default();
    if allowed.is_empty() {
        if any_granted || affinity.terms.is_empty() {
            return Ok(());
        }
        return Err(
            "it pins the volume to nodes, and neither the scheduler (no selected node) nor the class (no allowedTopologies) says where it may be, so the plugin would choose where the claim's pods run; use volumeBindingMode: WaitForFirstConsumer, list allowedTopologies on the class, or, for a plugin that knows where its storage is, grant output.anyNodeAffinity: true".to_owned(),
        );
    }
    for (i, term) in affinity.terms.iter().enumerate() {
        let within = allowed.iter().any(|topology| {
            topology
                .match_label_expressions
                .iter()
                .flatten()
                .all(|allowed| {
                    term.match_expressions.iter().any(|r| {
                        r.key == allowed.key
                            && r.operator == wit::NodeSelectorOperator::In
                            && r.values.iter().all(|v| allowed.values.contains(v))
                    })
                })
        });
        if !within {
            return Err(format!(
                "node-affinity term {i} reaches nodes outside the class's allowedTopologies; each term must keep the volume within them (an In requirement on each of their keys, with allowed values)"
            ));
        }
    }
    Ok(())
}

fn node_labels(node: &Node) -> BTreeMap<String, String> {
    let mut labels = node.metadata.labels.clone().unwrap_or_default();
    if let Some(name) = &node.metadata.name {
        labels
            .entry(HOSTNAME_LABEL.to_owned())
            .or_insert_with(|| name.clone());
    }
    labels
}

/// Whether a node with `labels` meets one requirement, as the scheduler
/// reads it.
fn selects(r: &wit::NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    use wit::NodeSelectorOperator as Op;
    let value = labels.get(&r.key);
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator {
        Op::In => value.is_some_and(|v| r.values.contains(v)),
        Op::NotIn => value.is_none_or(|v| !r.values.contains(v)),
        Op::Exists => value.is_some(),
        Op::DoesNotExist => value.is_none(),
        Op::Gt | Op::Lt => {
            let (Some(have), Some(bound)) = (
                value.and_then(|v| number(v)),
                r.values.first().and_then(|v| number(v)),
            ) else {
                return false;
            };
            if r.operator == Op::Gt {
                have > bound
            } else {
                have < bound
            }
        }
    }
}
