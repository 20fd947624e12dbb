//! The decisions of the nfs-subdir plugin, without I/O: parameters, the path
//! pattern, and which directory a volume is. Unit-tested natively.

use wasmprov_plugin::{
    claim, path, source, volume, DeleteError, DeleteRequest, ParamError, Params, ProvisionError,
    ProvisionRequest, Volume,
};

pub const PLUGIN: &str = "nfs-subdir";
pub const SERVER: &str = "server";
pub const SHARE: &str = "share";
pub const PATH_PATTERN: &str = "pathPattern";
pub const ARCHIVE_ON_DELETE: &str = "archiveOnDelete";
pub const MOUNT: &str = "mount";
pub const KNOWN: [&str; 5] = [SERVER, SHARE, PATH_PATTERN, ARCHIVE_ON_DELETE, MOUNT];
/// Where the sandbox policy preopens the share, by default.
pub const DEFAULT_MOUNT: &str = "/share";
/// The directory of a volume without `pathPattern`, as upstream names it.
pub const DEFAULT_PATTERN: &str = "${.PVC.namespace}-${.PVC.name}-${.PV.name}";
/// Prefix of an archived volume's directory.
pub const ARCHIVE_PREFIX: &str = "archived-";

/// The class parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub server: String,
    /// The exported directory on the server (normalized, absolute).
    pub share: String,
    /// Where the plugin sees the share (normalized, absolute).
    pub mount: String,
    pub archive_on_delete: bool,
}

impl Config {
    pub fn parse(params: &Params<'_>) -> Result<Config, ParamError> {
        let server = params.required(
            SERVER,
            "the NFS server's address or host name, e.g. server: 10.0.0.5",
        )?;
        if server
            .chars()
            .any(|c| c.is_whitespace() || c == '/' || c.is_control())
        {
            return Err(params.invalid(SERVER, server, "it must be a host name or IP address"));
        }
        let share = params.abs_path(
            SHARE,
            None,
            "the directory the server exports, e.g. share: /exports/k8s",
        )?;
        Ok(Config {
            server: server.to_string(),
            share,
            mount: params.abs_path(MOUNT, Some(DEFAULT_MOUNT), "")?,
            // Like upstream: keep the data unless told otherwise.
            archive_on_delete: params.bool(ARCHIVE_ON_DELETE, true)?,
        })
    }
}

/// Expands `pattern` for a request: `${.PVC.namespace}`, `${.PVC.name}`,
/// `${.PVC.annotations.KEY}`, `${.PVC.labels.KEY}` and `${.PV.name}`. The
/// result is split at `/` and every component sanitized
/// ([`path::sanitize_relative`]), so it is always a relative path under the
/// share, never `..` or absolute.
pub fn expand(pattern: &str, request: &ProvisionRequest) -> Result<Vec<String>, String> {
    let claim = &request.claim;
    let mut out = String::new();
    let mut rest = pattern;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("an unclosed ${{ in {pattern:?}"))?;
        let var = after[..end].trim();
        let value = match var {
            ".PVC.namespace" => claim.namespace.clone(),
            ".PVC.name" => claim.name.clone(),
            ".PV.name" => request.pv_name.clone(),
            _ => {
                let (map, key, what) = if let Some(key) = var.strip_prefix(".PVC.annotations.") {
                    (&claim.annotations, key, "annotation")
                } else if let Some(key) = var.strip_prefix(".PVC.labels.") {
                    (&claim.labels, key, "label")
                } else {
                    return Err(format!(
                        "unknown variable ${{{var}}}; use ${{.PVC.namespace}}, ${{.PVC.name}}, \
                         ${{.PVC.annotations.KEY}}, ${{.PVC.labels.KEY}} or ${{.PV.name}}"
                    ));
                };
                wasmprov_plugin::lookup(map, key)
                    .map(str::to_string)
                    .ok_or_else(|| {
                        format!(
                            "the claim has no {what} {key:?}, which the class's pathPattern \
                             uses; add it to the claim or change the pattern"
                        )
                    })?
            }
        };
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    let components = path::sanitize_relative(&out);
    if components.is_empty() {
        return Err(format!(
            "pathPattern {pattern:?} gives an empty directory name ({out:?}) for this claim"
        ));
    }
    Ok(components)
}

/// `base` + `/` + each component (already safe).
fn join_all(base: &str, components: &[String]) -> Result<String, String> {
    components
        .iter()
        .try_fold(base.to_string(), |dir, c| path::join(&dir, c))
}

/// What `provision` creates and returns.
#[derive(Debug, Clone)]
pub struct ProvisionPlan {
    /// The directory to create, as the plugin sees it.
    pub guest_dir: String,
    /// The mount of the share (for error messages).
    pub mount: String,
    pub volume: Volume,
}

pub fn plan_provision(request: &ProvisionRequest) -> Result<ProvisionPlan, ProvisionError> {
    let params = Params::new(PLUGIN, &request.storage_class.parameters);
    params.reject_unknown(&KNOWN)?;
    let config = Config::parse(&params)?;
    let size = claim::check_filesystem_claim(PLUGIN, request)?;
    let pattern = params.optional(PATH_PATTERN, DEFAULT_PATTERN);
    let components = expand(pattern, request).map_err(|e| {
        ProvisionError::InvalidArgument(format!("class parameter \"{PATH_PATTERN}\": {e}"))
    })?;
    if components[0].starts_with(ARCHIVE_PREFIX) {
        return Err(ProvisionError::InvalidArgument(format!(
            "class parameter \"{PATH_PATTERN}\" gives {:?}, a name reserved for archived \
             volumes; change the pattern",
            components.join("/")
        )));
    }
    let invalid = ProvisionError::InvalidArgument;
    let server_path = join_all(&config.share, &components).map_err(invalid)?;
    Ok(ProvisionPlan {
        guest_dir: join_all(&config.mount, &components).map_err(invalid)?,
        mount: config.mount,
        volume: volume(size, source::nfs(&config.server, &server_path, false)),
    })
}

/// What `delete` removes or archives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletePlan {
    pub guest_dir: String,
    /// Where to move it instead of removing it (archiveOnDelete).
    pub archive_to: Option<String>,
    /// A second archive name, if the first exists already.
    pub archive_fallback: Option<String>,
    pub mount: String,
}

/// Checks that the volume is a directory under this class's share and finds
/// it. Anything unexpected is refused: never remove something else.
pub fn plan_delete(request: &DeleteRequest) -> Result<DeletePlan, DeleteError> {
    let params = Params::new(PLUGIN, &request.parameters);
    let config = Config::parse(&params)?;
    locate(request, &config, "delete").map_err(DeleteError::Failed)
}

/// Finds a volume's directory under this class's share from what the host
/// recorded on it, for `delete` or `resize` (`verb`).
pub fn locate(request: &DeleteRequest, config: &Config, verb: &str) -> Result<DeletePlan, String> {
    let pv = &request.pv_name;
    let refuse =
        |why: String| format!("refusing to {verb} volume {pv}: {why}; nothing was changed");
    let config = config.clone();
    let (server, nfs_path) = source::nfs_of(&request.source).map_err(refuse)?;
    if server != config.server {
        return Err(refuse(format!(
            "its source is on server {server:?} but the class's server is {:?}",
            config.server
        )));
    }
    let relative = nfs_path
        .strip_prefix(&config.share)
        .and_then(|r| r.strip_prefix('/'))
        .map(|r| r.trim_end_matches('/'))
        .filter(|r| !r.is_empty())
        .ok_or_else(|| {
            refuse(format!(
                "its nfs.path {nfs_path:?} is not a directory under the share {:?}",
                config.share
            ))
        })?;
    let components: Vec<String> = relative.split('/').map(str::to_string).collect();
    for c in &components {
        path::check_component(c).map_err(|e| refuse(format!("its nfs.path {nfs_path:?}: {e}")))?;
    }
    if components[0].starts_with(ARCHIVE_PREFIX) {
        return Err(refuse(format!("{nfs_path:?} is an archive")));
    }
    let guest_dir = join_all(&config.mount, &components).map_err(refuse)?;
    let (archive_to, archive_fallback) = if config.archive_on_delete {
        let (leaf, parents) = components.split_last().unwrap_or((&components[0], &[]));
        let parent = join_all(&config.mount, parents).map_err(refuse)?;
        let archived = format!("{ARCHIVE_PREFIX}{leaf}");
        let fallback = format!("{ARCHIVE_PREFIX}{leaf}-{pv}");
        (
            Some(path::join(&parent, &archived).map_err(refuse)?),
            Some(path::join(&parent, &fallback).map_err(refuse)?),
        )
    } else {
        (None, None)
    };
    Ok(DeletePlan {
        guest_dir,
        archive_to,
        archive_fallback,
        mount: config.mount,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmprov_plugin::{
        AccessMode, Claim, ReclaimPolicy, StorageClass, VolumeBindingMode, VolumeMode,
    };

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const BASE: [(&str, &str); 2] = [("server", "10.0.0.5"), ("share", "/exports/k8s")];

    fn request(extra: &[(&str, &str)]) -> ProvisionRequest {
        let mut parameters = pairs(&BASE);
        parameters.extend(pairs(extra));
        ProvisionRequest {
            pv_name: "pvc-1".to_string(),
            claim: Claim {
                name: "data".to_string(),
                namespace: "apps".to_string(),
                uid: "1".to_string(),
                requested_bytes: 1 << 30,
                limit_bytes: None,
                access_modes: vec![AccessMode::ReadWriteMany],
                volume_mode: VolumeMode::Filesystem,
                selector: None,
                labels: pairs(&[("team", "blue")]),
                annotations: pairs(&[("nfs.io/dir", "../../etc/passwd")]),
                data_source: None,
            },
            storage_class: StorageClass {
                name: "nfs".to_string(),
                provisioner: "wasmprov.io/host".to_string(),
                parameters,
                reclaim_policy: ReclaimPolicy::Delete,
                mount_options: Vec::new(),
                volume_binding_mode: VolumeBindingMode::Immediate,
                allowed_topologies: Vec::new(),
            },
            selected_node: None,
        }
    }

    fn invalid(r: Result<ProvisionPlan, ProvisionError>) -> String {
        match r {
            Err(ProvisionError::InvalidArgument(m)) => m,
            other => panic!("expected invalid-argument, got {other:?}"),
        }
    }

    #[test]
    fn default_pattern_is_namespace_name_pv() {
        let plan = plan_provision(&request(&[])).unwrap();
        assert_eq!(plan.guest_dir, "/share/apps-data-pvc-1");
        assert_eq!(
            source::nfs_of(&plan.volume.source).unwrap(),
            ("10.0.0.5".into(), "/exports/k8s/apps-data-pvc-1".into())
        );
        assert_eq!(plan.volume.capacity_bytes, 1 << 30);
    }

    #[test]
    fn patterns_expand_and_can_never_escape() {
        let r = request(&[
            ("pathPattern", "${.PVC.labels.team}/${.PVC.name}"),
            ("mount", "/nfs"),
        ]);
        assert_eq!(plan_provision(&r).unwrap().guest_dir, "/nfs/blue/data");
        let r = request(&[("pathPattern", "${.PVC.annotations.nfs.io/dir}")]);
        let plan = plan_provision(&r).unwrap();
        assert_eq!(plan.guest_dir, "/share/etc/passwd");
        for hostile in [
            "..",
            "../..",
            "/",
            "${.PVC.annotations.nfs.io/dir}/../../..",
        ] {
            let r = request(&[("pathPattern", hostile)]);
            match plan_provision(&r) {
                Ok(plan) => {
                    assert!(plan.guest_dir.starts_with("/share/"), "{hostile}: {plan:?}");
                    assert!(!plan.guest_dir.contains("/.."), "{hostile}: {plan:?}");
                }
                Err(ProvisionError::InvalidArgument(m)) => assert!(m.contains("empty"), "{m}"),
                Err(other) => panic!("{other:?}"),
            }
        }
        let m = invalid(plan_provision(&request(&[("pathPattern", "${.PVC.uid}")])));
        assert!(m.contains("unknown variable ${.PVC.uid}"), "{m}");
        let m = invalid(plan_provision(&request(&[(
            "pathPattern",
            "${.PVC.labels.nope}",
        )])));
        assert!(m.contains("no label \"nope\""), "{m}");
        let m = invalid(plan_provision(&request(&[("pathPattern", "archived-x")])));
        assert!(m.contains("reserved"), "{m}");
    }

    #[test]
    fn parameters_are_checked() {
        let mut r = request(&[]);
        r.storage_class.parameters = pairs(&[("share", "/e")]);
        assert!(invalid(plan_provision(&r)).contains("missing class parameter \"server\""));
        r.storage_class.parameters = pairs(&[("server", "x")]);
        assert!(invalid(plan_provision(&r)).contains("missing class parameter \"share\""));
        assert!(
            invalid(plan_provision(&request(&[("archiveOnDelete", "yes")])))
                .contains("archiveOnDelete")
        );
        assert!(invalid(plan_provision(&request(&[("sever", "x")]))).contains("\"sever\""));
        let mut r = request(&[]);
        r.storage_class.parameters = pairs(&[("server", "a b"), ("share", "/e")]);
        assert!(invalid(plan_provision(&r)).contains("host name"));
        let mut r = request(&[]);
        r.claim.requested_bytes = 0;
        assert!(invalid(plan_provision(&r)).contains("0 bytes"));
    }

    fn delete_request(path: &str, extra: &[(&str, &str)]) -> DeleteRequest {
        let mut parameters = pairs(&BASE);
        parameters.extend(pairs(extra));
        DeleteRequest {
            pv_name: "pvc-1".to_string(),
            source: source::nfs("10.0.0.5", path, false),
            capacity_bytes: 1,
            parameters,
            claim_namespace: "apps".to_string(),
            claim_name: "data".to_string(),
            labels: Vec::new(),
            annotations: Vec::new(),
        }
    }

    #[test]
    fn delete_finds_the_directory_or_refuses() {
        let plan = plan_delete(&delete_request("/exports/k8s/apps/data", &[])).unwrap();
        assert_eq!(plan.guest_dir, "/share/apps/data");
        assert_eq!(
            plan.archive_to.as_deref(),
            Some("/share/apps/archived-data")
        );
        assert_eq!(
            plan.archive_fallback.as_deref(),
            Some("/share/apps/archived-data-pvc-1")
        );
        let plan = plan_delete(&delete_request(
            "/exports/k8s/x/",
            &[("archiveOnDelete", "false"), ("mount", "/nfs")],
        ))
        .unwrap();
        assert_eq!(plan.guest_dir, "/nfs/x");
        assert_eq!(plan.archive_to, None);
        for bad in [
            "/exports/k8s",
            "/exports/k8s/",
            "/exports/k8sx/a",
            "/exports/k8s/../etc",
            "/exports/k8s/a/./b",
            "/other/a",
            "/exports/k8s/archived-a",
        ] {
            match plan_delete(&delete_request(bad, &[])) {
                Err(DeleteError::Failed(m)) => assert!(m.contains("refusing"), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        let mut r = delete_request("/exports/k8s/a", &[]);
        r.source = source::nfs("10.9.9.9", "/exports/k8s/a", false);
        assert!(matches!(plan_delete(&r), Err(DeleteError::Failed(m)) if m.contains("server")));
    }
}
