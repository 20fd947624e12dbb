//! wasmprov reference plugin: each volume is a directory `<hostRoot>/<pv-name>`
//! on the node, served to pods as a `hostPath` volume.
//!
//! The plugin creates and removes the directory through a preopen that the
//! operator's sandbox policy grants: the node directory `hostRoot` mounted
//! read-write at the guest path `root` (default `/volumes`). It sees nothing
//! else of the node.
//!
//! StorageClass parameters:
//! - `hostRoot` (required): absolute directory on the node holding the volumes.
//! - `root` (default `/volumes`): where the sandbox policy preopens `hostRoot`.
//! - `nodeAffinity` (`"true"`/`"false"`, default `"false"`): pin each volume to
//!   the node the scheduler selected (needs `volumeBindingMode:
//!   WaitForFirstConsumer`).
//!
//! Unknown parameters are rejected so that typos do not pass silently.
//!
//! Volumes can grow (`allowVolumeExpansion: true`): a directory has no size
//! of its own, so `resize` checks the directory is still there and records
//! the new size; nothing on the node limits what a pod writes.

mod plan;

use std::io::ErrorKind;

use wasmprov_plugin::{
    export_resizable_plugin, log, DeleteError, DeleteRequest, Plugin, PluginCapabilities,
    ProvisionError, ProvisionRequest, ResizeError, ResizeRequest, ResizedVolume, Resizer, Volume,
};

struct HostPath;

impl Plugin for HostPath {
    fn capabilities() -> PluginCapabilities {
        PluginCapabilities {
            block_volumes: false,
        }
    }

    fn provision(request: ProvisionRequest) -> Result<Volume, ProvisionError> {
        let plan = plan::plan_provision(&request)?;
        let message = match std::fs::create_dir(&plan.guest_dir) {
            Ok(()) => "created volume directory",
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                // Provisioning again (host restart, failed save): the same
                // directory gives the same volume, as long as it is one.
                match std::fs::symlink_metadata(&plan.guest_dir) {
                    Ok(meta) if meta.is_dir() => "volume directory already exists",
                    Ok(_) => {
                        return Err(ProvisionError::Failed(format!(
                            "{} ({}) exists but is not a directory; remove it or pick another \
                             hostRoot",
                            plan.guest_dir, plan.host_dir
                        )))
                    }
                    Err(e) => {
                        return Err(ProvisionError::Failed(format!(
                            "inspect {}: {e}",
                            plan.guest_dir
                        )))
                    }
                }
            }
            Err(e) => {
                return Err(ProvisionError::Failed(format!(
                    "create {}: {e}; {}",
                    plan.guest_dir,
                    root_hint(&plan.root)
                )))
            }
        };
        log::info(
            message,
            &[("pv", &request.pv_name), ("path", &plan.host_dir)],
        );
        Ok(plan.volume)
    }

    fn delete(request: DeleteRequest) -> Result<(), DeleteError> {
        let plan = plan::plan_delete(&request)?;
        let message = match std::fs::remove_dir_all(&plan.guest_dir) {
            Ok(()) => "removed volume directory",
            Err(e) if e.kind() == ErrorKind::NotFound => {
                // Already gone is success, but only if we can see the root at
                // all: a missing preopen must not pass for a deleted volume.
                match std::fs::metadata(&plan.root) {
                    Ok(meta) if meta.is_dir() => "volume directory already gone",
                    _ => {
                        return Err(DeleteError::Failed(format!(
                            "remove {}: the root {} is not visible; {}",
                            plan.guest_dir,
                            plan.root,
                            root_hint(&plan.root)
                        )))
                    }
                }
            }
            Err(e) => {
                return Err(DeleteError::Failed(format!(
                    "remove {}: {e}; {}",
                    plan.guest_dir,
                    root_hint(&plan.root)
                )))
            }
        };
        log::info(
            message,
            &[("pv", &request.pv_name), ("path", &plan.host_dir)],
        );
        Ok(())
    }
}

impl Resizer for HostPath {
    fn resize(request: ResizeRequest) -> Result<ResizedVolume, ResizeError> {
        let plan = plan::locate(&request.volume, "grow").map_err(ResizeError::InvalidArgument)?;
        match std::fs::symlink_metadata(&plan.guest_dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(ResizeError::Failed(format!(
                    "{} ({}) is not a directory any more; the volume's storage was replaced",
                    plan.guest_dir, plan.host_dir
                )))
            }
            Err(e) => {
                return Err(ResizeError::Failed(format!(
                    "volume {}: its directory {} is gone ({e}); {}",
                    request.volume.pv_name,
                    plan.guest_dir,
                    root_hint(&plan.root)
                )))
            }
        }
        let capacity_bytes = request.requested_bytes.max(request.volume.capacity_bytes);
        log::info(
            "volume grown",
            &[
                ("pv", &request.volume.pv_name),
                ("bytes", &capacity_bytes.to_string()),
            ],
        );
        Ok(ResizedVolume {
            capacity_bytes,
            node_expansion_required: false,
        })
    }
}

fn root_hint(root: &str) -> String {
    format!(
        "does the sandbox policy preopen {root} read-write? (class parameter \"root\", \
         default /volumes, must name the guest path of the preopen of hostRoot)"
    )
}

export_resizable_plugin!(HostPath);
