//! Helpers for writing wasmprov plugins in Rust.
//!
//! A plugin is a `cdylib` crate that depends on this one, implements
//! [`Plugin`] and calls [`export_plugin!`]:
//!
//! ```no_run
//! use wasmprov_plugin::*;
//!
//! struct Mine;
//!
//! impl Plugin for Mine {
//!     fn capabilities() -> PluginCapabilities {
//!         PluginCapabilities { block_volumes: false }
//!     }
//!     fn provision(request: ProvisionRequest) -> Result<Volume, ProvisionError> {
//!         let params = Params::new("mine", &request.storage_class.parameters);
//!         params.reject_unknown(&["server"])?;
//!         let server = params.required("server", "the backend's address, e.g. 10.0.0.5")?;
//!         let size = claim::check_filesystem_claim("mine", &request)?;
//!         Ok(volume(size, source::nfs(server, "/exports/x", false)))
//!     }
//!     fn delete(_request: DeleteRequest) -> Result<(), DeleteError> {
//!         Ok(())
//!     }
//! }
//!
//! export_plugin!(Mine);
//! ```
//!
//! A plugin that can grow its volumes also implements [`Resizer`] and calls
//! [`export_resizable_plugin!`] instead: its component then exports the
//! optional `resizer` of `wasmprov:provisioner@0.3.0` (world
//! `resizable-provisioner`). A plugin that knows how much room a node has
//! left for its volumes better than the host (a pool, a backend of its own)
//! also implements [`Capacity`] and calls [`export_capacity!`] as well.
//!
//! The WIT bindings are generated once, here ([`bindings`]), from the
//! repository's `wit/provisioner.wit`; plugins neither regenerate nor depend on
//! `wit-bindgen` themselves. Everything else is plain Rust that also builds
//! natively, so a plugin's logic is unit-testable with `cargo test`.
//!
//! - [`params`]: class parameters with typed errors that become
//!   `invalid-argument` messages naming the parameter and the fix.
//! - [`source`]: `PersistentVolumeSource` JSON builders and readers.
//! - [`path`]: safe path handling: one safe component under a root, never an
//!   escape.
//! - [`claim`]: the usual checks on a claim (size, access modes, volume mode...).
//! - [`log`]: one-line logging into the host's log.

// The generated `export!` macro names this crate by its own name.
extern crate self as wasmprov_plugin;

pub mod claim;
pub mod log;
pub mod params;
pub mod path;
pub mod source;

/// Re-exported so that generated code (and plugins that need it) can reach it
/// through this crate.
pub use wit_bindgen;

/// The bindings of the `provisioner` world of `wit/provisioner.wit`,
/// generated once for every Rust plugin.
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "provisioner",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "wasmprov_plugin::bindings",
        runtime_path: "wasmprov_plugin::wit_bindgen::rt",
        with: {
            "wasmprov:provisioner/types@0.3.0": wasmprov_plugin_resizable::wasmprov::provisioner::types,
            "wasmprov:provisioner/logging@0.3.0": wasmprov_plugin_resizable::wasmprov::provisioner::logging,
        },
    });
}

/// The bindings of the optional `capacity` export alone, in a world of its
/// own: [`export_capacity!`] adds it to a plugin's other exports (the
/// component's worlds are merged when it is linked).
pub mod capacity_bindings {
    wit_bindgen::generate!({
        path: "wit",
        inline: "
            package wasmprov:plugin-sdk;
            world capacity-export {
                export wasmprov:provisioner/capacity@0.3.0;
            }
        ",
        world: "wasmprov:plugin-sdk/capacity-export",
        pub_export_macro: true,
        export_macro_name: "export_capacity_hook",
        default_bindings_module: "wasmprov_plugin::capacity_bindings",
        runtime_path: "wasmprov_plugin::wit_bindgen::rt",
        with: {
            "wasmprov:provisioner/types@0.3.0": wasmprov_plugin_resizable::wasmprov::provisioner::types,
        },
    });
}

/// The bindings of the `resizable-provisioner` world (their own crate, see
/// its Cargo.toml); [`bindings`] shares their types and logging.
pub use wasmprov_plugin_resizable as resizable_bindings;

pub use bindings::exports::wasmprov::provisioner::plugin::Guest as Plugin;
pub use capacity_bindings::exports::wasmprov::provisioner::capacity::{
    CapacityReport, CapacityRequest, Guest as Capacity,
};
pub use params::{ParamError, Params};
pub use resizable_bindings::exports::wasmprov::provisioner::resizer::Guest as Resizer;
pub use resizable_bindings::wasmprov::provisioner::logging::Level;
pub use resizable_bindings::wasmprov::provisioner::types::{
    AccessMode, Claim, DataSource, DeleteError, DeleteRequest, LabelSelector,
    LabelSelectorRequirement, Node, NodeAffinity, NodeSelectorOperator, NodeSelectorRequirement,
    NodeSelectorTerm, PluginCapabilities, ProvisionError, ProvisionRequest, ReclaimPolicy,
    ResizeError, ResizeRequest, ResizedVolume, StorageClass, TopologyRequirement, TopologyTerm,
    Volume, VolumeBindingMode, VolumeMode,
};

/// Exports a type implementing [`Plugin`] as the plugin of this component.
/// Call it once, in the plugin crate's `lib.rs`.
#[macro_export]
macro_rules! export_plugin {
    ($ty:ident) => {
        $crate::bindings::export!($ty with_types_in $crate::bindings);
    };
}

/// Exports a type implementing [`Plugin`] and [`Resizer`] as the plugin of
/// this component, with the optional `resizer` export. Call it once, in the
/// plugin crate's `lib.rs`, instead of [`export_plugin!`].
#[macro_export]
macro_rules! export_resizable_plugin {
    ($ty:ident) => {
        // The resizable world's `plugin` export is its own trait: forward it.
        struct __WasmprovResizable;
        impl $crate::resizable_bindings::exports::wasmprov::provisioner::plugin::Guest
            for __WasmprovResizable
        {
            fn capabilities() -> $crate::PluginCapabilities {
                <$ty as $crate::Plugin>::capabilities()
            }
            fn provision(
                request: $crate::ProvisionRequest,
            ) -> ::core::result::Result<$crate::Volume, $crate::ProvisionError> {
                <$ty as $crate::Plugin>::provision(request)
            }
            fn delete(
                request: $crate::DeleteRequest,
            ) -> ::core::result::Result<(), $crate::DeleteError> {
                <$ty as $crate::Plugin>::delete(request)
            }
        }
        impl $crate::Resizer for __WasmprovResizable {
            fn resize(
                request: $crate::ResizeRequest,
            ) -> ::core::result::Result<$crate::ResizedVolume, $crate::ResizeError> {
                <$ty as $crate::Resizer>::resize(request)
            }
        }
        $crate::resizable_bindings::export!(
            __WasmprovResizable with_types_in $crate::resizable_bindings
        );
    };
}

/// Exports a type implementing [`Capacity`] as the optional `capacity`
/// hook of this component, besides its [`export_plugin!`] or
/// [`export_resizable_plugin!`]: the plugin then tells node hosts how much
/// room a node has left for its volumes (contract 0.3).
#[macro_export]
macro_rules! export_capacity {
    ($ty:ident) => {
        $crate::capacity_bindings::export_capacity_hook!(
            $ty with_types_in $crate::capacity_bindings
        );
    };
}

/// A volume with `capacity_bytes` and `source` and nothing else (no node
/// affinity, mount options, labels or annotations); set those fields after.
pub fn volume(capacity_bytes: u64, source: String) -> Volume {
    Volume {
        capacity_bytes,
        source,
        node_affinity: None,
        mount_options: Vec::new(),
        labels: Vec::new(),
        annotations: Vec::new(),
    }
}

/// The value of `key` in a WIT string map (`list<tuple<string, string>>`).
pub fn lookup<'a>(map: &'a [(String, String)], key: &str) -> Option<&'a str> {
    map.iter()
        .find(|(k, _)| k == key)
        .map(|(_, value)| value.as_str())
}

/// A node affinity that pins a volume to one node by its
/// `kubernetes.io/hostname` label (its name when it has no such label).
pub fn pin_to_node(node: &Node) -> NodeAffinity {
    let hostname = lookup(&node.labels, claim::HOSTNAME_LABEL).unwrap_or(&node.name);
    NodeAffinity {
        terms: vec![NodeSelectorTerm {
            match_expressions: vec![NodeSelectorRequirement {
                key: claim::HOSTNAME_LABEL.to_string(),
                operator: NodeSelectorOperator::In,
                values: vec![hostname.to_string()],
            }],
        }],
    }
}
