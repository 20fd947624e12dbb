//! `wasmprov plugin pack`: the ConfigMaps that deliver a plugin, as YAML for
//! `kubectl apply --server-side -f -`.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, ValueEnum};

use super::PluginFile;
use crate::delivery::encoding::{self, Encoding};
use crate::delivery::package::{self, DEFAULT_PART_SIZE, PLUGIN_LABEL};
use crate::policy::PolicySet;

#[derive(Debug, Args)]
pub struct PackArgs {
    #[command(flatten)]
    pub plugin: PluginFile,
    /// How to compress the component in the ConfigMap.
    #[arg(long, value_enum, default_value_t = Compression::Zstd)]
    pub compression: Compression,
    /// Namespace of the ConfigMaps (the host's); without it, kubectl's.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Most bytes of plugin data in one ConfigMap; a larger plugin is split
    /// into parts and a manifest, which only the API source reads.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_PART_SIZE)]
    pub part_size: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Compression {
    Zstd,
    Gzip,
    None,
}

impl From<Compression> for Encoding {
    fn from(c: Compression) -> Self {
        match c {
            Compression::Zstd => Encoding::Zstd,
            Compression::Gzip => Encoding::Gzip,
            Compression::None => Encoding::Plain,
        }
    }
}

/// Client-side `kubectl apply` copies the object into an annotation, and
/// annotations may total 256 KiB; base64 makes the data 4/3 larger.
const CLIENT_SIDE_APPLY_LIMIT: usize = 180 * 1024;

pub async fn pack(args: PackArgs) -> anyhow::Result<ExitCode> {
    let file = &args.plugin.file;
    let name = match &args.plugin.name {
        Some(name) => name.clone(),
        None => {
            let file_name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
            encoding::plugin_file(file_name)
                .map(|(n, _)| n.to_owned())
                .with_context(|| {
                    format!(
                        "{}: cannot derive a plugin name; pass --name",
                        file.display()
                    )
                })?
        }
    };
    package::packable_name(&name).map_err(anyhow::Error::msg)?;
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    // A compressed input (`x.wasm.zst`) is packed as the component it holds.
    let input_encoding = file
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(encoding::plugin_file)
        .map_or(Encoding::Plain, |(_, e)| e);
    let wasm = encoding::decode(input_encoding, bytes)
        .with_context(|| format!("{} cannot be decompressed", file.display()))?;

    // Refuse what the host would reject: not a component, wrong world,
    // unsupported contract version.
    let policies = match &args.plugin.runtime.policy {
        Some(path) => super::policy_for(path, &name)?,
        None => PolicySet::default(),
    };
    let runtime = super::runtime(&args.plugin.runtime)?;
    runtime
        .load(&name, &wasm, policies.sandbox_for(&name))
        .await
        .with_context(|| format!("{} cannot be used as a plugin", file.display()))?;

    let encoding = Encoding::from(args.compression);
    let component_size = wasm.len();
    let packed = tokio::task::spawn_blocking({
        let (name, namespace, part_size) = (name.clone(), args.namespace.clone(), args.part_size);
        move || package::pack(&name, &wasm, encoding, namespace.as_deref(), part_size)
    })
    .await
    .context("packing task failed")?
    .map_err(anyhow::Error::msg)?;

    let count = packed.config_maps.len();
    let mut out = format!(
        "# Plugin {name} ({}), made by `wasmprov plugin pack`.\n\
         # {} bytes {} in {count} ConfigMap{}. Apply with: kubectl apply --server-side -f -\n",
        packed.digest,
        packed.encoded_size,
        package::encoding_name(encoding),
        if count == 1 { "" } else { "s" },
    );
    if packed.chunked {
        out.push_str(
            "# Chunked: only the host's API (ConfigMap) source reads it;\n\
             # mounted as a directory it shows manifest.json and no plugin.\n",
        );
    }
    out.push_str(&package::to_yaml(&packed.config_maps)?);
    print!("{out}");

    let kind = if packed.chunked {
        format!("{} parts and a manifest", count - 1)
    } else {
        format!("1 ConfigMap ({})", package::config_map_name(&name))
    };
    eprintln!(
        "packed plugin {name} ({}): {} bytes, {} {} bytes, {kind}",
        packed.digest,
        component_size,
        package::encoding_name(encoding),
        packed.encoded_size,
    );
    if packed.chunked {
        eprintln!(
            "note: a chunked plugin is read through the API only (the host's ConfigMap \
             source), not from a mounted directory; parts left over \
             from a bigger earlier version are ignored (remove them with `kubectl delete \
             configmap -l {PLUGIN_LABEL}={name}` before applying, if you like)"
        );
    }
    if packed.encoded_size > CLIENT_SIDE_APPLY_LIMIT {
        eprintln!(
            "note: apply with `kubectl apply --server-side -f -` (or `kubectl create -f -`): \
             plain `kubectl apply` copies each object into an annotation limited to 256 KiB, \
             which these ConfigMaps exceed"
        );
    }
    Ok(ExitCode::SUCCESS)
}
