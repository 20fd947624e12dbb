//! `plugins.<name>.capacity`: where a node plugin's volumes take their
//! room, so that a node host can say how much is left on its node (the
//! scheduler reads it) and refuse what does not fit.
//!
//! ```yaml
//! plugins:
//!   hostpath:
//!     runsOn: node
//!     preopens: [{host: /var/lib/wasmprov/hostpath, guest: /volumes, mode: read-write}]
//!     capacity:
//!       reserve: 1Gi                          # left free on that filesystem
//!       directory: /var/lib/wasmprov/hostpath # optional with one read-write preopen
//! ```
//!
//! A node plugin with one read-write preopen needs no entry: its volumes
//! fill that directory's filesystem, with no reserve. With several, the
//! entry says which one.

use std::path::PathBuf;

use serde::Deserialize;

use super::{DirMode, FieldError, Preopen};
use crate::quantity;

/// Where a node plugin's volumes take their room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityPolicy {
    /// A directory (host path, one of the plugin's read-write preopens) on
    /// the filesystem its volumes fill.
    pub directory: PathBuf,
    /// Bytes of that filesystem left for everything but volumes.
    pub reserve_bytes: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CapacitySpec {
    reserve: Option<Reserve>,
    directory: Option<PathBuf>,
}

/// A quantity, as `10Gi` or as a plain number of bytes (`0`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Reserve {
    Bytes(u64),
    Quantity(String),
}

/// Why a central plugin has no capacity.
pub(super) const ONLY_NODE_PLUGINS: &str =
    "only node plugins have a capacity (their volumes fill a node's disk, which the node host \
     measures); remove it, or give the plugin runsOn: node";

impl CapacitySpec {
    /// The capacity of a node plugin with these `preopens`: none for one
    /// without a read-write preopen.
    pub(super) fn resolve(
        spec: Option<Self>,
        preopens: &[Preopen],
        field: &str,
    ) -> Result<Option<CapacityPolicy>, FieldError> {
        let at = |sub: &str| format!("{field}.capacity{sub}");
        let spec = spec.unwrap_or_default();
        let writable: Vec<&PathBuf> = preopens
            .iter()
            .filter(|p| p.mode == DirMode::ReadWrite)
            .map(|p| &p.host)
            .collect();
        let reserve_bytes = match &spec.reserve {
            Some(Reserve::Bytes(n)) => *n,
            Some(Reserve::Quantity(q)) => {
                quantity::parse_bytes(q).map_err(|e| (at(".reserve"), e.to_string()))?
            }
            None => 0,
        };
        let directory = match (spec.directory, writable.as_slice()) {
            (Some(dir), _) if writable.contains(&&dir) => dir,
            (Some(dir), _) => {
                return Err((
                    at(".directory"),
                    format!(
                        "{} is not one of the plugin's read-write preopens ({}); name the host \
                         directory its volumes are made in",
                        dir.display(),
                        list(&writable)
                    ),
                ))
            }
            (None, [only]) => (*only).clone(),
            (None, []) if spec.reserve.is_none() => return Ok(None),
            (None, []) => {
                return Err((
                    at(""),
                    "the plugin has no read-write preopen, so its volumes fill no disk the \
                     node host can measure; remove capacity, or grant the directory its volumes \
                     are made in"
                        .into(),
                ))
            }
            (None, several) => {
                return Err((
                    at(".directory"),
                    format!(
                        "the plugin has several read-write preopens ({}); say which one its \
                         volumes are made in, so that the node host measures that disk",
                        list(several)
                    ),
                ))
            }
        };
        Ok(Some(CapacityPolicy {
            directory,
            reserve_bytes,
        }))
    }
}

fn list(dirs: &[&PathBuf]) -> String {
    if dirs.is_empty() {
        return "none".into();
    }
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{PolicyError, PolicySet, RunsOn};
    use std::path::Path;

    fn node_policy(body: &str) -> Result<PolicySet, PolicyError> {
        PolicySet::parse_for(body, Path::new("policy.yaml"), RunsOn::Node)
    }

    fn preopen(dir: &Path) -> String {
        format!("{{host: {}, guest: /v, mode: read-write}}", dir.display())
    }

    /// A node plugin `p` that may return hostPath volumes in `dir`, with
    /// `rest` (indented entries) added.
    fn node_plugin(dir: &Path, rest: &str) -> String {
        format!(
            "plugins:\n  p:\n    runsOn: node\n    output: {{sources: [hostPath], paths: [{}]}}\n{rest}",
            dir.display()
        )
    }

    #[test]
    fn a_node_plugin_with_one_writable_directory_fills_its_disk() {
        let dir = tempfile::tempdir().unwrap();
        let set = node_policy(&node_plugin(
            dir.path(),
            &format!("    preopens: [{}]\n", preopen(dir.path())),
        ))
        .unwrap();
        assert_eq!(
            set.sandbox_for("p").capacity,
            Some(CapacityPolicy {
                directory: dir.path().to_owned(),
                reserve_bytes: 0
            })
        );
        let set = node_policy(&node_plugin(
            dir.path(),
            &format!(
                "    preopens: [{}]\n    capacity: {{reserve: 1Gi}}\n",
                preopen(dir.path())
            ),
        ))
        .unwrap();
        assert_eq!(
            set.sandbox_for("p").capacity.unwrap().reserve_bytes,
            1 << 30
        );
        let set = node_policy(&node_plugin(
            dir.path(),
            &format!(
                "    preopens: [{}]\n    capacity: {{reserve: 0}}\n",
                preopen(dir.path())
            ),
        ))
        .unwrap();
        assert_eq!(set.sandbox_for("p").capacity.unwrap().reserve_bytes, 0);
    }

    #[test]
    fn mistakes_name_the_field_and_the_fix() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let cases = [
            (
                node_plugin(
                    a.path(),
                    &format!(
                        "    preopens: [{}, {}]\n",
                        preopen(a.path()),
                        preopen(b.path())
                    ),
                ),
                "plugins.p.capacity.directory",
                "several read-write preopens",
            ),
            (
                node_plugin(
                    a.path(),
                    &format!(
                        "    preopens: [{}]\n    capacity: {{directory: {}}}\n",
                        preopen(a.path()),
                        b.path().display()
                    ),
                ),
                "plugins.p.capacity.directory",
                "is not one of the plugin's read-write preopens",
            ),
            (
                node_plugin(a.path(), "    capacity: {reserve: 1Gi}\n"),
                "plugins.p.capacity",
                "no read-write preopen",
            ),
            (
                node_plugin(
                    a.path(),
                    &format!(
                        "    preopens: [{}]\n    capacity: {{reserve: lots}}\n",
                        preopen(a.path())
                    ),
                ),
                "plugins.p.capacity.reserve",
                "lots",
            ),
            (
                "plugins:\n  p:\n    capacity: {reserve: 1Gi}\n".to_owned(),
                "plugins.p.capacity",
                "only node plugins",
            ),
        ];
        for (yaml, field, says) in cases {
            // A central plugin's capacity is refused on either side.
            let error = node_policy(&yaml)
                .and_then(|_| PolicySet::parse(&yaml, Path::new("policy.yaml")))
                .expect_err(&yaml)
                .to_string();
            assert!(
                error.contains(field) && error.contains(says),
                "{yaml}\n{error}"
            );
        }
    }
}
