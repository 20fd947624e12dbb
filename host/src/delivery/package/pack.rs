//! Writing a plugin as ConfigMaps: one, or parts and a manifest.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;

use super::super::encoding::{self, Encoding};
use super::*;

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
/// Multi-document YAML of `config_maps`, for `kubectl apply -f -`.
pub fn to_yaml(config_maps: &[ConfigMap]) -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for cm in config_maps {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(cm)?);
    }
    Ok(out)
}
