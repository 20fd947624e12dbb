//! Rust bindings of the plugin contract (`wit/provisioner.wit`), generated at
//! build time so the host cannot drift from the WIT file.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "provisioner",
    exports: { default: async },
});

pub use self::exports::wasmprov::provisioner::plugin as plugin_exports;
pub use self::wasmprov::provisioner::logging;
pub use self::wasmprov::provisioner::types;

/// The WIT package and interface a plugin must export, without version.
pub const PLUGIN_INTERFACE: &str = "wasmprov:provisioner/plugin";
/// The logging interface the host provides, without version.
pub const LOGGING_INTERFACE: &str = "wasmprov:provisioner/logging";
/// The contract version this host implements.
pub const CONTRACT_VERSION: &str = "0.1.0";
