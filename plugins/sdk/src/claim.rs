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
