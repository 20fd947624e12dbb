//! The lifecycle's decisions as pure functions of an object and a snapshot of
//! what they depend on, so every rule is tested by table (the Go library's
//! `shouldProvision` and `shouldDelete`).
//!
//! `claims.rs` decides for claims, `volumes.rs` for volumes.

mod claims;
#[cfg(test)]
mod fixtures;
mod volumes;

pub use claims::{claim, claim_class, is_ours, selected_node, ClaimDecision, ClaimFacts};
pub use volumes::{adoption, provisioned_by, volume, Adoption, VolumeDecision};

/// Annotations the Kubernetes PV controller and scheduler set on claims.
pub mod keys {
    pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
    pub const STORAGE_PROVISIONER_BETA: &str = "volume.beta.kubernetes.io/storage-provisioner";
    pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
    /// The claim's class before `spec.storageClassName` (still honoured,
    /// first, by the PV controller and the Go library).
    pub const STORAGE_CLASS_BETA: &str = "volume.beta.kubernetes.io/storage-class";
    /// The finalizer the Go library adds to provisioned volumes (`AddFinalizer`).
    pub const PV_FINALIZER: &str = "external-provisioner.volume.kubernetes.io/finalizer";
    /// Ours, on a claim from just before its plugin is asked for storage
    /// until that storage is saved as a volume or known not to exist
    /// (`--claim-finalizer`): a claim deleted meanwhile, even while the host
    /// is down, is held until its storage is removed.
    pub const CLAIM_FINALIZER: &str = "wasmprov.io/provisioning";
}

/// The provisioner names this host answers to.
#[derive(Debug, Clone)]
pub struct Names {
    pub primary: String,
    pub additional: Vec<String>,
}

impl Names {
    pub fn contains(&self, name: &str) -> bool {
        self.primary == name || self.additional.iter().any(|n| n == name)
    }
}
