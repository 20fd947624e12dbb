//! Plugins by OCI reference (`plugins.<name>.image` in the sandbox policy):
//! pulled from their registry ([`crate::oci`]) and handed to the registry,
//! which validates each version before it serves, like any reload. A tag
//! is looked up again every poll interval; a new digest behind it is a new
//! version. A digest reference is pulled once.
//!
//! A registry's `mirrors` are asked first, in order, then the registry.
//! With `signature` in the policy, a version is pulled only once a cosign
//! signature of its digest by one of the keys is found ([`oci::signature`]).
//! The version serving is checked again when the keys change (a key added
//! where none was required, or the one that vouched for it removed or
//! replaced): signed by none of today's keys, it is withdrawn from new
//! claims (it still deletes the volumes it made).
//!
//! Every component pulled is kept on disk by its manifest digest (under
//! the compile cache directory, `oci/`), with the digest each plugin last
//! served: a host restarting while its registry is unreachable serves that
//! version again instead of nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::oci::signature::{PublicKey, Signed};
use crate::oci::{self, Access, Limits};
use crate::policy::{ImageSource, PolicySet};
use crate::registry::{Origin, PluginRegistry, Reload};

/// How often the policy's references are looked at.
const TICK: Duration = Duration::from_secs(1);
/// The wait before trying again a reference that could not be served.
const RETRY: Duration = Duration::from_secs(10);
/// "Never" for a digest reference once served (a year: any longer could
/// overflow an `Instant`).
const PINNED: Duration = Duration::from_secs(365 * 24 * 3600);

/// What this source knows of one plugin.
struct Tracked {
    reference: String,
    /// The digest last handed to the registry (loaded or refused).
    digest: Option<String>,
    /// The fingerprint of the key whose signature vouched for `digest`,
    /// when one was required.
    signer: Option<String>,
    next: Instant,
}

impl Tracked {
    fn new(reference: &str) -> Self {
        Tracked {
            reference: reference.to_owned(),
            digest: None,
            signer: None,
            next: Instant::now(),
        }
    }
}

/// Follows the policy's image references.
pub struct Follower {
    registry: Arc<PluginRegistry>,
    cache: Option<PathBuf>,
    tracked: HashMap<String, Tracked>,
}

impl Follower {
    /// Keeps pulled components under `cache`/oci, if given.
    pub fn new(registry: Arc<PluginRegistry>, cache: Option<PathBuf>) -> Self {
        Follower {
            registry,
            cache: cache.map(|dir| dir.join("oci")),
            tracked: HashMap::new(),
        }
    }

    /// Looks up every reference that is due, and hands new versions over.
    pub async fn round(&mut self) {
        let policies = self.registry.policies();
        self.tracked
            .retain(|name, _| policies.image_for(name).is_some());
        for (name, image) in policies.images() {
            let entry = self
                .tracked
                .entry(name.to_owned())
                .or_insert_with(|| Tracked::new(&image.reference));
            if entry.reference != image.reference {
                *entry = Tracked::new(&image.reference);
            }
            let endpoints = endpoints(&policies, image);
            let cache = self.cache.as_deref();
            if distrusted(name, image, entry) {
                recheck(&self.registry, name, image, &endpoints, entry, cache).await;
            }
            if Instant::now() < entry.next {
                continue;
            }
            let served = update(&self.registry, name, image, &endpoints, entry, cache).await;
            // A pinned version never changes: looked at again only if the
            // policy changes its reference.
            let wait = match served {
                true if image.pinned => PINNED,
                true => image.poll_interval,
                false => RETRY.min(image.poll_interval),
            };
            entry.next = Instant::now() + wait;
        }
    }

    /// Follows the references for ever.
    pub async fn run(mut self) {
        loop {
            self.round().await;
            tokio::time::sleep(TICK).await;
        }
    }
}

/// Looks `image` up and hands a new version to the registry. True when the
/// plugin's current version was found (served, or refused for good).
async fn update(
    registry: &PluginRegistry,
    name: &str,
    image: &ImageSource,
    endpoints: &[Endpoint],
    tracked: &mut Tracked,
    cache: Option<&Path>,
) -> bool {
    let digest = match resolve(image, endpoints).await {
        Ok(digest) => digest,
        Err(e) => {
            if tracked.digest.is_none() {
                if let Some(last) = cached(cache, name, image) {
                    let digest = last.digest;
                    tracing::warn!(plugin = name, reference = %image.reference, %digest, "{e}; serving the version cached on disk until the registry answers");
                    let origin = Origin::image(&image.reference, &digest);
                    registry.apply(name, last.component, &origin).await;
                    tracked.digest = Some(digest);
                    tracked.signer = last.signer;
                    return false;
                }
            }
            tracing::warn!(plugin = name, reference = %image.reference, "{e}; trying again");
            return false;
        }
    };
    if tracked.digest.as_deref() == Some(digest.as_str()) {
        return true;
    }
    let signed = match signature(name, image, &digest, endpoints).await {
        Ok(signed) => signed,
        Err(e) => {
            tracing::error!(plugin = name, reference = %image.reference, %digest, "refusing this version: {e}; the version serving now (if any) keeps serving");
            return false;
        }
    };
    if let Some(signed) = &signed {
        tracing::info!(plugin = name, reference = %image.reference, %digest, key = %signed.key, "signature verified ({})", signed.format);
    }
    let pulled = match load(cache, image, &digest, endpoints).await {
        Ok(pulled) => pulled,
        Err(e) => {
            tracing::error!(plugin = name, reference = %image.reference, %digest, "cannot pull the plugin: {e}; the version serving now (if any) keeps serving");
            return false;
        }
    };
    let origin = Origin::image(&image.reference, &digest);
    let reload = registry.apply(name, pulled, &origin).await;
    tracked.digest = Some(digest);
    tracked.signer = signed.map(|s| s.fingerprint);
    if matches!(reload, Reload::Loaded { .. } | Reload::Unchanged) {
        remember(cache, name, tracked);
    }
    true
}

/// Whether the version handed to the registry was accepted under other
/// keys than the policy's today: none were required then, or the key that
/// vouched for it is no longer one of them. Keys that cannot be read now
/// leave it be (the next new version reports them).
fn distrusted(name: &str, image: &ImageSource, tracked: &Tracked) -> bool {
    if tracked.digest.is_none() {
        return false;
    }
    match signature_keys(name, image) {
        Ok(keys) if !keys.is_empty() => !keys
            .iter()
            .any(|k| Some(&k.fingerprint) == tracked.signer.as_ref()),
        _ => false,
    }
}

/// Checks the version handed to the registry against today's keys: still
/// signed by one of them, it keeps serving; otherwise (or if no registry
/// can say) it serves no new claims, and the reference is looked up again
/// shortly, as a version never seen.
async fn recheck(
    registry: &PluginRegistry,
    name: &str,
    image: &ImageSource,
    endpoints: &[Endpoint],
    tracked: &mut Tracked,
    cache: Option<&Path>,
) {
    let Some(digest) = tracked.digest.clone() else {
        return;
    };
    match signature(name, image, &digest, endpoints).await {
        // The keys went between the two reads: nothing to check.
        Ok(None) => tracked.signer = None,
        Ok(Some(signed)) => {
            tracing::info!(plugin = name, reference = %image.reference, %digest, key = %signed.key, "the signature keys changed; the version serving is signed by one of them ({})", signed.format);
            tracked.signer = Some(signed.fingerprint);
            remember(cache, name, tracked);
        }
        Err(e) => {
            let why = format!(
                "its version {digest} ({}) is not signed by a key plugins.{name}.image.signature.keys \
                 trusts now, so it serves no new claim: {e}",
                image.reference
            );
            let origin = Origin::image(&image.reference, &digest);
            if registry.withdraw(name, &origin, &why).await {
                tracing::error!(plugin = name, reference = %image.reference, %digest, "{why}; it still deletes the volumes it made");
            }
            *tracked = Tracked::new(&image.reference);
            tracked.next = Instant::now() + RETRY.min(image.poll_interval);
        }
    }
}

/// One registry to ask for an image: a mirror or the image's own.
struct Endpoint {
    /// `host[:port]`, for messages.
    host: String,
    /// How to reach it, or why it cannot be reached (an unreadable login).
    access: Result<Access, String>,
}

/// Where to ask for `image`: its registry's mirrors in order, then the
/// registry itself, each reached as its own `registries` entry says. The
/// login and CA files are read at each look (a rotated Secret takes effect
/// without a restart).
fn endpoints(policies: &PolicySet, image: &ImageSource) -> Vec<Endpoint> {
    let own = policies.registry_access(&image.registry);
    let mirrors = own.mirrors.iter().map(|mirror| Endpoint {
        host: mirror.clone(),
        access: access_to(policies, mirror).map(|access| Access {
            mirror: Some(mirror.clone()),
            ..access
        }),
    });
    mirrors
        .chain(std::iter::once(Endpoint {
            host: image.registry.clone(),
            access: access_to(policies, &image.registry),
        }))
        .collect()
}

/// How to reach registry `host`, by its `registries` entry.
fn access_to(policies: &PolicySet, host: &str) -> Result<Access, String> {
    let entry = policies.registry_access(host);
    let credentials = match &entry.credentials {
        None => None,
        Some(file) => login(file, host).map_err(|e| {
            format!(
                "cannot use the login for {host} in {} (registries.{host}.credentials): {e}",
                file.display()
            )
        })?,
    };
    let ca_certificates = match &entry.ca_file {
        None => None,
        Some(file) => Some(std::fs::read(file).map_err(|e| {
            format!(
                "cannot read the certificate authority for {host} in {} \
                 (registries.{host}.caFile): {e}",
                file.display()
            )
        })?),
    };
    Ok(Access {
        plain_http: entry.plain_http,
        credentials,
        ca_certificates,
        mirror: None,
    })
}

/// The keys `image`'s signatures must be made with, read now (a rotated
/// key takes effect at the next look); empty when none are required.
fn signature_keys(name: &str, image: &ImageSource) -> Result<Vec<PublicKey>, String> {
    image
        .signature_keys
        .iter()
        .map(|file| {
            PublicKey::read(file).map_err(|e| format!("plugins.{name}.image.signature.keys: {e}"))
        })
        .collect()
}

/// The signature that vouches for `digest`, from the first endpoint that
/// has one, when the policy requires one; `None` when it does not.
async fn signature(
    name: &str,
    image: &ImageSource,
    digest: &str,
    endpoints: &[Endpoint],
) -> Result<Option<Signed>, String> {
    let keys = signature_keys(name, image)?;
    if keys.is_empty() {
        return Ok(None);
    }
    first_answer(image, endpoints, |access| async {
        oci::signature::verify(&image.reference, digest, access, &keys).await
    })
    .await
    .map(Some)
}

/// Asks each endpoint in turn what `image` names now; the first answer
/// counts.
async fn resolve(image: &ImageSource, endpoints: &[Endpoint]) -> Result<String, String> {
    first_answer(image, endpoints, |access| {
        oci::resolve(&image.reference, access)
    })
    .await
}

/// Asks `ask` of each endpoint in turn (mirrors first); the first answer
/// counts. The error says what each one said.
async fn first_answer<'a, T, F, Fut>(
    image: &ImageSource,
    endpoints: &'a [Endpoint],
    ask: F,
) -> Result<T, String>
where
    F: Fn(&'a Access) -> Fut,
    Fut: std::future::Future<Output = Result<T, oci::OciError>>,
{
    let mut failures = Vec::new();
    for endpoint in endpoints {
        let answer = match &endpoint.access {
            Ok(access) => ask(access).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.clone()),
        };
        match answer {
            Ok(answer) => return Ok(answer),
            Err(e) => failures.push(describe(endpoint, image, e)),
        }
    }
    Err(failures.join("; "))
}

/// A failure at `endpoint`, saying which mirror it was.
fn describe(endpoint: &Endpoint, image: &ImageSource, error: String) -> String {
    if endpoint.host == image.registry {
        error
    } else {
        format!("mirror {}: {error}", endpoint.host)
    }
}

/// The login for `registry` in a `.dockerconfigjson` file (`auths`, keyed
/// by host, with `auth` = base64 of `user:password`, or `username` and
/// `password`). None: the file has no entry for it.
fn login(file: &Path, registry: &str) -> Result<Option<(String, String)>, String> {
    use base64::Engine;
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
    let auths = config["auths"]
        .as_object()
        .ok_or("no \"auths\" object (is it a kubernetes.io/dockerconfigjson Secret?)")?;
    let host_of = |key: &str| {
        let key = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        key.split('/').next().unwrap_or(key).to_owned()
    };
    let Some(entry) = auths
        .iter()
        .find(|(k, _)| host_of(k) == registry)
        .map(|(_, v)| v)
    else {
        return Ok(None);
    };
    if let Some(auth) = entry["auth"].as_str() {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|e| format!("its auth for {registry} is not base64: {e}"))?;
        let decoded = String::from_utf8(decoded)
            .map_err(|_| format!("its auth for {registry} is not text"))?;
        let (user, password) = decoded
            .split_once(':')
            .ok_or(format!("its auth for {registry} is not user:password"))?;
        return Ok(Some((user.to_owned(), password.to_owned())));
    }
    match (entry["username"].as_str(), entry["password"].as_str()) {
        (Some(user), Some(password)) => Ok(Some((user.to_owned(), password.to_owned()))),
        _ => Err(format!(
            "its entry for {registry} has neither auth nor username and password"
        )),
    }
}

/// The component of `digest`: from the disk cache, or pulled from the
/// first endpoint that has it (and kept).
async fn load(
    cache: Option<&Path>,
    image: &ImageSource,
    digest: &str,
    endpoints: &[Endpoint],
) -> Result<Vec<u8>, String> {
    if let Some(file) = cache.map(|c| component_file(c, digest)) {
        if let Ok(bytes) = std::fs::read(&file) {
            return Ok(bytes);
        }
    }
    let pinned = oci::pinned(&image.reference, digest).map_err(|e| e.to_string())?;
    let pulled = first_answer(image, endpoints, |access| {
        oci::pull(&pinned, access, Limits::default())
    })
    .await?;
    if let Some(dir) = cache {
        if let Err(e) = keep(dir, &component_file(dir, digest), &pulled.component) {
            tracing::warn!(reference = %image.reference, "cannot keep the pulled plugin in {}: {e}; a restart while the registry is down will not find it", dir.display());
        }
    }
    Ok(pulled.component)
}

fn component_file(cache: &Path, digest: &str) -> PathBuf {
    cache.join(format!("{}.wasm", digest.replace(':', "-")))
}

fn last_file(cache: &Path, name: &str) -> PathBuf {
    cache.join(format!("{name}.last"))
}

fn keep(dir: &Path, file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    crate::files::write_whole(file, bytes)
}

/// Records that `name` served the version `tracked` names, signed by the
/// key of its signer's fingerprint if one was required.
fn remember(cache: Option<&Path>, name: &str, tracked: &Tracked) {
    let (Some(dir), Some(digest)) = (cache, &tracked.digest) else {
        return;
    };
    let signer = tracked.signer.as_deref().unwrap_or("unsigned");
    let text = format!("{}\n{digest}\n{signer}\n", tracked.reference);
    if let Err(e) = keep(dir, &last_file(dir, name), text.as_bytes()) {
        tracing::warn!(
            plugin = name,
            "cannot record the version served in {}: {e}",
            dir.display()
        );
    }
}

/// A version found in the disk cache.
struct Cached {
    digest: String,
    component: Vec<u8>,
    /// The fingerprint of the key that vouched for it, if one was required.
    signer: Option<String>,
}

/// The version `name` last served from `image`'s reference, from the disk
/// cache. When signatures are required, only a version one of today's
/// keys vouched for (a removed key's versions are not served again).
fn cached(cache: Option<&Path>, name: &str, image: &ImageSource) -> Option<Cached> {
    let dir = cache?;
    let text = std::fs::read_to_string(last_file(dir, name)).ok()?;
    let mut lines = text.lines();
    if lines.next()? != image.reference {
        return None;
    }
    let digest = lines.next()?.to_owned();
    let signer = lines.next().unwrap_or("unsigned");
    let keys = signature_keys(name, image).ok()?;
    if !keys.is_empty() && !keys.iter().any(|k| k.fingerprint == signer) {
        return None;
    }
    let component = std::fs::read(component_file(dir, &digest)).ok()?;
    Some(Cached {
        digest,
        component,
        signer: (signer != "unsigned").then(|| signer.to_owned()),
    })
}
