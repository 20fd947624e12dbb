//! The decisions of the hostpath plugin, without any I/O: parameter parsing,
//! request validation, naming and the returned volume. `lib.rs` only adds the
//! filesystem calls and logging, so everything here is unit-tested natively.

use crate::wasmprov::provisioner::types::{
    DeleteError, DeleteRequest, NodeAffinity, NodeSelectorOperator, NodeSelectorRequirement,
    NodeSelectorTerm, ProvisionError, ProvisionRequest, Volume, VolumeBindingMode, VolumeMode,
};

/// Class parameter: absolute directory on the node under which volumes live.
pub const PARAM_HOST_ROOT: &str = "hostRoot";
/// Class parameter: guest path where the sandbox policy preopens `hostRoot`.
pub const PARAM_ROOT: &str = "root";
/// Class parameter: `"true"` pins each volume to the selected node.
pub const PARAM_NODE_AFFINITY: &str = "nodeAffinity";
/// Every class parameter the plugin understands.
pub const KNOWN_PARAMS: [&str; 3] = [PARAM_HOST_ROOT, PARAM_ROOT, PARAM_NODE_AFFINITY];

/// Default of `root`.
pub const DEFAULT_ROOT: &str = "/volumes";
/// The node label node affinity is expressed with.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// Kubernetes object names are at most 253 characters.
const MAX_NAME_LEN: usize = 253;

/// The plugin's configuration, from the StorageClass parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    /// Directory on the node, e.g. `/var/lib/wasmprov/hostpath` (normalized, no
    /// trailing slash).
    pub host_root: String,
    /// The same directory as the plugin sees it, e.g. `/volumes`.
    pub root: String,
    /// Pin volumes to the selected node.
    pub node_affinity: bool,
}

/// What to do with parameters the plugin does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unknown {
    /// Reject them (provision: a typo in a class must not pass silently).
    Reject,
    /// Ignore them (delete: the volume exists, removing it must not depend on
    /// parameters that do not affect where it is).
    Ignore,
}

impl Params {
    /// Parses class parameters. The error is a message for the claim's events.
    pub fn parse(params: &[(String, String)], unknown: Unknown) -> Result<Params, String> {
        let mut host_root = None;
        let mut root = None;
        let mut node_affinity = None;
        let mut unknown_keys = Vec::new();
        for (key, value) in params {
            match key.as_str() {
                PARAM_HOST_ROOT => host_root = Some(value.as_str()),
                PARAM_ROOT => root = Some(value.as_str()),
                PARAM_NODE_AFFINITY => node_affinity = Some(value.as_str()),
                other => unknown_keys.push(other),
            }
        }
        if unknown == Unknown::Reject && !unknown_keys.is_empty() {
            unknown_keys.sort_unstable();
            return Err(format!(
                "unknown class parameter{} {}: the hostpath plugin accepts only {} \
                 (parameter names are case-sensitive)",
                if unknown_keys.len() == 1 { "" } else { "s" },
                quote_list(&unknown_keys),
                quote_list(&KNOWN_PARAMS),
            ));
        }

        let host_root = host_root.ok_or_else(|| {
            format!(
                "missing class parameter \"{PARAM_HOST_ROOT}\": set it to the absolute \
                 directory on the node under which volumes are created, \
                 e.g. {PARAM_HOST_ROOT}: /var/lib/wasmprov/hostpath"
            )
        })?;
        let host_root = normalize_abs_path(PARAM_HOST_ROOT, host_root)?;
        if host_root == "/" {
            return Err(format!(
                "class parameter \"{PARAM_HOST_ROOT}\" must not be \"/\": volumes would be \
                 created directly in the node's root directory; use a dedicated directory \
                 such as /var/lib/wasmprov/hostpath"
            ));
        }
        let root = normalize_abs_path(PARAM_ROOT, root.unwrap_or(DEFAULT_ROOT))?;
        let node_affinity = match node_affinity {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(format!(
                    "class parameter \"{PARAM_NODE_AFFINITY}\" must be \"true\" or \"false\", \
                     got {other:?}"
                ))
            }
        };
        Ok(Params {
            host_root,
            root,
            node_affinity,
        })
    }

    /// Where the volume's directory is inside the sandbox.
    pub fn guest_dir(&self, pv_name: &str) -> String {
        join(&self.root, pv_name)
    }

    /// Where the volume's directory is on the node.
    pub fn host_dir(&self, pv_name: &str) -> String {
        join(&self.host_root, pv_name)
    }
}

/// Checks that `value` is an absolute path without `.`, `..` or empty
/// components and without control characters; returns it without a trailing
/// slash (`/` stays `/`).
pub fn normalize_abs_path(param: &str, value: &str) -> Result<String, String> {
    let bad = |why: &str| {
        Err(format!(
            "class parameter \"{param}\" must be an absolute, normalized path, got {value:?}: {why}"
        ))
    };
    if !value.starts_with('/') {
        return bad("it does not start with /");
    }
    if value.chars().any(char::is_control) {
        return bad("it contains control characters");
    }
    let trimmed = value.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok("/".to_string());
    }
    for component in trimmed[1..].split('/') {
        match component {
            "" => return bad("it contains an empty component (//)"),
            "." | ".." => return bad("it contains a . or .. component"),
            _ => {}
        }
    }
    Ok(trimmed.to_string())
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn quote_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|item| format!("{item:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks that a PV name is one safe directory name: a lowercase DNS subdomain
/// (`[a-z0-9]([-a-z0-9.]*[a-z0-9])?`, at most 253 characters). That excludes
/// `.`, `..`, `/` and anything else that could leave the root.
pub fn validate_pv_name(name: &str) -> Result<(), String> {
    let bytes = name.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let ok = !bytes.is_empty()
        && bytes.len() <= MAX_NAME_LEN
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes.iter().all(|b| alnum(b) || *b == b'-' || *b == b'.');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid volume name {name:?}: it must be a lowercase DNS name \
             ([a-z0-9]([-a-z0-9.]*[a-z0-9])?, at most {MAX_NAME_LEN} characters) \
             so that it is a single directory name under the root"
        ))
    }
}

/// The PersistentVolume source of a volume: a `hostPath` directory, as JSON.
pub fn host_path_source(host_dir: &str) -> String {
    serde_json::json!({
        "hostPath": { "path": host_dir, "type": "DirectoryOrCreate" }
    })
    .to_string()
}

/// The `hostPath.path` of a PersistentVolume source given as JSON.
pub fn host_path_of(source: &str) -> Result<String, String> {
    let value: serde_json::Value =
        serde_json::from_str(source).map_err(|e| format!("the source is not JSON ({e})"))?;
    value
        .get("hostPath")
        .and_then(|host_path| host_path.get("path"))
        .and_then(serde_json::Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| "the source has no hostPath.path".to_string())
}

/// Everything `provision` does, decided before touching the filesystem.
#[derive(Debug, Clone)]
pub struct ProvisionPlan {
    /// Directory to create inside the sandbox.
    pub guest_dir: String,
    /// The same directory on the node.
    pub host_dir: String,
    /// The guest root it lives in (for error messages).
    pub root: String,
    /// The volume to return once the directory exists.
    pub volume: Volume,
}

/// Validates a provision request and decides what to create and return.
pub fn plan_provision(request: &ProvisionRequest) -> Result<ProvisionPlan, ProvisionError> {
    use ProvisionError::InvalidArgument;

    let params = Params::parse(&request.storage_class.parameters, Unknown::Reject)
        .map_err(InvalidArgument)?;
    let claim = &request.claim;
    if claim.requested_bytes == 0 {
        return Err(InvalidArgument(
            "the claim requests 0 bytes: set spec.resources.requests.storage to a positive size"
                .to_string(),
        ));
    }
    if claim.access_modes.is_empty() {
        return Err(InvalidArgument(
            "the claim has no access modes: set spec.accessModes, e.g. [ReadWriteOnce]".to_string(),
        ));
    }
    if claim.volume_mode == VolumeMode::Block {
        return Err(InvalidArgument(
            "the claim asks for a block volume (volumeMode: Block); the hostpath plugin only \
             provides filesystem volumes"
                .to_string(),
        ));
    }
    if let Some(source) = &claim.data_source {
        return Err(InvalidArgument(format!(
            "the claim wants its data copied from {} {:?}; the hostpath plugin cannot \
             pre-populate volumes (no snapshots or cloning)",
            source.kind, source.name
        )));
    }
    if claim.selector.is_some() {
        return Err(InvalidArgument(
            "the claim has a spec.selector; the hostpath plugin cannot select among existing \
             volumes: remove the selector"
                .to_string(),
        ));
    }
    validate_pv_name(&request.pv_name).map_err(InvalidArgument)?;

    let node_affinity = if params.node_affinity {
        let node = request.selected_node.as_ref().ok_or_else(|| {
            let fix = match request.storage_class.volume_binding_mode {
                VolumeBindingMode::Immediate => format!(
                    "the StorageClass has volumeBindingMode: Immediate; set it to \
                     WaitForFirstConsumer (or set {PARAM_NODE_AFFINITY}: \"false\")"
                ),
                VolumeBindingMode::WaitForFirstConsumer => "the class waits for the first \
                     consumer but no node was selected yet (with `wasmprov plugin invoke`, \
                     pass --node)"
                    .to_string(),
            };
            InvalidArgument(format!(
                "class parameter {PARAM_NODE_AFFINITY}=\"true\" pins the volume to the selected \
                 node, but the request has none: {fix}"
            ))
        })?;
        let hostname = node
            .labels
            .iter()
            .find(|(key, _)| key == HOSTNAME_LABEL)
            .map_or(node.name.as_str(), |(_, value)| value.as_str());
        Some(NodeAffinity {
            terms: vec![NodeSelectorTerm {
                match_expressions: vec![NodeSelectorRequirement {
                    key: HOSTNAME_LABEL.to_string(),
                    operator: NodeSelectorOperator::In,
                    values: vec![hostname.to_string()],
                }],
            }],
        })
    } else {
        None
    };

    let host_dir = params.host_dir(&request.pv_name);
    Ok(ProvisionPlan {
        guest_dir: params.guest_dir(&request.pv_name),
        volume: Volume {
            capacity_bytes: claim.requested_bytes,
            source: host_path_source(&host_dir),
            node_affinity,
            mount_options: Vec::new(),
            labels: Vec::new(),
            annotations: Vec::new(),
        },
        host_dir,
        root: params.root,
    })
}

/// Where the directory of a volume to delete is, inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletePlan {
    /// Directory to remove recursively.
    pub guest_dir: String,
    /// The same directory on the node.
    pub host_dir: String,
    /// The guest root it lives in (for error messages).
    pub root: String,
}

/// Checks that a volume is one this plugin made with these parameters and
/// finds its directory. Anything unexpected fails: never delete something else.
pub fn plan_delete(request: &DeleteRequest) -> Result<DeletePlan, DeleteError> {
    use DeleteError::Failed;

    let pv = &request.pv_name;
    let params = Params::parse(&request.parameters, Unknown::Ignore).map_err(|e| {
        Failed(format!(
            "cannot delete volume {pv}: its recorded class parameters are unusable: {e}"
        ))
    })?;
    validate_pv_name(pv).map_err(|e| Failed(format!("refusing to delete: {e}")))?;
    let host_dir = params.host_dir(pv);
    let actual = host_path_of(&request.source).map_err(|e| {
        Failed(format!(
            "refusing to delete volume {pv}: {e}; expected a hostPath source at {host_dir}"
        ))
    })?;
    // Compare normalized forms so a trailing slash is not a mismatch, while any
    // other difference (another directory, `..`) is.
    let actual_normalized = actual.trim_end_matches('/');
    if actual_normalized != host_dir {
        return Err(Failed(format!(
            "refusing to delete volume {pv}: its source hostPath.path is {actual:?} but \
             {PARAM_HOST_ROOT}={:?} puts this volume at {host_dir:?}; it was not created \
             by these parameters, so nothing was removed",
            params.host_root
        )));
    }
    Ok(DeletePlan {
        guest_dir: params.guest_dir(pv),
        host_dir,
        root: params.root,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wasmprov::provisioner::types::{
        AccessMode, Claim, DataSource, LabelSelector, Node, ReclaimPolicy, StorageClass,
        VolumeBindingMode,
    };

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn request(parameters: &[(&str, &str)]) -> ProvisionRequest {
        ProvisionRequest {
            pv_name: "pvc-1234".to_string(),
            claim: Claim {
                name: "data".to_string(),
                namespace: "default".to_string(),
                uid: "1234".to_string(),
                requested_bytes: 1 << 30,
                limit_bytes: None,
                access_modes: vec![AccessMode::ReadWriteOnce],
                volume_mode: VolumeMode::Filesystem,
                selector: None,
                labels: Vec::new(),
                annotations: Vec::new(),
                data_source: None,
            },
            storage_class: StorageClass {
                name: "hostpath".to_string(),
                provisioner: "wasmprov.io/host".to_string(),
                parameters: params(parameters),
                reclaim_policy: ReclaimPolicy::Delete,
                mount_options: Vec::new(),
                volume_binding_mode: VolumeBindingMode::Immediate,
                allowed_topologies: Vec::new(),
            },
            selected_node: None,
        }
    }

    fn invalid(result: Result<ProvisionPlan, ProvisionError>) -> String {
        match result {
            Err(ProvisionError::InvalidArgument(message)) => message,
            other => panic!("expected invalid-argument, got {other:?}"),
        }
    }

    fn delete_request(source: &str, parameters: &[(&str, &str)]) -> DeleteRequest {
        DeleteRequest {
            pv_name: "pvc-1234".to_string(),
            source: source.to_string(),
            capacity_bytes: 1 << 30,
            parameters: params(parameters),
            claim_namespace: "default".to_string(),
            claim_name: "data".to_string(),
            labels: Vec::new(),
            annotations: Vec::new(),
        }
    }

    #[test]
    fn parses_defaults() {
        let p = Params::parse(&params(&[("hostRoot", "/var/lib/x/")]), Unknown::Reject).unwrap();
        assert_eq!(
            p,
            Params {
                host_root: "/var/lib/x".to_string(),
                root: "/volumes".to_string(),
                node_affinity: false
            }
        );
    }

    #[test]
    fn parses_all_parameters() {
        let p = Params::parse(
            &params(&[
                ("hostRoot", "/srv/pv"),
                ("root", "/data"),
                ("nodeAffinity", "true"),
            ]),
            Unknown::Reject,
        )
        .unwrap();
        assert_eq!(p.root, "/data");
        assert!(p.node_affinity);
        assert_eq!(p.guest_dir("pvc-1"), "/data/pvc-1");
        assert_eq!(p.host_dir("pvc-1"), "/srv/pv/pvc-1");
    }

    #[test]
    fn rejects_unknown_parameters_by_name() {
        let err = Params::parse(
            &params(&[
                ("hostRoot", "/srv"),
                ("hostroot", "/x"),
                ("nodeAfinity", "true"),
            ]),
            Unknown::Reject,
        )
        .unwrap_err();
        assert!(err.contains("\"hostroot\", \"nodeAfinity\""), "{err}");
        assert!(
            err.contains("\"hostRoot\", \"root\", \"nodeAffinity\""),
            "{err}"
        );
        // ...but delete ignores them.
        assert!(Params::parse(
            &params(&[("hostRoot", "/srv"), ("extra", "1")]),
            Unknown::Ignore
        )
        .is_ok());
    }

    #[test]
    fn requires_host_root() {
        let err = Params::parse(&params(&[("root", "/data")]), Unknown::Reject).unwrap_err();
        assert!(
            err.contains("missing class parameter \"hostRoot\""),
            "{err}"
        );
    }

    #[test]
    fn rejects_bad_paths() {
        for bad in ["relative", "", "/a/../b", "/a/./b", "/a//b", "/a\nb", "/.."] {
            let err = Params::parse(&params(&[("hostRoot", bad)]), Unknown::Reject).unwrap_err();
            assert!(err.contains("\"hostRoot\""), "{bad:?}: {err}");
            let err = Params::parse(
                &params(&[("hostRoot", "/ok"), ("root", bad)]),
                Unknown::Reject,
            )
            .unwrap_err();
            assert!(err.contains("\"root\""), "{bad:?}: {err}");
        }
        let err = Params::parse(&params(&[("hostRoot", "/")]), Unknown::Reject).unwrap_err();
        assert!(err.contains("must not be \"/\""), "{err}");
        // A guest root of / is fine (the policy may preopen the directory there).
        let p = Params::parse(
            &params(&[("hostRoot", "/srv"), ("root", "/")]),
            Unknown::Reject,
        )
        .unwrap();
        assert_eq!(p.guest_dir("pvc-1"), "/pvc-1");
    }

    #[test]
    fn node_affinity_is_strictly_boolean() {
        for (value, expected) in [("true", true), ("false", false)] {
            let p = Params::parse(
                &params(&[("hostRoot", "/srv"), ("nodeAffinity", value)]),
                Unknown::Reject,
            )
            .unwrap();
            assert_eq!(p.node_affinity, expected);
        }
        for bad in ["True", "yes", "1", ""] {
            let err = Params::parse(
                &params(&[("hostRoot", "/srv"), ("nodeAffinity", bad)]),
                Unknown::Reject,
            )
            .unwrap_err();
            assert!(err.contains("nodeAffinity"), "{err}");
        }
    }

    #[test]
    fn pv_names() {
        for good in ["pvc-1234", "a", "0", "pvc-9f1c.x-y", &"a".repeat(253)] {
            assert!(validate_pv_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../etc",
            "a/b",
            "/abs",
            "-a",
            "a-",
            "a.",
            ".a",
            "PVC",
            "a b",
            "a\0b",
            "ä",
            &"a".repeat(254),
        ] {
            assert!(validate_pv_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn source_json_is_escaped() {
        let source = host_path_source("/srv/we\"ird\\dir/pvc-1");
        let value: serde_json::Value = serde_json::from_str(&source).unwrap();
        assert_eq!(value["hostPath"]["path"], "/srv/we\"ird\\dir/pvc-1");
        assert_eq!(value["hostPath"]["type"], "DirectoryOrCreate");
        assert_eq!(host_path_of(&source).unwrap(), "/srv/we\"ird\\dir/pvc-1");
    }

    #[test]
    fn plans_a_volume() {
        let plan = plan_provision(&request(&[("hostRoot", "/var/lib/wasmprov/hostpath")])).unwrap();
        assert_eq!(plan.guest_dir, "/volumes/pvc-1234");
        assert_eq!(plan.host_dir, "/var/lib/wasmprov/hostpath/pvc-1234");
        assert_eq!(plan.volume.capacity_bytes, 1 << 30);
        assert_eq!(
            plan.volume.source,
            r#"{"hostPath":{"path":"/var/lib/wasmprov/hostpath/pvc-1234","type":"DirectoryOrCreate"}}"#
        );
        assert!(plan.volume.node_affinity.is_none());
    }

    #[test]
    fn rejects_bad_claims() {
        let ok = [("hostRoot", "/srv")];
        let mut r = request(&ok);
        r.claim.requested_bytes = 0;
        assert!(invalid(plan_provision(&r)).contains("0 bytes"));

        let mut r = request(&ok);
        r.claim.access_modes.clear();
        assert!(invalid(plan_provision(&r)).contains("no access modes"));

        let mut r = request(&ok);
        r.claim.volume_mode = VolumeMode::Block;
        assert!(invalid(plan_provision(&r)).contains("block"));

        let mut r = request(&ok);
        r.claim.data_source = Some(DataSource {
            api_group: "snapshot.storage.k8s.io".to_string(),
            kind: "VolumeSnapshot".to_string(),
            name: "snap".to_string(),
            namespace: None,
        });
        assert!(invalid(plan_provision(&r)).contains("VolumeSnapshot"));

        let mut r = request(&ok);
        r.claim.selector = Some(LabelSelector {
            match_labels: Vec::new(),
            match_expressions: Vec::new(),
        });
        assert!(invalid(plan_provision(&r)).contains("selector"));

        for name in ["..", "../../etc", "pvc/x", ""] {
            let mut r = request(&ok);
            r.pv_name = name.to_string();
            assert!(
                invalid(plan_provision(&r)).contains("invalid volume name"),
                "{name}"
            );
        }

        let r = request(&[("hostRoot", "/srv"), ("hostroot", "/srv")]);
        assert!(invalid(plan_provision(&r)).contains("\"hostroot\""));
    }

    #[test]
    fn node_affinity_needs_a_selected_node() {
        let mut r = request(&[("hostRoot", "/srv"), ("nodeAffinity", "true")]);
        assert!(invalid(plan_provision(&r)).contains("set it to WaitForFirstConsumer"));

        r.storage_class.volume_binding_mode = VolumeBindingMode::WaitForFirstConsumer;
        assert!(invalid(plan_provision(&r)).contains("no node was selected"));

        r.selected_node = Some(Node {
            name: "node-a".to_string(),
            labels: params(&[("kubernetes.io/hostname", "host-a")]),
        });
        let affinity = plan_provision(&r).unwrap().volume.node_affinity.unwrap();
        let requirement = &affinity.terms[0].match_expressions[0];
        assert_eq!(requirement.key, "kubernetes.io/hostname");
        assert_eq!(requirement.operator, NodeSelectorOperator::In);
        assert_eq!(requirement.values, ["host-a"]);

        // Without the hostname label, the node name is the best guess.
        r.selected_node = Some(Node {
            name: "node-b".to_string(),
            labels: Vec::new(),
        });
        let affinity = plan_provision(&r).unwrap().volume.node_affinity.unwrap();
        assert_eq!(affinity.terms[0].match_expressions[0].values, ["node-b"]);
    }

    #[test]
    fn delete_checks_the_source() {
        let p = [("hostRoot", "/srv/pv"), ("root", "/data")];
        let plan = plan_delete(&delete_request(
            r#"{"hostPath":{"path":"/srv/pv/pvc-1234"}}"#,
            &p,
        ))
        .unwrap();
        assert_eq!(plan.guest_dir, "/data/pvc-1234");

        for source in [
            r#"{"hostPath":{"path":"/srv/pv/other"}}"#,
            r#"{"hostPath":{"path":"/srv/pv/../pv/pvc-1234"}}"#,
            r#"{"hostPath":{"path":"/"}}"#,
            r#"{"nfs":{"server":"x","path":"/srv/pv/pvc-1234"}}"#,
            "not json",
        ] {
            match plan_delete(&delete_request(source, &p)) {
                Err(DeleteError::Failed(message)) => {
                    assert!(message.contains("refusing to delete"), "{message}")
                }
                other => panic!("{source}: expected failed, got {other:?}"),
            }
        }

        let mut r = delete_request(r#"{"hostPath":{"path":"/srv/pv/.."}}"#, &p);
        r.pv_name = "..".to_string();
        assert!(matches!(plan_delete(&r), Err(DeleteError::Failed(_))));

        let r = delete_request(r#"{"hostPath":{"path":"/srv/pv/pvc-1234"}}"#, &[]);
        match plan_delete(&r) {
            Err(DeleteError::Failed(message)) => assert!(message.contains("hostRoot"), "{message}"),
            other => panic!("expected failed, got {other:?}"),
        }
    }
}
