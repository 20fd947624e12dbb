//! Reading a plugin back from its ConfigMaps: complete, waiting for the
//! rest of a version, or invalid.

use k8s_openapi::api::core::v1::ConfigMap;

use super::super::encoding::{self, Encoding};
use super::*;

/// What a plugin's ConfigMaps hold right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// The whole encoded component. `sha256` is the hex digest of `bytes`.
    Complete {
        encoding: Encoding,
        bytes: Vec<u8>,
        sha256: String,
    },
    /// Not all there yet (parts missing, or from another version while one
    /// is being applied): keep serving what serves and look again on the
    /// next change.
    Waiting(String),
    /// Cannot become a plugin as it is; says what to fix.
    Invalid(String),
}

/// Whether a labelled ConfigMap is a part of a chunked plugin (and so not
/// a plugin's own ConfigMap).
pub fn is_part(config_map: &ConfigMap) -> bool {
    label(config_map, PART_LABEL).is_some()
}

/// The plugin a ConfigMap is labelled for.
pub fn plugin_of(config_map: &ConfigMap) -> Option<&str> {
    label(config_map, PLUGIN_LABEL)
}

pub(super) fn label<'a>(config_map: &'a ConfigMap, key: &str) -> Option<&'a str> {
    config_map
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

fn object_name(config_map: &ConfigMap) -> &str {
    config_map.metadata.name.as_deref().unwrap_or("<unnamed>")
}

/// The parts a plugin's ConfigMap refers to (none for a single ConfigMap or
/// an unreadable manifest), to notice when one of them changes.
pub fn referenced_parts(head: &ConfigMap) -> Vec<String> {
    match manifest_of(head) {
        Some(Ok(m)) => m.parts.into_iter().map(|p| p.config_map).collect(),
        _ => Vec::new(),
    }
}

fn manifest_of(head: &ConfigMap) -> Option<Result<Manifest, serde_json::Error>> {
    let text = head.data.as_ref()?.get(MANIFEST_KEY)?;
    Some(serde_json::from_str(text))
}

/// Reads plugin `name` from its ConfigMap `head` (single or manifest),
/// finding parts with `part` (by ConfigMap name, in the same namespace).
pub fn read<'a>(
    name: &str,
    head: &ConfigMap,
    part: impl Fn(&str) -> Option<&'a ConfigMap>,
) -> Content {
    let object = object_name(head);
    let plugin_keys: Vec<(&String, &str, Encoding)> = head
        .binary_data
        .iter()
        .flatten()
        .filter_map(|(key, _)| encoding::plugin_file(key).map(|(n, e)| (key, n, e)))
        .collect();
    let manifest = manifest_of(head);
    let single = match (plugin_keys.as_slice(), manifest) {
        ([], None) => {
            return Content::Invalid(format!(
                "ConfigMap {object} has neither binaryData {name}.wasm[.gz|.zst] nor \
                 data {MANIFEST_KEY}; make it with `wasmprov plugin pack`"
            ))
        }
        ([_, ..], Some(_)) => {
            return Content::Invalid(format!(
                "ConfigMap {object} holds both a component and {MANIFEST_KEY}; keep one \
                 (re-apply the output of `wasmprov plugin pack`)"
            ))
        }
        ([_, _, ..], None) => {
            let keys: Vec<&str> = plugin_keys.iter().map(|(k, _, _)| k.as_str()).collect();
            return Content::Invalid(format!(
                "ConfigMap {object} holds several components ({}); keep one",
                keys.join(", ")
            ));
        }
        ([one], None) => *one,
        ([], Some(manifest)) => return read_chunked(name, object, manifest, part),
    };
    let (key, key_name, encoding) = single;
    if key_name != name {
        return Content::Invalid(format!(
            "ConfigMap {object} holds {key} but is labelled {PLUGIN_LABEL}={name}; \
             name the key {name}{} or change the label",
            encoding.suffix()
        ));
    }
    let bytes = head
        .binary_data
        .as_ref()
        .and_then(|b| b.get(key))
        .map(|b| b.0.clone())
        .unwrap_or_default();
    let sha256 = sha256_hex(&bytes);
    Content::Complete {
        encoding,
        bytes,
        sha256,
    }
}

fn read_chunked<'a>(
    name: &str,
    object: &str,
    manifest: Result<Manifest, serde_json::Error>,
    part: impl Fn(&str) -> Option<&'a ConfigMap>,
) -> Content {
    let redo = "re-apply the output of `wasmprov plugin pack`";
    let manifest = match manifest {
        Ok(m) => m,
        Err(e) => {
            return Content::Invalid(format!(
                "ConfigMap {object}: {MANIFEST_KEY} is not a plugin manifest ({e}); {redo}"
            ))
        }
    };
    if manifest.format > MANIFEST_FORMAT {
        return Content::Invalid(format!(
            "ConfigMap {object}: {MANIFEST_KEY} has format {}, this host reads format \
             {MANIFEST_FORMAT}; pack it with this host's version of wasmprov or upgrade the host",
            manifest.format
        ));
    }
    if manifest.plugin != name {
        return Content::Invalid(format!(
            "ConfigMap {object}: the manifest is for plugin {} but the ConfigMap is labelled \
             {PLUGIN_LABEL}={name}; {redo}",
            manifest.plugin
        ));
    }
    let Some(encoding) = parse_encoding(&manifest.encoding) else {
        return Content::Invalid(format!(
            "ConfigMap {object}: unknown encoding {:?} in the manifest (zstd, gzip or none)",
            manifest.encoding
        ));
    };
    // Checked: part sizes are the manifest writer's, and a sum that wraps
    // must not pass for a small stream (or panic the loader).
    let Some(listed) = manifest
        .parts
        .iter()
        .try_fold(0u64, |sum, p| sum.checked_add(p.size))
    else {
        return Content::Invalid(format!(
            "ConfigMap {object}: the manifest's part sizes add up to more than any stream can \
             hold; {redo}"
        ));
    };
    if manifest.parts.is_empty() || listed != manifest.size {
        return Content::Invalid(format!(
            "ConfigMap {object}: the manifest lists {} parts of {listed} bytes in all but a \
             stream of {} bytes; {redo}",
            manifest.parts.len(),
            manifest.size
        ));
    }
    if manifest.size > 2 * encoding::MAX_COMPONENT_SIZE {
        return Content::Invalid(format!(
            "ConfigMap {object}: the manifest lists a {} byte stream, more than a plugin may be",
            manifest.size
        ));
    }
    // Presence and version first (cheap), so a plugin being applied part by
    // part is not hashed again and again.
    let mut found = Vec::with_capacity(manifest.parts.len());
    for listed in &manifest.parts {
        let Some(cm) = part(&listed.config_map) else {
            return Content::Waiting(format!(
                "part {} of {} is missing",
                listed.config_map,
                manifest.parts.len()
            ));
        };
        if plugin_of(cm) != Some(name) || !is_part(cm) {
            return Content::Invalid(format!(
                "ConfigMap {} is listed as a part of plugin {name} but is not labelled \
                 {PLUGIN_LABEL}={name} and {PART_LABEL}; {redo}",
                listed.config_map
            ));
        }
        let version = cm
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(STREAM_ANNOTATION));
        // A part without the annotation is judged by its digest alone.
        if version.is_some_and(|v| *v != manifest.sha256) {
            return Content::Waiting(format!(
                "part {} belongs to another version than the manifest (being updated?)",
                listed.config_map
            ));
        }
        found.push((listed, cm));
    }
    let mut bytes = Vec::with_capacity(manifest.size as usize);
    for (listed, cm) in found {
        let Some(data) = cm.binary_data.as_ref().and_then(|b| b.get(PART_KEY)) else {
            return Content::Invalid(format!(
                "part {} has no binaryData {PART_KEY}; {redo}",
                listed.config_map
            ));
        };
        let sha256 = sha256_hex(&data.0);
        if data.0.len() as u64 != listed.size || sha256 != listed.sha256 {
            return Content::Invalid(format!(
                "part {} does not hold what the manifest lists: {} bytes with sha256 {sha256}, \
                 expected {} bytes with sha256 {}; {redo}",
                listed.config_map,
                data.0.len(),
                listed.size,
                listed.sha256
            ));
        }
        bytes.extend_from_slice(&data.0);
    }
    let sha256 = sha256_hex(&bytes);
    if sha256 != manifest.sha256 {
        return Content::Invalid(format!(
            "ConfigMap {object}: the parts together have sha256 {sha256}, the manifest says {}; \
             {redo}",
            manifest.sha256
        ));
    }
    Content::Complete {
        encoding,
        bytes,
        sha256,
    }
}

/// The component's digest a manifest records, if `head` is a manifest (to
/// check the decoded component against).
pub fn manifest_digest(head: &ConfigMap) -> Option<String> {
    match manifest_of(head)? {
        Ok(m) => Some(m.digest),
        Err(_) => None,
    }
}
