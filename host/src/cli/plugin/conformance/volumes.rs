//! What the suite reads from the volumes a plugin returns.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::policy::Preopen;

pub(super) fn capacity_of(pv: &PersistentVolume) -> Option<u64> {
    let q = pv.spec.as_ref()?.capacity.as_ref()?.get("storage")?;
    crate::quantity::parse_bytes(&q.0).ok()
}

/// `pv` as the host saves it after a resize: its new capacity.
pub(super) fn with_capacity(pv: &PersistentVolume, bytes: u64) -> PersistentVolume {
    let mut pv = pv.clone();
    if let Some(spec) = pv.spec.as_mut() {
        spec.capacity = Some(BTreeMap::from([(
            "storage".to_owned(),
            Quantity(crate::quantity::Bytes(bytes).to_string()),
        )]));
    }
    pv
}

/// The PV's source as the plugin returned it (`spec` minus the host's fields).
pub(super) fn source_json(pv: &PersistentVolume) -> String {
    let mut spec = serde_json::to_value(pv.spec.clone().unwrap_or_default()).unwrap_or_default();
    if let Some(map) = spec.as_object_mut() {
        for key in [
            "accessModes",
            "capacity",
            "claimRef",
            "mountOptions",
            "nodeAffinity",
            "persistentVolumeReclaimPolicy",
            "storageClassName",
            "volumeMode",
            "volumeAttributesClassName",
        ] {
            map.remove(key);
        }
    }
    spec.to_string()
}

pub(super) fn describe_pv(pv: &PersistentVolume) -> String {
    let capacity = pv
        .spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_default();
    format!("capacity {capacity}, source {}", source_json(pv))
}

/// The first field (JSON path) where two volumes differ.
pub(super) fn first_difference(a: &PersistentVolume, b: &PersistentVolume) -> Option<String> {
    fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value) -> Option<String> {
        use serde_json::Value;
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for key in x.keys().chain(y.keys()) {
                    let null = Value::Null;
                    let (va, vb) = (x.get(key).unwrap_or(&null), y.get(key).unwrap_or(&null));
                    if let Some(d) = walk(&format!("{path}.{key}"), va, vb) {
                        return Some(d);
                    }
                }
                None
            }
            _ if a == b => None,
            _ => Some(format!("{path}: {a} then {b}")),
        }
    }
    let a = serde_json::to_value(a).ok()?;
    let b = serde_json::to_value(b).ok()?;
    walk("", &a, &b)
}

/// `pv` as if it were another volume `name`: every occurrence of its name
/// (in metadata, source, claim reference) replaced.
pub(super) fn renamed(pv: &PersistentVolume, name: &str) -> Result<PersistentVolume, String> {
    let old = pv.metadata.name.clone().unwrap_or_default();
    let text = serde_json::to_string(pv).map_err(|e| e.to_string())?;
    let text = if old.is_empty() {
        text
    } else {
        text.replace(&old, name)
    };
    let mut pv: PersistentVolume = serde_json::from_str(&text)
        .map_err(|e| format!("cannot derive an unknown volume from the provisioned one: {e}"))?;
    pv.metadata.name = Some(name.to_owned());
    Ok(pv)
}

/// Where a volume's storage is on this machine, when the suite can look at
/// it: a `hostPath` or `local` path inside one of the plugin's preopened
/// directories that names the volume (the plugin made it for this claim).
/// Otherwise why it cannot.
pub(super) fn storage_on_disk(
    pv: &PersistentVolume,
    preopens: &[Preopen],
) -> Result<PathBuf, String> {
    let spec = pv.spec.as_ref().ok_or("the volume has no spec")?;
    let path = match (&spec.host_path, &spec.local) {
        (Some(h), _) => &h.path,
        (None, Some(l)) => &l.path,
        (None, None) => {
            return Err(
                "not a hostPath or local volume: its storage is not on this machine".to_owned(),
            )
        }
    };
    let path = PathBuf::from(path);
    if !preopens.iter().any(|p| path.starts_with(&p.host)) {
        return Err(format!(
            "{} is outside the plugin's preopened directories",
            path.display()
        ));
    }
    let name = pv.metadata.name.as_deref().unwrap_or_default();
    if name.is_empty() || !path.to_string_lossy().contains(name) {
        return Err(format!(
            "{} does not name the volume (a pool volume is handed back, not removed)",
            path.display()
        ));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::DirMode;

    #[test]
    fn unknown_volumes_are_renamed_everywhere() {
        let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pvc-1"},
            "spec": {"hostPath": {"path": "/v/pvc-1"}}
        }))
        .unwrap();
        let other = renamed(&pv, "pvc-2").unwrap();
        assert_eq!(other.metadata.name.as_deref(), Some("pvc-2"));
        assert_eq!(
            other.spec.unwrap().host_path.unwrap().path,
            "/v/pvc-2".to_string()
        );
    }

    #[test]
    fn differences_name_the_field() {
        let a: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pvc-1"},
            "spec": {"hostPath": {"path": "/v/a"}}
        }))
        .unwrap();
        let mut b = a.clone();
        assert_eq!(first_difference(&a, &b), None);
        b.spec.as_mut().unwrap().host_path.as_mut().unwrap().path = "/v/b".into();
        let d = first_difference(&a, &b).unwrap();
        assert!(d.starts_with(".spec.hostPath.path"), "{d}");
    }

    #[test]
    fn only_a_volume_made_inside_a_preopen_is_looked_at() {
        let preopens = [Preopen {
            host: PathBuf::from("/srv/volumes"),
            guest: "/data".into(),
            mode: DirMode::ReadWrite,
        }];
        let pv = |source: serde_json::Value| -> PersistentVolume {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "pvc-1"}, "spec": source
            }))
            .unwrap()
        };
        assert_eq!(
            storage_on_disk(
                &pv(serde_json::json!({"hostPath": {"path": "/srv/volumes/pvc-1"}})),
                &preopens
            ),
            Ok(PathBuf::from("/srv/volumes/pvc-1"))
        );
        assert_eq!(
            storage_on_disk(
                &pv(serde_json::json!({"local": {"path": "/srv/volumes/x/pvc-1"}})),
                &preopens
            ),
            Ok(PathBuf::from("/srv/volumes/x/pvc-1"))
        );
        for (source, why) in [
            (
                serde_json::json!({"hostPath": {"path": "/srv/volumes-2/pvc-1"}}),
                "outside",
            ),
            (
                serde_json::json!({"hostPath": {"path": "/srv/volumes/pool-3"}}),
                "does not name",
            ),
            (
                serde_json::json!({"nfs": {"server": "s", "path": "/srv/volumes/pvc-1"}}),
                "not a hostPath",
            ),
        ] {
            let e = storage_on_disk(&pv(source), &preopens).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }
}
