//! The binding half of kube-controller-manager's persistentvolume-controller:
//! binding (in the real order, with the real annotations and phases), static
//! matching, `Released` when the claim goes, `Lost` when the volume goes, and
//! reclaim. The provisioning half is in `provisioning.rs`.

use std::sync::Arc;

use serde_json::{json, Value};

use super::events::Recorder;
use crate::objects;
use crate::registry::{Registry, Subresource};
use crate::resources::{self, PV, PVC, STORAGE_CLASS};
use crate::selectors::LabelSelector;

pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";

pub(super) const COMPONENT: &str = "persistentvolume-controller";

pub struct PvController {
    pub(super) registry: Arc<Registry>,
    pub(super) recorder: Recorder,
    pub binder: bool,
    pub provisioner_annotations: bool,
}

fn phase(obj: &Value) -> &str {
    objects::path_str(obj, "status.phase").unwrap_or("")
}

fn set_phase(
    registry: &Registry,
    res: usize,
    obj: &Value,
    phase: &str,
    extra: Option<(&str, Value)>,
) -> Option<Arc<Value>> {
    registry
        .modify(
            res,
            objects::namespace(obj),
            objects::name(obj),
            Subresource::Status,
            COMPONENT,
            |o| {
                objects::set_path(o, "status.phase", json!(phase));
                if let Some((k, v)) = &extra {
                    objects::set_path(o, k, v.clone());
                }
            },
        )
        .ok()
}

/// Parse a quantity into bytes (enough for comparing sizes: plain, decimal and binary suffixes).
pub fn quantity_bytes(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "m" => 1e-3,
        _ => return None,
    };
    Some(n * mult)
}

fn claim_ref_matches(pv: &Value, claim: &Value) -> bool {
    let Some(r) = objects::path(pv, "spec.claimRef") else {
        return false;
    };
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
    s("name") == objects::name(claim)
        && s("namespace") == objects::namespace(claim)
        && (s("uid").is_empty() || s("uid") == objects::uid(claim))
}

/// A claim's or volume's class: the beta annotation first, then the spec
/// field (the PV controller's `GetPersistentVolume(Claim)Class`).
fn class_of(obj: &Value) -> &str {
    obj.pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
        .and_then(Value::as_str)
        .or_else(|| objects::path_str(obj, "spec.storageClassName"))
        .unwrap_or("")
}

impl PvController {
    pub fn new(registry: Arc<Registry>, binder: bool, provisioner_annotations: bool) -> Self {
        PvController {
            recorder: Recorder::new(registry.clone(), COMPONENT),
            registry,
            binder,
            provisioner_annotations,
        }
    }

    fn get(&self, res: usize, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.registry.get(res, ns, name).ok()
    }

    pub fn resync(&self) {
        for pv in self.registry.store.all(PV, None) {
            self.sync_volume(objects::name(&pv));
        }
        for pvc in self.registry.store.all(PVC, None) {
            self.sync_claim(objects::namespace(&pvc), objects::name(&pvc));
        }
    }

    pub fn sync_claim(&self, ns: &str, name: &str) {
        let Some(claim) = self.get(PVC, ns, name) else {
            return;
        };
        if objects::annotation(&claim, ANN_BIND_COMPLETED).is_none() {
            self.sync_unbound_claim(&claim);
        } else if self.binder {
            self.sync_bound_claim(&claim);
        }
    }

    fn sync_unbound_claim(&self, claim: &Arc<Value>) {
        let volume_name = objects::path_str(claim, "spec.volumeName").unwrap_or("");
        if !volume_name.is_empty() {
            if !self.binder {
                return;
            }
            // The user asked for a specific volume.
            match self.get(PV, "", volume_name) {
                None => self.recorder.event(
                    PVC,
                    claim,
                    "Normal",
                    "FailedBinding",
                    &format!("volume \"{volume_name}\" not found"),
                ),
                Some(pv) => {
                    if objects::path(&pv, "spec.claimRef").is_none()
                        || claim_ref_matches(&pv, claim)
                    {
                        self.bind(&pv, claim);
                    } else {
                        self.recorder.event(
                            PVC,
                            claim,
                            "Warning",
                            "FailedBinding",
                            "volume already bound to a different claim.",
                        );
                    }
                }
            }
            return;
        }
        let class_name = class_of(claim).to_string();
        let class = (!class_name.is_empty())
            .then(|| self.get(STORAGE_CLASS, "", &class_name))
            .flatten();
        let delay = class.as_ref().is_some_and(|c| {
            c.get("volumeBindingMode").and_then(Value::as_str) == Some("WaitForFirstConsumer")
        });
        if self.binder {
            if let Some(pv) = self.find_match(claim, delay) {
                self.bind(&pv, claim);
                return;
            }
        }
        if !self.provisioner_annotations {
            return;
        }
        self.request_provisioning(claim, &class_name, class.as_deref(), delay);
    }

    /// A volume pre-bound to the claim, else (unless binding is delayed) the
    /// smallest Available volume that satisfies it.
    fn find_match(&self, claim: &Value, delay: bool) -> Option<Arc<Value>> {
        let volumes = self.registry.store.all(PV, None);
        if let Some(pv) = volumes
            .iter()
            .find(|pv| claim_ref_matches(pv, claim) && !objects::is_deleting(pv))
        {
            return Some(pv.clone());
        }
        if delay {
            // The scheduler binds unbound volumes for WaitForFirstConsumer claims.
            return None;
        }
        let request =
            objects::path_str(claim, "spec.resources.requests.storage").and_then(quantity_bytes)?;
        let wanted_modes: Vec<&Value> = objects::path(claim, "spec.accessModes")
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        let selector = objects::path(claim, "spec.selector").map(LabelSelector::from_object);
        let mode = |o: &Value| {
            objects::path_str(o, "spec.volumeMode")
                .unwrap_or("Filesystem")
                .to_string()
        };
        volumes
            .iter()
            .filter(|pv| objects::path(pv, "spec.claimRef").is_none() && phase(pv) == "Available")
            .filter(|pv| {
                !objects::is_deleting(pv)
                    && class_of(pv) == class_of(claim)
                    && mode(pv) == mode(claim)
            })
            .filter(|pv| {
                let modes = objects::path(pv, "spec.accessModes").and_then(Value::as_array);
                wanted_modes
                    .iter()
                    .all(|m| modes.is_some_and(|a| a.contains(m)))
            })
            .filter(|pv| selector.as_ref().is_none_or(|s| s.matches(pv)))
            .filter_map(|pv| {
                let cap =
                    objects::path_str(pv, "spec.capacity.storage").and_then(quantity_bytes)?;
                (cap >= request).then_some((cap, pv))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, pv)| pv.clone())
    }

    /// Bind in the real controller's order: PV claimRef → PV Bound → claim
    /// volumeName + annotations → claim Bound.
    fn bind(&self, pv: &Value, claim: &Value) {
        let r = &self.registry;
        let claim_name = objects::name(claim).to_string();
        let claim_ns = objects::namespace(claim).to_string();
        let by_controller = !claim_ref_matches(pv, claim);
        let claim_ref = json!({
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "namespace": claim_ns,
            "name": claim_name,
            "uid": objects::uid(claim),
            "resourceVersion": objects::resource_version(claim).unwrap_or(""),
        });
        let full_ref = objects::path(pv, "spec.claimRef")
            .is_some_and(|c| c.get("uid").and_then(Value::as_str) == Some(objects::uid(claim)));
        let pv = if full_ref && !by_controller {
            Arc::new(pv.clone())
        } else {
            match r.modify(
                PV,
                "",
                objects::name(pv),
                Subresource::Main,
                COMPONENT,
                |v| {
                    objects::set_path(v, "spec.claimRef", claim_ref.clone());
                    if by_controller {
                        objects::set_annotation(v, ANN_BOUND_BY_CONTROLLER, "yes");
                    }
                },
            ) {
                Ok(v) => v,
                Err(_) => return,
            }
        };
        let Some(pv) = (if phase(&pv) == "Bound" {
            Some(pv)
        } else {
            set_phase(r, PV, &pv, "Bound", None)
        }) else {
            return;
        };
        let pv_name = objects::name(&pv).to_string();
        let claim = r.modify(
            PVC,
            &claim_ns,
            &claim_name,
            Subresource::Main,
            COMPONENT,
            |c| {
                if objects::path_str(c, "spec.volumeName") != Some(pv_name.as_str()) {
                    objects::set_path(c, "spec.volumeName", json!(pv_name));
                    if objects::annotation(c, ANN_BOUND_BY_CONTROLLER).is_none() {
                        objects::set_annotation(c, ANN_BOUND_BY_CONTROLLER, "yes");
                    }
                }
                if objects::annotation(c, ANN_BIND_COMPLETED).is_none() {
                    objects::set_annotation(c, ANN_BIND_COMPLETED, "yes");
                }
            },
        );
        let Ok(claim) = claim else { return };
        let modes = objects::path(&pv, "spec.accessModes")
            .cloned()
            .unwrap_or(json!([]));
        let capacity = objects::path(&pv, "spec.capacity")
            .cloned()
            .unwrap_or(json!({}));
        let _ = r.modify(
            PVC,
            &claim_ns,
            &claim_name,
            Subresource::Status,
            COMPONENT,
            |c| {
                // Capacity only as the claim becomes Bound: afterwards a
                // resizer owns it (the PV controller's updateClaimStatus).
                if phase(c) != "Bound" {
                    objects::set_path(c, "status.capacity", capacity);
                }
                objects::set_path(c, "status.phase", json!("Bound"));
                objects::set_path(c, "status.accessModes", modes);
            },
        );
        let _ = claim;
    }

    fn sync_bound_claim(&self, claim: &Arc<Value>) {
        let volume_name = objects::path_str(claim, "spec.volumeName").unwrap_or("");
        let lost = |reason: &str, message: &str| {
            if phase(claim) != "Lost" {
                set_phase(&self.registry, PVC, claim, "Lost", None);
                self.recorder.event(PVC, claim, "Warning", reason, message);
            }
        };
        if volume_name.is_empty() {
            return lost(
                "ClaimLost",
                "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
            );
        }
        let Some(pv) = self.get(PV, "", volume_name) else {
            return lost(
                "ClaimLost",
                "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
            );
        };
        match objects::path(&pv, "spec.claimRef") {
            None => self.bind(&pv, claim),
            Some(_) if claim_ref_matches(&pv, claim) => self.bind(&pv, claim),
            Some(_) => lost(
                "ClaimMisbound",
                "Two claims are bound to the same volume, this one is bound incorrectly",
            ),
        }
    }

    pub fn sync_volumes_for_claim(&self, claim: &Value) {
        for pv in self.registry.store.all(PV, None) {
            let r = objects::path(&pv, "spec.claimRef");
            let s = |k: &str| {
                r.and_then(|r| r.get(k))
                    .and_then(Value::as_str)
                    .unwrap_or("")
            };
            if s("name") == objects::name(claim) && s("namespace") == objects::namespace(claim) {
                self.sync_volume(objects::name(&pv));
            }
        }
    }

    pub fn sync_volume(&self, name: &str) {
        if !self.binder {
            return;
        }
        let Some(pv) = self.get(PV, "", name) else {
            return;
        };
        let r = &self.registry;
        let Some(claim_ref) = objects::path(&pv, "spec.claimRef").cloned() else {
            if phase(&pv) != "Available" {
                set_phase(r, PV, &pv, "Available", None);
            }
            return;
        };
        let s = |k: &str| {
            claim_ref
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        if s("uid").is_empty() {
            // Pre-bound by a user: the claim's sync binds it.
            if phase(&pv) != "Available" {
                set_phase(r, PV, &pv, "Available", None);
            }
            self.sync_claim(&s("namespace"), &s("name"));
            return;
        }
        let claim = self
            .get(PVC, &s("namespace"), &s("name"))
            .filter(|c| objects::uid(c) == s("uid"));
        let Some(claim) = claim else {
            if !matches!(phase(&pv), "Released" | "Failed") {
                if let Some(pv) = set_phase(r, PV, &pv, "Released", None) {
                    self.reclaim(&pv);
                }
            }
            return;
        };
        let bound_to = objects::path_str(&claim, "spec.volumeName").unwrap_or("");
        if bound_to.is_empty() {
            self.sync_claim(objects::namespace(&claim), objects::name(&claim));
        } else if bound_to == name {
            if phase(&pv) != "Bound" {
                set_phase(r, PV, &pv, "Bound", None);
            }
        } else if objects::annotation(&pv, ANN_PROVISIONED_BY).is_some()
            && objects::path_str(&pv, "spec.persistentVolumeReclaimPolicy") == Some("Delete")
        {
            if let Some(pv) = set_phase(r, PV, &pv, "Released", None) {
                self.reclaim(&pv);
            }
        } else {
            // The claim is bound elsewhere: undo our half of the binding.
            let by_controller = objects::annotation(&pv, ANN_BOUND_BY_CONTROLLER).is_some();
            if let Ok(pv) = r.modify(PV, "", name, Subresource::Main, COMPONENT, |v| {
                if by_controller {
                    objects::remove_path(v, "spec.claimRef");
                    objects::remove_annotation(v, ANN_BOUND_BY_CONTROLLER);
                } else {
                    objects::remove_path(v, "spec.claimRef.uid");
                }
            }) {
                set_phase(r, PV, &pv, "Available", None);
            }
        }
    }

    /// Reclaim a Released volume: Retain keeps it; Delete of an externally
    /// provisioned volume is the provisioner's job; anything else has no
    /// in-tree plugin here and fails like it would on a real cluster.
    fn reclaim(&self, pv: &Arc<Value>) {
        let policy =
            objects::path_str(pv, "spec.persistentVolumeReclaimPolicy").unwrap_or("Retain");
        match policy {
            "Retain" => {}
            "Delete"
                if objects::annotation(pv, ANN_PROVISIONED_BY)
                    .is_some_and(|p| !p.starts_with("kubernetes.io/")) => {}
            _ => {
                let message = format!("error getting deleter volume plugin for volume \"{}\": no deletable volume plugin matched", objects::name(pv));
                if let Some(pv) = set_phase(
                    &self.registry,
                    PV,
                    pv,
                    "Failed",
                    Some(("status.message", json!(message))),
                ) {
                    self.recorder
                        .event(PV, &pv, "Warning", "VolumeFailedDelete", &message);
                }
            }
        }
    }
}

/// Which syncs an event calls for.
pub fn affected(res: usize, obj: &Value, prev: Option<&Value>) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    match res {
        PVC => {
            out.push((
                PVC,
                objects::namespace(obj).into(),
                objects::name(obj).into(),
            ));
            // Volumes pointing at this claim (claim deleted → Released).
            for v in [Some(obj), prev].into_iter().flatten() {
                if let Some(vn) = objects::path_str(v, "spec.volumeName").filter(|s| !s.is_empty())
                {
                    out.push((PV, String::new(), vn.into()));
                }
            }
        }
        PV => {
            out.push((PV, String::new(), objects::name(obj).into()));
            if let Some(r) = objects::path(obj, "spec.claimRef") {
                let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                out.push((PVC, s("namespace"), s("name")));
            }
        }
        resources::STORAGE_CLASS => {}
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn quantities() {
        assert_eq!(super::quantity_bytes("1Gi"), Some(1073741824.0));
        assert_eq!(super::quantity_bytes("500M"), Some(5e8));
        assert_eq!(super::quantity_bytes("10"), Some(10.0));
        assert!(super::quantity_bytes("1Gi").unwrap() > super::quantity_bytes("1G").unwrap());
    }
}
