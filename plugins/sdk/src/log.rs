//! Logging into the host's log stream (`wasmprov:provisioner/logging`).
//!
//! The host attributes every line to the plugin and the volume being
//! processed, truncates long messages and caps lines per call.
//!
//! ```ignore
//! wasmprov_plugin::log::info("created volume directory", &[("pv", &name), ("path", &dir)]);
//! ```
//!
//! Outside a component (native unit tests) logging prints to stderr instead,
//! so plugin logic that logs stays testable.

use crate::Level;

/// Writes one line at `level` with key/value `fields`.
pub fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
    #[cfg(target_arch = "wasm32")]
    {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        crate::resizable_bindings::wasmprov::provisioner::logging::log(level, message, &fields);
    }
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {message} {fields:?}");
}

pub fn trace(message: &str, fields: &[(&str, &str)]) {
    log(Level::Trace, message, fields);
}

pub fn debug(message: &str, fields: &[(&str, &str)]) {
    log(Level::Debug, message, fields);
}

pub fn info(message: &str, fields: &[(&str, &str)]) {
    log(Level::Info, message, fields);
}

pub fn warn(message: &str, fields: &[(&str, &str)]) {
    log(Level::Warn, message, fields);
}

pub fn error(message: &str, fields: &[(&str, &str)]) {
    log(Level::Error, message, fields);
}
