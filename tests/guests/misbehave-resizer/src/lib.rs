//! A resizable wasmprov test guest whose `resize` misbehaves on demand, for
//! the host's expansion tests: they count its calls and the sizes asked.
//!
//! `provision` makes the misbehave guest's healthy volume (a directory
//! `/ok/<pv>`, the hostPath `/tmp/ok/<pv>`); `delete` succeeds. Every
//! `resize` call first appends the requested size in bytes and a newline to
//! `<dir>/<pv>.resizes`, then answers as the class parameter `resize` says:
//!
//! - `ok` (default): grown to the requested size;
//! - `fail`: `failed("misbehave: deliberate resize failure")`;
//! - `fail-above`: failed above the parameter `max-bytes`, grown at or below;
//! - `infeasible`: `infeasible("misbehave: never that large")`;
//! - `in-background`: `in-background("misbehave: still growing")`;
//! - `node`: grown, with `node-expansion-required`.
//!
//! `dir` (default `/data`) is the guest directory of the call log.

use std::io::Write;

use wasmprov_plugin::{
    export_resizable_plugin, lookup, volume, DeleteError, DeleteRequest, Plugin,
    PluginCapabilities, ProvisionError, ProvisionRequest, ResizeError, ResizeRequest,
    ResizedVolume, Resizer, Volume,
};

struct MisbehaveResizer;

impl Plugin for MisbehaveResizer {
    fn capabilities() -> PluginCapabilities {
        PluginCapabilities {
            block_volumes: false,
        }
    }

    fn provision(request: ProvisionRequest) -> Result<Volume, ProvisionError> {
        let pv = &request.pv_name;
        std::fs::create_dir_all(format!("/ok/{pv}"))
            .map_err(|e| ProvisionError::Failed(format!("create /ok/{pv}: {e}")))?;
        Ok(volume(
            request.claim.requested_bytes,
            format!(r#"{{"hostPath":{{"path":"/tmp/ok/{pv}"}}}}"#),
        ))
    }

    fn delete(_request: DeleteRequest) -> Result<(), DeleteError> {
        Ok(())
    }
}

impl Resizer for MisbehaveResizer {
    fn resize(request: ResizeRequest) -> Result<ResizedVolume, ResizeError> {
        let params = &request.volume.parameters;
        let dir = lookup(params, "dir").unwrap_or("/data");
        let log = format!("{dir}/{}.resizes", request.volume.pv_name);
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| writeln!(f, "{}", request.requested_bytes))
            .map_err(|e| ResizeError::Failed(format!("append to {log}: {e}")))?;
        let grown = |node_expansion_required| {
            Ok(ResizedVolume {
                capacity_bytes: request.requested_bytes,
                node_expansion_required,
            })
        };
        match lookup(params, "resize").unwrap_or("ok") {
            "ok" => grown(false),
            "node" => grown(true),
            "fail" => Err(ResizeError::Failed(
                "misbehave: deliberate resize failure".into(),
            )),
            "fail-above" => {
                let max: u64 = lookup(params, "max-bytes")
                    .and_then(|m| m.parse().ok())
                    .ok_or_else(|| {
                        ResizeError::InvalidArgument("resize=fail-above needs max-bytes".into())
                    })?;
                if request.requested_bytes > max {
                    Err(ResizeError::Failed(format!(
                        "misbehave: {} is above max-bytes {max}",
                        request.requested_bytes
                    )))
                } else {
                    grown(false)
                }
            }
            "infeasible" => Err(ResizeError::Infeasible(
                "misbehave: never that large".into(),
            )),
            "in-background" => Err(ResizeError::InBackground(
                "misbehave: still growing".into(),
            )),
            other => Err(ResizeError::InvalidArgument(format!(
                "parameter resize={other:?}: ok, node, fail, fail-above, infeasible or in-background"
            ))),
        }
    }
}

export_resizable_plugin!(MisbehaveResizer);
