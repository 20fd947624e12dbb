//! `PersistentVolumeSource` JSON, as `volume.source` carries it: builders for
//! the common kinds, and readers for `delete`, which gets the source back.

use serde_json::{json, Map, Value};

/// `{"hostPath":{"path":…,"type":…}}`; `kind` is e.g. `DirectoryOrCreate`
/// (`None` leaves the type out).
pub fn host_path(path: &str, kind: Option<&str>) -> String {
    let mut inner = Map::new();
    inner.insert("path".into(), json!(path));
    if let Some(kind) = kind {
        inner.insert("type".into(), json!(kind));
    }
    json!({ "hostPath": inner }).to_string()
}

/// `{"nfs":{"server":…,"path":…}}`, with `readOnly` when true.
pub fn nfs(server: &str, path: &str, read_only: bool) -> String {
    let mut inner = Map::new();
    inner.insert("server".into(), json!(server));
    inner.insert("path".into(), json!(path));
    if read_only {
        inner.insert("readOnly".into(), json!(true));
    }
    json!({ "nfs": inner }).to_string()
}

/// `{"local":{"path":…}}`, with `fsType` when given. A `local` volume needs
/// node affinity (see [`crate::pin_to_node`]).
pub fn local(path: &str, fs_type: Option<&str>) -> String {
    let mut inner = Map::new();
    inner.insert("path".into(), json!(path));
    if let Some(fs_type) = fs_type {
        inner.insert("fsType".into(), json!(fs_type));
    }
    json!({ "local": inner }).to_string()
}

/// A CSI volume: `{"csi":{"driver":…,"volumeHandle":…,…}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Csi {
    pub driver: String,
    pub volume_handle: String,
    pub fs_type: Option<String>,
    pub read_only: bool,
    /// `volumeAttributes`, in order.
    pub attributes: Vec<(String, String)>,
}

impl Csi {
    pub fn new(driver: &str, volume_handle: &str) -> Self {
        Csi {
            driver: driver.to_string(),
            volume_handle: volume_handle.to_string(),
            ..Csi::default()
        }
    }

    /// The source as JSON.
    pub fn to_json(&self) -> String {
        let mut inner = Map::new();
        inner.insert("driver".into(), json!(self.driver));
        inner.insert("volumeHandle".into(), json!(self.volume_handle));
        if let Some(fs_type) = &self.fs_type {
            inner.insert("fsType".into(), json!(fs_type));
        }
        if self.read_only {
            inner.insert("readOnly".into(), json!(true));
        }
        if !self.attributes.is_empty() {
            let attrs: Map<String, Value> = self
                .attributes
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            inner.insert("volumeAttributes".into(), Value::Object(attrs));
        }
        json!({ "csi": inner }).to_string()
    }
}

/// The string field `field` of the `kind` source in `source` JSON, e.g.
/// `field_of(source, "nfs", "path")`. The error says what is missing.
pub fn field_of(source: &str, kind: &str, field: &str) -> Result<String, String> {
    let value: Value =
        serde_json::from_str(source).map_err(|e| format!("the source is not JSON ({e})"))?;
    value
        .get(kind)
        .and_then(|inner| inner.get(field))
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("the source has no {kind}.{field}"))
}

/// The `hostPath.path` of a source.
pub fn host_path_of(source: &str) -> Result<String, String> {
    field_of(source, "hostPath", "path")
}

/// The `(server, path)` of an `nfs` source.
pub fn nfs_of(source: &str) -> Result<(String, String), String> {
    Ok((
        field_of(source, "nfs", "server")?,
        field_of(source, "nfs", "path")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn builds_sources() {
        assert_eq!(
            host_path("/srv/x", Some("DirectoryOrCreate")),
            r#"{"hostPath":{"path":"/srv/x","type":"DirectoryOrCreate"}}"#
        );
        assert_eq!(
            host_path("/srv/x", None),
            r#"{"hostPath":{"path":"/srv/x"}}"#
        );
        assert_eq!(
            parse(&nfs("10.0.0.5", "/exports/a", true)),
            json!({"nfs": {"server": "10.0.0.5", "path": "/exports/a", "readOnly": true}})
        );
        assert_eq!(
            parse(&local("/mnt/disks/a", Some("ext4"))),
            json!({"local": {"path": "/mnt/disks/a", "fsType": "ext4"}})
        );
        let mut csi = Csi::new("example.com/driver", "vol-1");
        csi.attributes.push(("pool".into(), "fast".into()));
        assert_eq!(
            parse(&csi.to_json()),
            json!({"csi": {"driver": "example.com/driver", "volumeHandle": "vol-1",
                            "volumeAttributes": {"pool": "fast"}}})
        );
    }

    #[test]
    fn escapes_and_reads_back() {
        let source = host_path("/srv/we\"ird\\dir/pvc-1", None);
        assert_eq!(host_path_of(&source).unwrap(), "/srv/we\"ird\\dir/pvc-1");
        let source = nfs("nfs.example", "/e/a", false);
        assert_eq!(
            nfs_of(&source).unwrap(),
            ("nfs.example".to_string(), "/e/a".to_string())
        );
        assert!(host_path_of(&source)
            .unwrap_err()
            .contains("no hostPath.path"));
        assert!(nfs_of("nope").unwrap_err().contains("not JSON"));
    }
}
