//! What to do with a volume (the Go library's `shouldDelete`), and how a
//! volume no plugin of ours made is routed to one.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::StorageClass;

use super::{keys, Names};
use crate::provisioner::{annotations, PLUGIN_PARAMETER};

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
    use super::super::fixtures::{merge, names};
    use super::*;
    use serde_json::json;

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
