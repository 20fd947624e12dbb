//! Plugins by OCI reference (`plugins.<name>.image` in the sandbox policy):
//! pulled from their registry ([`crate::oci`]) and handed to the registry,
//! which validates each version before it serves, like any reload. A tag
//! is looked up again every poll interval; a new digest behind it is a new
//! version. A digest reference is pulled once.
//!
//! Every component pulled is kept on disk by its manifest digest (under
//! the compile cache directory, `oci/`), with the digest each plugin last
//! served: a host restarting while its registry is unreachable serves that
//! version again instead of nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::oci::{self, Access, Limits};
use crate::policy::ImageSource;
use crate::registry::{Origin, PluginRegistry, Reload};

/// How often the policy's references are looked at.
const TICK: Duration = Duration::from_secs(1);
/// The wait before trying again a reference that could not be served.
const RETRY: Duration = Duration::from_secs(10);

/// What this source knows of one plugin.
struct Tracked {
    reference: String,
    /// The digest last handed to the registry (loaded or refused).
    digest: Option<String>,
    next: Instant,
}

/// Follows the policy's image references for ever.
pub async fn run(registry: Arc<PluginRegistry>, cache: Option<PathBuf>) {
    let cache = cache.map(|dir| dir.join("oci"));
    let mut tracked: HashMap<String, Tracked> = HashMap::new();
    loop {
        let policies = registry.policies();
        tracked.retain(|name, _| policies.image_for(name).is_some());
        for (name, image) in policies.images() {
            let entry = tracked.entry(name.to_owned()).or_insert_with(|| Tracked {
                reference: image.reference.clone(),
                digest: None,
                next: Instant::now(),
            });
            if entry.reference != image.reference {
                *entry = Tracked {
                    reference: image.reference.clone(),
                    digest: None,
                    next: Instant::now(),
                };
            }
            if Instant::now() < entry.next {
                continue;
            }
            let served = update(&registry, name, image, entry, cache.as_deref()).await;
            entry.next = Instant::now()
                + match served {
                    true if image.pinned => Duration::MAX / 4,
                    true => image.poll_interval,
                    false => RETRY.min(image.poll_interval),
                };
        }
        tokio::time::sleep(TICK).await;
    }
}

/// Looks `image` up and hands a new version to the registry. True when the
/// plugin's current version was found (served, or refused for good).
async fn update(
    registry: &PluginRegistry,
    name: &str,
    image: &ImageSource,
    tracked: &mut Tracked,
    cache: Option<&Path>,
) -> bool {
    let access = Access {
        plain_http: image.plain_http,
        credentials: None,
    };
    let digest = match oci::resolve(&image.reference, &access).await {
        Ok(digest) => digest,
        Err(e) => {
            if tracked.digest.is_none() {
                if let Some((digest, component)) = cached(cache, name, &image.reference) {
                    tracing::warn!(plugin = name, reference = %image.reference, %digest, "{e}; serving the version cached on disk until the registry answers");
                    let origin = Origin::image(&image.reference, &digest);
                    registry.apply(name, component, &origin).await;
                    tracked.digest = Some(digest);
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
    let pulled = match load(cache, &image.reference, &digest, &access).await {
        Ok(pulled) => pulled,
        Err(e) => {
            tracing::error!(plugin = name, reference = %image.reference, %digest, "cannot pull the plugin: {e}; the version serving now (if any) keeps serving");
            return false;
        }
    };
    let origin = Origin::image(&image.reference, &digest);
    let reload = registry.apply(name, pulled, &origin).await;
    tracked.digest = Some(digest.clone());
    if matches!(reload, Reload::Loaded { .. } | Reload::Unchanged) {
        remember(cache, name, &image.reference, &digest);
    }
    true
}

/// The component of `digest`: from the disk cache, or pulled (and kept).
async fn load(
    cache: Option<&Path>,
    reference: &str,
    digest: &str,
    access: &Access,
) -> Result<Vec<u8>, oci::OciError> {
    if let Some(file) = cache.map(|c| component_file(c, digest)) {
        if let Ok(bytes) = std::fs::read(&file) {
            return Ok(bytes);
        }
    }
    let pinned = oci::pinned(reference, digest)?;
    let pulled = oci::pull(&pinned, access, Limits::default()).await?;
    if let Some(dir) = cache {
        if let Err(e) = keep(dir, &component_file(dir, digest), &pulled.component) {
            tracing::warn!(%reference, "cannot keep the pulled plugin in {}: {e}; a restart while the registry is down will not find it", dir.display());
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
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.persist(file).map_err(|e| e.error)?;
    Ok(())
}

/// Records that `name` served `digest` of `reference`.
fn remember(cache: Option<&Path>, name: &str, reference: &str, digest: &str) {
    if let Some(dir) = cache {
        let text = format!("{reference}\n{digest}\n");
        if let Err(e) = keep(dir, &last_file(dir, name), text.as_bytes()) {
            tracing::warn!(
                plugin = name,
                "cannot record the version served in {}: {e}",
                dir.display()
            );
        }
    }
}

/// The version `name` last served from `reference`, from the disk cache.
fn cached(cache: Option<&Path>, name: &str, reference: &str) -> Option<(String, Vec<u8>)> {
    let dir = cache?;
    let text = std::fs::read_to_string(last_file(dir, name)).ok()?;
    let mut lines = text.lines();
    if lines.next()? != reference {
        return None;
    }
    let digest = lines.next()?.to_owned();
    let component = std::fs::read(component_file(dir, &digest)).ok()?;
    Some((digest, component))
}
