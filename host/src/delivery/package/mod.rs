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

mod pack;
mod read;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::encoding::{self, Encoding};

pub use pack::{pack, to_yaml, Packed};
pub use read::{is_part, manifest_digest, plugin_of, read, referenced_parts, Content};

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
