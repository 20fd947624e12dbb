//! Defaults and admission: what kube-apiserver adds to an object before it
//! is stored (SetDefaults, NamespaceLifecycle, DefaultStorageClass,
//! StorageObjectInUseProtection).

use serde_json::{json, Value};

use super::{target, Registry, DEFAULT_CLASS_ANNOTATION, PVC_PROTECTION, PV_PROTECTION};
use crate::error::{ApiError, ApiResult};
use crate::objects;
use crate::resources::{self, ResourceId, RESOURCES};
use crate::util;

impl Registry {
    /// Server-side defaults (the `SetDefaults_*` functions plus strategy resets).
    pub(super) fn apply_defaults(&self, res: ResourceId, obj: &mut Value) {
        let set_default = |obj: &mut Value, path: &str, v: Value| {
            let slot = objects::path_mut(obj, path);
            if slot.is_null() {
                *slot = v;
            }
        };
        match res {
            resources::PVC => {
                set_default(obj, "spec.volumeMode", json!("Filesystem"));
                set_default(obj, "status.phase", json!("Pending"));
            }
            resources::PV => {
                set_default(obj, "spec.persistentVolumeReclaimPolicy", json!("Retain"));
                set_default(obj, "spec.volumeMode", json!("Filesystem"));
                set_default(obj, "status.phase", json!("Pending"));
                set_default(obj, "status.lastPhaseTransitionTime", json!(util::now()));
            }
            resources::STORAGE_CLASS => {
                set_default(obj, "reclaimPolicy", json!("Delete"));
                set_default(obj, "volumeBindingMode", json!("Immediate"));
            }
            resources::NAMESPACE => {
                let name = objects::name(obj).to_string();
                set_default(obj, "spec.finalizers", json!(["kubernetes"]));
                set_default(obj, "status.phase", json!("Active"));
                let m = objects::meta_mut(obj);
                let labels = m.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert("kubernetes.io/metadata.name".into(), json!(name));
                }
            }
            resources::POD => {
                set_default(obj, "spec.restartPolicy", json!("Always"));
                set_default(obj, "spec.dnsPolicy", json!("ClusterFirst"));
                set_default(obj, "spec.schedulerName", json!("default-scheduler"));
                set_default(obj, "spec.terminationGracePeriodSeconds", json!(30));
                set_default(obj, "status.phase", json!("Pending"));
                set_default(obj, "status.qosClass", json!("BestEffort"));
            }
            _ => {}
        }
    }

    pub(super) fn admit_create(&self, res: ResourceId, obj: &mut Value) -> ApiResult<()> {
        let def = &RESOURCES[res];
        if def.namespaced {
            let ns = objects::namespace(obj).to_string();
            let namespace = self
                .store
                .get(resources::NAMESPACE, &(String::new(), ns.clone()))
                .ok_or_else(|| ApiError::NotFound(target(resources::NAMESPACE, &ns)))?;
            if objects::is_deleting(&namespace) {
                return Err(ApiError::Forbidden(format!(
                    "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    def.plural,
                    objects::name(obj)
                )));
            }
        }
        if res == resources::PVC && self.admission.default_storage_class {
            // The beta annotation names a class too (the real admission
            // plugin leaves such a claim alone).
            let unset = objects::path(obj, "spec.storageClassName").is_none_or(Value::is_null)
                && obj
                    .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
                    .is_none();
            if unset {
                if let Some(class) = self.default_storage_class() {
                    objects::set_path(obj, "spec.storageClassName", json!(class));
                }
            }
        }
        if self.admission.protection_finalizers {
            let finalizer = match res {
                resources::PVC => Some(PVC_PROTECTION),
                resources::PV => Some(PV_PROTECTION),
                _ => None,
            };
            if let Some(f) = finalizer {
                let mut fs = objects::finalizers(obj);
                if !fs.iter().any(|x| x == f) {
                    fs.push(f.to_string());
                    objects::set_finalizers(obj, fs);
                }
            }
        }
        Ok(())
    }

    /// The default StorageClass (newest one when several are marked default).
    pub fn default_storage_class(&self) -> Option<String> {
        self.store
            .all(resources::STORAGE_CLASS, None)
            .into_iter()
            .filter(|sc| objects::annotation(sc, DEFAULT_CLASS_ANNOTATION) == Some("true"))
            .max_by_key(|sc| objects::meta_str(sc, "creationTimestamp").map(str::to_string))
            .map(|sc| objects::name(&sc).to_string())
    }
}
