#!/usr/bin/env bash
# Regenerates bindings/ from wit/provisioner.wit (a copy of the repository's
# wit/provisioner.wit): the Go bindings of the `provisioner` world by
# wit-bindgen-cli 0.60.0's Go generator, moved into this module, and the
# runtime helpers they use (go.bytecodealliance.org/pkg v0.2.2, which is not
# on the Go module proxy) copied in beside them.
#
# Usage: plugins/sdk-go/generate.sh [OUT]   (OUT defaults to plugins/sdk-go/bindings)
#
# wit-bindgen: $WIT_BINDGEN, or target/plugin-toolchains/go/bin/wit-bindgen
# and target/plugin-toolchains/go/pkg-v0.2.2, as `bash plugins/build.sh`
# installs them for the Go plugins.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
root="$(cd "$here/../.." && pwd -P)"
out="${1:-$here/bindings}"
module="$(sed -n 's/^module //p' "$here/go.mod")"
wit_bindgen="${WIT_BINDGEN:-$root/target/plugin-toolchains/go/bin/wit-bindgen}"
pkg="${GO_PKG:-$root/target/plugin-toolchains/go/pkg-v0.2.2}"
[[ -x "$wit_bindgen" ]] || { echo "generate.sh: $wit_bindgen not found: run bash plugins/build.sh (it installs it)" >&2; exit 1; }
[[ -f "$pkg/go.mod" ]] || { echo "generate.sh: $pkg not found: run bash plugins/build.sh" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$wit_bindgen" go "$here/wit" --world provisioner --out-dir "$work/gen" >"$work/log" 2>&1 ||
    { cat "$work/log" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/types" "$out/logging" "$out/exports" "$out/wit"
cp "$work/gen/wasmprov_provisioner_types/"* "$out/types/"
cp "$work/gen/wasmprov_provisioner_logging/"* "$out/logging/"
# The exports: a package of their own (not main) that calls the plugin the
# program registers (package hooks), instead of a package the author writes.
sed -e 's/^package main$/package exports/' "$work/gen/wit_exports.go" >"$out/exports/wit_exports.go"
cp -R "$pkg/wit/types" "$pkg/wit/runtime" "$pkg/wit/async" "$out/wit/"
cp "$pkg/LICENSE" "$out/wit/LICENSE"

# Imports, as this module names the packages.
find "$out" -name '*.go' -print0 | xargs -0 sed -i \
    -e "s#\"wit_component/wasmprov_provisioner_types\"#wasmprov_provisioner_types \"$module/bindings/types\"#" \
    -e "s#\"wit_component/wasmprov_provisioner_logging\"#wasmprov_provisioner_logging \"$module/bindings/logging\"#" \
    -e "s#\"wit_component/export_wasmprov_provisioner_plugin\"#export_wasmprov_provisioner_plugin \"$module/hooks\"#" \
    -e "s#\"go.bytecodealliance.org/pkg/wit/#\"$module/bindings/wit/#"
# The package names wit-bindgen gave, for the directories they now live in.
sed -i 's/^package wasmprov_provisioner_types$/package types/' "$out/types/wit_bindings.go"
sed -i 's/^package wasmprov_provisioner_logging$/package logging/' "$out/logging/wit_bindings.go"
gofmt_bin="$(command -v gofmt || echo /usr/local/go/bin/gofmt)"
"$gofmt_bin" -w "$out"
