//! Rust bindings of the plugin contract, generated at build time so the host
//! cannot drift from the WIT files: `wit/provisioner.wit` (0.3, with the
//! optional `resizer` and `capacity`) and the frozen `wit/v0.2` and
//! `wit/v0.1`.
//!
//! Each minor version only adds to the one before, so all share one set of
//! Rust types (the older `types` interfaces are mapped onto 0.3's): the rest
//! of the host handles one `ProvisionRequest`, `Volume`… whatever the
//! plugin's version. Each version has its own exports and `logging` import,
//! because their names carry the version the component was built against.

/// `wasmprov:provisioner@0.3.0`, world `full-provisioner` (a plugin may
/// export `plugin` alone: `resizer` and `capacity` are looked up separately).
pub mod v0_3 {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "full-provisioner",
        exports: { default: async },
    });
}

/// `wasmprov:provisioner@0.2.0`, world `resizable-provisioner`.
pub mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2",
        world: "resizable-provisioner",
        exports: { default: async },
        with: {
            "wasmprov:provisioner/types": super::v0_3::wasmprov::provisioner::types,
        },
    });
}

/// `wasmprov:provisioner@0.1.0`, world `provisioner`.
pub mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1",
        world: "provisioner",
        exports: { default: async },
        with: {
            "wasmprov:provisioner/types": super::v0_3::wasmprov::provisioner::types,
        },
    });
}

pub use v0_3::exports::wasmprov::provisioner::capacity::{CapacityReport, CapacityRequest};
pub use v0_3::wasmprov::provisioner::types;

/// The WIT package and interface every plugin exports, without version.
pub const PLUGIN_INTERFACE: &str = "wasmprov:provisioner/plugin";
/// The optional interface of plugins that grow volumes, without version.
pub const RESIZER_INTERFACE: &str = "wasmprov:provisioner/resizer";
/// The optional interface of plugins that report a node's room, without
/// version.
pub const CAPACITY_INTERFACE: &str = "wasmprov:provisioner/capacity";
/// The logging interface the host provides, without version.
pub const LOGGING_INTERFACE: &str = "wasmprov:provisioner/logging";
/// The newest contract version this host implements.
pub const CONTRACT_VERSION: &str = "0.3.0";
/// Every contract version this host runs, oldest first (0.x: each minor
/// version is its own contract).
pub const SUPPORTED_VERSIONS: &[&str] = &["0.1.0", "0.2.0", "0.3.0"];
