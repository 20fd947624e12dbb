//! What a bound claim needs from its volume, decided from the claim, its
//! volume and class alone (tested by table).

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;

use super::super::decide::{claim_class, provisioned_by, Names};
use super::keys;
use crate::provisioner::annotations;
use crate::quantity::{self, Bytes};

/// What a bound claim needs from its volume.
#[derive(Debug, Clone, PartialEq)]
pub enum ResizePlan {
    /// Nothing: it holds what it asks, or the node's part is pending, or
    /// the volume is not ours.
    Nothing,
    /// Grow the volume to `bytes` with `plugin`.
    Grow { plugin: String, bytes: u64 },
    /// The volume already holds what the claim asks (a recovery to a size
    /// it has, or a restart after the volume was saved): record its size,
    /// or, when the volume says its filesystem must still grow, leave the
    /// claim to the kubelet.
    Finish {
        capacity: Quantity,
        node_expansion: bool,
    },
    /// An expansion is wanted but the claim's volume is not in the cache
    /// yet (the host just started): look again shortly.
    WaitForVolume,
    /// It cannot be grown here, and why (for a Warning on the claim).
    Refuse(String),
}

/// Decides what a claim needs. `pv` and `class` are the claim's volume and
/// StorageClass if known. The target is the claim's request, except while
/// an expansion is in progress: then the size being made
/// (`allocatedResources`), which the backend may be working on, unless its
/// last attempt failed for sure (`final_error`), when a smaller request may
/// replace it (as external-resizer allows).
pub fn plan(
    claim: &PersistentVolumeClaim,
    pv: Option<&PersistentVolume>,
    class: Option<&StorageClass>,
    names: &Names,
    final_error: bool,
) -> ResizePlan {
    let (Some(spec), Some(status)) = (claim.spec.as_ref(), claim.status.as_ref()) else {
        return ResizePlan::Nothing;
    };
    if status.phase.as_deref() != Some("Bound") || spec.volume_name.is_none() {
        return ResizePlan::Nothing;
    }
    let storage = quantity::storage_of;
    let Some(request) = storage(spec.resources.as_ref().and_then(|r| r.requests.as_ref())) else {
        return ResizePlan::Nothing;
    };
    let capacity = storage(status.capacity.as_ref()).unwrap_or(0);
    let state = status
        .allocated_resource_statuses
        .as_ref()
        .and_then(|s| s.get("storage"))
        .map(String::as_str);
    let in_progress = state == Some(keys::CONTROLLER_RESIZE_IN_PROGRESS);
    let infeasible = state == Some(keys::CONTROLLER_RESIZE_INFEASIBLE);
    let allocated = storage(status.allocated_resources.as_ref());
    // Less than an expansion made: a real API server refuses such a request
    // (below status.capacity); one that does not gets told, not obeyed.
    let shrink = state.is_none() && request < capacity && allocated.is_some_and(|a| request < a);
    // The node's part (the kubelet's) or nothing asked.
    if !(in_progress || infeasible || shrink) && (state.is_some() || request <= capacity) {
        return ResizePlan::Nothing;
    }
    let Some(pv) = pv else {
        return ResizePlan::WaitForVolume;
    };
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    if provisioned_by(pv, names).is_none()
        || claim_ref.and_then(|r| r.uid.as_deref()) != claim.metadata.uid.as_deref()
    {
        return ResizePlan::Nothing;
    }
    let pv_name = pv.name_any();
    if shrink {
        return ResizePlan::Refuse(format!(
            "the claim asks for {} but its volume {pv_name} holds {}: volumes cannot shrink, so nothing changed; ask for at least {}",
            Bytes(request),
            Bytes(capacity),
            Bytes(capacity)
        ));
    }
    let pv_capacity = pv.spec.as_ref().and_then(|s| s.capacity.as_ref());
    let pv_size = storage(pv_capacity).unwrap_or(0);
    let target = match allocated {
        Some(allocated) if in_progress && !final_error => allocated,
        _ => request,
    };
    if pv_size >= target {
        // Saved with the node step still to do (the claim was not marked
        // before a restart or a conflict): the kubelet must still grow the
        // filesystem, so the claim must not be marked done.
        let node_expansion = pv
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(keys::PRE_RESIZE_CAPACITY))
            && capacity < pv_size;
        let capacity = pv_capacity
            .and_then(|c| c.get("storage"))
            .cloned()
            .unwrap_or_else(|| Quantity(Bytes(target).to_string()));
        return ResizePlan::Finish {
            capacity,
            node_expansion,
        };
    }
    let class_name = claim_class(claim);
    if class.and_then(|c| c.allow_volume_expansion) != Some(true) {
        return ResizePlan::Refuse(format!(
            "StorageClass {class_name} does not allow volume expansion: set allowVolumeExpansion: true on it to grow volume {pv_name}"
        ));
    }
    let plugin = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::PLUGIN));
    match plugin {
        Some(plugin) => ResizePlan::Grow {
            plugin: plugin.clone(),
            bytes: target,
        },
        None => ResizePlan::Refuse(format!(
            "volume {pv_name} was made by a provisioner this host replaced, not by a wasmprov plugin, so no plugin can grow it"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{claim, class, names, pv};
    use super::*;

    fn grow(bytes: u64) -> ResizePlan {
        ResizePlan::Grow {
            plugin: "hostpath".into(),
            bytes,
        }
    }
    const GI: u64 = 1 << 30;

    #[test]
    fn a_larger_request_grows_the_volume_with_the_plugin_that_made_it() {
        let plan = plan(
            &claim("2Gi", "1Gi", None, None),
            Some(&pv("1Gi", Some("hostpath"))),
            Some(&class(Some(true))),
            &names(),
            false,
        );
        assert_eq!(plan, grow(2 * GI));
    }

    #[test]
    fn nothing_is_done_for_a_claim_that_holds_what_it_asks_or_is_not_ours() {
        let pv1 = pv("1Gi", Some("hostpath"));
        let class = class(Some(true));
        let ours = names();
        assert_eq!(
            plan(
                &claim("1Gi", "1Gi", None, None),
                Some(&pv1),
                Some(&class),
                &ours,
                false
            ),
            ResizePlan::Nothing
        );
        let other = Names {
            primary: "other.example.com/x".into(),
            additional: Vec::new(),
        };
        assert_eq!(
            plan(
                &claim("2Gi", "1Gi", None, None),
                Some(&pv1),
                Some(&class),
                &other,
                false
            ),
            ResizePlan::Nothing
        );
        // The volume of another claim with the same name.
        let mut stolen = pv1.clone();
        stolen
            .spec
            .as_mut()
            .unwrap()
            .claim_ref
            .as_mut()
            .unwrap()
            .uid = Some("u2".into());
        assert_eq!(
            plan(
                &claim("2Gi", "1Gi", None, None),
                Some(&stolen),
                Some(&class),
                &ours,
                false
            ),
            ResizePlan::Nothing
        );
        // The kubelet's part.
        assert_eq!(
            plan(
                &claim("2Gi", "1Gi", Some(keys::NODE_RESIZE_PENDING), Some("2Gi")),
                Some(&pv("2Gi", Some("hostpath"))),
                Some(&class),
                &ours,
                false
            ),
            ResizePlan::Nothing
        );
        // Not in the cache yet: looked at again soon.
        assert_eq!(
            plan(
                &claim("2Gi", "1Gi", None, None),
                None,
                Some(&class),
                &ours,
                false
            ),
            ResizePlan::WaitForVolume
        );
    }

    #[test]
    fn a_class_without_allow_volume_expansion_or_an_adopted_volume_is_refused_with_the_fix() {
        let claim = claim("2Gi", "1Gi", None, None);
        let ResizePlan::Refuse(m) = plan(
            &claim,
            Some(&pv("1Gi", Some("hostpath"))),
            Some(&class(None)),
            &names(),
            false,
        ) else {
            panic!("refused")
        };
        assert!(
            m.contains("StorageClass fast") && m.contains("allowVolumeExpansion: true"),
            "{m}"
        );
        let ResizePlan::Refuse(m) = plan(
            &claim,
            Some(&pv("1Gi", None)),
            Some(&class(Some(true))),
            &names(),
            false,
        ) else {
            panic!("refused")
        };
        assert!(m.contains("pvc-u1"), "{m}");
    }

    #[test]
    fn an_expansion_in_progress_keeps_its_size_and_an_infeasible_one_takes_the_new_request() {
        let pv1 = pv("1Gi", Some("hostpath"));
        let class = class(Some(true));
        // Lowered while in progress: the backend may be growing to 10Gi.
        let lowered = claim(
            "3Gi",
            "1Gi",
            Some(keys::CONTROLLER_RESIZE_IN_PROGRESS),
            Some("10Gi"),
        );
        assert_eq!(
            plan(&lowered, Some(&pv1), Some(&class), &names(), false),
            grow(10 * GI)
        );
        // Recovery: after infeasible, the user asks for less.
        let recovered = claim(
            "3Gi",
            "1Gi",
            Some(keys::CONTROLLER_RESIZE_INFEASIBLE),
            Some("10Gi"),
        );
        assert_eq!(
            plan(&recovered, Some(&pv1), Some(&class), &names(), false),
            grow(3 * GI)
        );
    }

    #[test]
    fn asking_for_less_than_an_expansion_made_is_refused_and_a_rounded_up_volume_is_not() {
        let pv2 = pv("2Gi", Some("hostpath"));
        let class = class(Some(true));
        let shrunk = claim("1Gi", "2Gi", None, Some("2Gi"));
        let ResizePlan::Refuse(m) = plan(&shrunk, Some(&pv2), Some(&class), &names(), false) else {
            panic!("refused")
        };
        assert!(
            m.contains("cannot shrink") && m.contains("at least 2Gi"),
            "{m}"
        );
        // Provisioned larger than asked (rounded up), never expanded.
        let rounded = claim("1Gi", "2Gi", None, None);
        assert_eq!(
            plan(&rounded, Some(&pv2), Some(&class), &names(), false),
            ResizePlan::Nothing
        );
    }

    #[test]
    fn a_volume_already_large_enough_only_finishes_the_claim() {
        // Saved before a restart, the claim not yet marked done.
        let claim = claim(
            "2Gi",
            "1Gi",
            Some(keys::CONTROLLER_RESIZE_IN_PROGRESS),
            Some("2Gi"),
        );
        assert_eq!(
            plan(
                &claim,
                Some(&pv("2Gi", Some("hostpath"))),
                Some(&class(Some(true))),
                &names(),
                false
            ),
            ResizePlan::Finish {
                capacity: Quantity("2Gi".into()),
                node_expansion: false,
            }
        );
    }

    #[test]
    fn a_volume_saved_with_its_node_step_to_do_leaves_the_claim_to_the_kubelet() {
        let claim = claim(
            "2Gi",
            "1Gi",
            Some(keys::CONTROLLER_RESIZE_IN_PROGRESS),
            Some("2Gi"),
        );
        let mut saved = pv("2Gi", Some("hostpath"));
        saved
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(keys::PRE_RESIZE_CAPACITY.into(), "1Gi".into());
        let finish = |pv: &PersistentVolume| {
            plan(&claim, Some(pv), Some(&class(Some(true))), &names(), false)
        };
        assert_eq!(
            finish(&saved),
            ResizePlan::Finish {
                capacity: Quantity("2Gi".into()),
                node_expansion: true,
            }
        );
        // A stale record of an earlier expansion the claim already holds.
        let mut done = claim.clone();
        done.status.as_mut().unwrap().capacity =
            Some([("storage".to_owned(), Quantity("2Gi".into()))].into());
        assert_eq!(
            plan(
                &done,
                Some(&saved),
                Some(&class(Some(true))),
                &names(),
                false
            ),
            ResizePlan::Finish {
                capacity: Quantity("2Gi".into()),
                node_expansion: false,
            }
        );
    }

    #[test]
    fn a_failed_expansion_in_progress_may_be_replaced_by_a_smaller_request() {
        let lowered = claim(
            "3Gi",
            "1Gi",
            Some(keys::CONTROLLER_RESIZE_IN_PROGRESS),
            Some("10Gi"),
        );
        let pv1 = pv("1Gi", Some("hostpath"));
        let class = class(Some(true));
        assert_eq!(
            plan(&lowered, Some(&pv1), Some(&class), &names(), true),
            grow(3 * GI),
            "the backend failed for sure: the new request"
        );
        assert_eq!(
            plan(&lowered, Some(&pv1), Some(&class), &names(), false),
            grow(10 * GI),
            "the backend may still be growing to 10Gi"
        );
    }
}
