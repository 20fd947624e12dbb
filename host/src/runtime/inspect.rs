//! Checks that a file is a component of our world, before anything runs it.

use wasmtime::component::Component;
use wasmtime::Engine;

use super::bindings::{CONTRACT_VERSION, LOGGING_INTERFACE, PLUGIN_INTERFACE};

/// What kind of WebAssembly a byte string holds, from its 8-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryKind {
    NotWasm,
    CoreModule,
    Component,
}

pub fn binary_kind(bytes: &[u8]) -> BinaryKind {
    match bytes {
        [0, b'a', b's', b'm', 1, 0, 0, 0, ..] => BinaryKind::CoreModule,
        // Component binaries use layer 1 in the upper half of the version.
        [0, b'a', b's', b'm', _, _, 1, 0, ..] => BinaryKind::Component,
        _ => BinaryKind::NotWasm,
    }
}

/// The imports and exports of a component, as `plugin check` prints them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Surface {
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

pub fn surface(engine: &Engine, component: &Component) -> Surface {
    let ty = component.component_type();
    Surface {
        imports: ty.imports(engine).map(|(n, _)| n.to_owned()).collect(),
        exports: ty.exports(engine).map(|(n, _)| n.to_owned()).collect(),
    }
}

/// Why a component's exports or imports do not fit the contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// It exports no version of `wasmprov:provisioner/plugin`.
    WrongWorld { exports: Vec<String> },
    /// It targets a contract version this host cannot run.
    UnsupportedVersion { interface: String, found: String },
}

/// Finds the plugin export and checks its version against ours.
///
/// Semver rules of the component model: `0.1.x` is compatible with `0.1.0`;
/// any other `0.y` or major version is not.
pub fn check_contract(surface: &Surface) -> Result<String, Mismatch> {
    let prefix = format!("{PLUGIN_INTERFACE}@");
    let Some(export) = surface.exports.iter().find(|e| e.starts_with(&prefix)) else {
        return Err(Mismatch::WrongWorld {
            exports: surface.exports.clone(),
        });
    };
    let version = &export[prefix.len()..];
    check_version(PLUGIN_INTERFACE, version)?;
    let log_prefix = format!("{LOGGING_INTERFACE}@");
    for import in surface
        .imports
        .iter()
        .filter(|i| i.starts_with(&log_prefix))
    {
        check_version(LOGGING_INTERFACE, &import[log_prefix.len()..])?;
    }
    Ok(version.to_owned())
}

fn check_version(interface: &str, found: &str) -> Result<(), Mismatch> {
    let compatible = match (semver_prefix(found), semver_prefix(CONTRACT_VERSION)) {
        (Some((0, minor)), Some((0, ours))) => minor == ours,
        (Some((major, _)), Some((ours, _))) => major == ours && major != 0,
        _ => false,
    };
    if compatible {
        Ok(())
    } else {
        Err(Mismatch::UnsupportedVersion {
            interface: interface.to_owned(),
            found: found.to_owned(),
        })
    }
}

fn semver_prefix(v: &str) -> Option<(u64, u64)> {
    let mut parts = v.split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn surface(exports: &[&str], imports: &[&str]) -> Surface {
        Surface {
            imports: imports.iter().map(|s| s.to_string()).collect(),
            exports: exports.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn header_tells_modules_components_and_garbage_apart() {
        assert_eq!(binary_kind(b"\0asm\x01\0\0\0rest"), BinaryKind::CoreModule);
        assert_eq!(binary_kind(b"\0asm\x0d\0\x01\0rest"), BinaryKind::Component);
        assert_eq!(binary_kind(b"#!/bin/sh\n"), BinaryKind::NotWasm);
        assert_eq!(binary_kind(b"\0as"), BinaryKind::NotWasm);
    }

    #[test]
    fn versions_follow_component_model_semver() {
        let ok = ["0.1.0", "0.1.7", "0.1.0-rc1"];
        for v in ok {
            let s = surface(&[&format!("wasmprov:provisioner/plugin@{v}")], &[]);
            assert_eq!(check_contract(&s), Ok(v.to_string()));
        }
        for v in ["0.2.0", "1.0.0", "x"] {
            let s = surface(&[&format!("wasmprov:provisioner/plugin@{v}")], &[]);
            assert!(
                matches!(check_contract(&s), Err(Mismatch::UnsupportedVersion { .. })),
                "{v}"
            );
        }
        let s = surface(
            &["wasmprov:provisioner/plugin@0.1.0"],
            &["wasmprov:provisioner/logging@0.3.0"],
        );
        assert!(matches!(
            check_contract(&s),
            Err(Mismatch::UnsupportedVersion { .. })
        ));
    }

    #[test]
    fn a_component_without_the_plugin_export_is_another_world() {
        let s = surface(&["wasi:cli/run@0.2.0"], &[]);
        assert_eq!(
            check_contract(&s),
            Err(Mismatch::WrongWorld {
                exports: vec!["wasi:cli/run@0.2.0".into()]
            })
        );
    }
}
