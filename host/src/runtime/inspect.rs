//! Checks that a file is a component of our world, before anything runs it.

use wasmtime::component::Component;
use wasmtime::Engine;

use super::bindings::{
    CAPACITY_INTERFACE, LOGGING_INTERFACE, PLUGIN_INTERFACE, RESIZER_INTERFACE, SUPPORTED_VERSIONS,
};

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
    // An optional hook must come from the plugin's own version, one that
    // has it: `resizer` is new in 0.2, `capacity` in 0.3.
    for (interface, since_minor) in [(RESIZER_INTERFACE, 2), (CAPACITY_INTERFACE, 3)] {
        if let Some(found) = export_version(surface, interface) {
            let fits = semver_prefix(found) == semver_prefix(version)
                && semver_prefix(version).is_some_and(|(_, minor)| minor >= since_minor);
            if !fits {
                return Err(Mismatch::UnsupportedVersion {
                    interface: interface.to_owned(),
                    found: found.to_owned(),
                });
            }
        }
    }
    Ok(version.to_owned())
}

/// Which optional hooks a component exports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Optional {
    /// `resizer`: it grows volumes.
    pub resizer: bool,
    /// `capacity`: it reports a node's room for its volumes.
    pub capacity: bool,
}

pub fn optional_exports(surface: &Surface) -> Optional {
    Optional {
        resizer: export_version(surface, RESIZER_INTERFACE).is_some(),
        capacity: export_version(surface, CAPACITY_INTERFACE).is_some(),
    }
}

/// The version of `interface` the component exports, if it does.
fn export_version<'s>(surface: &'s Surface, interface: &str) -> Option<&'s str> {
    surface.exports.iter().find_map(|e| {
        e.strip_prefix(interface)
            .and_then(|rest| rest.strip_prefix('@'))
    })
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
        let ok = ["0.1.0", "0.1.7", "0.1.0-rc1", "0.2.0", "0.2.3", "0.3.0"];
        for v in ok {
            let s = surface(&[&format!("wasmprov:provisioner/plugin@{v}")], &[]);
            assert_eq!(check_contract(&s), Ok(v.to_string()));
        }
        for v in ["0.4.0", "1.0.0", "x"] {
            let s = surface(&[&format!("wasmprov:provisioner/plugin@{v}")], &[]);
            assert!(
                matches!(check_contract(&s), Err(Mismatch::UnsupportedVersion { .. })),
                "{v}"
            );
        }
        let s = surface(
            &["wasmprov:provisioner/plugin@0.1.0"],
            &["wasmprov:provisioner/logging@0.4.0"],
        );
        assert!(matches!(
            check_contract(&s),
            Err(Mismatch::UnsupportedVersion { .. })
        ));
    }

    #[test]
    fn optional_hooks_come_from_the_plugins_version() {
        let plain = surface(&["wasmprov:provisioner/plugin@0.2.0"], &[]);
        assert_eq!(check_contract(&plain), Ok("0.2.0".into()));
        assert_eq!(optional_exports(&plain), Optional::default());
        let resizable = surface(
            &[
                "wasmprov:provisioner/plugin@0.2.0",
                "wasmprov:provisioner/resizer@0.2.0",
            ],
            &[],
        );
        assert_eq!(check_contract(&resizable), Ok("0.2.0".into()));
        assert!(optional_exports(&resizable).resizer);
        let reporting = surface(
            &[
                "wasmprov:provisioner/plugin@0.3.1",
                "wasmprov:provisioner/capacity@0.3.1",
            ],
            &[],
        );
        assert_eq!(check_contract(&reporting), Ok("0.3.1".into()));
        assert_eq!(
            optional_exports(&reporting),
            Optional {
                resizer: false,
                capacity: true
            }
        );
        for (plugin, hook) in [
            ("plugin@0.1.0", "resizer@0.2.0"),
            ("plugin@0.1.0", "resizer@0.1.0"),
            ("plugin@0.2.0", "capacity@0.3.0"),
            ("plugin@0.2.0", "capacity@0.2.0"),
            ("plugin@0.3.0", "resizer@0.2.0"),
        ] {
            let mixed = surface(
                &[
                    &format!("wasmprov:provisioner/{plugin}"),
                    &format!("wasmprov:provisioner/{hook}"),
                ],
                &[],
            );
            assert!(
                matches!(
                    check_contract(&mixed),
                    Err(Mismatch::UnsupportedVersion { .. })
                ),
                "{plugin} {hook}"
            );
        }
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
