//! Plugins as ConfigMaps: the format `wasmprov plugin pack` writes and the
//! API source reads.
//!
//! A plugin whose (compressed) component fits one ConfigMap is **one
//! ConfigMap** `wasmprov-plugin-<name>`, labelled `wasmprov.io/plugin:
//! <name>`, with `binaryData: {<name>.wasm.zst: …}`. It works for both
//! sources: mounted, it is a directory holding `<name>.wasm.zst`; read
//! through the API, it is the same bytes.
//!
//! A larger one is **chunked** (API source only): parts
//! `wasmprov-plugin-<name>-part-000`, `-001`, … (labels `wasmprov.io/plugin`
//! and `wasmprov.io/part: "<i>"`, annotation `wasmprov.io/stream-sha256`
//! naming the version they belong to, `binaryData: {part: …}`), plus the
//! **manifest** ConfigMap `wasmprov-plugin-<name>` with `data:
//! {manifest.json: …}` listing the encoding, the size and sha256 of the
//! whole encoded stream, and each part's ConfigMap, size and sha256.
//!
//! A chunked plugin is complete when every part the manifest lists is
//! present, belongs to the manifest's version and has the listed digest.
//! Objects are written one at a time, so while a new version is being
//! applied some parts belong to the old version and some to the new: that
//! is *waiting*, not an error. A part that claims the manifest's version but
//! holds other bytes is *invalid*. Parts the manifest does not list (left
//! from a bigger previous version) are ignored.
//!
//! Sizes: Kubernetes refuses a ConfigMap whose keys plus values (decoded
//! `binaryData`) exceed 1 MiB (1,048,576 bytes). Parts and single ConfigMaps
//! hold at most [`DEFAULT_PART_SIZE`] = 1,000,000 bytes, leaving 48 KiB for
//! keys and metadata; on the wire (base64 in JSON) that is about 1.33 MB, well
//! under the API server's 3 MiB request limit, and etcd stores the bytes
//! (protobuf), not the base64.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::encoding::{self, Encoding};

/// Label naming the plugin a ConfigMap carries (the API source watches it).
pub const PLUGIN_LABEL: &str = "wasmprov.io/plugin";
/// Label of a part ConfigMap: its index, `"0"`, `"1"`, ….
pub const PART_LABEL: &str = "wasmprov.io/part";
/// Annotation of a part: the sha256 of the whole encoded stream it is part of.
pub const STREAM_ANNOTATION: &str = "wasmprov.io/stream-sha256";
/// Annotation of a plugin's (single or manifest) ConfigMap: the component's
/// digest, as the host reports it in logs, metrics and volume annotations.
/// Informational: the host computes the digest itself.
pub const DIGEST_ANNOTATION: &str = "wasmprov.io/digest";
/// The manifest's key in `data`.
pub const MANIFEST_KEY: &str = "manifest.json";
/// A part's key in `binaryData`.
pub const PART_KEY: &str = "part";
/// The manifest format this host writes and reads.
pub const MANIFEST_FORMAT: u32 = 1;

/// Kubernetes' limit on a ConfigMap's keys plus values (`MaxConfigMapSize`).
pub const MAX_CONFIG_MAP_BYTES: usize = 1 << 20;
/// The most bytes of plugin data one ConfigMap holds.
pub const DEFAULT_PART_SIZE: usize = 1_000_000;
/// The smallest part size `pack` accepts (smaller only multiplies objects).
pub const MIN_PART_SIZE: usize = 1024;

/// The name of a plugin's (single or manifest) ConfigMap.
pub fn config_map_name(plugin: &str) -> String {
    format!("wasmprov-plugin-{plugin}")
}

/// The name of part `index` of a chunked plugin.
pub fn part_name(plugin: &str, index: usize) -> String {
    format!("wasmprov-plugin-{plugin}-part-{index:03}")
}

/// Names `pack` accepts: a plugin name that is also a valid label value and
/// part of a ConfigMap name (lowercase letters, digits and `-`, starting and
/// ending with a letter or digit, at most 63 characters).
pub fn packable_name(name: &str) -> Result<(), String> {
    let dns_label = encoding::valid_name(name)
        && !name.contains('_')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if dns_label {
        Ok(())
    } else {
        Err(format!(
            "{name:?} cannot be a packed plugin's name: use lowercase letters, digits and '-', \
             starting and ending with a letter or digit, at most 63 characters \
             (it becomes the label value and part of the ConfigMap names)"
        ))
    }
}

/// How the manifest names an encoding.
pub fn encoding_name(encoding: Encoding) -> &'static str {
    match encoding {
        Encoding::Plain => "none",
        Encoding::Gzip => "gzip",
        Encoding::Zstd => "zstd",
    }
}

/// The encoding a manifest names.
pub fn parse_encoding(name: &str) -> Option<Encoding> {
    match name {
        "none" => Some(Encoding::Plain),
        "gzip" => Some(Encoding::Gzip),
        "zstd" => Some(Encoding::Zstd),
        _ => None,
    }
}

/// `manifest.json` of a chunked plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`]; a newer format is refused with a clear message.
    pub format: u32,
    pub plugin: String,
    /// `zstd`, `gzip` or `none`.
    pub encoding: String,
    /// Bytes of the whole encoded stream.
    pub size: u64,
    /// Hex sha256 of the whole encoded stream (also each part's
    /// [`STREAM_ANNOTATION`]).
    pub sha256: String,
    /// The decoded component's digest (`sha256:<hex>`).
    pub digest: String,
    /// In order.
    pub parts: Vec<PartRef>,
}

/// One part as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartRef {
    pub config_map: String,
    pub size: u64,
    /// Hex sha256 of the part's bytes.
    pub sha256: String,
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// What [`pack`] made.
#[derive(Debug, Clone)]
pub struct Packed {
    /// Parts first, then the manifest (or the single ConfigMap): applied in
    /// this order, the manifest arrives when its parts are there.
    pub config_maps: Vec<ConfigMap>,
    /// The component's digest (`sha256:<hex>`).
    pub digest: String,
    /// Bytes of the encoded stream.
    pub encoded_size: usize,
    /// Whether it is split over several ConfigMaps (API source only).
    pub chunked: bool,
}

/// The ConfigMaps that carry `wasm` as plugin `name`, each holding at most
/// `part_size` bytes of plugin data.
pub fn pack(
    name: &str,
    wasm: &[u8],
    encoding: Encoding,
    namespace: Option<&str>,
    part_size: usize,
) -> Result<Packed, String> {
    packable_name(name)?;
    if !(MIN_PART_SIZE..=DEFAULT_PART_SIZE).contains(&part_size) {
        return Err(format!(
            "a part size of {part_size} bytes is out of range: use {MIN_PART_SIZE} to \
             {DEFAULT_PART_SIZE} bytes (a ConfigMap holds at most {MAX_CONFIG_MAP_BYTES} bytes)"
        ));
    }
    let digest = format!("sha256:{}", sha256_hex(wasm));
    let encoded = encoding::encode(encoding, wasm)
        .map_err(|e| format!("cannot compress the component: {e}"))?;
    let meta = |object: String, labels: Vec<(&str, String)>, annotations: Vec<(&str, String)>| {
        ObjectMeta {
            name: Some(object),
            namespace: namespace.map(str::to_owned),
            labels: Some(
                std::iter::once((PLUGIN_LABEL.to_owned(), name.to_owned()))
                    .chain(labels.into_iter().map(|(k, v)| (k.to_owned(), v)))
                    .collect(),
            ),
            annotations: Some(
                annotations
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    };
    let key = format!("{name}{}", encoding.suffix());
    if encoded.len() + key.len() <= part_size {
        let single = ConfigMap {
            metadata: meta(
                config_map_name(name),
                vec![],
                vec![(DIGEST_ANNOTATION, digest.clone())],
            ),
            binary_data: Some(BTreeMap::from([(key, ByteString(encoded.clone()))])),
            ..ConfigMap::default()
        };
        return Ok(Packed {
            config_maps: vec![single],
            digest,
            encoded_size: encoded.len(),
            chunked: false,
        });
    }
    let stream_sha256 = sha256_hex(&encoded);
    let chunk = part_size - PART_KEY.len();
    let mut config_maps = Vec::new();
    let mut parts = Vec::new();
    for (index, bytes) in encoded.chunks(chunk).enumerate() {
        let object = part_name(name, index);
        parts.push(PartRef {
            config_map: object.clone(),
            size: bytes.len() as u64,
            sha256: sha256_hex(bytes),
        });
        config_maps.push(ConfigMap {
            metadata: meta(
                object,
                vec![(PART_LABEL, index.to_string())],
                vec![(STREAM_ANNOTATION, stream_sha256.clone())],
            ),
            binary_data: Some(BTreeMap::from([(
                PART_KEY.to_owned(),
                ByteString(bytes.to_vec()),
            )])),
            ..ConfigMap::default()
        });
    }
    let manifest = Manifest {
        format: MANIFEST_FORMAT,
        plugin: name.to_owned(),
        encoding: encoding_name(encoding).to_owned(),
        size: encoded.len() as u64,
        sha256: stream_sha256,
        digest: digest.clone(),
        parts,
    };
    let json = serde_json::to_string_pretty(&manifest)
        .map_err(|e| format!("cannot write the manifest: {e}"))?;
    config_maps.push(ConfigMap {
        metadata: meta(
            config_map_name(name),
            vec![],
            vec![(DIGEST_ANNOTATION, digest.clone())],
        ),
        data: Some(BTreeMap::from([(MANIFEST_KEY.to_owned(), json + "\n")])),
        ..ConfigMap::default()
    });
    Ok(Packed {
        config_maps,
        digest,
        encoded_size: encoded.len(),
        chunked: true,
    })
}

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

fn label<'a>(config_map: &'a ConfigMap, key: &str) -> Option<&'a str> {
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

/// Multi-document YAML of `config_maps`, for `kubectl apply -f -`.
pub fn to_yaml(config_maps: &[ConfigMap]) -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for cm in config_maps {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(cm)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Incompressible bytes, so small part sizes give several parts.
    fn component(len: usize) -> Vec<u8> {
        let mut out = b"\0asm\x0d\0\x01\0".to_vec();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        while out.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.extend_from_slice(&x.to_le_bytes());
        }
        out.truncate(len);
        out
    }

    fn by_name(cms: &[ConfigMap]) -> HashMap<String, ConfigMap> {
        cms.iter()
            .map(|cm| (cm.metadata.name.clone().unwrap(), cm.clone()))
            .collect()
    }

    fn read_all(name: &str, cms: &HashMap<String, ConfigMap>) -> Content {
        read(name, &cms[&config_map_name(name)], |n| cms.get(n))
    }

    fn decoded(content: Content) -> Vec<u8> {
        match content {
            Content::Complete {
                encoding, bytes, ..
            } => encoding::decode(encoding, bytes).unwrap(),
            other => panic!("not complete: {other:?}"),
        }
    }

    #[test]
    fn small_plugin_is_one_config_map() {
        let wasm = b"\0asm\x0d\0\x01\0".repeat(1000);
        let packed = pack(
            "hostpath",
            &wasm,
            Encoding::Zstd,
            Some("ns"),
            DEFAULT_PART_SIZE,
        )
        .unwrap();
        assert!(!packed.chunked);
        let [cm] = packed.config_maps.as_slice() else {
            panic!("{:?}", packed.config_maps)
        };
        assert_eq!(
            cm.metadata.name.as_deref(),
            Some("wasmprov-plugin-hostpath")
        );
        assert_eq!(cm.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(plugin_of(cm), Some("hostpath"));
        assert!(!is_part(cm));
        let keys: Vec<&String> = cm.binary_data.as_ref().unwrap().keys().collect();
        assert_eq!(keys, ["hostpath.wasm.zst"]);
        assert_eq!(decoded(read("hostpath", cm, |_| None)), wasm);
        assert_eq!(
            packed.digest,
            format!("sha256:{}", hex::encode(Sha256::digest(&wasm)))
        );
    }

    #[test]
    fn split_and_assemble_round_trip() {
        let wasm = component(10_000);
        for encoding in [Encoding::Plain, Encoding::Gzip, Encoding::Zstd] {
            let packed = pack("big", &wasm, encoding, None, 2048).unwrap();
            assert!(packed.chunked, "{encoding:?}");
            let n = packed.config_maps.len();
            // Parts first, manifest last.
            assert!(n >= 6, "{n}");
            for (i, cm) in packed.config_maps[..n - 1].iter().enumerate() {
                assert_eq!(cm.metadata.name.clone().unwrap(), part_name("big", i));
                assert_eq!(label(cm, PART_LABEL), Some(i.to_string().as_str()));
                let bytes = &cm.binary_data.as_ref().unwrap()[PART_KEY].0;
                assert!(bytes.len() + PART_KEY.len() <= 2048);
            }
            let head = &packed.config_maps[n - 1];
            assert_eq!(head.metadata.name.clone().unwrap(), "wasmprov-plugin-big");
            assert!(!is_part(head));
            assert_eq!(referenced_parts(head).len(), n - 1);
            let cms = by_name(&packed.config_maps);
            assert_eq!(decoded(read_all("big", &cms)), wasm, "{encoding:?}");
        }
    }

    #[test]
    fn parts_are_assembled_in_manifest_order() {
        let wasm = component(8000);
        let packed = pack("big", &wasm, Encoding::Plain, None, 2048).unwrap();
        let mut cms = by_name(&packed.config_maps);
        // Swap the contents of two parts (as if names were mixed up): the
        // manifest's order and digests catch it.
        let a = cms[&part_name("big", 0)].binary_data.clone();
        let b = cms[&part_name("big", 1)].binary_data.clone();
        cms.get_mut(&part_name("big", 0)).unwrap().binary_data = b;
        cms.get_mut(&part_name("big", 1)).unwrap().binary_data = a;
        assert!(matches!(read_all("big", &cms), Content::Invalid(m) if m.contains("part-000")),);
        // Restored, they assemble in the manifest's order.
        let cms = by_name(&packed.config_maps);
        assert_eq!(decoded(read_all("big", &cms)), wasm);
    }

    #[test]
    fn waits_for_missing_parts_and_other_versions() {
        let v1 = pack("big", &component(6000), Encoding::Plain, None, 2048).unwrap();
        let v2 = pack("big", &component(7000), Encoding::Plain, None, 2048).unwrap();
        let mut cms = by_name(&v1.config_maps);
        cms.remove(&part_name("big", 2));
        assert!(
            matches!(read_all("big", &cms), Content::Waiting(m) if m.contains("part-002 of 3 is missing"))
        );
        // The new manifest first: the old parts are of another version.
        let mut cms = by_name(&v1.config_maps);
        let head = v2.config_maps.last().unwrap().clone();
        cms.insert(config_map_name("big"), head);
        assert!(
            matches!(read_all("big", &cms), Content::Waiting(m) if m.contains("another version"))
        );
        // New parts first, under the old manifest: waiting too.
        let mut cms = by_name(&v1.config_maps);
        cms.insert(part_name("big", 0), v2.config_maps[0].clone());
        assert!(matches!(read_all("big", &cms), Content::Waiting(_)));
    }

    #[test]
    fn leftover_parts_of_a_bigger_version_are_ignored() {
        let big = pack("p", &component(9000), Encoding::Plain, None, 2048).unwrap();
        let small = component(3000);
        let packed = pack("p", &small, Encoding::Plain, None, 2048).unwrap();
        let mut cms = by_name(&big.config_maps);
        cms.extend(by_name(&packed.config_maps));
        assert!(cms.len() > packed.config_maps.len());
        assert_eq!(decoded(read_all("p", &cms)), small);
    }

    #[test]
    fn digest_mismatch_is_invalid() {
        let packed = pack("big", &component(6000), Encoding::Plain, None, 2048).unwrap();
        let mut cms = by_name(&packed.config_maps);
        let part = cms.get_mut(&part_name("big", 1)).unwrap();
        part.binary_data
            .as_mut()
            .unwrap()
            .get_mut(PART_KEY)
            .unwrap()
            .0[5] ^= 1;
        match read_all("big", &cms) {
            Content::Invalid(m) => assert!(m.contains("part-001 does not hold"), "{m}"),
            other => panic!("{other:?}"),
        }
        // Without the version annotation, the digest alone decides.
        part_annotations_cleared(&mut cms, &part_name("big", 1));
        assert!(matches!(read_all("big", &cms), Content::Invalid(_)));
        // A manifest whose total disagrees with its parts.
        let mut cms = by_name(&packed.config_maps);
        let head = cms.get_mut(&config_map_name("big")).unwrap();
        let text = head.data.as_mut().unwrap().get_mut(MANIFEST_KEY).unwrap();
        let mut m: Manifest = serde_json::from_str(text).unwrap();
        m.size += 1;
        *text = serde_json::to_string(&m).unwrap();
        assert!(
            matches!(read_all("big", &cms), Content::Invalid(m) if m.contains("lists 3 parts"))
        );
        // Part sizes that wrap around to the manifest's small total when
        // added: refused, never a panic or a pass.
        let mut cms = by_name(&packed.config_maps);
        let head = cms.get_mut(&config_map_name("big")).unwrap();
        let text = head.data.as_mut().unwrap().get_mut(MANIFEST_KEY).unwrap();
        let mut m: Manifest = serde_json::from_str(text).unwrap();
        m.parts[0].size = u64::MAX;
        m.parts[1].size = m.size - m.parts[2].size + 1;
        *text = serde_json::to_string(&m).unwrap();
        assert!(
            matches!(read_all("big", &cms), Content::Invalid(m) if m.contains("add up to more than any stream"))
        );
    }

    fn part_annotations_cleared(cms: &mut HashMap<String, ConfigMap>, name: &str) {
        cms.get_mut(name).unwrap().metadata.annotations = None;
    }

    #[test]
    fn invalid_heads_say_what_to_fix() {
        let wasm = b"\0asm".to_vec();
        let mut cm = pack("a", &wasm, Encoding::Plain, None, DEFAULT_PART_SIZE)
            .unwrap()
            .config_maps
            .remove(0);
        assert!(
            matches!(read("b", &cm, |_| None), Content::Invalid(m) if m.contains("a.wasm but is labelled"))
        );
        cm.binary_data = None;
        assert!(matches!(read("a", &cm, |_| None), Content::Invalid(m) if m.contains("neither")));
        cm.data = Some(BTreeMap::from([(MANIFEST_KEY.into(), "{".into())]));
        assert!(
            matches!(read("a", &cm, |_| None), Content::Invalid(m) if m.contains("not a plugin manifest"))
        );
    }

    #[test]
    fn names_and_sizes_are_checked() {
        for bad in ["", "Upper", "under_score", "-x", "x-", &"a".repeat(64)] {
            assert!(
                pack(bad, b"\0asm", Encoding::Plain, None, DEFAULT_PART_SIZE).is_err(),
                "{bad}"
            );
        }
        assert!(pack("ok", b"\0asm", Encoding::Plain, None, 100).is_err());
        assert!(pack("ok", b"\0asm", Encoding::Plain, None, MAX_CONFIG_MAP_BYTES).is_err());
    }

    #[test]
    fn yaml_documents_parse_back() {
        let packed = pack("big", &component(5000), Encoding::Gzip, Some("ns"), 2048).unwrap();
        let yaml = to_yaml(&packed.config_maps).unwrap();
        let back: Vec<ConfigMap> = serde_yaml::Deserializer::from_str(&yaml)
            .map(|d| ConfigMap::deserialize(d).unwrap())
            .collect();
        assert_eq!(back, packed.config_maps);
        assert!(yaml.contains("apiVersion: v1\nkind: ConfigMap\n"), "{yaml}");
    }
}
