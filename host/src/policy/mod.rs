//! The operator's policy file: what each plugin may use (its sandbox) and,
//! in [`output`], what it may return.
//!
//! The policy is a YAML file owned by the cluster operator, never by a plugin.
//! Everything is denied unless granted: a plugin with no entry gets the
//! defaults below, no directories and no network.
//!
//! ```yaml
//! defaults:              # optional; applies to every plugin
//!   memoryLimit: 64Mi    # linear memory per call
//!   timeout: 10s         # wall-clock budget per call
//!   maxConcurrentCalls: 4
//! plugins:
//!   hostpath:
//!     timeout: 5s
//!     preopens:
//!       - host: /var/lib/wasmprov/hostpath   # directory in the host's filesystem
//!         guest: /volumes                     # where the plugin sees it
//!         mode: read-write                    # or read-only (the default)
//!     allowedOutbound: ["10.0.0.5:2049"]      # TCP/UDP peers; default none
//!     networkFilesystem: false                # true if a preopen is on NFS/CIFS
//!     secretParameters: [password]            # class parameters never written on a volume
//!     recordParameters: [hostRoot]            # class parameters written on each volume; "*": all
//!     output:                                 # what it may return: see [`output`]
//!       sources: [hostPath]
//!       paths: [/var/lib/wasmprov/hostpath]
//!     runsOn: node                            # served by the host on each node
//!     capacity: {reserve: 1Gi}                # what its node hosts leave free: see [`capacity`]
//!     image: {reference: registry.example.com/plugins/hostpath:1.0.0}  # its code: see [`image`]
//! ```
//!
//! `runsOn: node` gives a plugin to the hosts running on every node
//! (`--node-name`); it must make only `hostPath`/`local` volumes in granted
//! directories. Central hosts serve the others. Each host loads only its
//! side's entries; the other side's are checked, not resolved (their
//! directories exist on the nodes only).
//!
//! Guarded layout: a plugin whose preopens overlap a path that volumes may
//! use (any plugin's `output.paths`) cannot create links in any of its
//! preopens, nor move anything but regular files and a volume's own
//! directory (it gets "operation not permitted"); otherwise it could put a
//! link, or a directory a pod wrote, where a checked volume's path leads,
//! on a later call. The rule is enforced in `runtime::fs_guard`; which
//! plugins it covers, and why also those sharing a directory with such a
//! plugin, is in [`guarded`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::quantity;

pub mod capacity;
pub mod guarded;
pub mod image;
pub mod output;

pub use capacity::CapacityPolicy;
pub use image::{ImageSource, RegistryAccess};
pub use output::OutputPolicy;
use output::OutputSpec;

/// Built-in limits for a plugin that the policy does not mention.
pub const DEFAULT_MEMORY_LIMIT: u64 = 64 << 20;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 4;

/// A policy file that cannot be used. Nothing of it is applied.
///
/// Each message is complete on its own (the underlying error, with its field
/// path and line, is part of it), so the underlying error is deliberately not
/// also the error's `source()`: a report that prints the chain (`{:#}`)
/// would say it twice.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read sandbox policy {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("sandbox policy {path} is not valid: {error}")]
    Parse {
        path: PathBuf,
        error: serde_yaml::Error,
    },
    #[error("sandbox policy {path}: {field}: {message}")]
    Invalid {
        path: PathBuf,
        field: String,
        message: String,
    },
}

/// Access granted to a preopened directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum DirMode {
    #[default]
    ReadOnly,
    ReadWrite,
}

/// A host directory the plugin may use, and the path it sees it at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preopen {
    pub host: PathBuf,
    pub guest: String,
    pub mode: DirMode,
}

/// The resolved sandbox of one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// Maximum linear memory of one call, in bytes.
    pub memory_limit: u64,
    /// Wall-clock budget of one call.
    pub timeout: Duration,
    /// Calls of this plugin running at once; more wait their turn.
    pub max_concurrent_calls: usize,
    pub preopens: Vec<Preopen>,
    /// Socket addresses the plugin may connect to (TCP) or send to (UDP).
    pub allowed_outbound: Vec<SocketAddr>,
    /// A preopen is on a network filesystem whose calls can hang: run each
    /// filesystem call on a blocking thread so the call's timeout still fires
    /// and no runtime thread is stuck (calls get ~5x slower).
    pub network_filesystem: bool,
    /// Links and moves (but of regular files and a volume's own directory)
    /// are refused in the plugin's preopens. On by default; a policy file
    /// turns it off for each plugin whose preopens are apart from every path
    /// volumes may use ([`guarded`]).
    pub guard_volumes: bool,
    /// A node plugin's volumes take their room on this directory's
    /// filesystem ([`capacity`]).
    pub capacity: Option<CapacityPolicy>,
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        Self {
            memory_limit: DEFAULT_MEMORY_LIMIT,
            timeout: DEFAULT_TIMEOUT,
            max_concurrent_calls: DEFAULT_MAX_CONCURRENT_CALLS,
            preopens: Vec::new(),
            allowed_outbound: Vec::new(),
            network_filesystem: false,
            guard_volumes: true,
            capacity: None,
        }
    }
}

/// Which hosts serve a plugin (`runsOn`): the central Deployment, or the
/// host on every node (a DaemonSet started with `--node-name`), for
/// plugins that make storage on the node's own filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunsOn {
    #[default]
    Central,
    Node,
}

impl RunsOn {
    fn describe(self) -> &'static str {
        match self {
            RunsOn::Central => "central hosts (no runsOn, or runsOn: central)",
            RunsOn::Node => "node hosts (runsOn: node)",
        }
    }
}

/// A parsed, validated policy file, as one side (central or node) uses it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicySet {
    defaults: SandboxPolicy,
    plugins: BTreeMap<String, (SandboxPolicy, OutputPolicy)>,
    /// The side this host serves.
    side: RunsOn,
    /// Plugins the file gives to the other side: checked as far as can be
    /// without their node's directories, then left to that side's hosts.
    elsewhere: BTreeMap<String, RunsOn>,
    /// This side's plugins whose code comes from a registry.
    images: BTreeMap<String, ImageSource>,
    /// How to reach registries, by host.
    registries: BTreeMap<String, RegistryAccess>,
}

impl PolicySet {
    /// Reads and validates a policy file for a central host.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        Self::load_for(path, RunsOn::Central)
    }

    /// Reads and validates a policy file for a host of `side`.
    pub fn load_for(path: &Path, side: RunsOn) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|error| PolicyError::Read {
            path: path.to_owned(),
            error,
        })?;
        Self::parse_for(&text, path, side)
    }

    /// Parses and validates policy YAML for a central host; `origin` names
    /// it in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<Self, PolicyError> {
        Self::parse_for(text, origin, RunsOn::Central)
    }

    /// Parses and validates policy YAML for a host of `side`: the entries
    /// of the other side are checked but not resolved (their directories
    /// are on nodes, not necessarily here).
    pub fn parse_for(text: &str, origin: &Path, side: RunsOn) -> Result<Self, PolicyError> {
        let file: PolicyFile = if text.trim().is_empty() {
            PolicyFile::default()
        } else {
            serde_yaml::from_str(text).map_err(|error| PolicyError::Parse {
                path: origin.to_owned(),
                error,
            })?
        };
        let invalid = |field: String, message: String| PolicyError::Invalid {
            path: origin.to_owned(),
            field,
            message,
        };
        let defaults = file
            .defaults
            .apply(SandboxPolicy::default(), "defaults")
            .map_err(|(f, m)| invalid(f, m))?;
        let mut plugins = BTreeMap::new();
        let mut elsewhere = BTreeMap::new();
        let mut images = BTreeMap::new();
        for (name, mut spec) in file.plugins {
            let field = format!("plugins.{name}");
            if let Some(image) = spec.image.take() {
                let image = image.resolve(&field).map_err(|(f, m)| invalid(f, m))?;
                if spec.runs_on.unwrap_or_default() == side {
                    images.insert(name.clone(), image);
                }
            }
            let runs_on = spec.runs_on.unwrap_or_default();
            if runs_on == RunsOn::Node {
                spec.output
                    .check_node_local(&field)
                    .map_err(|(f, m)| invalid(f, m))?;
            }
            let capacity = spec.capacity.take();
            if runs_on == RunsOn::Central && capacity.is_some() {
                return Err(invalid(
                    format!("{field}.capacity"),
                    capacity::ONLY_NODE_PLUGINS.into(),
                ));
            }
            if runs_on != side {
                elsewhere.insert(name, runs_on);
                continue;
            }
            let mut output = std::mem::take(&mut spec.output)
                .resolve(&format!("{field}.output"))
                .map_err(|(f, m)| invalid(f, m))?;
            for (i, key) in std::mem::take(&mut spec.secret_parameters)
                .into_iter()
                .enumerate()
            {
                if key.is_empty() || key == crate::provisioner::PLUGIN_PARAMETER {
                    return Err(invalid(
                        format!("{field}.secretParameters[{i}]"),
                        format!("{key:?} is not a parameter the plugin receives"),
                    ));
                }
                output.secret_parameters.insert(key);
            }
            for (i, key) in std::mem::take(&mut spec.record_parameters)
                .into_iter()
                .enumerate()
            {
                let at = format!("{field}.recordParameters[{i}]");
                if key.is_empty() || key == crate::provisioner::PLUGIN_PARAMETER {
                    return Err(invalid(
                        at,
                        format!("{key:?} is not a parameter the plugin receives"),
                    ));
                }
                // A secret written on the volume would be readable by anyone
                // who may read PersistentVolumes: say which list is wrong.
                if output.secret_parameters.contains(&key) {
                    return Err(invalid(
                        at,
                        format!(
                            "{key:?} is also listed under {field}.secretParameters, which are never written on a volume; remove it from one of the two"
                        ),
                    ));
                }
                output.record_parameters.insert(key);
            }
            let mut sandbox = spec
                .resolve(defaults.clone(), &field)
                .map_err(|(f, m)| invalid(f, m))?;
            if runs_on == RunsOn::Node {
                sandbox.capacity =
                    capacity::CapacitySpec::resolve(capacity, &sandbox.preopens, &field)
                        .map_err(|(f, m)| invalid(f, m))?;
            }
            plugins.insert(name, (sandbox, output));
        }
        no_writable_preopen_above_a_grant(&plugins).map_err(|(f, m)| invalid(f, m))?;
        let guarded = guarded::plugins(plugins.iter().map(|(name, (sandbox, output))| {
            let preopens = sandbox.preopens.iter().map(|p| p.host.as_path());
            let paths = output.paths.iter().map(PathBuf::as_path);
            (name.as_str(), preopens.collect(), paths.collect())
        }));
        for (name, (sandbox, _)) in &mut plugins {
            sandbox.guard_volumes = guarded.contains(name);
        }
        let mut registries = BTreeMap::new();
        for (host, spec) in file.registries {
            let access = spec
                .resolve(&host, &format!("registries.{host}"))
                .map_err(|(f, m)| invalid(f, m))?;
            registries.insert(host, access);
        }
        Ok(Self {
            defaults,
            plugins,
            side,
            elsewhere,
            images,
            registries,
        })
    }

    /// Whether a host of this side serves the named plugin, or why not: a
    /// plugin the file gives to the other side, or (on a node host) one the
    /// file does not give to node hosts at all.
    pub fn serves(&self, name: &str) -> Result<(), String> {
        if let Some(side) = self.elsewhere.get(name) {
            return Err(format!(
                "plugin {name} is served by {} as the sandbox policy says (plugins.{name}.runsOn), \
                 not by this host, which serves {}",
                side.describe(),
                self.side.describe()
            ));
        }
        if self.side == RunsOn::Node && !self.plugins.contains_key(name) {
            return Err(format!(
                "plugin {name} has no entry with runsOn: node in the sandbox policy, and this \
                 host serves node hosts' plugins only; add plugins.{name} with runsOn: node, or \
                 serve it centrally"
            ));
        }
        Ok(())
    }

    /// The side the file gives the named plugin to, if it is not this one.
    pub fn runs_elsewhere(&self, name: &str) -> Option<RunsOn> {
        self.elsewhere.get(name).copied()
    }

    /// The sandbox of the named plugin (the defaults if it has no entry).
    pub fn sandbox_for(&self, name: &str) -> SandboxPolicy {
        self.plugins
            .get(name)
            .map(|(sandbox, _)| sandbox.clone())
            .unwrap_or_else(|| self.defaults.clone())
    }

    /// Where the named plugin's code comes from, if from a registry
    /// (`plugins.<name>.image`).
    pub fn image_for(&self, name: &str) -> Option<&ImageSource> {
        self.images.get(name)
    }

    /// How to reach registry `host` (`registries.<host>`; none: HTTPS,
    /// anonymous).
    pub fn registry_access(&self, host: &str) -> RegistryAccess {
        self.registries.get(host).cloned().unwrap_or_default()
    }

    /// The plugins of this side whose code comes from a registry.
    pub fn images(&self) -> impl Iterator<Item = (&str, &ImageSource)> {
        self.images.iter().map(|(n, i)| (n.as_str(), i))
    }

    /// What the named plugin may return (nothing if it has no entry).
    pub fn output_for(&self, name: &str) -> OutputPolicy {
        self.plugins
            .get(name)
            .map(|(_, output)| output.clone())
            .unwrap_or_default()
    }

    /// Granted directories refusing new volumes
    /// ([`OutputPolicy::unusable_paths`]): plugin, directory, what was found.
    pub fn unusable_grants(&self) -> impl Iterator<Item = (&str, &Path, &str)> {
        self.plugins.iter().flat_map(|(name, (_, output))| {
            output
                .unusable_paths
                .iter()
                .map(move |(path, found)| (name.as_str(), path.as_path(), found.as_str()))
        })
    }

    /// Names of the plugins the policy has an entry for.
    pub fn plugin_names(&self) -> impl Iterator<Item = &str> {
        self.plugins.keys().map(String::as_str)
    }
}

type FieldError = (String, String);

/// A plugin that can write in a directory holding a granted directory (any
/// plugin's) could rename the grant away and put something else in its
/// place; only the grant itself, or directories inside it, may be
/// preopened read-write.
fn no_writable_preopen_above_a_grant(
    plugins: &BTreeMap<String, (SandboxPolicy, OutputPolicy)>,
) -> Result<(), FieldError> {
    for (name, (sandbox, _)) in plugins {
        for (i, preopen) in sandbox.preopens.iter().enumerate() {
            if preopen.mode != DirMode::ReadWrite {
                continue;
            }
            // Compared as the kernel resolves them: a preopen may be a link.
            let host =
                std::fs::canonicalize(&preopen.host).unwrap_or_else(|_| preopen.host.clone());
            for (owner, (_, output)) in plugins {
                if let Some(grant) = output
                    .paths
                    .iter()
                    .find(|g| g.starts_with(&host) && **g != host)
                {
                    return Err((
                        format!("plugins.{name}.preopens[{i}].host"),
                        format!(
                            "{} is read-write and holds {}, which plugins.{owner}.output.paths grants; a plugin that can write above a granted directory could replace it: preopen the granted directory itself, or this one read-only",
                            preopen.host.display(),
                            grant.display()
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    defaults: LimitsSpec,
    #[serde(default)]
    plugins: BTreeMap<String, PluginSpec>,
    #[serde(default)]
    registries: BTreeMap<String, image::RegistrySpec>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LimitsSpec {
    memory_limit: Option<String>,
    timeout: Option<String>,
    max_concurrent_calls: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PluginSpec {
    memory_limit: Option<String>,
    timeout: Option<String>,
    max_concurrent_calls: Option<usize>,
    #[serde(default)]
    preopens: Vec<PreopenSpec>,
    #[serde(default)]
    allowed_outbound: Vec<String>,
    #[serde(default)]
    network_filesystem: bool,
    #[serde(default)]
    secret_parameters: Vec<String>,
    #[serde(default)]
    record_parameters: Vec<String>,
    #[serde(default)]
    output: OutputSpec,
    #[serde(default)]
    runs_on: Option<RunsOn>,
    #[serde(default)]
    capacity: Option<capacity::CapacitySpec>,
    #[serde(default)]
    image: Option<image::ImageSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PreopenSpec {
    host: PathBuf,
    guest: String,
    #[serde(default)]
    mode: DirMode,
}

impl LimitsSpec {
    fn apply(self, mut base: SandboxPolicy, field: &str) -> Result<SandboxPolicy, FieldError> {
        apply_limits(
            &mut base,
            field,
            self.memory_limit,
            self.timeout,
            self.max_concurrent_calls,
        )?;
        Ok(base)
    }
}

impl PluginSpec {
    fn resolve(self, mut base: SandboxPolicy, field: &str) -> Result<SandboxPolicy, FieldError> {
        apply_limits(
            &mut base,
            field,
            self.memory_limit,
            self.timeout,
            self.max_concurrent_calls,
        )?;
        for (i, p) in self.preopens.into_iter().enumerate() {
            let at = |sub: &str| format!("{field}.preopens[{i}].{sub}");
            if !p.host.is_absolute() {
                return Err((at("host"), format!("{:?} must be an absolute path", p.host)));
            }
            if !p.host.is_dir() {
                return Err((
                    at("host"),
                    format!(
                        "{} is not an existing directory; create it or fix the path",
                        p.host.display()
                    ),
                ));
            }
            if !p.guest.starts_with('/') || p.guest.split('/').any(|c| c == "..") {
                return Err((
                    at("guest"),
                    format!(
                        "{:?} must be an absolute path without \"..\" (e.g. /data)",
                        p.guest
                    ),
                ));
            }
            base.preopens.push(Preopen {
                host: p.host,
                guest: p.guest,
                mode: p.mode,
            });
        }
        base.network_filesystem = self.network_filesystem;
        for (i, addr) in self.allowed_outbound.into_iter().enumerate() {
            let parsed = addr.parse().map_err(|_| {
                (
                    format!("{field}.allowedOutbound[{i}]"),
                    format!("{addr:?} is not an IP:port address (e.g. \"10.0.0.5:2049\" or \"[fd00::5]:443\"); host names are not resolved"),
                )
            })?;
            base.allowed_outbound.push(parsed);
        }
        Ok(base)
    }
}

fn apply_limits(
    base: &mut SandboxPolicy,
    field: &str,
    memory_limit: Option<String>,
    timeout: Option<String>,
    max_concurrent_calls: Option<usize>,
) -> Result<(), FieldError> {
    if let Some(m) = memory_limit {
        let bytes = quantity::parse_bytes(&m)
            .map_err(|e| (format!("{field}.memoryLimit"), e.to_string()))?;
        if bytes < 1 << 20 {
            return Err((
                format!("{field}.memoryLimit"),
                format!("{m} is below the 1Mi minimum a component needs"),
            ));
        }
        base.memory_limit = bytes;
    }
    if let Some(t) = timeout {
        let d = humantime::parse_duration(&t).map_err(|e| {
            (
                format!("{field}.timeout"),
                format!("{t:?} is not a duration like \"500ms\" or \"10s\": {e}"),
            )
        })?;
        if d.is_zero() {
            return Err((format!("{field}.timeout"), "must be greater than 0".into()));
        }
        base.timeout = d;
    }
    if let Some(n) = max_concurrent_calls {
        if n == 0 {
            return Err((
                format!("{field}.maxConcurrentCalls"),
                "must be at least 1".into(),
            ));
        }
        base.max_concurrent_calls = n;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
