//! Claims, volumes and classes the resize tests share.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::json;

use super::super::decide::Names;

pub fn names() -> Names {
    Names {
        primary: "example.com/hostpath".into(),
        additional: Vec::new(),
    }
}

pub fn claim(
    request: &str,
    capacity: &str,
    state: Option<&str>,
    allocated: Option<&str>,
) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
        "spec": {"storageClassName": "fast", "volumeName": "pvc-u1",
            "resources": {"requests": {"storage": request}}},
        "status": {"phase": "Bound", "capacity": {"storage": capacity},
            "allocatedResourceStatuses": state.map(|s| json!({"storage": s})),
            "allocatedResources": allocated.map(|a| json!({"storage": a}))},
    }))
    .unwrap()
}

pub fn pv(capacity: &str, plugin: Option<&str>) -> PersistentVolume {
    let mut annotations = json!({"pv.kubernetes.io/provisioned-by": "example.com/hostpath"});
    if let Some(p) = plugin {
        annotations["wasmprov.io/plugin"] = json!(p);
    }
    serde_json::from_value(json!({
        "metadata": {"name": "pvc-u1", "annotations": annotations},
        "spec": {"capacity": {"storage": capacity},
            "claimRef": {"namespace": "ns", "name": "data", "uid": "u1"}},
    }))
    .unwrap()
}

pub fn class(allow: Option<bool>) -> StorageClass {
    serde_json::from_value(
        json!({"metadata": {"name": "fast"}, "provisioner": "example.com/hostpath",
        "allowVolumeExpansion": allow}),
    )
    .unwrap()
}
