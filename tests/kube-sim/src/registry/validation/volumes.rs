//! PersistentVolume (`ValidatePersistentVolume` and its update).

use serde_json::Value;

use super::claims;
use super::{field, names};
use crate::objects;

/// The volume sources, in the order the real server checks them.
const SOURCES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "flocker",
    "nfs",
    "rbd",
    "quobyte",
    "cephfs",
    "iscsi",
    "cinder",
    "fc",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "scaleIO",
    "local",
    "storageos",
    "csi",
];
const RECLAIM_POLICIES: &[&str] = &["Delete", "Recycle", "Retain"];
const HOST_PATH_TYPES: &[&str] = &[
    "",
    "BlockDevice",
    "CharDevice",
    "Directory",
    "DirectoryOrCreate",
    "File",
    "FileOrCreate",
    "Socket",
];

pub fn validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<String>) {
    let modes = objects::path(obj, "spec.accessModes").and_then(Value::as_array);
    if modes.is_none_or(Vec::is_empty) {
        errs.push(field::required("spec.accessModes", ""));
    }
    claims::access_modes(modes, errs);
    let capacity = objects::path(obj, "spec.capacity").and_then(Value::as_object);
    if capacity.is_none_or(|c| c.is_empty()) {
        errs.push(field::required("spec.capacity", ""));
    }
    if capacity.is_none_or(|c| !c.contains_key("storage") || c.len() > 1) {
        let shown = capacity.map_or(Value::Null, |c| Value::Object(c.clone()));
        errs.push(field::not_supported("spec.capacity", &shown, &["storage"]));
    }
    for (key, quantity) in capacity.into_iter().flatten() {
        claims::positive(&format!("spec.capacity[{key}]"), quantity, errs);
    }
    if let Some(policy) = objects::path(obj, "spec.persistentVolumeReclaimPolicy") {
        if !policy
            .as_str()
            .is_some_and(|p| RECLAIM_POLICIES.contains(&p))
        {
            errs.push(field::not_supported(
                "spec.persistentVolumeReclaimPolicy",
                policy,
                RECLAIM_POLICIES,
            ));
        }
    }
    let mut sources = 0;
    for source in SOURCES {
        let Some(spec) = objects::path(obj, &format!("spec.{source}")) else {
            continue;
        };
        sources += 1;
        if sources > 1 {
            let shown = if *source == "cephfs" {
                "cephFS"
            } else {
                source
            };
            errs.push(field::forbidden(
                &format!("spec.{shown}"),
                "may not specify more than 1 volume type",
            ));
            continue;
        }
        match *source {
            "hostPath" => host_path(spec, errs),
            "local" => local(obj, spec, errs),
            "nfs" => nfs(spec, errs),
            "csi" => csi(spec, errs),
            _ => {}
        }
    }
    if sources == 0 {
        errs.push(field::required("spec", "must specify a volume type"));
    }
    if let Some(class) = objects::path_str(obj, "spec.storageClassName").filter(|c| !c.is_empty()) {
        errs.extend(field::invalid_each(
            "spec.storageClassName",
            class,
            names::dns_subdomain(class),
        ));
    }
    claims::volume_mode(obj, errs);
    if let Some(old) = old {
        update(obj, old, errs);
    }
}

/// Whether a path has a `..` element.
fn backsteps(path: &str) -> bool {
    path.split('/').any(|part| part == "..")
}

fn host_path(spec: &Value, errs: &mut Vec<String>) {
    let path = spec["path"].as_str().unwrap_or_default();
    if path.is_empty() {
        errs.push(field::required("spec.hostPath.path", ""));
        return;
    }
    if backsteps(path) {
        errs.push(field::invalid(
            "spec.hostPath.path",
            path,
            "must not contain '..'",
        ));
    }
    if let Some(kind) = spec.get("type") {
        if !kind.as_str().is_some_and(|k| HOST_PATH_TYPES.contains(&k)) {
            errs.push(field::not_supported(
                "spec.hostPath.type",
                kind,
                HOST_PATH_TYPES,
            ));
        }
    }
}

fn local(obj: &Value, spec: &Value, errs: &mut Vec<String>) {
    let path = spec["path"].as_str().unwrap_or_default();
    if path.is_empty() {
        errs.push(field::required("spec.local.path", ""));
        return;
    }
    if backsteps(path) {
        errs.push(field::invalid(
            "spec.local.path",
            path,
            "must not contain '..'",
        ));
    }
    if objects::path(obj, "spec.nodeAffinity").is_none() {
        errs.push(field::required(
            "spec.nodeAffinity",
            "Local volume requires node affinity",
        ));
    }
}

fn nfs(spec: &Value, errs: &mut Vec<String>) {
    if spec["server"].as_str().is_none_or(str::is_empty) {
        errs.push(field::required("spec.nfs.server", ""));
    }
    let path = spec["path"].as_str().unwrap_or_default();
    if path.is_empty() {
        errs.push(field::required("spec.nfs.path", ""));
    }
    if !path.starts_with('/') {
        errs.push(field::invalid(
            "spec.nfs.path",
            path,
            "must be an absolute path",
        ));
    }
}

fn csi(spec: &Value, errs: &mut Vec<String>) {
    let driver = spec["driver"].as_str().unwrap_or_default();
    if driver.is_empty() {
        errs.push(field::required("spec.csi.driver", ""));
        return;
    }
    if driver.len() > 63 {
        errs.push(field::too_long("spec.csi.driver", 63));
    }
    errs.extend(field::invalid_each(
        "spec.csi.driver",
        driver,
        names::dns_subdomain(&driver.to_lowercase()),
    ));
    if spec["volumeHandle"].as_str().is_none_or(str::is_empty) {
        errs.push(field::required("spec.csi.volumeHandle", ""));
    }
}

fn update(obj: &Value, old: &Value, errs: &mut Vec<String>) {
    let source = |v: &Value| -> Vec<(String, Value)> {
        SOURCES
            .iter()
            .filter_map(|s| {
                Some((
                    s.to_string(),
                    objects::path(v, &format!("spec.{s}"))?.clone(),
                ))
            })
            .collect()
    };
    if source(old) != source(obj) {
        errs.push(field::forbidden(
            "spec.persistentvolumesource",
            "spec.persistentvolumesource is immutable after creation\n(the real API server shows a diff of the spec here; the simulator does not)",
        ));
    }
    claims::volume_mode_kept(obj, old, errs);
}
