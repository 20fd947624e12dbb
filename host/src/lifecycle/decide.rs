//! The lifecycle's decisions as pure functions of an object and a snapshot of
//! what they depend on, so every rule is tested by table (the Go library's
//! `shouldProvision` and `shouldDelete`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::provisioner::{annotations, PluginInfo, PLUGIN_PARAMETER};

/// Annotations the Kubernetes PV controller and scheduler set on claims.
pub mod keys {
    pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
    pub const STORAGE_PROVISIONER_BETA: &str = "volume.beta.kubernetes.io/storage-provisioner";
    pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
    /// The claim's class before `spec.storageClassName` (still honoured,
    /// first, by the PV controller and the Go library).
    pub const STORAGE_CLASS_BETA: &str = "volume.beta.kubernetes.io/storage-class";
    /// The finalizer the Go library adds to provisioned volumes (`AddFinalizer`).
    pub const PV_FINALIZER: &str = "external-provisioner.volume.kubernetes.io/finalizer";
    /// Ours, on a claim from just before its plugin is asked for storage
    /// until that storage is saved as a volume or known not to exist
    /// (`--claim-finalizer`): a claim deleted meanwhile, even while the host
    /// is down, is held until its storage is removed.
    pub const CLAIM_FINALIZER: &str = "wasmprov.io/provisioning";
}

/// The provisioner names this host answers to.
#[derive(Debug, Clone)]
pub struct Names {
    pub primary: String,
    pub additional: Vec<String>,
}

impl Names {
    pub fn contains(&self, name: &str) -> bool {
        self.primary == name || self.additional.iter().any(|n| n == name)
    }
}

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
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    names: &Names,
    plugin: impl Fn(&str) -> Result<PluginInfo, String>,
) -> ClaimDecision {
    let spec = claim.spec.as_ref();
    // Another wasmprov host (another provisioner name) uses the same claim
    // finalizer: the annotation says whose claim it is, always.
    if !is_ours(claim, names) {
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
    let class_name = claim_class(claim);
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
        && selected_node(claim).is_none()
    {
        return ClaimDecision::WaitForNode;
    }
    ClaimDecision::Provision {
        plugin: plugin_name.clone(),
        info,
    }
}

/// What to do with a PersistentVolume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeDecision {
    Ignore,
    /// Delete its storage with this plugin, then the volume itself. No
    /// plugin: a volume no plugin of ours made (a replaced provisioner's),
    /// to route with [`adoption`].
    Delete {
        plugin: Option<String>,
    },
    /// Ours, reclaimed by deletion, and `--add-finalizer` is on: hold the
    /// object with our finalizer (a volume made before it was turned on).
    AddFinalizer,
    /// Our finalizer guards nothing here (a Retain or Recycle volume, or
    /// `--add-finalizer` turned off): remove it, or deleting the object
    /// would wait for ever.
    RemoveFinalizer,
}

/// Decides what to do with a volume, on every sync as the Go library does.
/// Its storage is deleted when it is one we provisioned, with reclaim
/// policy Delete, once it is Released. A volume object already being
/// deleted is only handled while it carries our finalizer (otherwise it may
/// vanish mid-way); a Bound volume's storage is never deleted, even when
/// someone deletes its object (the Go library's `shouldDelete`). Our
/// finalizer is kept exactly on our Delete volumes while `add_finalizer`.
pub fn volume(pv: &PersistentVolume, names: &Names, add_finalizer: bool) -> VolumeDecision {
    let ann = pv.metadata.annotations.as_ref();
    if provisioned_by(pv, names).is_none() {
        return VolumeDecision::Ignore;
    }
    let reclaim_delete = pv
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        == Some("Delete");
    let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    let deleting = pv.metadata.deletion_timestamp.is_some();
    let has_finalizer = pv
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == keys::PV_FINALIZER);
    if reclaim_delete && released {
        if deleting && !has_finalizer {
            return VolumeDecision::Ignore;
        }
        return VolumeDecision::Delete {
            plugin: ann.and_then(|a| a.get(annotations::PLUGIN)).cloned(),
        };
    }
    if has_finalizer && (!reclaim_delete || (!add_finalizer && !deleting)) {
        return VolumeDecision::RemoveFinalizer;
    }
    if add_finalizer && reclaim_delete && !has_finalizer && !deleting {
        return VolumeDecision::AddFinalizer;
    }
    VolumeDecision::Ignore
}

/// Which of our names the volume was provisioned by, as the Go library's
/// `shouldDelete` reads it: `pv.kubernetes.io/provisioned-by`, or
/// `pv.kubernetes.io/migrated-to` for a volume handed over by CSI migration.
pub fn provisioned_by<'a>(pv: &'a PersistentVolume, names: &Names) -> Option<&'a str> {
    let ann = pv.metadata.annotations.as_ref()?;
    [annotations::PROVISIONED_BY, annotations::MIGRATED_TO]
        .iter()
        .filter_map(|key| ann.get(*key))
        .find(|name| names.contains(name))
        .map(String::as_str)
}

/// How a volume that no plugin of ours made is deleted: by the plugin of
/// the class that names it, with that class's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adoption {
    pub plugin: String,
    /// The class whose plugin and parameters are used.
    pub class: String,
    /// The parameters the plugin gets (the class's, without `plugin`).
    pub parameters: BTreeMap<String, String>,
}

/// Routes a volume a replaced provisioner made (it carries one of our names
/// but no `wasmprov.io/plugin`): to its own class when that class names a
/// plugin (the operator recreated it for this host), else to the class the
/// operator mapped its provisioner to (`--adopt-volumes NAME=CLASS`). The
/// error says which of the two to set up.
pub fn adoption(
    pv: &PersistentVolume,
    names: &Names,
    adopt: &BTreeMap<String, String>,
    class: impl Fn(&str) -> Option<std::sync::Arc<StorageClass>>,
) -> Result<Adoption, String> {
    let name = pv.metadata.name.as_deref().unwrap_or_default();
    let provisioner = provisioned_by(pv, names).unwrap_or_default();
    let own = pv
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .filter(|c| !c.is_empty());
    let with_plugin = |class_name: &str| {
        let class = class(class_name)?;
        let mut parameters = class.parameters.clone().unwrap_or_default();
        let plugin = parameters.remove(PLUGIN_PARAMETER)?;
        Some(Adoption {
            plugin,
            class: class_name.to_owned(),
            parameters,
        })
    };
    if let Some(found) = own.and_then(with_plugin) {
        return Ok(found);
    }
    if let Some(mapped) = adopt.get(provisioner) {
        return with_plugin(mapped).ok_or_else(|| {
            format!(
                "volume {name} was made by {provisioner}, which --adopt-volumes maps to StorageClass {mapped:?}, \
                 but that class does not exist or has no \"plugin\" parameter; create it with the plugin and \
                 parameters that can delete this volume's storage"
            )
        });
    }
    Err(format!(
        "volume {name} was made by {provisioner} before this host served that name, and no plugin is \
         known to delete its storage: give its StorageClass {} a \"plugin\" parameter (recreate the \
         class), or map the provisioner to a class that has one with \
         --adopt-volumes {provisioner}=<class>",
        own.map_or_else(|| "(none)".to_owned(), |c| format!("{c:?}"))
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names() -> Names {
        Names {
            primary: "wasmprov.io/host".into(),
            additional: vec!["example.com/legacy".into()],
        }
    }

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

    /// JSON merge patch: objects merge, `null` removes a key.
    fn merge(base: &mut serde_json::Value, patch: serde_json::Value) {
        match (base, patch) {
            (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        b.remove(&k);
                    } else {
                        merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                    }
                }
            }
            (b, p) => *b = p,
        }
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
                claim(&claim_obj, class.as_ref(), &names(), known),
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
                claim(&claim_obj, class.as_ref(), &names(), known),
                want,
                "{case}"
            );
        }
    }

    fn pv(patch: serde_json::Value) -> PersistentVolume {
        let mut base = json!({
            "metadata": {"name": "pvc-u1", "annotations": {
                "pv.kubernetes.io/provisioned-by": "wasmprov.io/host",
                "wasmprov.io/plugin": "hostpath"}},
            "spec": {"persistentVolumeReclaimPolicy": "Delete"},
            "status": {"phase": "Released"},
        });
        merge(&mut base, patch);
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn a_replaced_provisioners_volume_goes_to_its_class_plugin_or_the_mapped_one() {
        let class = |name: &str, params: serde_json::Value| -> std::sync::Arc<StorageClass> {
            std::sync::Arc::new(
                serde_json::from_value(json!({"metadata": {"name": name},
                    "provisioner": "example.com/legacy", "parameters": params}))
                .unwrap(),
            )
        };
        let classes = [
            class(
                "recreated",
                json!({"plugin": "hostpath", "hostRoot": "/srv"}),
            ),
            class("go-only", json!({"pvDir": "/srv"})),
            class(
                "mapped",
                json!({"plugin": "hostpath", "hostRoot": "/mapped"}),
            ),
        ];
        let lookup = |n: &str| {
            classes
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(n))
                .cloned()
        };
        let legacy = |class: &str| {
            pv(json!({"metadata": {"annotations": {
                "pv.kubernetes.io/provisioned-by": "example.com/legacy", "wasmprov.io/plugin": null}},
                "spec": {"storageClassName": class}}))
        };
        let none = BTreeMap::new();
        let map = BTreeMap::from([("example.com/legacy".to_owned(), "mapped".to_owned())]);

        let by_class = adoption(&legacy("recreated"), &names(), &none, lookup).unwrap();
        assert_eq!(
            (by_class.plugin.as_str(), by_class.class.as_str()),
            ("hostpath", "recreated")
        );
        assert_eq!(
            by_class.parameters,
            BTreeMap::from([("hostRoot".into(), "/srv".into())])
        );
        for own in ["go-only", "deleted"] {
            let mapped = adoption(&legacy(own), &names(), &map, lookup).unwrap();
            assert_eq!(mapped.class, "mapped", "{own}");
            let err = adoption(&legacy(own), &names(), &none, lookup).unwrap_err();
            assert!(
                err.contains("--adopt-volumes example.com/legacy=<class>"),
                "{err}"
            );
        }
        let wrong = BTreeMap::from([("example.com/legacy".to_owned(), "go-only".to_owned())]);
        let err = adoption(&legacy("deleted"), &names(), &wrong, lookup).unwrap_err();
        assert!(err.contains("maps to StorageClass \"go-only\""), "{err}");
    }

    #[test]
    fn volumes_are_deleted_only_when_released_ours_and_reclaim_delete() {
        use VolumeDecision::*;
        let del = || Delete {
            plugin: Some("hostpath".into()),
        };
        let cases = vec![
            ("delete a released volume we made", pv(json!({})), del()),
            (
                "keep a bound volume",
                pv(json!({"status": {"phase": "Bound"}})),
                Ignore,
            ),
            (
                "never delete a Retain volume",
                pv(json!({"spec": {"persistentVolumeReclaimPolicy": "Retain"}})),
                Ignore,
            ),
            (
                "ignore another provisioner's volume",
                pv(
                    json!({"metadata": {"annotations": {"pv.kubernetes.io/provisioned-by": "other"}}}),
                ),
                Ignore,
            ),
            (
                "delete a volume without a recorded plugin (a replaced provisioner's) by adoption",
                pv(json!({"metadata": {"annotations": {"wasmprov.io/plugin": null}}})),
                Delete { plugin: None },
            ),
            (
                "delete a volume migrated to one of our names",
                pv(json!({"metadata": {"annotations": {
                    "pv.kubernetes.io/provisioned-by": "kubernetes.io/in-tree",
                    "pv.kubernetes.io/migrated-to": "example.com/legacy"}}})),
                del(),
            ),
            (
                "delete a released volume being deleted while it carries our finalizer",
                pv(
                    json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z",
                    "finalizers": ["external-provisioner.volume.kubernetes.io/finalizer"]}}),
                ),
                del(),
            ),
            (
                "leave a volume being deleted without our finalizer alone",
                pv(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})),
                Ignore,
            ),
            (
                "never delete a bound volume's storage, even when its object is deleted",
                pv(
                    json!({"status": {"phase": "Bound"}, "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z",
                    "finalizers": ["external-provisioner.volume.kubernetes.io/finalizer"]}}),
                ),
                Ignore,
            ),
        ];
        for (case, pv_obj, want) in cases {
            // (The finalizer's own table is below.)
            assert_eq!(volume(&pv_obj, &names(), false), want, "{case}");
        }
    }

    #[test]
    fn our_finalizer_is_kept_exactly_on_our_delete_volumes_while_enabled() {
        use VolumeDecision::*;
        const FINALIZER: &str = "external-provisioner.volume.kubernetes.io/finalizer";
        let bound = |extra: serde_json::Value| {
            let mut base = json!({"status": {"phase": "Bound"}});
            merge(&mut base, extra);
            pv(base)
        };
        let held = json!({"metadata": {"finalizers": [FINALIZER]}});
        let retain = json!({"spec": {"persistentVolumeReclaimPolicy": "Retain"}});
        let cases = vec![
            ("add it to a Delete volume made without it", bound(json!({})), true, AddFinalizer),
            ("keep it", bound(held.clone()), true, Ignore),
            ("remove it when turned off", bound(held.clone()), false, RemoveFinalizer),
            ("nothing to do when off and absent", bound(json!({})), false, Ignore),
            ("remove it from a Retain volume", bound(json!({"metadata": {"finalizers": [FINALIZER]}, "spec": {"persistentVolumeReclaimPolicy": "Retain"}})), true, RemoveFinalizer),
            ("never add it to a Retain volume", bound(retain.clone()), true, Ignore),
            (
                "a deleted Released Retain volume is let go",
                pv(json!({"metadata": {"finalizers": [FINALIZER], "deletionTimestamp": "2026-01-01T00:00:00Z"},
                          "spec": {"persistentVolumeReclaimPolicy": "Retain"}})),
                true,
                RemoveFinalizer,
            ),
            (
                "a deleted Bound Delete volume keeps it even when turned off (its storage is still to reclaim)",
                bound(json!({"metadata": {"finalizers": [FINALIZER], "deletionTimestamp": "2026-01-01T00:00:00Z"}})),
                false,
                Ignore,
            ),
            ("never add it to an object being deleted", bound(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})), true, Ignore),
            (
                "not another provisioner's",
                bound(json!({"metadata": {"annotations": {"pv.kubernetes.io/provisioned-by": "other"}}})),
                true,
                Ignore,
            ),
        ];
        for (case, pv_obj, add_finalizer, want) in cases {
            assert_eq!(volume(&pv_obj, &names(), add_finalizer), want, "{case}");
        }
    }
}
