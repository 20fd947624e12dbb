//! The contract between the provisioning lifecycle and a storage backend, in
//! Kubernetes terms. It mirrors the Go library's `Provisioner` interface:
//! `provision` turns a claim into a PersistentVolume, `delete` removes the
//! storage of a released one, and a failed provision says what the backend may
//! still be doing ([`ProvisionState`]). `resize` grows a bound volume, what
//! the Go library leaves to CSI's external-resizer.

use std::future::Future;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

/// The storage backends the lifecycle drives, each named by a plugin.
///
/// `plugin` is the StorageClass's `plugin` parameter when provisioning, and the
/// plugin recorded on the PersistentVolume when deleting, so a volume is
/// deleted by the backend that made it even after its class changed.
pub trait Provisioner: Send + Sync + 'static {
    /// What `plugin` supports, or why it cannot be used (say where plugins are
    /// looked for, so the message in the claim's events is actionable).
    fn plugin(&self, plugin: &str) -> Result<PluginInfo, String>;

    /// Creates the storage for a claim and returns its PersistentVolume.
    fn provision(
        &self,
        plugin: &str,
        opts: &ProvisionOptions,
    ) -> impl Future<Output = Result<PersistentVolume, ProvisionError>> + Send;

    /// Removes the storage of a released PersistentVolume.
    fn delete(
        &self,
        plugin: &str,
        pv: &PersistentVolume,
    ) -> impl Future<Output = Result<(), DeleteError>> + Send;

    /// Grows the storage of a bound PersistentVolume to at least
    /// `request.requested_bytes` (never called to shrink). Only called for
    /// plugins whose [`PluginInfo::resize`] is true.
    fn resize(
        &self,
        plugin: &str,
        pv: &PersistentVolume,
        request: &ResizeOptions,
    ) -> impl Future<Output = Result<Resized, ResizeError>> + Send {
        let _ = (pv, request);
        let message = format!("plugin {plugin} cannot grow volumes");
        async move { Err(ResizeError::new(ResizeState::Infeasible, message)) }
    }

    /// Changes each time a plugin becomes usable (a version loads), so the
    /// lifecycle can look again at the claims and volumes that waited for
    /// it instead of at their next retry. None: plugins never change.
    fn plugins_changed(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}

/// What the lifecycle needs to know about a plugin before calling it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    /// Whether it provisions `volumeMode: Block` claims.
    pub block_volumes: bool,
    /// Whether it grows volumes (a Wasm plugin exporting `resizer`).
    pub resize: bool,
}

/// What a claim now asks of its volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResizeOptions {
    /// `spec.resources.requests.storage` of the claim, in bytes.
    pub requested_bytes: u64,
    /// `spec.resources.limits.storage` of the claim, in bytes.
    pub limit_bytes: Option<u64>,
}

/// A volume after a resize.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resized {
    /// Its size now: the PersistentVolume's new `spec.capacity.storage`.
    pub capacity_bytes: u64,
    /// The filesystem on the node must still grow (the kubelet's part).
    pub node_expansion_required: bool,
}

/// Why a volume did not grow (the resize states of the plugin contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeState {
    /// Retry with backoff.
    Failed,
    /// The backend may still be growing it: keep the claim resizing, retry.
    InBackground,
    /// Nothing changed since the last attempt; retry quietly.
    NoChange,
    /// The size can never be reached (or a class parameter forbids it): the
    /// claim is marked `ControllerResizeInfeasible` until the user asks for
    /// another size.
    Infeasible,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ResizeError {
    pub state: ResizeState,
    /// What failed, for which volume, and what to do: shown in claim events.
    pub message: String,
}

impl ResizeError {
    pub fn new(state: ResizeState, message: impl Into<String>) -> Self {
        Self {
            state,
            message: message.into(),
        }
    }
}

/// The StorageClass parameter that names the plugin; the host consumes it and
/// passes the other parameters to the plugin.
pub const PLUGIN_PARAMETER: &str = "plugin";

/// Annotations the host records on every PersistentVolume it creates, so that
/// `delete` reaches the right plugin even after the class or plugin changed.
pub mod annotations {
    /// The plugin that made the volume.
    pub const PLUGIN: &str = "wasmprov.io/plugin";
    /// `sha256:<hex>` of the plugin component that made the volume.
    pub const PLUGIN_DIGEST: &str = "wasmprov.io/plugin-digest";
    /// The class parameters given to the plugin, as a JSON object.
    pub const PARAMETERS: &str = "wasmprov.io/parameters";
    /// The provisioner that made the volume (standard Kubernetes annotation).
    pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
    /// The provisioner a volume was handed over to by CSI migration.
    pub const MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";
    /// Prefix reserved for the host; plugins may not set annotations under it.
    pub const RESERVED_PREFIX: &str = "wasmprov.io/";
}

/// Everything a backend needs to provision a volume for a claim (the Go
/// library's `ProvisionOptions`).
#[derive(Debug, Clone)]
pub struct ProvisionOptions {
    /// The PersistentVolume's name: `pvc-<claim uid>`.
    pub pv_name: String,
    pub claim: PersistentVolumeClaim,
    pub class: StorageClass,
    /// The node the scheduler picked (WaitForFirstConsumer only).
    pub selected_node: Option<Node>,
}

impl ProvisionOptions {
    /// The deterministic PersistentVolume name of a claim: a restart or a retry
    /// never makes a second volume.
    pub fn pv_name_for(claim: &PersistentVolumeClaim) -> Option<String> {
        claim.metadata.uid.as_ref().map(|uid| format!("pvc-{uid}"))
    }
}

/// What the backend may still be doing after a provision that produced no
/// volume (the Go library's `ProvisioningState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProvisionState {
    /// Nothing was created; retry with backoff.
    Failed,
    /// The backend may still be creating the volume: keep calling provision for
    /// this claim, even if it is deleted, until a final answer.
    InBackground,
    /// Nothing changed since the last attempt; retry quietly.
    NoChange,
    /// The selected node cannot host the volume: ask for another node.
    Reschedule,
    /// The request can never succeed as it is; retry only slowly.
    InvalidArgument,
}

/// A provision that produced no volume.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProvisionError {
    pub state: ProvisionState,
    /// What failed, for which object, and what to do: shown in claim events.
    pub message: String,
}

impl ProvisionError {
    pub fn new(state: ProvisionState, message: impl Into<String>) -> Self {
        Self {
            state,
            message: message.into(),
        }
    }
}

/// Why a volume's storage was not deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteState {
    /// Deleting failed: keep the PersistentVolume and retry with backoff.
    Failed,
    /// The backend does not own this volume: leave it alone, no error event.
    Ignored,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DeleteError {
    pub state: DeleteState,
    pub message: String,
}

impl DeleteError {
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            state: DeleteState::Failed,
            message: message.into(),
        }
    }
}
