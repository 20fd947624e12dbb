#!/bin/sh
# Builds {{name}}.wasm (a WebAssembly component for wasmprov) from this crate.
set -eu
cd "$(dirname "$0")"
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    echo "the wasm32-wasip2 target is missing: run \`rustup target add wasm32-wasip2\`" >&2
    exit 1
fi
cargo build --release --target wasm32-wasip2
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
cp "$target_dir/wasm32-wasip2/release/{{crate_file}}.wasm" {{name}}.wasm
echo "built {{name}}.wasm ($(wc -c < {{name}}.wasm) bytes)"
