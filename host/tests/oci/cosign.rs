//! Signatures made as cosign makes them, with a key of the test's own: the
//! cosign 2 signature tag and the cosign 3 Sigstore bundle attached as a
//! referrer (with the referrers tag schema, as go-containerregistry writes
//! it for a registry without the referrers API). The formats follow
//! cosign's code (pkg/oci/static/signature.go, sigstore's
//! pkg/signature/payload, cmd/cosign/cli/sign/sign.go); the module's unit
//! test checks a signature cosign itself made.

use std::collections::BTreeMap;

use base64::Engine;
use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::{
    ImageIndexEntry, OciDescriptor, OciImageIndex, OciImageManifest, OCI_IMAGE_INDEX_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE,
};
use oci_client::secrets::RegistryAuth;
use oci_client::Reference;
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::{EncodePublicKey, LineEnding};
use wasmprov::oci::signature::{BUNDLE, SIGNATURE_ANNOTATION, SIMPLE_SIGNING};

/// A signing key pair; `seed` picks which.
pub struct Key(SigningKey);

impl Key {
    pub fn new(seed: u8) -> Self {
        Key(SigningKey::from_slice(&[seed; 32]).expect("a valid P-256 scalar"))
    }

    /// Its public half as `cosign.pub` holds it.
    pub fn public_pem(&self) -> String {
        self.0
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap()
    }

    fn sign(&self, message: &[u8]) -> String {
        let signature: Signature = self.0.sign(message);
        base64::engine::general_purpose::STANDARD.encode(signature.to_der().as_bytes())
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn parse(reference: &str) -> Reference {
    reference.parse().unwrap()
}

/// `cosign sign --key` (cosign 2): a payload naming `names_digest`, kept
/// under `repository`'s tag for `manifest_digest`.
pub async fn sign_v2(repository: &str, manifest_digest: &str, names_digest: &str, key: &Key) {
    let payload = format!(
        r#"{{"critical":{{"identity":{{"docker-reference":"{repository}"}},"image":{{"docker-manifest-digest":"{names_digest}"}},"type":"cosign container image signature"}},"optional":null}}"#
    );
    let layer = ImageLayer {
        data: payload.clone().into_bytes().into(),
        media_type: SIMPLE_SIGNING.to_owned(),
        annotations: Some(BTreeMap::from([(
            SIGNATURE_ANNOTATION.to_owned(),
            key.sign(payload.as_bytes()),
        )])),
    };
    let config = Config::oci_v1(
        serde_json::to_vec(&serde_json::json!({
            "architecture": "", "os": "", "config": {},
            "rootfs": {"type": "layers", "diff_ids": [wasmprov::oci::digest(payload.as_bytes())]},
        }))
        .unwrap(),
        None,
    );
    let manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
    let tag = format!("{repository}:{}.sig", manifest_digest.replace(':', "-"));
    super::raw_client()
        .push(
            &parse(&tag),
            &[layer],
            config,
            &RegistryAuth::Anonymous,
            Some(manifest),
        )
        .await
        .unwrap();
}

/// `cosign sign --key` (cosign 3): a bundle whose DSSE envelope holds an
/// in-toto statement about `names_digest`, attached to `manifest_digest`
/// as a referrer.
pub async fn sign_v3(repository: &str, manifest_digest: &str, names_digest: &str, key: &Key) {
    let client = super::raw_client();
    let subject_ref = parse(&format!("{repository}@{manifest_digest}"));
    let (subject_body, _) = client
        .pull_manifest_raw(
            &subject_ref,
            &RegistryAuth::Anonymous,
            &[OCI_IMAGE_MEDIA_TYPE],
        )
        .await
        .unwrap();
    let named = names_digest.strip_prefix("sha256:").unwrap();
    let statement = serde_json::to_vec(&serde_json::json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"digest": {"sha256": named}}],
        "predicateType": "https://sigstore.dev/cosign/sign/v1",
        "predicate": {},
    }))
    .unwrap();
    let payload_type = "application/vnd.in-toto+json";
    let mut pae = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        statement.len()
    )
    .into_bytes();
    pae.extend_from_slice(&statement);
    let bundle = serde_json::to_vec(&serde_json::json!({
        "mediaType": BUNDLE,
        "verificationMaterial": {"publicKey": {"hint": "test"}},
        "dsseEnvelope": {
            "payload": b64(&statement),
            "payloadType": payload_type,
            "signatures": [{"sig": key.sign(&pae)}],
        },
    }))
    .unwrap();
    let layer = ImageLayer::new(bundle, BUNDLE.to_owned(), None);
    let config = Config::new(
        b"{}".to_vec(),
        "application/vnd.oci.empty.v1+json".to_owned(),
        None,
    );
    let mut manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
    manifest.artifact_type = Some(BUNDLE.to_owned());
    manifest.subject = Some(OciDescriptor {
        media_type: OCI_IMAGE_MEDIA_TYPE.to_owned(),
        digest: manifest_digest.to_owned(),
        size: subject_body.len() as i64,
        ..Default::default()
    });
    // Pushed by digest, as cosign does: the blobs, then these very bytes.
    let body = serde_json::to_vec(&manifest).unwrap();
    let digest = wasmprov::oci::digest(&body);
    let at = parse(&format!("{repository}@{digest}"));
    for data in [&layer.data, &config.data] {
        client
            .push_blob(&at, data.clone(), &wasmprov::oci::digest(data))
            .await
            .unwrap();
    }
    client
        .push_manifest_raw(&at, body.clone(), OCI_IMAGE_MEDIA_TYPE.parse().unwrap())
        .await
        .unwrap();
    // The referrers tag schema: the index under tag sha256-<hex>, kept by
    // the signer when the registry has no referrers API.
    let hex = manifest_digest.strip_prefix("sha256:").unwrap();
    let fallback = parse(&format!("{repository}:sha256-{hex}"));
    let mut index = match client
        .pull_manifest_raw(
            &fallback,
            &RegistryAuth::Anonymous,
            &[OCI_IMAGE_INDEX_MEDIA_TYPE],
        )
        .await
    {
        Ok((body, _)) => serde_json::from_slice(&body).unwrap(),
        Err(_) => OciImageIndex {
            schema_version: 2,
            media_type: Some(OCI_IMAGE_INDEX_MEDIA_TYPE.to_owned()),
            manifests: Vec::new(),
            artifact_type: None,
            annotations: None,
        },
    };
    index.manifests.push(ImageIndexEntry {
        media_type: OCI_IMAGE_MEDIA_TYPE.to_owned(),
        digest,
        size: body.len() as i64,
        platform: None,
        annotations: None,
        artifact_type: Some(BUNDLE.to_owned()),
    });
    client
        .push_manifest_list(&fallback, &RegistryAuth::Anonymous, index)
        .await
        .unwrap();
}
