#!/bin/sh
# Builds {{name}}.wasm (a WebAssembly component for wasmprov) from plugin.c:
# clang compiles it with the SDK (wasmprov-sdk/, bindings included) into a
# WASI core module, then `wasmprov plugin componentize` makes that a
# component with the plugin's world.
set -eu
cd "$(dirname "$0")"
wasmprov=${WASMPROV:-wasmprov}
if ! command -v clang >/dev/null 2>&1; then
    echo "clang not found: install clang, lld and wasi-libc (e.g. apt-get install clang lld wasi-libc libclang-rt-dev-wasm32)" >&2
    exit 1
fi
if ! command -v "$wasmprov" >/dev/null 2>&1; then
    echo "$wasmprov not found: put wasmprov on PATH (or set WASMPROV to it); it makes the component" >&2
    exit 1
fi
mkdir -p build
clang --target=wasm32-wasi -mexec-model=reactor -Os -Wall -Wextra -Werror -Wno-unused-parameter \
    -I wasmprov-sdk -I wasmprov-sdk/bindings -o build/{{name}}.core.wasm \
    plugin.c wasmprov-sdk/wasmprov_plugin.c wasmprov-sdk/bindings/provisioner.c
"$wasmprov" plugin componentize build/{{name}}.core.wasm --wit wasmprov-sdk/wit \
    --world provisioner -o {{name}}.wasm >/dev/null
echo "built {{name}}.wasm ($(wc -c < {{name}}.wasm) bytes)"
