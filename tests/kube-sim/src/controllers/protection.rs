//! pvc-protection and pv-protection controllers: remove the in-use
//! protection finalizers (added at admission) once a deleting object is no
//! longer in use.

use std::sync::Arc;

use serde_json::Value;

use crate::objects;
use crate::registry::{Registry, Subresource, PVC_PROTECTION, PV_PROTECTION};
use crate::resources::{POD, PV, PVC};

pub struct Protection {
    registry: Arc<Registry>,
}

/// Pods that are not finished count as users of the claims they mount.
fn pod_uses_claim(pod: &Value, claim: &str) -> bool {
    let phase = objects::path_str(pod, "status.phase").unwrap_or("");
    if matches!(phase, "Succeeded" | "Failed") {
        return false;
    }
    let pod_name = objects::name(pod);
    objects::path(pod, "spec.volumes")
        .and_then(Value::as_array)
        .is_some_and(|vols| {
            vols.iter().any(|v| {
                let direct = v
                    .get("persistentVolumeClaim")
                    .and_then(|c| c.get("claimName"))
                    .and_then(Value::as_str)
                    == Some(claim);
                // Generic ephemeral volumes create a claim named <pod>-<volume>.
                let ephemeral = v.get("ephemeral").is_some()
                    && v.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| format!("{pod_name}-{n}") == claim);
                direct || ephemeral
            })
        })
}

impl Protection {
    pub fn new(registry: Arc<Registry>) -> Self {
        Protection { registry }
    }

    fn drop_finalizer(&self, res: usize, ns: &str, name: &str, finalizer: &str) {
        let _ = self.registry.modify(
            res,
            ns,
            name,
            Subresource::Main,
            "kube-controller-manager",
            |o| {
                let fs: Vec<String> = objects::finalizers(o)
                    .into_iter()
                    .filter(|f| f != finalizer)
                    .collect();
                objects::set_finalizers(o, fs);
            },
        );
    }

    pub fn sync_claim(&self, ns: &str, name: &str) {
        let Ok(claim) = self.registry.get(PVC, ns, name) else {
            return;
        };
        if !objects::is_deleting(&claim)
            || !objects::finalizers(&claim)
                .iter()
                .any(|f| f == PVC_PROTECTION)
        {
            return;
        }
        let in_use = self
            .registry
            .store
            .all(POD, Some(ns))
            .iter()
            .any(|p| pod_uses_claim(p, name));
        if !in_use {
            self.drop_finalizer(PVC, ns, name, PVC_PROTECTION);
        }
    }

    pub fn sync_volume(&self, name: &str) {
        let Ok(pv) = self.registry.get(PV, "", name) else {
            return;
        };
        if !objects::is_deleting(&pv)
            || !objects::finalizers(&pv).iter().any(|f| f == PV_PROTECTION)
        {
            return;
        }
        if objects::path_str(&pv, "status.phase") != Some("Bound") {
            self.drop_finalizer(PV, "", name, PV_PROTECTION);
        }
    }

    /// A pod changed or went away: re-check the claims it mounted.
    pub fn sync_pod(&self, pod: &Value) {
        let ns = objects::namespace(pod);
        for claim in self.registry.store.all(PVC, Some(ns)) {
            if pod_uses_claim(pod, objects::name(&claim)) || objects::is_deleting(&claim) {
                self.sync_claim(ns, objects::name(&claim));
            }
        }
    }

    pub fn resync(&self) {
        for c in self.registry.store.all(PVC, None) {
            self.sync_claim(objects::namespace(&c), objects::name(&c));
        }
        for v in self.registry.store.all(PV, None) {
            self.sync_volume(objects::name(&v));
        }
    }
}
