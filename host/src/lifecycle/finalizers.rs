//! Adding and removing one finalizer without losing anyone else's.
//!
//! Both are JSON patches that test what they assume first, so a concurrent
//! change is a failed test (422), never a finalizer list overwritten with a
//! stale copy. The object a reconcile holds comes from a watch and may be
//! behind; on a failed test the object is read again and the patch retried.

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// Patches tried before giving up to the caller's retry.
const ATTEMPTS: usize = 3;

/// Adds `finalizer` to `obj` unless it has it. Returns the object as saved.
pub async fn add<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    add_written(api, obj, finalizer).await.map(|(obj, _)| obj)
}

/// [`add`], and whether it wrote (false: the object had it already).
pub async fn add_written<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
) -> Result<(K, bool), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut current = obj.clone();
    let mut attempt = 0;
    loop {
        attempt += 1;
        if current.finalizers().iter().any(|f| f == finalizer) {
            return Ok((current, false));
        }
        let mut finalizers = current.finalizers().to_vec();
        finalizers.push(finalizer.to_owned());
        // The list may not exist yet, so it is written whole: only on top
        // of the version it was read from.
        let patch = serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": current.resource_version()},
            {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
        ]);
        match json_patch(api, &current, patch).await {
            Err(kube::Error::Api(s)) if s.code == 422 && attempt < ATTEMPTS => {
                current = api.get(&current.name_any()).await?;
            }
            result => return result.map(|saved| (saved, true)),
        }
    }
}

/// Removes `finalizer` from `obj`. An object (or finalizer) already gone is
/// success.
pub async fn remove<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    remove_written(api, obj, finalizer).await.map(|_| ())
}

/// [`remove`], and whether it wrote (false: the finalizer or object was
/// gone already).
pub async fn remove_written<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut current = obj.clone();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Some(index) = current.finalizers().iter().position(|f| f == finalizer) else {
            return Ok(false);
        };
        let patch = serde_json::json!([
            {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": finalizer},
            {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
        ]);
        match json_patch(api, &current, patch).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            Err(kube::Error::Api(s)) if s.code == 422 && attempt < ATTEMPTS => {
                match api.get_opt(&current.name_any()).await? {
                    Some(fresh) => current = fresh,
                    None => return Ok(false),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

async fn json_patch<K>(api: &Api<K>, obj: &K, ops: serde_json::Value) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let ops: json_patch::Patch = serde_json::from_value(ops).map_err(kube::Error::SerdeError)?;
    let patch = Patch::Json::<()>(ops);
    api.patch(&obj.name_any(), &PatchParams::default(), &patch)
        .await
}
