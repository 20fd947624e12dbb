//! Manifests and referrer indexes read with a cap. oci-client reads a
//! manifest's whole body before its caller can look at the size, so a
//! hostile registry or mirror could make a host hold gigabytes; these two
//! requests are made here instead, with oci-client's login (its `auth`
//! gives the bearer token, or says to send the Basic login) and the same
//! TLS settings, and reading stops past [`MAX_MANIFEST_BYTES`]. Blobs stay
//! with oci-client: their size is known from the manifest before reading.

use oci_client::{Client, Reference, RegistryOperation};

use super::{auth, refused, registry_error, Access, OciError, MAX_MANIFEST_BYTES};

/// What a capped GET found.
pub(super) struct Body {
    pub bytes: Vec<u8>,
    /// The registry's `Docker-Content-Digest`, if it sent one.
    pub digest: Option<String>,
}

/// `GET /v2/<repository>/<tail>` of `image`'s registry (or its mirror),
/// accepting `accept`; `None` for a 404.
pub(super) async fn get(
    client: &Client,
    image: &Reference,
    access: &Access,
    tail: &str,
    accept: &[&str],
    reference: &str,
) -> Result<Option<Body>, OciError> {
    let token = client
        .auth(image, &auth(access), RegistryOperation::Pull)
        .await
        .map_err(|e| registry_error(reference, e))?;
    let scheme = if access.plain_http { "http" } else { "https" };
    let mut url = format!(
        "{scheme}://{}/v2/{}/{tail}",
        image.resolve_registry(),
        image.repository()
    );
    if let Some(origin) = image.namespace() {
        let join = if url.contains('?') { '&' } else { '?' };
        url = format!("{url}{join}ns={origin}");
    }
    let mut request = http(access, reference)?
        .get(&url)
        .header(reqwest::header::ACCEPT, accept.join(", "));
    request = match (token, &access.credentials) {
        (Some(token), _) => request.bearer_auth(token),
        (None, Some((user, password))) => request.basic_auth(user, Some(password)),
        (None, None) => request,
    };
    let mut response = request
        .send()
        .await
        .map_err(|e| registry_error(reference, e))?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !status.is_success() {
        return Err(registry_error(
            reference,
            std::io::Error::other(format!("GET {url}: {status}")),
        ));
    }
    let too_big = || {
        refused(
            reference,
            format!(
                "its manifest is larger than the {MAX_MANIFEST_BYTES} bytes a manifest may \
                 have; refusing it without reading it"
            ),
        )
    };
    if response
        .content_length()
        .is_some_and(|n| n > MAX_MANIFEST_BYTES as u64)
    {
        return Err(too_big());
    }
    let digest = response
        .headers()
        .get("docker-content-digest")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| registry_error(reference, e))?
    {
        if bytes.len() + chunk.len() > MAX_MANIFEST_BYTES {
            return Err(too_big());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Some(Body { bytes, digest }))
}

/// An HTTP client configured as oci-client's is (TLS roots, timeouts).
fn http(access: &Access, reference: &str) -> Result<reqwest::Client, OciError> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(super::CONNECT_TIMEOUT)
        .read_timeout(super::READ_TIMEOUT);
    if let Some(pem) = &access.ca_certificates {
        let certificates = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| {
            refused(
                reference,
                format!("the CA file is not PEM certificates: {e}"),
            )
        })?;
        builder = builder.tls_certs_merge(certificates);
    }
    builder.build().map_err(|e| registry_error(reference, e))
}
