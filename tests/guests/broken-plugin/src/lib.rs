//! A plugin with the mistakes plugin authors make, for the conformance
//! suite's own test (`host/tests/conformance.rs`): it looks fine when tried
//! once by hand, and `wasmprov plugin test` must catch every mistake.
//!
//! Each volume is a directory `<root>/<pv-name>` (class parameter `root`, the
//! guest path of a read-write preopen), returned as a `hostPath` source.
//!
//! The mistakes:
//! - **not idempotent**: provisioning an existing volume answers `failed`
//!   ("already exists") instead of returning it again;
//! - **ignores a zero-size claim**: returns a volume of capacity 0 (which the
//!   host refuses as invalid) instead of `invalid-argument`;
//! - **crashes on a missing parameter**: `root` is unwrapped (a trap) instead
//!   of answering `invalid-argument`;
//! - **delete of a gone volume fails** ("No such file or directory");
//! - **takes any parameter**: an unknown one is ignored instead of refused.

use wasmprov_plugin::{
    export_plugin, source, volume, DeleteError, DeleteRequest, Plugin, PluginCapabilities,
    ProvisionError, ProvisionRequest, Volume,
};

struct Broken;

impl Plugin for Broken {
    fn capabilities() -> PluginCapabilities {
        PluginCapabilities {
            block_volumes: false,
        }
    }

    fn provision(request: ProvisionRequest) -> Result<Volume, ProvisionError> {
        let root = wasmprov_plugin::lookup(&request.storage_class.parameters, "root")
            .expect("class parameter root");
        let dir = format!("{root}/{}", request.pv_name);
        std::fs::create_dir(&dir)
            .map_err(|e| ProvisionError::Failed(format!("create {dir}: {e}")))?;
        Ok(volume(
            request.claim.requested_bytes,
            source::host_path(&dir, None),
        ))
    }

    fn delete(request: DeleteRequest) -> Result<(), DeleteError> {
        let dir = source::host_path_of(&request.source).map_err(DeleteError::Failed)?;
        std::fs::remove_dir(&dir).map_err(|e| DeleteError::Failed(format!("remove {dir}: {e}")))
    }
}

export_plugin!(Broken);
