//! wasmprov: a Kubernetes dynamic volume provisioner whose backends are
//! sandboxed WebAssembly components.
//!
//! - [`provisioner`]: the backend contract in Kubernetes terms.
//! - [`runtime`]: loads and runs plugin components (Wasm only, no Kubernetes).
//! - [`wasm_provisioner`]: a plugin seen as a provisioner (Kubernetes ↔ WIT).
//! - [`oci`]: components pushed to and pulled from OCI registries.
//! - [`quantity`], [`text`]: small helpers.

pub mod cli;
pub mod delivery;
pub mod events;
pub mod files;
pub mod leader;
pub mod lifecycle;
pub mod metrics;
pub mod oci;
pub mod ops;
pub mod policy;
pub mod provisioner;
pub mod quantity;
pub mod registry;
pub mod runtime;
pub mod text;
pub mod wasm_provisioner;
