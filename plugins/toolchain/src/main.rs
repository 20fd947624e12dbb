//! `wasmprov-adapter OUT`: writes the `wasi_snapshot_preview1` reactor adapter
//! (from the wasmtime release the host uses) to OUT, for
//! `wasm-tools component new core.wasm --adapt wasi_snapshot_preview1=OUT`.

use std::process::ExitCode;

use wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER;

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!(
            "usage: wasmprov-adapter OUT (writes the wasi_snapshot_preview1 reactor adapter)"
        );
        return ExitCode::from(2);
    };
    match std::fs::write(&out, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "wasmprov-adapter: cannot write {}: {e}",
                out.to_string_lossy()
            );
            ExitCode::FAILURE
        }
    }
}
