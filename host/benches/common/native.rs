//! The hostpath plugin's logic as a native provisioner, shared by the
//! benchmarks that compare the Wasm plugin with it.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::ResourceExt;
use wasmprov::provisioner::{
    DeleteError, PluginInfo, ProvisionError, ProvisionOptions, ProvisionState, Provisioner,
};
use wasmprov::wasm_provisioner::plugin_parameters;

/// The hostpath plugin's logic as a native provisioner: the comparison point.
pub struct NativeHostPath(pub PathBuf);

/// Stands in for the plugin digest the Wasm path records (same length).
const NATIVE_DIGEST: &str =
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";

impl Provisioner for NativeHostPath {
    fn plugin(&self, _plugin: &str) -> Result<PluginInfo, String> {
        Ok(PluginInfo {
            node_local: true,
            ..Default::default()
        })
    }

    async fn provision(
        &self,
        _plugin: &str,
        opts: &ProvisionOptions,
    ) -> Result<PersistentVolume, ProvisionError> {
        let dir = self.0.join(&opts.pv_name);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(ProvisionError::new(ProvisionState::Failed, e.to_string())),
        }
        let claim = &opts.claim;
        // The same object the Wasm path saves (provenance and parameters
        // included), so both hosts make the simulator and the watches do the
        // same work and the ratio measures the plugin call alone.
        let parameters = serde_json::to_string(&plugin_parameters(&opts.class))
            .map_err(|e| ProvisionError::new(ProvisionState::Failed, e.to_string()))?;
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": opts.pv_name, "annotations": {
                "pv.kubernetes.io/provisioned-by": opts.class.provisioner,
                "wasmprov.io/plugin": "hostpath",
                "wasmprov.io/plugin-digest": NATIVE_DIGEST,
                "wasmprov.io/parameters": parameters}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": opts.class.metadata.name,
                "volumeMode": "Filesystem",
                "hostPath": {"path": dir, "type": "DirectoryOrCreate"},
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "namespace": claim.metadata.namespace, "name": claim.metadata.name,
                    "uid": claim.metadata.uid},
            },
        }))
        .map_err(|e| ProvisionError::new(ProvisionState::Failed, e.to_string()))
    }

    async fn delete(&self, _plugin: &str, pv: &PersistentVolume) -> Result<(), DeleteError> {
        let _ = std::fs::remove_dir_all(self.0.join(pv.name_any()));
        Ok(())
    }
}
