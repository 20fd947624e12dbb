//! The checks most plugins make on a provision request, with messages that
//! name the claim field and the fix.

use crate::{ProvisionError, ProvisionRequest, VolumeBindingMode, VolumeMode};

/// The node label node affinity is usually expressed with.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Checks a claim for a plugin that makes empty filesystem volumes: a size
/// above 0, at least one access mode, `volumeMode: Filesystem`, no data
/// source, no selector, and a PV name that is a safe directory name. Returns
/// the requested size. Every refusal is `invalid-argument`.
pub fn check_filesystem_claim(
    plugin: &str,
    request: &ProvisionRequest,
) -> Result<u64, ProvisionError> {
    use ProvisionError::InvalidArgument;
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
        return Err(InvalidArgument(format!(
            "the claim asks for a block volume (volumeMode: Block); the {plugin} plugin only \
             provides filesystem volumes"
        )));
    }
    if let Some(source) = &claim.data_source {
        return Err(InvalidArgument(format!(
            "the claim wants its data copied from {} {:?}; the {plugin} plugin cannot \
             pre-populate volumes (no snapshots or cloning)",
            source.kind, source.name
        )));
    }
    if claim.selector.is_some() {
        return Err(InvalidArgument(format!(
            "the claim has a spec.selector; the {plugin} plugin cannot select among existing \
             volumes: remove the selector"
        )));
    }
    crate::path::check_pv_name(&request.pv_name).map_err(InvalidArgument)?;
    Ok(claim.requested_bytes)
}

/// The selected node, for a class that needs one (`needed_by` names the
/// parameter or feature in the message); `invalid-argument` saying how to fix
/// the class when there is none.
pub fn selected_node<'a>(
    request: &'a ProvisionRequest,
    needed_by: &str,
) -> Result<&'a crate::Node, ProvisionError> {
    request.selected_node.as_ref().ok_or_else(|| {
        let fix = match request.storage_class.volume_binding_mode {
            VolumeBindingMode::Immediate => {
                "the StorageClass has volumeBindingMode: Immediate; set it to \
                 WaitForFirstConsumer"
            }
            VolumeBindingMode::WaitForFirstConsumer => {
                "the class waits for the first consumer but no node was selected yet \
                 (with `wasmprov plugin invoke`, pass --node)"
            }
        };
        ProvisionError::InvalidArgument(format!(
            "{needed_by} pins the volume to the selected node, but the request has none: {fix}"
        ))
    })
}

/// The value of a claim annotation.
pub fn annotation<'a>(request: &'a ProvisionRequest, key: &str) -> Option<&'a str> {
    crate::lookup(&request.claim.annotations, key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AccessMode, Claim, DataSource, LabelSelector, Node, ReclaimPolicy, StorageClass};

    fn request() -> ProvisionRequest {
        ProvisionRequest {
            pv_name: "pvc-1".to_string(),
            claim: Claim {
                name: "data".to_string(),
                namespace: "apps".to_string(),
                uid: "1".to_string(),
                requested_bytes: 5,
                limit_bytes: None,
                access_modes: vec![AccessMode::ReadWriteOnce],
                volume_mode: VolumeMode::Filesystem,
                selector: None,
                labels: Vec::new(),
                annotations: vec![("a".to_string(), "b".to_string())],
                data_source: None,
            },
            storage_class: StorageClass {
                name: "c".to_string(),
                provisioner: "wasmprov.io/host".to_string(),
                parameters: Vec::new(),
                reclaim_policy: ReclaimPolicy::Delete,
                mount_options: Vec::new(),
                volume_binding_mode: VolumeBindingMode::Immediate,
                allowed_topologies: Vec::new(),
            },
            selected_node: None,
        }
    }

    fn refused(r: &ProvisionRequest) -> String {
        match check_filesystem_claim("demo", r) {
            Err(ProvisionError::InvalidArgument(m)) => m,
            other => panic!("expected invalid-argument, got {other:?}"),
        }
    }

    #[test]
    fn filesystem_claims_are_checked_field_by_field() {
        assert_eq!(check_filesystem_claim("demo", &request()).unwrap(), 5);
        assert_eq!(annotation(&request(), "a"), Some("b"));
        let mut r = request();
        r.claim.requested_bytes = 0;
        assert!(refused(&r).contains("0 bytes"));
        let mut r = request();
        r.claim.access_modes.clear();
        assert!(refused(&r).contains("no access modes"));
        let mut r = request();
        r.claim.volume_mode = VolumeMode::Block;
        assert!(refused(&r).contains("the demo plugin only provides filesystem volumes"));
        let mut r = request();
        r.claim.data_source = Some(DataSource {
            api_group: String::new(),
            kind: "PersistentVolumeClaim".to_string(),
            name: "src".to_string(),
            namespace: None,
        });
        assert!(refused(&r).contains("PersistentVolumeClaim \"src\""));
        let mut r = request();
        r.claim.selector = Some(LabelSelector {
            match_labels: Vec::new(),
            match_expressions: Vec::new(),
        });
        assert!(refused(&r).contains("spec.selector"));
        let mut r = request();
        r.pv_name = "../x".to_string();
        assert!(refused(&r).contains("invalid volume name"));
    }

    #[test]
    fn selected_node_says_how_to_fix_the_class() {
        let mut r = request();
        let err = selected_node(&r, "pinning").unwrap_err();
        assert!(
            matches!(&err, ProvisionError::InvalidArgument(m) if m.contains("set it to WaitForFirstConsumer")),
            "{err:?}"
        );
        r.storage_class.volume_binding_mode = VolumeBindingMode::WaitForFirstConsumer;
        assert!(matches!(
            selected_node(&r, "pinning"),
            Err(ProvisionError::InvalidArgument(m)) if m.contains("pass --node")
        ));
        r.selected_node = Some(Node {
            name: "n1".to_string(),
            labels: vec![(HOSTNAME_LABEL.to_string(), "host-1".to_string())],
        });
        let node = selected_node(&r, "pinning").unwrap();
        let affinity = crate::pin_to_node(node);
        assert_eq!(affinity.terms[0].match_expressions[0].values, ["host-1"]);
        let bare = Node {
            name: "n2".to_string(),
            labels: Vec::new(),
        };
        assert_eq!(
            crate::pin_to_node(&bare).terms[0].match_expressions[0].values,
            ["n2"]
        );
    }
}
