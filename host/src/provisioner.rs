//! The contract between the provisioning lifecycle and a storage backend, in
//! Kubernetes terms. It mirrors the Go library's `Provisioner` interface:
//! `provision` turns a claim into a PersistentVolume, `delete` removes the
//! storage of a released one, and a failed provision says what the backend may
//! still be doing ([`ProvisionState`]). `resize` grows a bound volume, what
//! the Go library leaves to CSI's external-resizer.

use std::collections::BTreeMap;
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

    /// Node mode: what `plugin` says `node` can still take for new volumes
    /// of `class`, for plugins that know better than the host
    /// ([`PluginInfo::reports_capacity`]). `Ok(None)`: it knows no better
    /// for this class; the host measures the plugin's [`NodeStorage`]. The
    /// figure is checked against the plugin's own limits, not yet against
    /// the node's disk. `Err`: why there is no figure, for the class's events.
    fn capacity(
        &self,
        plugin: &str,
        class: &StorageClass,
        node: &Node,
    ) -> impl Future<Output = Result<Option<ReportedCapacity>, String>> + Send {
        let _ = (class, node);
        let message = format!("plugin {plugin} does not report capacity");
        async move { Err(message) }
    }

    /// Changes each time a plugin becomes usable (a version loads), so the
    /// lifecycle can look again at the claims and volumes that waited for
    /// it instead of at their next retry. None: plugins never change.
    fn plugins_changed(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}

/// What the lifecycle needs to know about a plugin before calling it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginInfo {
    /// Whether it provisions `volumeMode: Block` claims.
    pub block_volumes: bool,
    /// Whether it grows volumes (a Wasm plugin exporting `resizer`).
    pub resize: bool,
    /// Whether it makes storage on the node the host runs on (`hostPath`
    /// or `local` volumes): only right where that is the volume's node.
    pub node_local: bool,
    /// Where its volumes take their room on a node, for the capacity a node
    /// host publishes and checks; `None`: nothing the host can measure.
    pub storage: Option<NodeStorage>,
    /// Whether it says itself what room a node has left for its volumes
    /// ([`Provisioner::capacity`]).
    pub reports_capacity: bool,
}

/// What a plugin says a node can still take for new volumes of a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportedCapacity {
    /// All new volumes together.
    pub available_bytes: u64,
    /// The largest one; at most `available_bytes`.
    pub maximum_volume_bytes: u64,
}

/// Where a node-local plugin's volumes take their room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStorage {
    /// A directory (as the host sees it) on the filesystem its volumes fill.
    pub directory: std::path::PathBuf,
    /// Bytes of that filesystem to leave for everything but volumes.
    pub reserve_bytes: u64,
    /// The largest volume the plugin may make.
    pub max_volume_bytes: u64,
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
    /// The class parameters recorded for `delete` and `resize`, as a JSON
    /// object: only those the plugin's `recordParameters` grant; the others
    /// come from the StorageClass.
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

/// The volume as `delete` and `resize` get it: the parameters recorded on it
/// (only those its plugin's `recordParameters` grant), completed from
/// `class`, its StorageClass, the recorded values winning. The Go library's
/// provisioners read the class the same way. In memory only: nothing of the
/// class is ever written on the volume.
///
/// A class that names another plugin than the volume's adds nothing (its
/// parameters mean something else), nor does an unreadable annotation: the
/// request builder reports that one.
pub fn with_class_parameters(
    pv: &PersistentVolume,
    class: Option<&StorageClass>,
) -> PersistentVolume {
    let Some(class) = class.filter(|c| class_fits(pv, c)) else {
        return pv.clone();
    };
    let recorded = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::PARAMETERS));
    let mut parameters: BTreeMap<String, String> = match recorded {
        Some(json) => match serde_json::from_str(json) {
            Ok(map) => map,
            Err(_) => return pv.clone(),
        },
        None => BTreeMap::new(),
    };
    for (key, value) in class.parameters.iter().flatten() {
        if key != PLUGIN_PARAMETER {
            parameters
                .entry(key.clone())
                .or_insert_with(|| value.clone());
        }
    }
    let mut completed = pv.clone();
    completed
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            annotations::PARAMETERS.to_owned(),
            serde_json::to_string(&parameters).unwrap_or_default(),
        );
    completed
}

/// Why [`with_class_parameters`] can add nothing to `pv`, and how to fix it:
/// for the message of a failed delete or resize, which may be the plugin
/// missing a parameter only the class had.
pub fn missing_class(pv: &PersistentVolume, class: Option<&StorageClass>) -> Option<String> {
    let name = pv
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or_default();
    let plugin = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::PLUGIN))
        .map_or("(unrecorded)", String::as_str);
    let why = match class {
        Some(c) if class_fits(pv, c) => return None,
        Some(c) => format!(
            "StorageClass {name:?} now names plugin {:?}, not {plugin:?} that made this volume,",
            c.parameters
                .as_ref()
                .and_then(|p| p.get(PLUGIN_PARAMETER))
                .map_or("", String::as_str)
        ),
        None if name.is_empty() => "the volume names no StorageClass,".to_owned(),
        None => format!("StorageClass {name:?} no longer exists,"),
    };
    let recorded: Vec<String> = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::PARAMETERS))
        .and_then(|json| serde_json::from_str::<BTreeMap<String, String>>(json).ok())
        .map(|m| m.into_keys().collect())
        .unwrap_or_default();
    let recorded = if recorded.is_empty() {
        "none".to_owned()
    } else {
        recorded.join(", ")
    };
    Some(format!(
        "{why} so plugin {plugin} got only the class parameters recorded on the volume ({recorded}); \
         if it needs others, recreate the class with them (and plugin: {plugin}), and list them under \
         plugins.{plugin}.recordParameters in the sandbox policy so that new volumes record them"
    ))
}

/// Whether `class` holds the parameters of `pv`'s plugin: not when it names
/// another plugin (recreated for it under the same name).
fn class_fits(pv: &PersistentVolume, class: &StorageClass) -> bool {
    let made_by = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::PLUGIN));
    let names = class
        .parameters
        .as_ref()
        .and_then(|p| p.get(PLUGIN_PARAMETER));
    match (made_by, names) {
        (Some(made_by), Some(names)) => made_by == names,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv(recorded: Option<&str>) -> PersistentVolume {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pvc-1", "annotations": {"wasmprov.io/plugin": "p"}},
            "spec": {"storageClassName": "fast"},
        }))
        .map(|mut pv: PersistentVolume| {
            if let Some(json) = recorded {
                pv.metadata
                    .annotations
                    .as_mut()
                    .unwrap()
                    .insert(annotations::PARAMETERS.into(), json.into());
            }
            pv
        })
        .unwrap()
    }

    fn class(params: &[(&str, &str)]) -> StorageClass {
        StorageClass {
            parameters: Some(
                params
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn parameters(pv: &PersistentVolume) -> serde_json::Value {
        serde_json::from_str(&pv.metadata.annotations.as_ref().unwrap()[annotations::PARAMETERS])
            .unwrap()
    }

    #[test]
    fn the_class_fills_what_the_volume_does_not_record() {
        let class = class(&[("plugin", "p"), ("root", "/new"), ("server", "10.0.0.5")]);
        let pv = pv(Some(r#"{"root":"/recorded"}"#));
        let completed = with_class_parameters(&pv, Some(&class));
        assert_eq!(
            parameters(&completed),
            serde_json::json!({"root": "/recorded", "server": "10.0.0.5"}),
            "recorded values win, the class fills the rest, `plugin` is the host's"
        );
        assert_eq!(missing_class(&pv, Some(&class)), None);
        // Nothing recorded at all (the default).
        let completed = with_class_parameters(&self::pv(None), Some(&class));
        assert_eq!(
            parameters(&completed),
            serde_json::json!({"root": "/new", "server": "10.0.0.5"})
        );
    }

    #[test]
    fn without_its_class_a_volume_keeps_what_it_records_and_says_why() {
        let pv = pv(Some(r#"{"root":"/recorded"}"#));
        assert_eq!(with_class_parameters(&pv, None), pv);
        let note = missing_class(&pv, None).unwrap();
        assert!(
            note.starts_with("StorageClass \"fast\" no longer exists"),
            "{note}"
        );
        assert!(note.contains("recorded on the volume (root)"), "{note}");
        assert!(note.contains("plugins.p.recordParameters"), "{note}");

        // A class recreated for another plugin is not this volume's.
        let other = class(&[("plugin", "q"), ("server", "x")]);
        assert_eq!(with_class_parameters(&pv, Some(&other)), pv);
        let note = missing_class(&pv, Some(&other)).unwrap();
        assert!(note.contains("now names plugin \"q\", not \"p\""), "{note}");

        // An unreadable annotation is left for the request builder to report.
        let broken = self::pv(Some("not json"));
        assert_eq!(
            with_class_parameters(&broken, Some(&class(&[("plugin", "p"), ("a", "b")]))),
            broken
        );
    }
}
