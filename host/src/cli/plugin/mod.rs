//! `wasmprov plugin …`: make a plugin project (`new`), run a plugin
//! component against Kubernetes objects read from files with no cluster
//! (`check`, `invoke`, `delete`, `test`), and package it (`pack`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::Resource;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use sha2::{Digest, Sha256};

mod componentize;
mod conformance;
mod new;
mod pack;
mod registry;

use super::{RuntimeArgs, DEFAULT_NODE_PROVISIONER_NAME, DEFAULT_PROVISIONER_NAME};
use crate::policy::PolicySet;
use crate::provisioner::{ProvisionOptions, ProvisionState, PLUGIN_PARAMETER};
use crate::runtime::{CacheOutcome, Runtime};
use crate::text::escape_control;
use crate::wasm_provisioner::WasmProvisioner;

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Check that FILE is a plugin component this host can run, and describe it.
    Check(CheckArgs),
    /// Provision a volume for a claim with the plugin; print the PersistentVolume.
    Invoke(InvokeArgs),
    /// Delete the storage of a PersistentVolume with the plugin.
    Delete(DeleteArgs),
    /// Run the conformance suite against the plugin (no cluster needed);
    /// prints a pass/fail table, exits non-zero on a failure.
    Test(conformance::TestArgs),
    /// Print the ConfigMaps that deliver FILE as plugin NAME, as YAML for
    /// `kubectl apply --server-side -f -` (split into parts and a manifest
    /// when it does not fit one ConfigMap).
    Pack(pack::PackArgs),
    /// Create a plugin project of its own in a new directory: a working
    /// backend (a directory per volume) with its build script, class and
    /// policy, passing `wasmprov plugin test` from the start.
    New(new::NewArgs),
    /// Turn a core WebAssembly module (C or Go, built for WASI preview 1)
    /// into a plugin component: embed its WIT world, and adapt its WASI
    /// calls to preview 2 with this host's adapter.
    Componentize(componentize::ComponentizeArgs),
    /// Push FILE to an OCI registry as REF, in the CNCF layout for Wasm
    /// components (config application/vnd.wasm.config.v0+json, one
    /// application/wasm layer); prints the digest that pins it.
    Push(registry::PushArgs),
    /// Pull the plugin component at REF from an OCI registry, checking
    /// every digest and size; accepts the CNCF layout and the older
    /// application/vnd.wasm.content.layer.v1+wasm one.
    Pull(registry::PullArgs),
}

#[derive(Debug, Args)]
pub struct PluginFile {
    /// The plugin component (`.wasm`).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The plugin's name, used to find its sandbox policy and recorded on
    /// volumes [default: FILE's name without `.wasm`].
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub plugin: PluginFile,
}

#[derive(Debug, Args)]
pub struct InvokeArgs {
    #[command(flatten)]
    pub plugin: PluginFile,
    /// The StorageClass (YAML or JSON).
    #[arg(long, value_name = "FILE")]
    pub class: PathBuf,
    /// The PersistentVolumeClaim (YAML or JSON). Without `metadata.uid`, a uid
    /// derived from its namespace and name is used, so repeated invokes name
    /// the volume the same way.
    #[arg(long, value_name = "FILE")]
    pub pvc: PathBuf,
    /// The node the scheduler selected (for WaitForFirstConsumer classes).
    #[arg(long, value_name = "FILE")]
    pub node: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub plugin: PluginFile,
    /// The PersistentVolume to delete (YAML or JSON), as `invoke` printed it.
    #[arg(long, value_name = "FILE")]
    pub pv: PathBuf,
    /// The StorageClass it was made with (YAML or JSON): like the host, the
    /// plugin gets the class parameters the volume does not record from it.
    #[arg(long, value_name = "FILE")]
    pub class: Option<PathBuf>,
}

pub async fn run(cmd: PluginCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        PluginCommand::Check(args) => check(args).await,
        PluginCommand::Invoke(args) => invoke(args).await,
        PluginCommand::Delete(args) => delete(args).await,
        PluginCommand::Test(args) => conformance::test(args).await,
        PluginCommand::Pack(args) => pack::pack(args).await,
        PluginCommand::New(args) => new::new(args),
        PluginCommand::Componentize(args) => componentize::componentize(args),
        PluginCommand::Push(args) => registry::push(args).await,
        PluginCommand::Pull(args) => registry::pull(args).await,
    }
}

/// The plugin loaded from its file, with the runtime that runs it.
struct Loaded {
    _runtime: Runtime,
    provisioner: WasmProvisioner,
    /// Why the plugin runs with no directories, when the command line is the
    /// reason (no `--policy`, or no entry for this plugin in it). Said after
    /// a failed call: the plugin's own message cannot know about flags.
    sandbox_note: Option<String>,
}

impl Loaded {
    fn print_sandbox_note(&self) {
        if let Some(note) = &self.sandbox_note {
            eprintln!("note: {note}");
        }
    }
}

fn plugin_name(args: &PluginFile) -> anyhow::Result<String> {
    match &args.name {
        Some(name) => Ok(name.clone()),
        None => name_of_file(&args.file),
    }
}

/// A plugin's name from its file: `hostpath` of `…/hostpath.wasm`.
fn name_of_file(file: &std::path::Path) -> anyhow::Result<String> {
    let file_name = file.file_name().and_then(|n| n.to_str()).with_context(|| {
        format!(
            "{}: cannot derive a plugin name; pass --name",
            file.display()
        )
    })?;
    Ok(file_name
        .strip_suffix(".wasm")
        .unwrap_or(file_name)
        .to_owned())
}

/// Writes `bytes` to `out` whole (a file watcher never sees half a
/// component).
fn write_atomically(out: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    crate::files::write_whole(out, bytes).with_context(|| format!("cannot write {}", out.display()))
}

fn runtime(args: &RuntimeArgs) -> anyhow::Result<Runtime> {
    Ok(Runtime::new(args.runtime_config()?)?)
}

async fn load(args: &PluginFile) -> anyhow::Result<Loaded> {
    let name = plugin_name(args)?;
    let policies = match &args.runtime.policy {
        Some(path) => policy_for(path, &name)?,
        None => PolicySet::default(),
    };
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read plugin file {}", args.file.display()))?;
    let runtime = runtime(&args.runtime)?;
    let plugin = runtime
        .load(&name, &bytes, policies.sandbox_for(&name))
        .await
        .with_context(|| format!("{} cannot be used as a plugin", args.file.display()))?;
    Ok(Loaded {
        _runtime: runtime,
        provisioner: WasmProvisioner::new(Arc::new(plugin), policies.output_for(&name)),
        sandbox_note: sandbox_note(args.runtime.policy.as_deref(), &policies, &name),
    })
}

/// The policy file as the host that serves plugin `name` reads it: a local
/// run stands for that host, central or on a node (`runsOn: node`).
fn policy_for(path: &Path, name: &str) -> anyhow::Result<PolicySet> {
    let central = PolicySet::load(path)?;
    Ok(match central.runs_elsewhere(name) {
        Some(side) => PolicySet::load_for(path, side)?,
        None => central,
    })
}

/// Why plugin `name` gets no directories from the command line, if it does.
fn sandbox_note(policy: Option<&Path>, policies: &PolicySet, name: &str) -> Option<String> {
    let Some(path) = policy else {
        return Some(format!(
            "no sandbox policy was given (--policy), so plugin {name} ran with no directories \
             and no network, and may return no volume; pass a policy that preopens the \
             directories it uses and grants what it returns, e.g. \
             `--policy deploy/examples/policy.yaml`"
        ));
    };
    if policies.plugin_names().any(|n| n == name) {
        return None;
    }
    let entries = policies.plugin_names().collect::<Vec<_>>().join(", ");
    Some(format!(
        "sandbox policy {} has no entry plugins.{name}, so plugin {name} ran with the defaults: \
         no directories, no network, and no volume it may return; add that entry, or pass \
         --name to use another ({})",
        path.display(),
        if entries.is_empty() {
            "the policy has no plugin entries".to_owned()
        } else {
            format!("entries: {entries}")
        }
    ))
}

/// What a host on a cluster would do differently with `class` than a local
/// run with plugin `plugin` does: one warning per field to fix. These are
/// warnings, not errors: the local run is still meaningful (the plugin gets
/// the class's parameters either way), and a plugin author often tries a
/// build under another file name, or a class written for another host name.
fn class_warnings(class: &StorageClass, file: &Path, plugin: &PluginFile) -> Vec<String> {
    let Ok(name) = plugin_name(plugin) else {
        return Vec::new();
    };
    let class_name = class.metadata.name.as_deref().unwrap_or("(unnamed)");
    let file = file.display();
    let mut warnings = Vec::new();
    let named_by = match &plugin.name {
        Some(_) => "from --name".to_owned(),
        None => format!(
            "from the file name {}",
            plugin
                .file
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        ),
    };
    match class
        .parameters
        .as_ref()
        .and_then(|p| p.get(PLUGIN_PARAMETER))
        .filter(|p| !p.is_empty())
    {
        None => warnings.push(format!(
            "StorageClass {class_name} ({file}) has no \"{PLUGIN_PARAMETER}\" parameter; set \
             parameters.{PLUGIN_PARAMETER} to the plugin that serves it (`{PLUGIN_PARAMETER}: \
             {name}`). On a cluster the host refuses its claims; running plugin {name} anyway"
        )),
        Some(other) if *other != name => warnings.push(format!(
            "StorageClass {class_name} ({file}) names plugin {other:?} in \
             parameters.{PLUGIN_PARAMETER}, but this plugin is {name:?} ({named_by}); on a \
             cluster the host serves the class with plugin {other}. Set \
             parameters.{PLUGIN_PARAMETER} to {name}, or pass --name {other} (which also picks \
             the policy entry plugins.{other}); running plugin {name} anyway"
        )),
        Some(_) => {}
    }
    if ![DEFAULT_PROVISIONER_NAME, DEFAULT_NODE_PROVISIONER_NAME]
        .contains(&class.provisioner.as_str())
    {
        let provisioner = &class.provisioner;
        warnings.push(format!(
            "StorageClass {class_name} ({file}) has provisioner {provisioner:?}, but the host \
             serves {DEFAULT_PROVISIONER_NAME} ({DEFAULT_NODE_PROVISIONER_NAME} with \
             --node-name) unless run with --provisioner-name (or --extra-provisioner-names), \
             and ignores other classes. Set provisioner: {DEFAULT_PROVISIONER_NAME}, or run the \
             host with --provisioner-name {provisioner}; the volume made here records \
             provisioned-by {provisioner}"
        ));
    }
    warnings
}

/// Prints [`class_warnings`] on stderr.
fn warn_about_class(class: &StorageClass, file: &Path, plugin: &PluginFile) {
    for warning in class_warnings(class, file, plugin) {
        eprintln!("warning: {warning}");
    }
}

/// Reads the object of kind `T` that the file given to `flag` holds; an
/// error names the flag, the file, the kind it holds and the kind expected.
fn read_object<T: Resource + DeserializeOwned>(path: &Path, flag: &str) -> anyhow::Result<T> {
    let mut objects = read_objects(path, flag)?;
    match objects.len() {
        1 => Ok(objects.remove(0)),
        n => anyhow::bail!(
            "{} (given to {flag}) holds {n} objects; {flag} takes one {}",
            path.display(),
            T::KIND
        ),
    }
}

/// The objects of a YAML file of one or more documents (or of a JSON file),
/// each of kind `T`.
fn read_objects<T: Resource + DeserializeOwned>(path: &Path, flag: &str) -> anyhow::Result<Vec<T>> {
    let (kind, api_version) = (T::KIND, T::API_VERSION);
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read the {kind} file {} given to {flag}",
            path.display()
        )
    })?;
    let mut objects = Vec::new();
    for (i, document) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let value = serde_yaml::Value::deserialize(document).with_context(|| {
            format!(
                "{} (given to {flag}) is not valid YAML or JSON",
                path.display()
            )
        })?;
        if value.is_null() {
            continue; // an empty document, e.g. after a trailing `---`
        }
        let which = if i == 0 {
            String::new()
        } else {
            format!(" (document {})", i + 1)
        };
        // An object of another kind: say so, rather than what deserialising
        // it as `T` trips over first (often only its apiVersion).
        if let Some(found) = value
            .get("kind")
            .and_then(|k| k.as_str())
            .filter(|found| *found != kind)
        {
            anyhow::bail!(
                "{}{which} (given to {flag}) holds a {found}, but {flag} expects a {kind} \
                 (apiVersion: {api_version}, kind: {kind})",
                path.display()
            );
        }
        objects.push(serde_yaml::from_value(value).with_context(|| {
            format!(
                "{}{which} (given to {flag}) is not a valid {kind} manifest",
                path.display()
            )
        })?);
    }
    if objects.is_empty() {
        anyhow::bail!("{} (given to {flag}) holds no {kind}", path.display());
    }
    Ok(objects)
}

async fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let loaded = load(&args.plugin).await?;
    let plugin = loaded.provisioner.plugin();
    let compiled = plugin.compiled();
    let cache = match compiled.cache {
        CacheOutcome::Hit => "loaded from cache",
        CacheOutcome::Compiled => "compiled, cached",
        CacheOutcome::CompiledUncached => "compiled, not cached",
    };
    println!("file:          {}", args.plugin.file.display());
    println!("plugin:        {}", plugin.name());
    println!("size:          {} bytes", compiled.size);
    println!("digest:        {}", compiled.digest);
    println!(
        "contract:      wasmprov:provisioner@{} (supported by this host: {})",
        compiled.contract_version,
        crate::runtime::bindings::SUPPORTED_VERSIONS.join(", ")
    );
    println!(
        "capabilities:  block-volumes={} resize={}",
        plugin.capabilities().block_volumes,
        plugin.can_resize()
    );
    println!("load:          {:?} ({cache})", compiled.compile_time);
    println!("imports:");
    // Names come from the component: shown, never interpreted by the terminal.
    for import in &compiled.surface.imports {
        println!("  {}", escape_control(import));
    }
    println!("exports:");
    for export in &compiled.surface.exports {
        println!("  {}", escape_control(export));
    }
    Ok(ExitCode::SUCCESS)
}

async fn invoke(args: InvokeArgs) -> anyhow::Result<ExitCode> {
    let class: StorageClass = read_object(&args.class, "--class")?;
    let mut claim: PersistentVolumeClaim = read_object(&args.pvc, "--pvc")?;
    let node: Option<Node> = args
        .node
        .as_deref()
        .map(|p| read_object(p, "--node"))
        .transpose()?;
    warn_about_class(&class, &args.class, &args.plugin);
    let namespace = claim
        .metadata
        .namespace
        .get_or_insert_with(|| "default".to_owned())
        .clone();
    let name = claim
        .metadata
        .name
        .clone()
        .with_context(|| format!("{}: the claim has no metadata.name", args.pvc.display()))?;
    let uid = claim
        .metadata
        .uid
        .get_or_insert_with(|| stable_uid(&format!("{namespace}/{name}")))
        .clone();
    if let Some(spec_class) = claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_ref())
    {
        let class_name = class.metadata.name.as_deref().unwrap_or_default();
        if spec_class != class_name {
            eprintln!(
                "warning: claim {namespace}/{name} names StorageClass {spec_class:?}, but {} is {class_name:?}; provisioning with the given class",
                args.class.display()
            );
        }
    }
    let opts = ProvisionOptions {
        pv_name: format!("pvc-{uid}"),
        claim,
        class,
        selected_node: node,
    };
    let loaded = load(&args.plugin).await?;
    match loaded.provisioner.provision(&opts).await {
        Ok(pv) => {
            print!("{}", to_yaml(&pv)?);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!(
                "error: provisioning {} for claim {namespace}/{name} failed ({}): {}",
                opts.pv_name,
                state_name(e.state),
                e.message
            );
            // An invalid request is the class's or claim's fault, whatever
            // the sandbox.
            if e.state != ProvisionState::InvalidArgument {
                loaded.print_sandbox_note();
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn delete(args: DeleteArgs) -> anyhow::Result<ExitCode> {
    let pv: PersistentVolume = read_object(&args.pv, "--pv")?;
    let class: Option<StorageClass> = args
        .class
        .as_deref()
        .map(|p| read_object(p, "--class"))
        .transpose()?;
    let loaded = load(&args.plugin).await?;
    let name = pv.metadata.name.clone().unwrap_or_default();
    let note = match &class {
        Some(class) => crate::provisioner::missing_class(&pv, Some(class)),
        None => Some(
            "the plugin got only the class parameters recorded on the volume; pass the StorageClass \
             it was made with as --class, as the host gets the others from the volume's class"
                .to_owned(),
        ),
    };
    let pv = crate::provisioner::with_class_parameters(&pv, class.as_ref());
    match loaded.provisioner.delete(&pv).await {
        Ok(()) => {
            println!("deleted the storage of PersistentVolume {name}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {}", e.message);
            if let Some(note) = note {
                eprintln!("note: {note}");
            }
            loaded.print_sandbox_note();
            Ok(ExitCode::FAILURE)
        }
    }
}

fn state_name(state: ProvisionState) -> &'static str {
    use ProvisionState as S;
    match state {
        S::Failed => "failed",
        S::InBackground => "in-background",
        S::NoChange => "no-change",
        S::Reschedule => "reschedule",
        S::InvalidArgument => "invalid-argument",
    }
}

/// A UUID-shaped id derived from `seed` (e.g. a claim's `namespace/name`), so
/// repeated runs name things the same way.
fn stable_uid(seed: &str) -> String {
    let h = hex::encode(&Sha256::digest(seed)[..16]);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A PersistentVolume as YAML with its apiVersion and kind first.
fn to_yaml(pv: &PersistentVolume) -> anyhow::Result<String> {
    // k8s-openapi serialises apiVersion and kind itself.
    Ok(serde_yaml::to_string(pv)?)
}
