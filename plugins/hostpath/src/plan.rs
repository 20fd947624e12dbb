//! The decisions of the hostpath plugin, without any I/O: parameter parsing,
//! request validation, naming and the returned volume. `lib.rs` only adds the
//! filesystem calls and logging, so everything here is unit-tested natively.

use wasmprov_plugin::{
    claim, path, pin_to_node, source, volume, DeleteError, DeleteRequest, Params as ClassParams,
    ProvisionError, ProvisionRequest, Volume,
};

/// The plugin's name in messages.
pub const PLUGIN: &str = "hostpath";
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
        let params = ClassParams::new(PLUGIN, params);
        if unknown == Unknown::Reject {
            params
                .reject_unknown(&KNOWN_PARAMS)
                .map_err(|e| e.to_string())?;
        }
        let host_root = params
            .abs_path(
                PARAM_HOST_ROOT,
                None,
                "the absolute directory on the node under which volumes are created, \
                 e.g. hostRoot: /var/lib/wasmprov/hostpath",
            )
            .map_err(|e| e.to_string())?;
        if host_root == "/" {
            return Err(format!(
                "class parameter \"{PARAM_HOST_ROOT}\" must not be \"/\": volumes would be \
                 created directly in the node's root directory; use a dedicated directory \
                 such as /var/lib/wasmprov/hostpath"
            ));
        }
        let root = params
            .abs_path(PARAM_ROOT, Some(DEFAULT_ROOT), "")
            .map_err(|e| e.to_string())?;
        let node_affinity = params
            .bool(PARAM_NODE_AFFINITY, false)
            .map_err(|e| e.to_string())?;
        Ok(Params {
            host_root,
            root,
            node_affinity,
        })
    }

    /// Where the volume's directory is inside the sandbox.
    pub fn guest_dir(&self, pv_name: &str) -> Result<String, String> {
        path::join(&self.root, pv_name)
    }

    /// Where the volume's directory is on the node.
    pub fn host_dir(&self, pv_name: &str) -> Result<String, String> {
        path::join(&self.host_root, pv_name)
    }
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
    let size = claim::check_filesystem_claim(PLUGIN, request)?;
    let node_affinity = if params.node_affinity {
        let needed_by = format!(
            "class parameter {PARAM_NODE_AFFINITY}=\"true\" (set it to \"false\" to allow any node)"
        );
        Some(pin_to_node(claim::selected_node(request, &needed_by)?))
    } else {
        None
    };
    let host_dir = params.host_dir(&request.pv_name).map_err(InvalidArgument)?;
    let mut volume = volume(
        size,
        source::host_path(&host_dir, Some("DirectoryOrCreate")),
    );
    volume.node_affinity = node_affinity;
    Ok(ProvisionPlan {
        guest_dir: params
            .guest_dir(&request.pv_name)
            .map_err(InvalidArgument)?,
        volume,
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
    locate(request, "delete").map_err(DeleteError::Failed)
}

/// Finds a volume's directory from what the host recorded on it, for
/// `delete` or `resize` (`verb`): refuses (with the reason) a volume these
/// parameters did not make, so nothing else is ever touched.
pub fn locate(request: &DeleteRequest, verb: &str) -> Result<DeletePlan, String> {
    let pv = &request.pv_name;
    let params = Params::parse(&request.parameters, Unknown::Ignore).map_err(|e| {
        format!("cannot {verb} volume {pv}: its recorded class parameters are unusable: {e}")
    })?;
    path::check_pv_name(pv).map_err(|e| format!("refusing to {verb}: {e}"))?;
    let refuse = |e: String| format!("refusing to {verb}: {e}");
    let host_dir = params.host_dir(pv).map_err(refuse)?;
    let actual = source::host_path_of(&request.source).map_err(|e| {
        format!("refusing to {verb} volume {pv}: {e}; expected a hostPath source at {host_dir}")
    })?;
    // Compare normalized forms so a trailing slash is not a mismatch, while any
    // other difference (another directory, `..`) is.
    let actual_normalized = actual.trim_end_matches('/');
    if actual_normalized != host_dir {
        return Err(format!(
            "refusing to {verb} volume {pv}: its source hostPath.path is {actual:?} but \
             {PARAM_HOST_ROOT}={:?} puts this volume at {host_dir:?}; it was not created \
             by these parameters, so nothing was changed",
            params.host_root
        ));
    }
    Ok(DeletePlan {
        guest_dir: params.guest_dir(pv).map_err(refuse)?,
        host_dir,
        root: params.root,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmprov_plugin::{
        AccessMode, Claim, DataSource, LabelSelector, Node, NodeSelectorOperator, ReclaimPolicy,
        StorageClass, VolumeBindingMode, VolumeMode,
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
        assert_eq!(p.guest_dir("pvc-1").unwrap(), "/data/pvc-1");
        assert_eq!(p.host_dir("pvc-1").unwrap(), "/srv/pv/pvc-1");
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
        assert_eq!(p.guest_dir("pvc-1").unwrap(), "/pvc-1");
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
    fn source_json_is_escaped() {
        let source = source::host_path("/srv/we\"ird\\dir/pvc-1", Some("DirectoryOrCreate"));
        let value: serde_json::Value = serde_json::from_str(&source).unwrap();
        assert_eq!(value["hostPath"]["path"], "/srv/we\"ird\\dir/pvc-1");
        assert_eq!(value["hostPath"]["type"], "DirectoryOrCreate");
        assert_eq!(
            source::host_path_of(&source).unwrap(),
            "/srv/we\"ird\\dir/pvc-1"
        );
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
