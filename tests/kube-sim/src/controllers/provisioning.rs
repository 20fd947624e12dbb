//! The provisioning half of persistentvolume-controller: a pending claim with
//! no volume to bind is handed to its class's external provisioner (the
//! storage-provisioner annotations, GA and beta, and `ExternalProvisioning`),
//! waits for a consumer (`WaitForFirstConsumer`), or gets the failure events
//! the real controller emits.

use std::sync::Arc;

use serde_json::Value;

use super::pv::{
    PvController, ANN_BETA_STORAGE_PROVISIONER, ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER,
    COMPONENT,
};
use crate::objects;
use crate::registry::Subresource;
use crate::resources::PVC;

impl PvController {
    /// `class` is the claim's StorageClass (None if unset or missing);
    /// `delay` is true for WaitForFirstConsumer classes.
    pub(super) fn request_provisioning(
        &self,
        claim: &Arc<Value>,
        class_name: &str,
        class: Option<&Value>,
        delay: bool,
    ) {
        let selected = objects::annotation(claim, ANN_SELECTED_NODE).is_some();
        match class {
            _ if delay && !selected => self.recorder.event(
                PVC,
                claim,
                "Normal",
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding",
            ),
            Some(class) => {
                let provisioner = class
                    .get("provisioner")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                if provisioner.starts_with("kubernetes.io/") {
                    self.recorder.event(
                        PVC,
                        claim,
                        "Warning",
                        "ProvisioningFailed",
                        &format!("no volume plugin matched name: {provisioner}"),
                    );
                    return;
                }
                let annotated = objects::annotation(claim, ANN_STORAGE_PROVISIONER)
                    == Some(provisioner.as_str())
                    && objects::annotation(claim, ANN_BETA_STORAGE_PROVISIONER)
                        == Some(provisioner.as_str());
                let current = if annotated {
                    Some(claim.clone())
                } else {
                    self.registry
                        .modify(
                            PVC,
                            objects::namespace(claim),
                            objects::name(claim),
                            Subresource::Main,
                            COMPONENT,
                            |c| {
                                objects::set_annotation(c, ANN_STORAGE_PROVISIONER, &provisioner);
                                objects::set_annotation(
                                    c,
                                    ANN_BETA_STORAGE_PROVISIONER,
                                    &provisioner,
                                );
                            },
                        )
                        .ok()
                };
                if let Some(c) = current {
                    self.recorder.event(
                            PVC,
                            &c,
                            "Normal",
                            "ExternalProvisioning",
                            &format!("Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."),
                        );
                }
            }
            None if !class_name.is_empty() => self.recorder.event(
                PVC,
                claim,
                "Warning",
                "ProvisioningFailed",
                &format!("storageclass.storage.k8s.io \"{class_name}\" not found"),
            ),
            None => self.recorder.event(
                PVC,
                claim,
                "Normal",
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set",
            ),
        }
    }
}
