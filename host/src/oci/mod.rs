//! Plugins as OCI artifacts: a component pushed to a registry and pulled
//! back, as the WebAssembly ecosystem ships components (wasm-pkg-tools,
//! Spin, Kubewarden).
//!
//! Pushed in the CNCF TAG-Runtime layout: an OCI image manifest whose
//! config is `application/vnd.wasm.config.v0+json` and whose one layer is
//! the component, `application/wasm`, titled `<name>.wasm`. Pulled in that
//! layout or the older one (layer `application/vnd.wasm.content.layer.v1+wasm`,
//! Kubewarden's and Spin's). A pull never holds more than it allows: the
//! manifest at most [`MAX_MANIFEST_BYTES`], the layer at most the size its
//! manifest says and [`Limits::max_component_bytes`], and every byte is
//! checked against its digest.
//!
//! The registry transport is `oci-client`'s (auth challenges, tokens,
//! digests); this module knows nothing of Kubernetes.

use std::collections::BTreeMap;

use futures::StreamExt;
use oci_client::client::{
    Certificate, CertificateEncoding, ClientConfig, ClientProtocol, Config, ImageLayer,
};
use oci_client::manifest::{OciDescriptor, OciImageManifest, OCI_IMAGE_MEDIA_TYPE};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest, Sha256};

mod capped;
mod image;
pub mod signature;

pub use image::push_image;

/// The layer of a component in the CNCF layout.
pub const WASM_LAYER: &str = "application/wasm";
/// The layer of a component in the layout before it (Kubewarden, Spin).
pub const LEGACY_WASM_LAYER: &str = oci_client::manifest::WASM_LAYER_MEDIA_TYPE;
/// The config of a component in the CNCF layout.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The largest manifest a pull accepts: a component's is under 1 KiB.
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;
/// How long connecting to a registry may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a registry may stay silent in the middle of an answer.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// The annotation naming a layer's file.
const TITLE: &str = "org.opencontainers.image.title";

/// How to reach a registry.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Speak plain HTTP to it (a registry on loopback, a lab): never
    /// assumed, never a fallback.
    pub plain_http: bool,
    /// User name and password (or token) for HTTP Basic or the registry's
    /// token service; none: anonymous.
    pub credentials: Option<(String, String)>,
    /// PEM certificates of the authorities that sign the registry's
    /// certificate, trusted beside the system's (a private CA).
    pub ca_certificates: Option<Vec<u8>>,
    /// Ask this registry (`host[:port]`) instead of the reference's own: a
    /// mirror. The reference's registry goes along as `?ns=`, as
    /// containerd sends it; digests are checked as ever, so a mirror can
    /// withhold a version but never change one.
    pub mirror: Option<String>,
}

/// What a pull accepts.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_component_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_component_bytes: crate::delivery::encoding::MAX_COMPONENT_SIZE,
        }
    }
}

/// A component pulled from a registry.
#[derive(Debug, Clone)]
pub struct Pulled {
    pub component: Vec<u8>,
    /// The manifest's digest: what pins this version (`REF@<digest>`).
    pub manifest_digest: String,
    /// The layer's media type (either layout).
    pub layer_media_type: String,
}

/// Why a push or pull did not happen. Each says which reference, and what
/// to do about it.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("{reference:?} is not an OCI reference ({message}); write REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:DIGEST, e.g. registry.example.com/plugins/hostpath:1.0.0")]
    Reference { reference: String, message: String },
    #[error("{reference}: the registry refused or could not be reached: {message}")]
    Registry { reference: String, message: String },
    #[error("{reference}: {message}")]
    Refused { reference: String, message: String },
}

fn client(access: &Access, reference: &str) -> Result<Client, OciError> {
    // rustls with ring, as the kube client: no second crypto library.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // try_from, not new: new falls back to a default configuration (no CA,
    // HTTPS) when this one cannot be built.
    Client::try_from(ClientConfig {
        protocol: if access.plain_http {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        extra_root_certificates: access
            .ca_certificates
            .iter()
            .map(|pem| Certificate {
                encoding: CertificateEncoding::Pem,
                data: pem.clone(),
            })
            .collect(),
        // An unreachable registry (an air-gapped cluster's origin behind
        // its mirrors) fails in seconds, not at the system's TCP timeout.
        connect_timeout: Some(CONNECT_TIMEOUT),
        read_timeout: Some(READ_TIMEOUT),
        ..Default::default()
    })
    .map_err(|e| {
        refused(
            reference,
            format!("cannot make a registry client: {e} (is the CA file PEM certificates?)"),
        )
    })
}

fn auth(access: &Access) -> RegistryAuth {
    match &access.credentials {
        Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
        None => RegistryAuth::Anonymous,
    }
}

fn parse(reference: &str) -> Result<Reference, OciError> {
    reference
        .parse::<Reference>()
        .map_err(|e| OciError::Reference {
            reference: reference.to_owned(),
            message: e.to_string(),
        })
}

/// `reference`, sent to `access`'s mirror if it has one.
fn target(reference: &str, access: &Access) -> Result<Reference, OciError> {
    let mut image = parse(reference)?;
    if let Some(mirror) = &access.mirror {
        image.set_mirror_registry(mirror.clone());
    }
    Ok(image)
}

fn registry_error(reference: &str, e: impl std::error::Error) -> OciError {
    // reqwest's own message stops at "error sending request": the cause (a
    // refused connection, an unknown certificate authority) is below it.
    let mut message = e.to_string();
    let mut cause = e.source();
    while let Some(inner) = cause {
        let text = inner.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        cause = inner.source();
    }
    if message.contains("certificate") || message.contains("UnknownIssuer") {
        message.push_str(
            "; if a private authority signs the registry's certificate, give its certificate \
             (registries.<host>.caFile in the sandbox policy, --ca-file on the command line)",
        );
    }
    OciError::Registry {
        reference: reference.to_owned(),
        message,
    }
}

fn refused(reference: &str, message: String) -> OciError {
    OciError::Refused {
        reference: reference.to_owned(),
        message,
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The CNCF config of a component: what it imports and exports, so a
/// registry's UI (and `oras manifest fetch-config`) shows it.
fn config_of(component: &[u8], layer_digest: &str) -> Result<Vec<u8>, String> {
    let wit_parser::decoding::DecodedWasm::Component(resolve, world) =
        wit_parser::decoding::decode(component).map_err(|e| format!("{e:#}"))?
    else {
        return Err("it holds WIT packages, not a component".into());
    };
    let world = &resolve.worlds[world];
    let names = |keys: Vec<&wit_parser::WorldKey>| -> Vec<String> {
        keys.into_iter()
            .map(|k| resolve.name_world_key(k))
            .collect()
    };
    let config = serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": {
            "imports": names(world.imports.keys().collect()),
            "exports": names(world.exports.keys().collect()),
        },
    });
    Ok(serde_json::to_vec(&config).expect("a JSON value serializes"))
}

/// Pushes `component` (a `name.wasm`) to `reference` in the CNCF layout;
/// returns the manifest's digest (`reference`'s repository `@` it pins
/// exactly this push).
pub async fn push(
    reference: &str,
    name: &str,
    component: &[u8],
    access: &Access,
) -> Result<String, OciError> {
    let image = parse(reference)?;
    if crate::runtime::binary_kind(component) != crate::runtime::BinaryKind::Component {
        return Err(refused(
            reference,
            format!(
                "{name}.wasm is not a WebAssembly component (a core module or another file); \
                 build it as a component, or make one with `wasmprov plugin componentize`"
            ),
        ));
    }
    let layer_digest = digest(component);
    let config = config_of(component, &layer_digest).map_err(|e| {
        refused(
            reference,
            format!("{name}.wasm cannot be read as a component: {e}"),
        )
    })?;
    let layer = ImageLayer {
        data: component.to_vec().into(),
        media_type: WASM_LAYER.to_owned(),
        annotations: Some(BTreeMap::from([(TITLE.to_owned(), format!("{name}.wasm"))])),
    };
    let config = Config {
        data: config.into(),
        media_type: WASM_CONFIG.to_owned(),
        annotations: None,
    };
    push_one_layer(reference, &image, layer, config, access).await
}

/// Pushes a manifest of `layer` and `config` to `image`; returns the
/// digest that now pins it, in the registry's own words.
async fn push_one_layer(
    reference: &str,
    image: &Reference,
    layer: ImageLayer,
    config: Config,
    access: &Access,
) -> Result<String, OciError> {
    let manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
    let client = client(access, reference)?;
    let auth = auth(access);
    client
        .push(image, &[layer], config, &auth, Some(manifest))
        .await
        .map_err(|e| registry_error(reference, e))?;
    client
        .fetch_manifest_digest(image, &auth)
        .await
        .map_err(|e| registry_error(reference, e))
}

/// The digest of the manifest `reference` names now (a tag's current
/// version), asked without pulling it.
pub async fn resolve(reference: &str, access: &Access) -> Result<String, OciError> {
    let image = target(reference, access)?;
    client(access, reference)?
        .fetch_manifest_digest(&image, &auth(access))
        .await
        .map_err(|e| registry_error(reference, e))
}

/// `reference` pinned to `digest`: `REGISTRY/REPOSITORY@digest`.
pub fn pinned(reference: &str, digest: &str) -> Result<String, OciError> {
    let image = parse(reference)?;
    Ok(format!(
        "{}/{}@{digest}",
        image.registry(),
        image.repository()
    ))
}

/// Pulls the component at `reference` (a tag, or a digest that pins it).
pub async fn pull(reference: &str, access: &Access, limits: Limits) -> Result<Pulled, OciError> {
    let image = target(reference, access)?;
    let client = client(access, reference)?;
    let (manifest, manifest_digest) = read_manifest(&client, &image, access, reference).await?;
    let [layer] = manifest.layers.as_slice() else {
        return Err(refused(
            reference,
            format!(
                "it has {} layers; a plugin is one layer of type {WASM_LAYER} (or \
                 {LEGACY_WASM_LAYER}): push it with `wasmprov plugin push`",
                manifest.layers.len()
            ),
        ));
    };
    if layer.media_type != WASM_LAYER && layer.media_type != LEGACY_WASM_LAYER {
        let image_volume = match layer.media_type.contains("image.layer") {
            true => {
                " (an image, as `plugin push --image` makes for image volumes, is mounted \
                      by the kubelet, not pulled by a host)"
            }
            false => "",
        };
        return Err(refused(
            reference,
            format!(
                "its layer is of type {}, not a WebAssembly component ({WASM_LAYER} or \
                 {LEGACY_WASM_LAYER}){image_volume}: push the .wasm file with `wasmprov plugin \
                 push`",
                layer.media_type
            ),
        ));
    }
    let component = read_blob(
        &client,
        &image,
        layer,
        limits.max_component_bytes,
        "component",
        reference,
    )
    .await?;
    Ok(Pulled {
        component,
        manifest_digest,
        layer_media_type: layer.media_type.clone(),
    })
}

/// The image manifest `image` names, checked against its digest, and that
/// digest.
async fn read_manifest(
    client: &Client,
    image: &Reference,
    access: &Access,
    reference: &str,
) -> Result<(OciImageManifest, String), OciError> {
    let named = image
        .digest()
        .or(image.tag())
        .unwrap_or("latest")
        .to_owned();
    let body = capped::get(
        client,
        image,
        access,
        &format!("manifests/{named}"),
        &[OCI_IMAGE_MEDIA_TYPE],
        reference,
    )
    .await?
    .ok_or_else(|| {
        registry_error(
            reference,
            std::io::Error::other(format!("no manifest {named} there")),
        )
    })?;
    let actual = digest(&body.bytes);
    // What the reference pins, else what the registry says it sent.
    let said = image.digest().map(str::to_owned).or(body.digest);
    if let Some(said) = said.filter(|said| *said != actual) {
        return Err(refused(
            reference,
            format!(
                "the registry sent a manifest whose digest is {actual}, not the {said} it \
                 said; refusing it"
            ),
        ));
    }
    let manifest = serde_json::from_slice(&body.bytes).map_err(|e| {
        refused(
            reference,
            format!("its manifest is not an OCI image manifest: {e}"),
        )
    })?;
    Ok((manifest, actual))
}

/// The blob `layer` describes (its `what`), no larger than `max` bytes nor
/// than the layer says, and matching its digest.
async fn read_blob(
    client: &Client,
    image: &Reference,
    layer: &OciDescriptor,
    max: u64,
    what: &str,
    reference: &str,
) -> Result<Vec<u8>, OciError> {
    let size = u64::try_from(layer.size).unwrap_or(u64::MAX);
    if size > max {
        return Err(refused(
            reference,
            format!("its {what} has {size} bytes, more than the {max} allowed"),
        ));
    }
    let mut stream = client
        .pull_blob_stream(image, layer)
        .await
        .map_err(|e| registry_error(reference, e))?
        .stream;
    let mut bytes = Vec::with_capacity(size.min(64 << 20) as usize);
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| refused(reference, format!("reading its {what} failed: {e}")))?;
        if (bytes.len() + chunk.len()) as u64 > size {
            return Err(refused(
                reference,
                format!(
                    "the registry sent more than the {size} bytes its manifest gives the \
                     {what}; refusing it"
                ),
            ));
        }
        bytes.extend_from_slice(&chunk);
    }
    if digest(&bytes) != layer.digest {
        return Err(refused(
            reference,
            format!(
                "its {what}'s digest is {}, not the {} its manifest says: the registry's \
                 copy is damaged or was tampered with",
                digest(&bytes),
                layer.digest
            ),
        ));
    }
    Ok(bytes)
}
