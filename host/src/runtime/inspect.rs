//! Checks that a file is a component of our world, before anything runs it.

use wasmtime::component::Component;
use wasmtime::Engine;

use super::bindings::{LOGGING_INTERFACE, PLUGIN_INTERFACE, RESIZER_INTERFACE, SUPPORTED_VERSIONS};

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

/// Finds the plugin export and checks its version against the ones this
/// host runs; returns it.
///
/// Semver rules of the component model: `0.1.x` is compatible with `0.1.0`
/// (and `0.2.x` with `0.2.0`); any other `0.y` or major version is not.
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
    let resizer_prefix = format!("{RESIZER_INTERFACE}@");
    if let Some(resizer) = surface
        .exports
        .iter()
        .find(|e| e.starts_with(&resizer_prefix))
    {
        let found = &resizer[resizer_prefix.len()..];
        // The resizer is new in 0.2; it must come from the plugin's version.
        if semver_prefix(found) != semver_prefix(version) || version.starts_with("0.1.") {
            return Err(Mismatch::UnsupportedVersion {
                interface: RESIZER_INTERFACE.to_owned(),
                found: found.to_owned(),
            });
        }
    }
    Ok(version.to_owned())
}

/// Whether the component exports the optional `resizer` hook.
pub fn exports_resizer(surface: &Surface) -> bool {
    let prefix = format!("{RESIZER_INTERFACE}@");
    surface.exports.iter().any(|e| e.starts_with(&prefix))
}

fn check_version(interface: &str, found: &str) -> Result<(), Mismatch> {
    let compatible = semver_prefix(found).is_some_and(|(major, minor)| {
        SUPPORTED_VERSIONS
            .iter()
            .any(|ours| match semver_prefix(ours) {
                Some((0, ours_minor)) => major == 0 && minor == ours_minor,
                Some((ours_major, _)) => major == ours_major,
                None => false,
            })
    });
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
        let ok = ["0.1.0", "0.1.7", "0.1.0-rc1", "0.2.0", "0.2.3"];
        for v in ok {
            let s = surface(&[&format!("wasmprov:provisioner/plugin@{v}")], &[]);
            assert_eq!(check_contract(&s), Ok(v.to_string()));
        }
        for v in ["0.3.0", "1.0.0", "x"] {
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
    fn the_resizer_is_optional_and_from_the_plugins_version() {
        let plain = surface(&["wasmprov:provisioner/plugin@0.2.0"], &[]);
        assert_eq!(check_contract(&plain), Ok("0.2.0".into()));
        assert!(!exports_resizer(&plain));
        let resizable = surface(
            &[
                "wasmprov:provisioner/plugin@0.2.0",
                "wasmprov:provisioner/resizer@0.2.0",
            ],
            &[],
        );
        assert_eq!(check_contract(&resizable), Ok("0.2.0".into()));
        assert!(exports_resizer(&resizable));
        let mixed = surface(
            &[
                "wasmprov:provisioner/plugin@0.1.0",
                "wasmprov:provisioner/resizer@0.2.0",
            ],
            &[],
        );
        assert!(matches!(
            check_contract(&mixed),
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
