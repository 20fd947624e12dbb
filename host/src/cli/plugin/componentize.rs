//! `wasmprov plugin componentize CORE -o OUT`: the last step of building a
//! plugin in a language whose compiler makes a core module for WASI preview
//! 1 (C with clang and wasi-libc, Go with `GOOS=wasip1`): embed the WIT
//! world the module implements (unless its bindings already carry it) and
//! adapt its `wasi_snapshot_preview1` imports to WASI preview 2 with the
//! reactor adapter of the wasmtime release this host runs, so that the
//! component imports exactly what the sandbox provides. What `wasm-tools
//! component embed` and `component new --adapt` do, without installing them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER;

#[derive(Debug, Args)]
pub struct ComponentizeArgs {
    /// The core module (`.wasm`), e.g. from `clang --target=wasm32-wasi
    /// -mexec-model=reactor` or `GOOS=wasip1 go build -buildmode=c-shared`.
    #[arg(value_name = "CORE")]
    pub core: PathBuf,
    /// The WIT directory of the world the module implements, to embed in it
    /// (leave out when the module's bindings embedded it already, as
    /// wit-bindgen's `*_component_type.o` does).
    #[arg(long, value_name = "DIR")]
    pub wit: Option<PathBuf>,
    /// The world in --wit.
    #[arg(long, default_value = "provisioner", requires = "wit")]
    pub world: String,
    /// Where to write the component.
    #[arg(short, long, value_name = "OUT")]
    pub out: PathBuf,
}

pub fn componentize(args: ComponentizeArgs) -> anyhow::Result<ExitCode> {
    let core = std::fs::read(&args.core)
        .with_context(|| format!("cannot read the core module {}", args.core.display()))?;
    let component = component_of(core, args.wit.as_deref(), &args.world)
        .with_context(|| format!("cannot make a component of {}", args.core.display()))?;
    super::write_atomically(&args.out, &component)?;
    println!("wrote {} ({} bytes)", args.out.display(), component.len());
    Ok(ExitCode::SUCCESS)
}

fn component_of(mut core: Vec<u8>, wit: Option<&Path>, world: &str) -> anyhow::Result<Vec<u8>> {
    if is_component(&core) {
        anyhow::bail!("it is a component already: give the core module the compiler wrote");
    }
    if wit.is_none() && !carries_a_world(&core) {
        anyhow::bail!(
            "the module carries no WIT world: pass --wit DIR with the world it implements (or \
             link the bindings' *_component_type.o)"
        );
    }
    if let Some(dir) = wit {
        let mut resolve = wit_parser::Resolve::default();
        let (package, _) = resolve
            .push_path(dir)
            .with_context(|| format!("cannot read the WIT in {}", dir.display()))?;
        let world = resolve
            .select_world(&[package], Some(world))
            .with_context(|| format!("no world {world:?} in {}", dir.display()))?;
        wit_component::embed_component_metadata(
            &mut core,
            &resolve,
            world,
            wit_component::StringEncoding::UTF8,
        )?;
    }
    wit_component::ComponentEncoder::default()
        .module(&core)
        .context("the module does not match the WIT world it carries")?
        .adapter(
            "wasi_snapshot_preview1",
            WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )?
        .validate(true)
        .encode()
}

/// Whether a core module has the `component-type` custom section that
/// wit-bindgen's object file or `embed_component_metadata` adds.
fn carries_a_world(core: &[u8]) -> bool {
    wasmtime::wasmparser::Parser::new(0)
        .parse_all(core)
        .any(|payload| {
            matches!(payload, Ok(wasmtime::wasmparser::Payload::CustomSection(section))
                if section.name().starts_with("component-type"))
        })
}

/// A component starts with the component layer's version, a core module
/// with version 1.
fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] != [1, 0, 0, 0]
}
