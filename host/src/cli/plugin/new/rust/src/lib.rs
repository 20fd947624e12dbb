//! The {{name}} plugin for wasmprov: each volume is a directory
//! `<hostRoot>/<pv-name>` on the node, served to pods as a `hostPath` volume.
//!
//! The plugin sees the node only through the directory the operator's
//! sandbox policy preopens for it: `hostRoot` at the guest path `root`.
//!
//! StorageClass parameters:
//! - `hostRoot` (required): the directory on the node that holds the volumes;
//! - `root` (default `/volumes`): where the policy preopens `hostRoot`.
//!
//! Unknown parameters are refused, so that an operator's typo is reported
//! instead of ignored. Change what you need: `wasmprov plugin test` says
//! what the host expects of every answer.

use std::io::ErrorKind;

use wasmprov_plugin::{
    claim, export_plugin, log, path, source, volume, DeleteError, DeleteRequest, Params, Plugin,
    PluginCapabilities, ProvisionError, ProvisionRequest, Volume,
};

/// The plugin's name in messages.
const PLUGIN: &str = "{{name}}";
const HOST_ROOT: &str = "hostRoot";
const ROOT: &str = "root";
const DEFAULT_ROOT: &str = "/volumes";

struct {{type_name}};

impl Plugin for {{type_name}} {
    fn capabilities() -> PluginCapabilities {
        PluginCapabilities {
            block_volumes: false,
        }
    }

    fn provision(request: ProvisionRequest) -> Result<Volume, ProvisionError> {
        let params = Params::new(PLUGIN, &request.storage_class.parameters);
        params.reject_unknown(&[HOST_ROOT, ROOT])?;
        let host_root = params.abs_path(
            HOST_ROOT,
            None,
            "the directory on the node that holds the volumes, e.g. /var/lib/{{name}}",
        )?;
        let root = params.abs_path(
            ROOT,
            Some(DEFAULT_ROOT),
            "where the policy preopens hostRoot",
        )?;
        // A size above 0, a filesystem volume, a safe pv-name.
        let size = claim::check_filesystem_claim(PLUGIN, &request)?;
        let dir = path::join(&root, &request.pv_name).map_err(ProvisionError::InvalidArgument)?;
        let host_dir =
            path::join(&host_root, &request.pv_name).map_err(ProvisionError::InvalidArgument)?;
        // Asked again after a restart: the same directory is the same volume.
        match std::fs::create_dir(&dir) {
            Ok(()) => log::info("created volume directory", &[("path", &host_dir)]),
            Err(e) if e.kind() == ErrorKind::AlreadyExists && is_dir(&dir) => {}
            Err(e) => {
                return Err(ProvisionError::Failed(format!(
                    "create {dir}: {e}; the policy must preopen {host_root} read-write at {root}"
                )))
            }
        }
        // Who the volume belongs to, for whoever finds it on the node.
        let readme = format!(
            "Volume {} of the claim {}/{}, made by the {PLUGIN} plugin of wasmprov.\n",
            request.pv_name, request.claim.namespace, request.claim.name
        );
        std::fs::write(format!("{dir}/README.txt"), readme)
            .map_err(|e| ProvisionError::Failed(format!("write {dir}/README.txt: {e}")))?;
        Ok(volume(
            size,
            source::host_path(&host_dir, Some("Directory")),
        ))
    }

    fn delete(request: DeleteRequest) -> Result<(), DeleteError> {
        let params = Params::new(PLUGIN, &request.parameters);
        let root = params
            .abs_path(
                ROOT,
                Some(DEFAULT_ROOT),
                "where the policy preopens hostRoot",
            )
            .map_err(|e| DeleteError::Failed(e.to_string()))?;
        let dir = path::join(&root, &request.pv_name).map_err(DeleteError::Failed)?;
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => log::info("removed volume directory", &[("path", &dir)]),
            // Already gone is success (the host retries deletes), as long as
            // the root is there: a missing preopen is not a deleted volume.
            Err(e) if e.kind() == ErrorKind::NotFound && is_dir(&root) => {}
            Err(e) => return Err(DeleteError::Failed(format!("remove {dir}: {e}"))),
        }
        Ok(())
    }
}

fn is_dir(path: &str) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

export_plugin!({{type_name}});
