//! The bindings of the `resizable-provisioner` world of `wit/provisioner.wit`
//! (`provisioner` plus the optional `resizer` export). Plugins reach them as
//! `wasmprov_plugin::resizable_bindings` and export through
//! `wasmprov_plugin::export_resizable_plugin!`; the `provisioner` world's
//! bindings in `wasmprov_plugin` share these types.

// The generated code names its runtime `wasmprov_plugin::wit_bindgen::rt`,
// the path plugin crates (where the export macro expands) know it by; here
// that name is this crate.
extern crate self as wasmprov_plugin;
#[doc(hidden)]
pub use wit_bindgen;

wit_bindgen::generate!({
    path: "wit",
    world: "resizable-provisioner",
    pub_export_macro: true,
    export_macro_name: "export",
    default_bindings_module: "wasmprov_plugin::resizable_bindings",
    runtime_path: "wasmprov_plugin::wit_bindgen::rt",
});
