//! The resource types this server serves, and how each is decoded.

use k8s_openapi::api::{apps, coordination, core, events, rbac, storage};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;

/// Index of a resource in [`RESOURCES`].
pub type ResourceId = usize;

/// Static description of one served resource (what discovery publishes, plus decoding).
pub struct ResourceDef {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub list_kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub status_subresource: bool,
    /// Field selector labels accepted besides `metadata.name` / `metadata.namespace`.
    pub field_labels: &'static [&'static str],
    /// Decode through the k8s-openapi type and re-encode: drops unknown fields,
    /// rejects wrong types, like the real server's decoder.
    pub roundtrip: fn(Value) -> Result<Value, serde_json::Error>,
}

impl ResourceDef {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Base path of the group version: `/api/v1` or `/apis/<group>/<version>`.
    pub fn group_version_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }
}

fn roundtrip<K: Serialize + DeserializeOwned>(v: Value) -> Result<Value, serde_json::Error> {
    let typed: K = serde_json::from_value(v)?;
    serde_json::to_value(typed)
}

pub const PVC: ResourceId = 0;
pub const PV: ResourceId = 1;
pub const STORAGE_CLASS: ResourceId = 2;
pub const NODE: ResourceId = 3;
pub const NAMESPACE: ResourceId = 4;
pub const CONFIG_MAP: ResourceId = 5;
pub const POD: ResourceId = 6;
pub const EVENT: ResourceId = 7;
pub const EVENT_V1: ResourceId = 8;
pub const LEASE: ResourceId = 9;
pub const SERVICE_ACCOUNT: ResourceId = 10;
pub const CLUSTER_ROLE: ResourceId = 11;
pub const CLUSTER_ROLE_BINDING: ResourceId = 12;
pub const ROLE: ResourceId = 13;
pub const ROLE_BINDING: ResourceId = 14;
pub const DEPLOYMENT: ResourceId = 15;
pub const DAEMON_SET: ResourceId = 16;
pub const CSI_DRIVER: ResourceId = 17;
pub const CSI_STORAGE_CAPACITY: ResourceId = 18;

pub static RESOURCES: &[ResourceDef] = &[
    ResourceDef {
        group: "",
        version: "v1",
        plural: "persistentvolumeclaims",
        singular: "persistentvolumeclaim",
        kind: "PersistentVolumeClaim",
        list_kind: "PersistentVolumeClaimList",
        namespaced: true,
        short_names: &["pvc"],
        status_subresource: true,
        field_labels: &[],
        roundtrip: roundtrip::<core::v1::PersistentVolumeClaim>,
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "persistentvolumes",
        singular: "persistentvolume",
        kind: "PersistentVolume",
        list_kind: "PersistentVolumeList",
        namespaced: false,
        short_names: &["pv"],
        status_subresource: true,
        field_labels: &[],
        roundtrip: roundtrip::<core::v1::PersistentVolume>,
    },
    ResourceDef {
        group: "storage.k8s.io",
        version: "v1",
        plural: "storageclasses",
        singular: "storageclass",
        kind: "StorageClass",
        list_kind: "StorageClassList",
        namespaced: false,
        short_names: &["sc"],
        status_subresource: false,
        field_labels: &[],
        roundtrip: roundtrip::<storage::v1::StorageClass>,
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        list_kind: "NodeList",
        namespaced: false,
        short_names: &["no"],
        status_subresource: true,
        field_labels: &["spec.unschedulable"],
        roundtrip: roundtrip::<core::v1::Node>,
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        list_kind: "NamespaceList",
        namespaced: false,
        short_names: &["ns"],
        status_subresource: true,
        field_labels: &["status.phase"],
        roundtrip: roundtrip::<core::v1::Namespace>,
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        list_kind: "ConfigMapList",
        namespaced: true,
        short_names: &["cm"],
        status_subresource: false,
        field_labels: &[],
        roundtrip: roundtrip::<core::v1::ConfigMap>,
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        list_kind: "PodList",
        namespaced: true,
        short_names: &["po"],
        status_subresource: true,
        field_labels: &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        roundtrip: roundtrip::<core::v1::Pod>,
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        list_kind: "EventList",
        namespaced: true,
        short_names: &["ev"],
        status_subresource: false,
        field_labels: &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        roundtrip: roundtrip::<core::v1::Event>,
    },
    ResourceDef {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        list_kind: "EventList",
        namespaced: true,
        short_names: &["ev"],
        status_subresource: false,
        field_labels: &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "reason",
            "reportingController",
            "type",
        ],
        roundtrip: roundtrip::<events::v1::Event>,
    },
    ResourceDef {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        list_kind: "LeaseList",
        namespaced: true,
        short_names: &[],
        status_subresource: false,
        field_labels: &[],
        roundtrip: roundtrip::<coordination::v1::Lease>,
    },
    // What a provisioner's manifests create (`kubectl apply -k deploy/`):
    // stored and served like any object; RBAC is not enforced and no
    // controller runs Deployments or DaemonSets.
    ResourceDef {
        group: "",
        version: "v1",
        plural: "serviceaccounts",
        singular: "serviceaccount",
        kind: "ServiceAccount",
        list_kind: "ServiceAccountList",
        namespaced: true,
        short_names: &["sa"],
        status_subresource: false,
        field_labels: &[],
        roundtrip: roundtrip::<core::v1::ServiceAccount>,
    },
    ResourceDef {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "clusterroles",
        singular: "clusterrole",
        kind: "ClusterRole",
        list_kind: "ClusterRoleList",
        namespaced: false,
        short_names: &[],
        status_subresource: false,
        field_labels: &[],
        roundtrip: roundtrip::<rbac::v1::ClusterRole>,
    },
    ResourceDef {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "clusterrolebindings",
        singular: "clusterrolebinding",
        kind: "ClusterRoleBinding",
        list_kind: "ClusterRoleBindingList",
        namespaced: false,
        short_names: &[],
        status_subresource: false,
        field_labels: &[],
        roundtrip: roundtrip::<rbac::v1::ClusterRoleBinding>,
    },
    ResourceDef {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "roles",
        singular: "role",
        kind: "Role",
        list_kind: "RoleList",
        namespaced: true,
        short_names: &[],
        status_subresource: false,
        field_labels: &[],
        roundtrip: roundtrip::<rbac::v1::Role>,
    },
    ResourceDef {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "rolebindings",
        singular: "rolebinding",
        kind: "RoleBinding",
        list_kind: "RoleBindingList",
        namespaced: true,
        short_names: &[],
        status_subresource: false,
        field_labels: &[],
        roundtrip: roundtrip::<rbac::v1::RoleBinding>,
    },
    ResourceDef {
        group: "apps",
        version: "v1",
        plural: "deployments",
        singular: "deployment",
        kind: "Deployment",
        list_kind: "DeploymentList",
        namespaced: true,
        short_names: &["deploy"],
        status_subresource: true,
        field_labels: &[],
        roundtrip: roundtrip::<apps::v1::Deployment>,
    },
    ResourceDef {
        group: "apps",
        version: "v1",
        plural: "daemonsets",
        singular: "daemonset",
        kind: "DaemonSet",
        list_kind: "DaemonSetList",
        namespaced: true,
        short_names: &["ds"],
        status_subresource: true,
        field_labels: &[],
        roundtrip: roundtrip::<apps::v1::DaemonSet>,
    },
    ResourceDef {
        group: "storage.k8s.io",
        version: "v1",
        plural: "csidrivers",
        singular: "csidriver",
        kind: "CSIDriver",
        list_kind: "CSIDriverList",
        namespaced: false,
        short_names: &[],
        status_subresource: false,
        field_labels: &[],
        roundtrip: roundtrip::<storage::v1::CSIDriver>,
    },
    ResourceDef {
        group: "storage.k8s.io",
        version: "v1",
        plural: "csistoragecapacities",
        singular: "csistoragecapacity",
        kind: "CSIStorageCapacity",
        list_kind: "CSIStorageCapacityList",
        namespaced: true,
        short_names: &[],
        status_subresource: false,
        field_labels: &[],
        roundtrip: roundtrip::<storage::v1::CSIStorageCapacity>,
    },
];

/// Resource served at `group`/`version`/`plural`.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<ResourceId> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Group versions served under `/apis` (core is under `/api`).
pub fn api_groups() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

/// Paths present in `input` but dropped by the typed round trip: unknown fields.
pub fn unknown_fields(input: &Value, decoded: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect_unknown(input, decoded, "", &mut out);
    out
}

fn collect_unknown(input: &Value, decoded: &Value, prefix: &str, out: &mut Vec<String>) {
    match (input, decoded) {
        (Value::Object(i), Value::Object(d)) => {
            for (k, v) in i {
                if v.is_null() {
                    continue;
                }
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                match d.get(k) {
                    Some(dv) => collect_unknown(v, dv, &path, out),
                    None => out.push(path),
                }
            }
        }
        (Value::Array(i), Value::Array(d)) if i.len() == d.len() => {
            for (n, (iv, dv)) in i.iter().zip(d).enumerate() {
                collect_unknown(iv, dv, &format!("{prefix}[{n}]"), out);
            }
        }
        _ => {}
    }
}
