#!/bin/sh
# Builds {{name}}.wasm (a WebAssembly component for wasmprov) from main.go:
# `go build` for WASI preview 1 makes a core module, then `wasmprov plugin
# componentize` makes that a component with the SDK's world.
set -eu
cd "$(dirname "$0")"
go=${GO:-go}
if ! command -v "$go" >/dev/null 2>&1; then
    if [ -x /usr/local/go/bin/go ]; then
        go=/usr/local/go/bin/go
    else
        echo "go not found: install Go 1.25 or later (https://go.dev/dl)" >&2
        exit 1
    fi
fi
wasmprov=${WASMPROV:-wasmprov}
if ! command -v "$wasmprov" >/dev/null 2>&1; then
    echo "$wasmprov not found: put wasmprov on PATH (or set WASMPROV to it); it makes the component" >&2
    exit 1
fi
mkdir -p build
GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 "$go" build -trimpath -buildmode=c-shared \
    -ldflags="-checklinkname=0 -s -w" -o build/{{name}}.core.wasm .
# The world the SDK's bindings were generated from, in the SDK module.
sdk=$("$go" list -m -json {{go_sdk_module}} | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' | head -n 1)
"$wasmprov" plugin componentize build/{{name}}.core.wasm --wit "$sdk/wit" \
    --world provisioner -o {{name}}.wasm >/dev/null
echo "built {{name}}.wasm ($(wc -c < {{name}}.wasm) bytes)"
