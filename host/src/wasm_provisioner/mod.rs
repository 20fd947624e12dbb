//! A storage backend served by a Wasm plugin: translates between the
//! Kubernetes objects of the [`provisioner`](crate::provisioner) contract and
//! the plugin's WIT types, and validates what the plugin returns.

mod request;
mod source;
mod volume;

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;

use crate::provisioner::{
    DeleteError, DeleteState, ProvisionError, ProvisionOptions, ProvisionState,
};
use crate::runtime::bindings::types as wit;
use crate::runtime::{CallError, Plugin};

pub use request::{plugin_parameters, provision_request};

/// One plugin seen as a provisioner.
#[derive(Debug, Clone)]
pub struct WasmProvisioner {
    plugin: Arc<Plugin>,
}

impl WasmProvisioner {
    pub fn new(plugin: Arc<Plugin>) -> Self {
        Self { plugin }
    }

    pub fn plugin(&self) -> &Plugin {
        &self.plugin
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
        let volume = match self.plugin.provision(&request).await {
            Ok(Ok(volume)) => volume,
            Ok(Err(e)) => return Err(plugin_provision_error(name, e)),
            Err(e) => return Err(call_provision_error(e)),
        };
        let provenance = volume::Provenance {
            plugin: name,
            digest: self.plugin.digest(),
        };
        volume::build(opts, &volume, &provenance).map_err(|message| {
            ProvisionError::new(
                ProvisionState::Failed,
                format!(
                    "plugin {name} returned an invalid volume for {}: {message}; this is a bug in the plugin",
                    opts.pv_name
                ),
            )
        })
    }

    /// Asks the plugin to delete the storage of a released volume.
    pub async fn delete(&self, pv: &PersistentVolume) -> Result<(), DeleteError> {
        let name = self.plugin.name();
        let request = request::delete_request(pv)?;
        match self.plugin.delete(&request).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(wit::DeleteError::Failed(m))) => Err(DeleteError::failed(format!(
                "plugin {name} failed to delete {}: {m}",
                request.pv_name
            ))),
            Ok(Err(wit::DeleteError::Ignored(m))) => Err(DeleteError {
                state: DeleteState::Ignored,
                message: format!("plugin {name} ignored {}: {m}", request.pv_name),
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
    ProvisionError::new(state, format!("plugin {plugin}: {message}"))
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
