//! Cosign signatures of a plugin's manifest, checked offline against the
//! signer's public key (`cosign generate-key-pair`'s `cosign.pub`): no
//! transparency log, no certificate authority, no network but the
//! registry. Keyless signatures need Fulcio and Rekor on the internet and
//! are not read.
//!
//! Both places cosign keeps a signature in the image's repository are read:
//! - cosign 2's (`--new-bundle-format=false` in cosign 3): the tag
//!   `sha256-<hex>.sig`, a manifest whose `simplesigning` layers are the
//!   signed payloads, each with its signature in an annotation; the
//!   payload names the manifest digest it vouches for;
//! - cosign 3's: a Sigstore bundle attached as a referrer of the manifest
//!   (the referrers API, or the `sha256-<hex>` tag of registries without
//!   it), holding a DSSE envelope whose in-toto statement names the digest.
//!
//! A signature counts when one of the keys verifies it and what it signs
//! names exactly the manifest digest being served. Everything read is
//! small and size-checked, and every blob is checked against its digest.

use std::path::Path;

use base64::Engine;
use oci_client::manifest::{OciImageIndex, OciImageManifest, OCI_IMAGE_INDEX_MEDIA_TYPE};
use oci_client::{Client, Reference};
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::{DecodePublicKey, EncodePublicKey};

use super::{client, read_blob, read_manifest, refused, target, Access, OciError};

/// The layer of a cosign 2 signature: the signed payload.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding its signature (base64).
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// A Sigstore bundle (cosign 3), as artifact type and layer.
pub const BUNDLE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// What a cosign 2 payload says it is.
const SIMPLE_SIGNING_TYPE: &str = "cosign container image signature";
/// A DSSE envelope's payload type in a cosign 3 bundle.
const IN_TOTO: &str = "application/vnd.in-toto+json";
/// A payload or bundle is a few KiB.
const MAX_SIGNATURE_BYTES: u64 = 256 << 10;
/// Signatures looked at per manifest, at most.
const MAX_SIGNATURES: usize = 32;

/// A signer's public key.
#[derive(Clone)]
pub struct PublicKey {
    key: VerifyingKey,
    /// Where it was read from, for messages.
    pub name: String,
    /// `sha256:<hex>` of its DER form: which key vouched for a version.
    pub fingerprint: String,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.fingerprint)
    }
}

impl PublicKey {
    /// A PEM `PUBLIC KEY` (cosign's ECDSA P-256), named `name` in messages.
    pub fn from_pem(name: &str, pem: &str) -> Result<Self, String> {
        let key = VerifyingKey::from_public_key_pem(pem.trim()).map_err(|e| {
            format!(
                "{name} is not an ECDSA P-256 public key in PEM ({e}); give the cosign.pub \
                 that `cosign generate-key-pair` wrote (other key types are not read)"
            )
        })?;
        let der = key
            .to_public_key_der()
            .map_err(|e| format!("{name}: {e}"))?;
        Ok(PublicKey {
            key,
            name: name.to_owned(),
            fingerprint: super::digest(der.as_bytes()),
        })
    }

    /// The key in `file`.
    pub fn read(file: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        Self::from_pem(&file.display().to_string(), &text)
    }

    /// Whether `signature` (DER, or the 64-byte r‖s form) over `message`
    /// is this key's.
    fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        let signature =
            Signature::from_der(signature).or_else(|_| Signature::from_slice(signature));
        signature.is_ok_and(|s| self.key.verify(message, &s).is_ok())
    }
}

/// A signature found good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The key that verified it ([`PublicKey::name`]).
    pub key: String,
    pub fingerprint: String,
    /// Where it was found: `cosign 2 signature tag` or `cosign 3 bundle`.
    pub format: &'static str,
}

impl Signed {
    fn by(key: &PublicKey, format: &'static str) -> Option<Self> {
        Some(Signed {
            key: key.name.clone(),
            fingerprint: key.fingerprint.clone(),
            format,
        })
    }
}

/// Finds a signature of `manifest_digest` (of `reference`'s repository) by
/// one of `keys`. The error says what was found and why none counts.
pub async fn verify(
    reference: &str,
    manifest_digest: &str,
    access: &Access,
    keys: &[PublicKey],
) -> Result<Signed, OciError> {
    let image = target(reference, access)?;
    let client = client(access, reference)?;
    let mut seen = Vec::new();
    match signature_tag(&client, &image, manifest_digest, access, keys, reference).await {
        Ok(Some(signed)) => return Ok(signed),
        Ok(None) => {}
        Err(why) => seen.push(why),
    }
    match bundles(&client, &image, manifest_digest, access, keys, reference).await {
        Ok(Some(signed)) => return Ok(signed),
        Ok(None) => {}
        Err(why) => seen.push(why),
    }
    let names: Vec<&str> = keys.iter().map(|k| k.name.as_str()).collect();
    Err(refused(
        reference,
        format!(
            "no signature of {manifest_digest} by {} was found{}; sign it with `cosign sign \
             --key cosign.key {}@{manifest_digest}` (the key whose public half is given)",
            names.join(" or "),
            if seen.is_empty() {
                String::new()
            } else {
                format!(" ({})", seen.join("; "))
            },
            repository_of(&image),
        ),
    ))
}

fn repository_of(image: &Reference) -> String {
    format!("{}/{}", image.registry(), image.repository())
}

/// The same repository, at `tag` or `digest`, through the same mirror.
fn sibling(image: &Reference, tag: Option<String>, digest: Option<String>) -> Reference {
    let (registry, repository) = (image.registry().to_owned(), image.repository().to_owned());
    let mut other = match (tag, digest) {
        (Some(tag), _) => Reference::with_tag(registry, repository, tag),
        (None, digest) => Reference::with_digest(registry, repository, digest.unwrap_or_default()),
    };
    if image.namespace().is_some() {
        // Asked through a mirror: `resolve_registry` is the mirror.
        other.set_mirror_registry(image.resolve_registry().to_owned());
    }
    other
}

/// Cosign 2: the payloads under tag `sha256-<hex>.sig`. `Ok(None)`: no
/// such tag; `Err`: signatures there, none good.
async fn signature_tag(
    client: &Client,
    image: &Reference,
    manifest_digest: &str,
    access: &Access,
    keys: &[PublicKey],
    reference: &str,
) -> Result<Option<Signed>, String> {
    let tag = format!("{}.sig", manifest_digest.replace(':', "-"));
    let at = sibling(image, Some(tag.clone()), None);
    let Ok((manifest, _)) = read_manifest(client, &at, access, reference).await else {
        return Ok(None);
    };
    let mut problems = Vec::new();
    for layer in signature_layers(&manifest, SIMPLE_SIGNING) {
        let Some(signature) = layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(SIGNATURE_ANNOTATION))
        else {
            problems.push("a payload without a signature annotation".to_owned());
            continue;
        };
        let Ok(signature) = base64::engine::general_purpose::STANDARD.decode(signature.trim())
        else {
            problems.push("a signature that is not base64".to_owned());
            continue;
        };
        let payload = read_blob(
            client,
            &at,
            layer,
            MAX_SIGNATURE_BYTES,
            "signature payload",
            reference,
        )
        .await
        .map_err(|e| e.to_string())?;
        let Some(key) = keys.iter().find(|k| k.verifies(&payload, &signature)) else {
            problems.push("a signature by another key".to_owned());
            continue;
        };
        match simple_signing_digest(&payload) {
            Some(digest) if digest == manifest_digest => {
                return Ok(Signed::by(key, "cosign 2 signature tag"));
            }
            Some(digest) => problems.push(format!(
                "a signature by {} of another manifest, {digest}",
                key.name
            )),
            None => problems.push(format!(
                "a payload signed by {} that is not a cosign image signature",
                key.name
            )),
        }
    }
    Err(format!("tag {tag}: {}", summary(problems)))
}

/// The digest a cosign 2 payload vouches for.
fn simple_signing_digest(payload: &[u8]) -> Option<String> {
    let payload: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let critical = &payload["critical"];
    if critical["type"] != SIMPLE_SIGNING_TYPE {
        return None;
    }
    critical["image"]["docker-manifest-digest"]
        .as_str()
        .map(str::to_owned)
}

/// Cosign 3: Sigstore bundles referring to the manifest.
async fn bundles(
    client: &Client,
    image: &Reference,
    manifest_digest: &str,
    access: &Access,
    keys: &[PublicKey],
    reference: &str,
) -> Result<Option<Signed>, String> {
    let index = referrers(client, image, manifest_digest, access, reference)
        .await
        .map_err(|e| format!("referrers: {e}"))?;
    if index.manifests.is_empty() {
        return Ok(None);
    }
    let mut problems = Vec::new();
    for entry in index.manifests.iter().take(MAX_SIGNATURES) {
        if entry.artifact_type.as_deref().is_some_and(|t| t != BUNDLE) {
            continue;
        }
        let at = sibling(image, None, Some(entry.digest.clone()));
        let (manifest, _) = read_manifest(client, &at, access, reference)
            .await
            .map_err(|e| e.to_string())?;
        if manifest.subject.as_ref().map(|s| s.digest.as_str()) != Some(manifest_digest) {
            problems.push(format!("{} refers to another manifest", entry.digest));
            continue;
        }
        for layer in signature_layers(&manifest, BUNDLE) {
            let bundle = read_blob(client, &at, layer, MAX_SIGNATURE_BYTES, "bundle", reference)
                .await
                .map_err(|e| e.to_string())?;
            match check_bundle(&bundle, manifest_digest, keys) {
                Ok(key) => return Ok(Signed::by(key, "cosign 3 bundle")),
                Err(problem) => problems.push(problem),
            }
        }
    }
    Err(format!("referrers: {}", summary(problems)))
}

/// The referrers of `manifest_digest` that are Sigstore bundles: from the
/// referrers API, or where registries without it keep them (the index
/// under tag `sha256-<hex>`); none if neither is there.
async fn referrers(
    client: &Client,
    image: &Reference,
    manifest_digest: &str,
    access: &Access,
    reference: &str,
) -> Result<OciImageIndex, OciError> {
    // A `+` in a query is a space to many servers.
    let api = format!(
        "referrers/{manifest_digest}?artifactType={}",
        BUNDLE.replace('+', "%2B")
    );
    let fallback = format!("manifests/{}", manifest_digest.replace(':', "-"));
    let mut body = None;
    for tail in [api, fallback] {
        body = super::capped::get(
            client,
            image,
            access,
            &tail,
            &[OCI_IMAGE_INDEX_MEDIA_TYPE],
            reference,
        )
        .await?;
        if body.is_some() {
            break;
        }
    }
    let Some(body) = body else {
        return Ok(OciImageIndex {
            schema_version: 2,
            media_type: None,
            manifests: Vec::new(),
            artifact_type: None,
            annotations: None,
        });
    };
    serde_json::from_slice(&body.bytes).map_err(|e| {
        refused(
            reference,
            format!("its referrers are not an image index: {e}"),
        )
    })
}

/// The key that signed `bundle`'s DSSE envelope, if its in-toto statement
/// names `manifest_digest` as its subject.
fn check_bundle<'k>(
    bundle: &[u8],
    manifest_digest: &str,
    keys: &'k [PublicKey],
) -> Result<&'k PublicKey, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let bundle: serde_json::Value =
        serde_json::from_slice(bundle).map_err(|e| format!("a bundle that is not JSON: {e}"))?;
    let envelope = &bundle["dsseEnvelope"];
    let payload_type = envelope["payloadType"].as_str().unwrap_or_default();
    if payload_type != IN_TOTO {
        return Err(format!(
            "a bundle without an in-toto DSSE envelope (payload type {payload_type:?})"
        ));
    }
    let payload = envelope["payload"]
        .as_str()
        .and_then(|p| b64.decode(p).ok())
        .ok_or("a DSSE envelope without a base64 payload")?;
    let signed = pae(payload_type, &payload);
    let key = envelope["signatures"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["sig"].as_str().and_then(|s| b64.decode(s).ok()))
        .find_map(|sig| keys.iter().find(|k| k.verifies(&signed, &sig)))
        .ok_or("a bundle signed by another key")?;
    let statement: serde_json::Value = serde_json::from_slice(&payload)
        .map_err(|e| format!("a statement signed by {} that is not JSON: {e}", key.name))?;
    let hex = manifest_digest.strip_prefix("sha256:").unwrap_or_default();
    let names_it = statement["subject"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| s["digest"]["sha256"] == hex);
    if names_it {
        Ok(key)
    } else {
        Err(format!(
            "a statement signed by {} about another manifest",
            key.name
        ))
    }
}

/// DSSE's pre-authentication encoding: what a DSSE signature is over.
fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

fn signature_layers<'m>(
    manifest: &'m OciImageManifest,
    media_type: &'m str,
) -> impl Iterator<Item = &'m oci_client::manifest::OciDescriptor> {
    manifest
        .layers
        .iter()
        .filter(move |l| l.media_type == media_type)
        .take(MAX_SIGNATURES)
}

fn summary(mut problems: Vec<String>) -> String {
    problems.dedup();
    if problems.is_empty() {
        "no signature in it".to_owned()
    } else {
        problems.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A signature `cosign sign --key` made, from sigstore-rs's tests
    /// (src/crypto/verification_key.rs, `verify_signature_success`): what
    /// cosign writes is what this module reads.
    const COSIGN_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAENptdY/l3nB0yqkXLBWkZWQwo6+cu
OSWS1X9vPavpiQOoTTGC0xX57OojUadxF1cdQmrsiReWg2Wn4FneJfa8xw==
-----END PUBLIC KEY-----";
    const COSIGN_PAYLOAD: &str = r#"{"critical":{"identity":{"docker-reference":"registry-testing.svc.lan/busybox"},"image":{"docker-manifest-digest":"sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b"},"type":"cosign container image signature"},"optional":null}"#;
    const COSIGN_SIGNATURE: &str = "MEUCIQD6q/COgzOyW0YH1Dk+CCYSt4uAhm3FDHUwvPI55zwnlwIgE0ZK58ZOWpZw8YVmBapJhBqCfdPekIknimuO0xH8Jh8=";

    #[test]
    fn a_signature_cosign_made_verifies_and_names_its_digest() {
        let key = PublicKey::from_pem("cosign.pub", COSIGN_PUB).unwrap();
        let signature = base64::engine::general_purpose::STANDARD
            .decode(COSIGN_SIGNATURE)
            .unwrap();
        assert!(key.verifies(COSIGN_PAYLOAD.as_bytes(), &signature));
        assert!(!key.verifies(b"hello world", &signature));
        assert_eq!(
            simple_signing_digest(COSIGN_PAYLOAD.as_bytes()).as_deref(),
            Some("sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b")
        );
        assert!(key.fingerprint.starts_with("sha256:"));
    }

    #[test]
    fn what_is_not_a_p256_public_key_is_named() {
        for text in [
            "",
            "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----",
        ] {
            let error = PublicKey::from_pem("keys/release.pub", text).unwrap_err();
            assert!(
                error.contains("keys/release.pub is not an ECDSA P-256 public key"),
                "{error}"
            );
        }
    }

    #[test]
    fn dsse_signs_the_pre_authentication_encoding() {
        // The example of the DSSE specification (protocol.md).
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
        );
    }
}
