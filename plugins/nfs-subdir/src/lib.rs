//! wasmprov plugin in the spirit of nfs-subdir-external-provisioner: each
//! volume is a subdirectory of one NFS share, served to pods as an `nfs`
//! volume. The plugin makes and removes the subdirectories through a
//! read-write preopen of the share (mounted on the host's machine), at the
//! guest path `mount` (default `/share`).
//!
//! Class parameters: `server`, `share` (required), `pathPattern`,
//! `archiveOnDelete` (default `"true"`), `mount`. See plugins/README.md.
//!
//! Volumes can grow (`allowVolumeExpansion: true`): a subdirectory shares
//! the whole export, so `resize` checks it is still there and records the
//! new size (as nfs-subdir-external-provisioner's volumes, unenforced).

mod plan;

use std::io::ErrorKind;

use wasmprov_plugin::{
    export_resizable_plugin, log, DeleteError, DeleteRequest, Params, Plugin, PluginCapabilities,
    ProvisionError, ProvisionRequest, ResizeError, ResizeRequest, ResizedVolume, Resizer, Volume,
};

struct NfsSubdir;

fn hint(mount: &str) -> String {
    format!(
        "does the sandbox policy preopen the NFS share read-write at {mount}? (class \
         parameter \"mount\", default /share)"
    )
}

impl Plugin for NfsSubdir {
    fn capabilities() -> PluginCapabilities {
        PluginCapabilities {
            block_volumes: false,
        }
    }

    fn provision(request: ProvisionRequest) -> Result<Volume, ProvisionError> {
        let plan = plan::plan_provision(&request)?;
        let dir = &plan.guest_dir;
        // The share itself must be there: creating it (and the whole path)
        // inside an empty sandbox would only fail later, less clearly.
        if !std::fs::metadata(&plan.mount).is_ok_and(|m| m.is_dir()) {
            return Err(ProvisionError::Failed(format!(
                "the share is not visible at {}; {}",
                plan.mount,
                hint(&plan.mount)
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| {
            ProvisionError::Failed(format!("create {dir}: {e}; {}", hint(&plan.mount)))
        })?;
        match std::fs::symlink_metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            _ => {
                return Err(ProvisionError::Failed(format!(
                    "{dir} exists but is not a directory; remove it or change pathPattern"
                )))
            }
        }
        log::info(
            "volume directory ready",
            &[("pv", &request.pv_name), ("dir", dir)],
        );
        Ok(plan.volume)
    }

    fn delete(request: DeleteRequest) -> Result<(), DeleteError> {
        let plan = plan::plan_delete(&request)?;
        let dir = &plan.guest_dir;
        if std::fs::symlink_metadata(dir).is_err() {
            // Already gone is success, but only if the share is visible.
            return if std::fs::metadata(&plan.mount).is_ok_and(|m| m.is_dir()) {
                log::info("volume directory already gone", &[("dir", dir)]);
                Ok(())
            } else {
                Err(DeleteError::Failed(format!(
                    "the share is not visible at {}; {}",
                    plan.mount,
                    hint(&plan.mount)
                )))
            };
        }
        let failed = |what: &str, e: std::io::Error| {
            DeleteError::Failed(format!("{what}: {e}; {}", hint(&plan.mount)))
        };
        match (&plan.archive_to, &plan.archive_fallback) {
            (Some(archive), Some(fallback)) => {
                let target = if std::fs::symlink_metadata(archive).is_err() {
                    archive
                } else {
                    fallback
                };
                std::fs::rename(dir, target)
                    .map_err(|e| failed(&format!("archive {dir} to {target}"), e))?;
                log::info(
                    "archived volume directory",
                    &[("dir", dir), ("archive", target)],
                );
            }
            _ => {
                match std::fs::remove_dir_all(dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(failed(&format!("remove {dir}"), e)),
                }
                log::info("removed volume directory", &[("dir", dir)]);
            }
        }
        Ok(())
    }
}

impl Resizer for NfsSubdir {
    fn resize(request: ResizeRequest) -> Result<ResizedVolume, ResizeError> {
        let volume = &request.volume;
        let config = plan::Config::parse(&Params::new(plan::PLUGIN, &volume.parameters))?;
        let plan = plan::locate(volume, &config, "grow").map_err(ResizeError::InvalidArgument)?;
        let dir = &plan.guest_dir;
        if !std::fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
            let why = if std::fs::metadata(&plan.mount).is_ok_and(|m| m.is_dir()) {
                "it is gone from the share".to_owned()
            } else {
                format!(
                    "the share is not visible at {}; {}",
                    plan.mount,
                    hint(&plan.mount)
                )
            };
            return Err(ResizeError::Failed(format!(
                "volume {}: cannot grow {dir}: {why}",
                volume.pv_name
            )));
        }
        let capacity_bytes = request.requested_bytes.max(volume.capacity_bytes);
        log::info(
            "volume grown",
            &[("dir", dir), ("bytes", &capacity_bytes.to_string())],
        );
        Ok(ResizedVolume {
            capacity_bytes,
            node_expansion_required: false,
        })
    }
}

export_resizable_plugin!(NfsSubdir);
