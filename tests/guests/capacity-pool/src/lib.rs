//! A test guest that reports its room itself (the `capacity` hook of
//! contract 0.3), as a plugin handing out a pool of fixed size would.
//!
//! Its pool is the guest directory `/pool`: `provision` makes `/pool/<pv>`
//! and records the size it handed out in `/pool/<pv>/size`; it never
//! refuses a claim itself, so keeping the pool from being handed out twice
//! is left to the host. `delete` removes `/pool/<pv>`. The volume is the
//! hostPath `<hostRoot>/<pv>` (class parameter `hostRoot`, the host path of
//! `/pool`).
//!
//! `capacity` answers as the class parameter `report` says:
//! - `pool` (default): `size` (bytes, required) less what the volumes in
//!   `/pool` were handed, with `largest` (bytes, optional) as the largest
//!   volume;
//! - `none`: no figure (the host measures the directory itself);
//! - `fail`: an error;
//! - `negative`: -1 turned unsigned, as a careless C plugin would;
//! - `larger-than-available`: a largest volume above what is available.

use wasmprov_plugin::{
    export_capacity, export_plugin, lookup, volume, Capacity, CapacityReport, CapacityRequest,
    DeleteError, DeleteRequest, Plugin, PluginCapabilities, ProvisionError, ProvisionRequest,
    Volume,
};

const POOL: &str = "/pool";

struct CapacityPool;

impl Plugin for CapacityPool {
    fn capabilities() -> PluginCapabilities {
        PluginCapabilities {
            block_volumes: false,
        }
    }

    fn provision(request: ProvisionRequest) -> Result<Volume, ProvisionError> {
        let pv = &request.pv_name;
        let params = &request.storage_class.parameters;
        let root = lookup(params, "hostRoot")
            .ok_or_else(|| ProvisionError::InvalidArgument("hostRoot is required".into()))?;
        let size = request.claim.requested_bytes;
        std::fs::create_dir_all(format!("{POOL}/{pv}"))
            .and_then(|()| std::fs::write(format!("{POOL}/{pv}/size"), size.to_string()))
            .map_err(|e| ProvisionError::Failed(format!("{POOL}/{pv}: {e}")))?;
        Ok(volume(
            size,
            format!(r#"{{"hostPath":{{"path":"{root}/{pv}"}}}}"#),
        ))
    }

    fn delete(request: DeleteRequest) -> Result<(), DeleteError> {
        match std::fs::remove_dir_all(format!("{POOL}/{}", request.pv_name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(DeleteError::Failed(e.to_string()))
            }
            _ => Ok(()),
        }
    }
}

impl Capacity for CapacityPool {
    fn capacity(request: CapacityRequest) -> Result<Option<CapacityReport>, String> {
        let params = &request.storage_class.parameters;
        let bytes = |key: &str| lookup(params, key).map(|v| v.parse::<u64>());
        match lookup(params, "report").unwrap_or("pool") {
            "pool" => {
                let size = bytes("size")
                    .ok_or("report=pool needs size")?
                    .map_err(|e| format!("size: {e}"))?;
                let largest = bytes("largest")
                    .transpose()
                    .map_err(|e| format!("largest: {e}"))?;
                let available = size.saturating_sub(handed_out()?);
                Ok(Some(CapacityReport {
                    available_bytes: available,
                    maximum_volume_bytes: largest.map(|l| l.min(available)),
                }))
            }
            "none" => Ok(None),
            "fail" => Err("capacity-pool: deliberate failure".into()),
            "negative" => Ok(Some(CapacityReport {
                available_bytes: -1i64 as u64,
                maximum_volume_bytes: None,
            })),
            "larger-than-available" => Ok(Some(CapacityReport {
                available_bytes: 1,
                maximum_volume_bytes: Some(2),
            })),
            other => Err(format!(
                "parameter report={other:?}: pool, none, fail, negative or larger-than-available"
            )),
        }
    }
}

/// What the volumes in the pool were handed, in bytes.
fn handed_out() -> Result<u64, String> {
    let entries = std::fs::read_dir(POOL).map_err(|e| format!("{POOL}: {e}"))?;
    let mut total = 0u64;
    for entry in entries.flatten() {
        let size = entry.path().join("size");
        if let Ok(text) = std::fs::read_to_string(&size) {
            total += text.trim().parse::<u64>().unwrap_or(0);
        }
    }
    Ok(total)
}

export_plugin!(CapacityPool);
export_capacity!(CapacityPool);
