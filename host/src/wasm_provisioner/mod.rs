//! A storage backend served by a Wasm plugin: translates between the
//! Kubernetes objects of the [`provisioner`](crate::provisioner) contract and
//! the plugin's WIT types, and checks what the plugin returns: that it is a
//! valid volume, and that the operator's output policy allows it.

mod access;
mod output;
mod request;
mod source;
mod volume;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::policy::OutputPolicy;
use crate::provisioner::{
    DeleteError, DeleteState, ProvisionError, ProvisionOptions, ProvisionState, ReportedCapacity,
    ResizeError, ResizeOptions, ResizeState, Resized,
};
use crate::quantity::Bytes;
use crate::runtime::bindings::types as wit;
use crate::runtime::{CallError, Plugin};
use crate::text::untrusted;

pub use access::{GID_KEY, HOST_PARAMETER_PREFIX, MODE_KEY, UID_KEY};
pub use request::{plugin_parameters, provision_request};
pub use volume::{
    MAX_ANNOTATIONS, MAX_ANNOTATION_BYTES, MAX_LABELS, MAX_MOUNT_OPTIONS, MAX_SOURCE_BYTES,
    MAX_VOLUME_BYTES,
};

/// The longest plugin message passed on (in events, logs and errors); the
/// rest is cut, saying how much. An event holds about 1 KiB.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// Starts the message of a provision whose volume the output policy refused.
pub const REFUSED_BY_POLICY: &str = "returned a volume that its output policy refuses";

/// One plugin seen as a provisioner.
#[derive(Debug, Clone)]
pub struct WasmProvisioner {
    plugin: Arc<Plugin>,
    output: OutputPolicy,
}

impl WasmProvisioner {
    /// `plugin` may return only what `output` grants.
    pub fn new(plugin: Arc<Plugin>, output: OutputPolicy) -> Self {
        Self { plugin, output }
    }

    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// What this plugin may return.
    pub fn output_policy(&self) -> &OutputPolicy {
        &self.output
    }

    /// The same plugin version under another output policy.
    pub fn with_output_policy(&self, output: OutputPolicy) -> Self {
        Self {
            plugin: self.plugin.clone(),
            output,
        }
    }

    /// Whether the plugin can provision `volumeMode: Block` claims.
    pub fn supports_block(&self) -> bool {
        self.plugin.capabilities().block_volumes
    }

    /// Asks the plugin for a volume and builds the validated PersistentVolume.
    pub async fn provision(
        &self,
        opts: &ProvisionOptions,
    ) -> Result<PersistentVolume, ProvisionError> {
        let name = self.plugin.name();
        let request = request::provision_request(opts)?;
        if request.claim.volume_mode == wit::VolumeMode::Block && !self.supports_block() {
            return Err(ProvisionError::new(
                ProvisionState::InvalidArgument,
                format!(
                    "plugin {name} does not support volumeMode Block (claim {}/{}); use volumeMode Filesystem or a class whose plugin supports block volumes",
                    request.claim.namespace, request.claim.name
                ),
            ));
        }
        if request.claim.requested_bytes > self.output.max_capacity_bytes {
            return Err(ProvisionError::new(
                ProvisionState::InvalidArgument,
                format!(
                    "claim {}/{} asks for {}, and plugin {name} may make volumes of at most {} (plugins.{name}.output.maxCapacity in the sandbox policy); ask for less",
                    request.claim.namespace,
                    request.claim.name,
                    crate::quantity::Bytes(request.claim.requested_bytes),
                    crate::quantity::Bytes(self.output.max_capacity_bytes)
                ),
            ));
        }
        let access = self.access(opts)?;
        let volume = match self.plugin.provision(&request).await {
            Ok(Ok(volume)) => volume,
            Ok(Err(e)) => return Err(plugin_provision_error(name, e)),
            Err(e) => return Err(call_provision_error(e)),
        };
        let provenance = volume::Provenance {
            plugin: name,
            digest: self.plugin.digest(),
            output: &self.output,
        };
        let rejection = match volume::build(opts, &volume, &provenance) {
            Ok(pv) => {
                let source = serde_json::from_str(&volume.source).unwrap_or_default();
                let refusals = output::check(
                    &self.output,
                    &self.plugin.policy().preopens,
                    opts,
                    &volume,
                    &source,
                );
                if refusals.is_empty() {
                    match access::apply_to_source(&access, &source) {
                        Ok(()) => return Ok(pv),
                        Err(e) => format!(
                            "the mode and owner of volume {} (StorageClass {}) could not be set: {}",
                            opts.pv_name,
                            opts.class.metadata.name.as_deref().unwrap_or_default(),
                            untrusted(&e, MAX_MESSAGE_BYTES)
                        ),
                    }
                } else {
                    format!(
                        "plugin {name} {REFUSED_BY_POLICY} for {}: {}; if the plugin is meant to return this, grant it under plugins.{name}.output in the sandbox policy",
                        opts.pv_name,
                        untrusted(&refusals.join("; "), 4 * MAX_MESSAGE_BYTES)
                    )
                }
            }
            Err(message) => format!(
                "plugin {name} returned an invalid volume for {}: {}; this is a bug in the plugin",
                opts.pv_name,
                untrusted(&message, MAX_MESSAGE_BYTES)
            ),
        };
        Err(self.clean_up_rejected(opts, &volume, rejection).await)
    }

    /// The mode and owner the claim's volume gets (class parameters, claim
    /// annotations where the policy allows), checked before any storage is
    /// made.
    fn access(&self, opts: &ProvisionOptions) -> Result<access::Access, ProvisionError> {
        let claim = &opts.claim;
        access::Access::of(
            opts.class.metadata.name.as_deref().unwrap_or_default(),
            opts.class
                .parameters
                .as_ref()
                .unwrap_or(&Default::default()),
            &request::claim_name(claim),
            claim
                .metadata
                .annotations
                .as_ref()
                .unwrap_or(&Default::default()),
            self.output.claim_access,
            self.plugin.name(),
        )
        .map_err(|e| ProvisionError::new(ProvisionState::InvalidArgument, e))
    }

    /// The plugin made storage for a volume the host will not save: ask it
    /// to remove that storage. If it cannot, the claim stays in progress
    /// (in-background), so the host keeps trying instead of forgetting it.
    async fn clean_up_rejected(
        &self,
        opts: &ProvisionOptions,
        volume: &wit::Volume,
        rejection: String,
    ) -> ProvisionError {
        let mut request = request::rejected_volume_request(opts, volume);
        self.without_secrets(&mut request);
        let failure = match self.plugin.delete(&request).await {
            Ok(Ok(())) | Ok(Err(wit::DeleteError::Ignored(_))) => None,
            Ok(Err(wit::DeleteError::Failed(m))) => {
                Some(untrusted(&m, MAX_MESSAGE_BYTES).into_owned())
            }
            Err(e) => Some(e.to_string()),
        };
        match failure {
            None => ProvisionError::new(
                ProvisionState::Failed,
                format!("{rejection} (the storage it made was deleted again)"),
            ),
            Some(e) => ProvisionError::new(
                ProvisionState::InBackground,
                format!("{rejection}; deleting the storage it made failed, and is retried: {e}"),
            ),
        }
    }

    /// Only `provision` gets the `secretParameters`: the parameters of a
    /// delete or resize may come from the class, which holds them.
    fn without_secrets(&self, request: &mut wit::DeleteRequest) {
        let secrets = &self.output.secret_parameters;
        request.parameters.retain(|(key, _)| !secrets.contains(key));
    }

    /// Whether the plugin grows volumes (it exports `resizer`).
    pub fn can_resize(&self) -> bool {
        self.plugin.can_resize()
    }

    /// Asks the plugin to grow a volume's storage, and checks its answer.
    pub async fn resize(
        &self,
        pv: &PersistentVolume,
        options: &ResizeOptions,
    ) -> Result<Resized, ResizeError> {
        let name = self.plugin.name();
        let failed = |m: String| ResizeError::new(ResizeState::Failed, m);
        let mut volume = request::delete_request(pv).map_err(|e| failed(e.message))?;
        self.without_secrets(&mut volume);
        let pv_name = volume.pv_name.clone();
        if !self.can_resize() {
            return Err(ResizeError::new(
                ResizeState::Infeasible,
                format!(
                    "plugin {name} cannot grow volumes: it does not export {} (a plugin built against wasmprov:provisioner@{}); rebuild it against the resizable-provisioner world of wit/provisioner.wit, or set allowVolumeExpansion: false on the class",
                    crate::runtime::bindings::RESIZER_INTERFACE,
                    self.plugin.compiled().contract_version,
                ),
            ));
        }
        if options.requested_bytes > self.output.max_capacity_bytes {
            return Err(ResizeError::new(
                ResizeState::Infeasible,
                format!(
                    "{pv_name} cannot grow to {}: plugin {name} may make volumes of at most {} (plugins.{name}.output.maxCapacity in the sandbox policy)",
                    crate::quantity::Bytes(options.requested_bytes),
                    crate::quantity::Bytes(self.output.max_capacity_bytes)
                ),
            ));
        }
        let request = wit::ResizeRequest {
            volume,
            requested_bytes: options.requested_bytes,
            limit_bytes: options.limit_bytes,
        };
        let resized = match self.plugin.resize(&request).await {
            Ok(Ok(resized)) => resized,
            Ok(Err(e)) => return Err(plugin_resize_error(name, &pv_name, e)),
            // A timeout may have left the backend growing the volume.
            Err(e @ CallError::Timeout { .. }) => {
                return Err(ResizeError::new(ResizeState::InBackground, e.to_string()))
            }
            Err(e) => return Err(failed(e.to_string())),
        };
        if resized.capacity_bytes < options.requested_bytes {
            return Err(failed(format!(
                "plugin {name} returned a capacity of {} bytes for {pv_name}, less than the {} bytes asked for; this is a bug in the plugin",
                resized.capacity_bytes, options.requested_bytes
            )));
        }
        if resized.capacity_bytes > self.output.max_capacity_bytes {
            return Err(failed(format!(
                "plugin {name} grew {pv_name} to {}; {REFUSED_BY_POLICY}: {}",
                crate::quantity::Bytes(resized.capacity_bytes),
                output::too_large(resized.capacity_bytes, self.output.max_capacity_bytes)
            )));
        }
        Ok(Resized {
            capacity_bytes: resized.capacity_bytes,
            node_expansion_required: resized.node_expansion_required,
        })
    }

    /// Whether the plugin reports a node's room itself (it exports `capacity`).
    pub fn reports_capacity(&self) -> bool {
        self.plugin.reports_capacity()
    }

    /// Asks the plugin what `node` can still take for new volumes of
    /// `class`, and checks that the answer makes sense on its own (the
    /// lifecycle checks it against the node's disk).
    pub async fn capacity(
        &self,
        class: &StorageClass,
        node: &Node,
    ) -> Result<Option<ReportedCapacity>, String> {
        let name = self.plugin.name();
        let class_name = class.metadata.name.as_deref().unwrap_or_default();
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        if !self.reports_capacity() {
            return Err(format!(
                "plugin {name} does not report capacity: it does not export {}",
                crate::runtime::bindings::CAPACITY_INTERFACE
            ));
        }
        let request = request::capacity_request(class, node)?;
        let report = match self.plugin.capacity(&request).await {
            Ok(Ok(Some(report))) => report,
            Ok(Ok(None)) => return Ok(None),
            Ok(Err(m)) => {
                return Err(format!(
                    "plugin {name} could not tell the capacity of StorageClass {class_name} on \
                     node {node_name}: {}",
                    untrusted(&m, MAX_MESSAGE_BYTES)
                ))
            }
            Err(e) => return Err(e.to_string()),
        };
        let bug = |what: String| {
            Err(format!(
                "plugin {name} reported {what} for StorageClass {class_name} on node \
                 {node_name}; this is a bug in the plugin"
            ))
        };
        let available = report.available_bytes;
        // A quantity holds at most i64::MAX; more is no real disk (a
        // negative number turned unsigned, more likely).
        if available > i64::MAX as u64 {
            return bug(format!(
                "{available} bytes available, more than any disk holds (a negative number?)"
            ));
        }
        let maximum = report.maximum_volume_bytes.unwrap_or(available);
        if maximum > available {
            return bug(format!(
                "a largest volume of {} with only {} available",
                Bytes(maximum),
                Bytes(available)
            ));
        }
        Ok(Some(ReportedCapacity {
            available_bytes: available,
            maximum_volume_bytes: maximum.min(self.output.max_capacity_bytes),
        }))
    }

    /// Asks the plugin to delete the storage of a released volume.
    pub async fn delete(&self, pv: &PersistentVolume) -> Result<(), DeleteError> {
        let name = self.plugin.name();
        let mut request = request::delete_request(pv)?;
        self.without_secrets(&mut request);
        match self.plugin.delete(&request).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(wit::DeleteError::Failed(m))) => Err(DeleteError::failed(format!(
                "plugin {name} failed to delete {}: {}",
                request.pv_name,
                untrusted(&m, MAX_MESSAGE_BYTES)
            ))),
            Ok(Err(wit::DeleteError::Ignored(m))) => Err(DeleteError {
                state: DeleteState::Ignored,
                message: format!(
                    "plugin {name} ignored {}: {}",
                    request.pv_name,
                    untrusted(&m, MAX_MESSAGE_BYTES)
                ),
            }),
            Err(e) => Err(DeleteError::failed(e.to_string())),
        }
    }
}

fn plugin_provision_error(plugin: &str, e: wit::ProvisionError) -> ProvisionError {
    use wit::ProvisionError as E;
    let (state, message) = match e {
        E::Failed(m) => (ProvisionState::Failed, m),
        E::InBackground(m) => (ProvisionState::InBackground, m),
        E::NoChange(m) => (ProvisionState::NoChange, m),
        E::Reschedule(m) => (ProvisionState::Reschedule, m),
        E::InvalidArgument(m) => (ProvisionState::InvalidArgument, m),
    };
    ProvisionError::new(
        state,
        format!(
            "plugin {plugin}: {}",
            untrusted(&message, MAX_MESSAGE_BYTES)
        ),
    )
}

fn plugin_resize_error(plugin: &str, pv_name: &str, e: wit::ResizeError) -> ResizeError {
    use wit::ResizeError as E;
    let (state, message) = match e {
        E::Failed(m) => (ResizeState::Failed, m),
        E::InBackground(m) => (ResizeState::InBackground, m),
        E::NoChange(m) => (ResizeState::NoChange, m),
        E::InvalidArgument(m) | E::Infeasible(m) => (ResizeState::Infeasible, m),
    };
    ResizeError::new(
        state,
        format!(
            "plugin {plugin} did not grow {pv_name}: {}",
            untrusted(&message, MAX_MESSAGE_BYTES)
        ),
    )
}

/// A call that ended without an answer. A timeout may have left the backend
/// half-way (the plugin could have started creating storage), so it is
/// retried like in-background work; a crash is a final failure.
fn call_provision_error(e: CallError) -> ProvisionError {
    let state = match e {
        CallError::Timeout { .. } => ProvisionState::InBackground,
        _ => ProvisionState::Failed,
    };
    ProvisionError::new(state, e.to_string())
}
