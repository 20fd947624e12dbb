//! What to do with a claim (the Go library's `shouldProvision`), and the
//! facts of a claim it is decided from.

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Resource;

use super::{keys, Names};
use crate::provisioner::{PluginInfo, PLUGIN_PARAMETER};

/// What to do with a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimDecision {
    /// Not ours, already bound, or being deleted: nothing to do.
    Ignore,
    /// The claim's class does not exist (yet): retry later.
    WaitForClass(String),
    /// WaitForFirstConsumer: wait for the scheduler to pick a node.
    WaitForNode,
    /// Ours, but it cannot be provisioned as it is: report and retry slowly.
    Refuse(String),
    /// Provision it with this plugin, as `info` describes it (whether it
    /// makes storage on the host's own node, and where).
    Provision { plugin: String, info: PluginInfo },
    /// Bound, yet still carrying our claim finalizer: remove it.
    DropFinalizer,
    /// Deleted while provisioning may have made storage (our claim finalizer
    /// holds it): finish with this plugin, remove the storage, let it go.
    FinishDeleted { plugin: String },
}

/// What the lifecycle reads off a claim: read once when the claim comes in
/// and passed on, rather than derived again by each step on its way.
#[derive(Debug, Clone)]
pub struct ClaimFacts<'a> {
    pub claim: &'a PersistentVolumeClaim,
    /// `namespace/name`, as logs and messages name it.
    pub key: String,
    pub uid: String,
    /// What its events are reported on.
    pub reference: ObjectReference,
    /// Its StorageClass's name ([`claim_class`]); empty for none.
    pub class: &'a str,
    /// The node the scheduler selected ([`selected_node`]).
    pub selected_node: Option<&'a str>,
    /// Whether the PV controller handed it to one of our names ([`is_ours`]).
    pub ours: bool,
}

impl<'a> ClaimFacts<'a> {
    pub fn read(claim: &'a PersistentVolumeClaim, names: &Names) -> Self {
        ClaimFacts {
            claim,
            key: format!(
                "{}/{}",
                claim.metadata.namespace.as_deref().unwrap_or_default(),
                claim.metadata.name.as_deref().unwrap_or_default()
            ),
            uid: claim.metadata.uid.clone().unwrap_or_default(),
            reference: claim.object_ref(&()),
            class: claim_class(claim),
            selected_node: selected_node(claim),
            ours: is_ours(claim, names),
        }
    }
}

/// The node the scheduler selected for the claim; an empty annotation is
/// none.
pub fn selected_node(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .metadata
        .annotations
        .as_ref()?
        .get(keys::SELECTED_NODE)
        .map(String::as_str)
        .filter(|n| !n.is_empty())
}

/// The name of the claim's StorageClass: the beta annotation first, then
/// `spec.storageClassName`, as the PV controller and the Go library read it
/// (`GetPersistentVolumeClaimClass`); empty for none.
pub fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::STORAGE_CLASS_BETA))
        .or_else(|| claim.spec.as_ref()?.storage_class_name.as_ref())
        .map_or("", String::as_str)
}

/// Whether the PV controller has handed `claim` to one of our names (its
/// storage-provisioner annotation, GA or beta), as the Go library checks
/// before anything else. Claims of other provisioners and static claims
/// (`storageClassName: manual`) are not: they must cost no API request.
pub fn is_ours(claim: &PersistentVolumeClaim, names: &Names) -> bool {
    let annotations = claim.metadata.annotations.as_ref();
    annotations
        .and_then(|a| {
            a.get(keys::STORAGE_PROVISIONER)
                .or_else(|| a.get(keys::STORAGE_PROVISIONER_BETA))
        })
        .is_some_and(|p| names.contains(p))
}

/// Decides what to do with a claim. `class` is the claim's StorageClass if it
/// exists; `plugin` looks up a plugin by name.
pub fn claim(
    facts: &ClaimFacts,
    class: Option<&StorageClass>,
    names: &Names,
    plugin: impl Fn(&str) -> Result<PluginInfo, String>,
) -> ClaimDecision {
    let claim = facts.claim;
    let spec = claim.spec.as_ref();
    // Another wasmprov host (another provisioner name) uses the same claim
    // finalizer: the annotation says whose claim it is, always.
    if !facts.ours {
        return ClaimDecision::Ignore;
    }
    let held = claim
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == keys::CLAIM_FINALIZER);
    if spec
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty())
    {
        return if held {
            ClaimDecision::DropFinalizer
        } else {
            ClaimDecision::Ignore
        };
    }
    let deleting = claim.metadata.deletion_timestamp.is_some();
    if deleting && !held {
        return ClaimDecision::Ignore;
    }
    let class_name = facts.class;
    let refuse = |message: String| {
        ClaimDecision::Refuse(if deleting {
            format!(
                "{message}. The claim is being deleted, and its finalizer {} keeps it until the \
                 storage a provision may have made is removed: fix this, or remove the finalizer \
                 if the backend made nothing",
                keys::CLAIM_FINALIZER
            )
        } else {
            message
        })
    };
    let Some(class) = class else {
        if deleting {
            return refuse(format!("StorageClass {class_name} does not exist"));
        }
        return ClaimDecision::WaitForClass(class_name.to_owned());
    };
    if !names.contains(&class.provisioner) {
        // The PV controller handed the claim to us when the class named
        // us; the class has been recreated for someone else since.
        return refuse(format!(
            "StorageClass {class_name} names provisioner {:?}, not this host ({}): the claim was handed to this host before the class changed; recreate the claim to have {:?} provision it",
            class.provisioner,
            names.primary,
            class.provisioner,
        ));
    }
    let Some(plugin_name) = class
        .parameters
        .as_ref()
        .and_then(|p| p.get(PLUGIN_PARAMETER))
        .filter(|p| !p.is_empty())
    else {
        return refuse(format!(
            "StorageClass {class_name} has no \"{PLUGIN_PARAMETER}\" parameter; set parameters.{PLUGIN_PARAMETER} to the plugin that serves it"
        ));
    };
    let info = match plugin(plugin_name) {
        Ok(info) => info,
        Err(message) => return refuse(message),
    };
    if deleting {
        return ClaimDecision::FinishDeleted {
            plugin: plugin_name.clone(),
        };
    }
    if spec.and_then(|s| s.volume_mode.as_deref()) == Some("Block") && !info.block_volumes {
        return ClaimDecision::Refuse(format!(
            "plugin {plugin_name} (StorageClass {class_name}) does not support volumeMode Block; use volumeMode Filesystem or a class whose plugin supports block volumes"
        ));
    }
    if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
        && facts.selected_node.is_none()
    {
        return ClaimDecision::WaitForNode;
    }
    ClaimDecision::Provision {
        plugin: plugin_name.clone(),
        info,
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{merge, names};
    use super::*;
    use serde_json::json;

    fn known(plugin: &str) -> Result<PluginInfo, String> {
        match plugin {
            "hostpath" => Ok(PluginInfo {
                node_local: true,
                ..Default::default()
            }),
            "blocky" => Ok(PluginInfo {
                block_volumes: true,
                ..Default::default()
            }),
            other => Err(format!("no plugin {other}")),
        }
    }

    fn pvc(patch: serde_json::Value) -> PersistentVolumeClaim {
        let mut base = json!({
            "metadata": {"name": "data", "namespace": "default", "uid": "u1",
                "annotations": {"volume.kubernetes.io/storage-provisioner": "wasmprov.io/host"}},
            "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}},
        });
        merge(&mut base, patch);
        serde_json::from_value(base).unwrap()
    }

    fn sc(patch: serde_json::Value) -> StorageClass {
        let mut base = json!({
            "metadata": {"name": "fast"}, "provisioner": "wasmprov.io/host",
            "parameters": {"plugin": "hostpath"},
        });
        merge(&mut base, patch);
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn the_claims_class_is_its_beta_annotation_first_then_its_spec() {
        let claim = |value: serde_json::Value| -> PersistentVolumeClaim {
            serde_json::from_value(value).unwrap()
        };
        let beta = json!({"volume.beta.kubernetes.io/storage-class": "old"});
        assert_eq!(
            claim_class(&claim(json!({"spec": {"storageClassName": "fast"}}))),
            "fast"
        );
        assert_eq!(
            claim_class(&claim(json!({"metadata": {"annotations": beta}}))),
            "old"
        );
        assert_eq!(
            claim_class(&claim(
                json!({"metadata": {"annotations": beta}, "spec": {"storageClassName": "fast"}})
            )),
            "old",
            "the annotation wins, as in the PV controller"
        );
        assert_eq!(claim_class(&claim(json!({}))), "");
    }

    #[test]
    fn claims_are_provisioned_only_when_every_rule_allows_it() {
        use ClaimDecision::*;
        let hostpath = || Provision {
            plugin: "hostpath".into(),
            info: known("hostpath").unwrap(),
        };
        let cases: Vec<(&str, PersistentVolumeClaim, Option<StorageClass>, ClaimDecision)> = vec![
            ("provision a pending claim of our class", pvc(json!({})), Some(sc(json!({}))), hostpath()),
            (
                "the beta annotation counts too",
                pvc(json!({"metadata": {"annotations": {"volume.kubernetes.io/storage-provisioner": null, "volume.beta.kubernetes.io/storage-provisioner": "wasmprov.io/host"}}})),
                Some(sc(json!({}))),
                hostpath(),
            ),
            (
                "an additional provisioner name counts",
                pvc(json!({"metadata": {"annotations": {"volume.kubernetes.io/storage-provisioner": "example.com/legacy"}}})),
                Some(sc(json!({}))),
                hostpath(),
            ),
            (
                "ignore another provisioner's claim",
                pvc(json!({"metadata": {"annotations": {"volume.kubernetes.io/storage-provisioner": "ebs.csi.aws.com"}}})),
                Some(sc(json!({}))),
                Ignore,
            ),
            (
                "ignore a claim no provisioner was assigned to",
                pvc(json!({"metadata": {"annotations": null}})),
                Some(sc(json!({}))),
                Ignore,
            ),
            (
                "ignore an already bound claim",
                pvc(json!({"spec": {"volumeName": "pv-1"}})),
                Some(sc(json!({}))),
                Ignore,
            ),
            (
                "ignore a claim being deleted",
                pvc(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})),
                Some(sc(json!({}))),
                Ignore,
            ),
            ("wait for a missing class", pvc(json!({})), None, WaitForClass("fast".into())),
            (
                "refuse a class without a plugin parameter",
                pvc(json!({})),
                Some(sc(json!({"parameters": null}))),
                Refuse("StorageClass fast has no \"plugin\" parameter; set parameters.plugin to the plugin that serves it".into()),
            ),
            (
                "refuse a class naming an unknown plugin",
                pvc(json!({})),
                Some(sc(json!({"parameters": {"plugin": "nope"}}))),
                Refuse("no plugin nope".into()),
            ),
            (
                "refuse block mode when the plugin cannot do it",
                pvc(json!({"spec": {"volumeMode": "Block"}})),
                Some(sc(json!({}))),
                Refuse("plugin hostpath (StorageClass fast) does not support volumeMode Block; use volumeMode Filesystem or a class whose plugin supports block volumes".into()),
            ),
            (
                "block mode with a plugin that supports it",
                pvc(json!({"spec": {"volumeMode": "Block"}})),
                Some(sc(json!({"parameters": {"plugin": "blocky"}}))),
                Provision {
                    plugin: "blocky".into(),
                    info: known("blocky").unwrap(),
                },
            ),
            (
                "wait for the scheduler on WaitForFirstConsumer",
                pvc(json!({})),
                Some(sc(json!({"volumeBindingMode": "WaitForFirstConsumer"}))),
                WaitForNode,
            ),
            (
                "an empty selected node is none",
                pvc(json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": ""}}})),
                Some(sc(json!({"volumeBindingMode": "WaitForFirstConsumer"}))),
                WaitForNode,
            ),
            (
                "refuse a claim whose class now names another provisioner",
                pvc(json!({})),
                Some(sc(json!({"provisioner": "ebs.csi.aws.com"}))),
                Refuse("StorageClass fast names provisioner \"ebs.csi.aws.com\", not this host (wasmprov.io/host): the claim was handed to this host before the class changed; recreate the claim to have \"ebs.csi.aws.com\" provision it".into()),
            ),
            (
                "a class naming an additional name of ours",
                pvc(json!({})),
                Some(sc(json!({"provisioner": "example.com/legacy"}))),
                hostpath(),
            ),
            (
                "provision WaitForFirstConsumer once a node is selected",
                pvc(json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n1"}}})),
                Some(sc(json!({"volumeBindingMode": "WaitForFirstConsumer"}))),
                hostpath(),
            ),
        ];
        for (case, claim_obj, class, want) in cases {
            assert_eq!(
                claim(
                    &ClaimFacts::read(&claim_obj, &names()),
                    class.as_ref(),
                    &names(),
                    known
                ),
                want,
                "{case}"
            );
        }
    }

    #[test]
    fn a_claim_carrying_our_finalizer_is_finished_then_let_go() {
        use ClaimDecision::*;
        let held =
            json!({"finalizers": ["kubernetes.io/pvc-protection", "wasmprov.io/provisioning"]});
        let deleting = json!({"deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["wasmprov.io/provisioning"]});
        let held_note = "The claim is being deleted, and its finalizer wasmprov.io/provisioning keeps it until the storage a provision may have made is removed: fix this, or remove the finalizer if the backend made nothing";
        let cases: Vec<(
            &str,
            PersistentVolumeClaim,
            Option<StorageClass>,
            ClaimDecision,
        )> = vec![
            (
                "a pending claim is provisioned as usual",
                pvc(json!({"metadata": held})),
                Some(sc(json!({}))),
                Provision {
                    plugin: "hostpath".into(),
                    info: known("hostpath").unwrap(),
                },
            ),
            (
                "bound: the volume holds the storage now",
                pvc(json!({"metadata": held, "spec": {"volumeName": "pvc-u1"}})),
                Some(sc(json!({}))),
                DropFinalizer,
            ),
            (
                "bound and deleted: the same",
                pvc(json!({"metadata": deleting, "spec": {"volumeName": "pvc-u1"}})),
                Some(sc(json!({}))),
                DropFinalizer,
            ),
            (
                "deleted mid-provision: finish and clean up",
                pvc(json!({"metadata": deleting})),
                Some(sc(json!({}))),
                FinishDeleted {
                    plugin: "hostpath".into(),
                },
            ),
            (
                "another wasmprov host's claim is its own to finish",
                pvc(
                    json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z",
                    "finalizers": ["wasmprov.io/provisioning"],
                    "annotations": {"volume.kubernetes.io/storage-provisioner": "other.example.com"}}}),
                ),
                Some(sc(json!({}))),
                Ignore,
            ),
            (
                "and so is its bound claim",
                pvc(
                    json!({"metadata": {"finalizers": ["wasmprov.io/provisioning"],
                    "annotations": {"volume.kubernetes.io/storage-provisioner": "other.example.com"}},
                    "spec": {"volumeName": "pvc-u1"}}),
                ),
                Some(sc(json!({}))),
                Ignore,
            ),
            (
                "deleted mid-provision on a WaitForFirstConsumer class without a node",
                pvc(json!({"metadata": deleting})),
                Some(sc(json!({"volumeBindingMode": "WaitForFirstConsumer"}))),
                FinishDeleted {
                    plugin: "hostpath".into(),
                },
            ),
            (
                "deleted, class gone: say what holds the claim",
                pvc(json!({"metadata": deleting})),
                None,
                Refuse(format!("StorageClass fast does not exist. {held_note}")),
            ),
            (
                "deleted, plugin gone: say what holds the claim",
                pvc(json!({"metadata": deleting})),
                Some(sc(json!({"parameters": {"plugin": "nope"}}))),
                Refuse(format!("no plugin nope. {held_note}")),
            ),
        ];
        for (case, claim_obj, class, want) in cases {
            assert_eq!(
                claim(
                    &ClaimFacts::read(&claim_obj, &names()),
                    class.as_ref(),
                    &names(),
                    known
                ),
                want,
                "{case}"
            );
        }
    }
}
