#!/bin/sh
# Builds {{name}}.wasm (a WebAssembly component for wasmprov) from app.js:
# esbuild bundles it with the SDK into one module, componentize-js makes
# that a component. The first run installs them (package.json) into
# node_modules; later runs install again only when package.json changed.
set -eu
cd "$(dirname "$0")"
for tool in node npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "$tool not found: install Node.js 18 or later with npm (e.g. apt-get install nodejs npm)" >&2
        exit 1
    fi
done
if ! cmp -s package.json node_modules/.package.json.installed; then
    npm install --no-audit --no-fund --loglevel=error
    cp package.json node_modules/.package.json.installed
fi
mkdir -p build
# The host's interfaces (wasmprov:…, wasi:…) are the component's imports,
# not modules to bundle.
node_modules/.bin/esbuild app.js --bundle --format=esm --platform=neutral --log-level=warning \
    '--external:wasmprov:*' '--external:wasi:*' --outfile=build/{{name}}.js
# `-d http fetch-event`: no wasi:http import, which the sandbox does not
# provide.
node_modules/.bin/componentize-js build/{{name}}.js --wit node_modules/wasmprov-plugin/wit \
    -n provisioner -d http fetch-event -o {{name}}.wasm.tmp >/dev/null
mv {{name}}.wasm.tmp {{name}}.wasm
echo "built {{name}}.wasm ($(wc -c < {{name}}.wasm) bytes)"
