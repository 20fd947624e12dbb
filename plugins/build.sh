#!/usr/bin/env bash
# Builds every wasmprov plugin and test guest into a WebAssembly component:
#
#   plugins/<name>/       -> target/plugins/<name>.wasm
#   tests/guests/<name>/  -> target/test-guests/<name>.wasm
#
# Usage: bash plugins/build.sh [--quiet] [--rust-only]
#
# --rust-only builds only the Rust plugins and guests: it needs nothing but
# `rustup target add wasm32-wasip2` (what `wasmprov dev` uses on a fresh machine).
#
# Languages, found by what a plugin directory holds:
#   Cargo.toml (a cdylib) -> Rust (wit-bindgen, target wasm32-wasip2)
#   *.c                   -> C (wit-bindgen c, clang --target=wasm32-wasi, the
#                            WASI reactor adapter, wasm-tools component new)
#   app.js                -> JavaScript (componentize-js, -d http fetch-event)
#   app.py                -> Python (componentize-py)
#   go.mod                -> Go (wit-bindgen go, GOOS=wasip1 -buildmode=c-shared,
#                            the WASI reactor adapter, wasm-tools component new)
#
# The contract: wit/provisioner.wit, world `provisioner`, unless the plugin
# directory has a `wit` (e.g. a symlink to ../../wit/v0.1, the frozen 0.1.0)
# or a `world` file (`resizable-provisioner` for plugins that grow volumes).
# Rust plugins choose their world through the SDK's export macro instead.
#
# Toolchains: C needs the apt packages clang lld wasi-libc libclang-rt-dev-wasm32,
# JavaScript needs node and npm, Python needs python3 with venv (`.ci/run`
# installs them), Go needs Go >= 1.25 (`go` on PATH, else /usr/local/go/bin).
# Everything else is installed on first use into target/plugin-toolchains/
# (componentize-js from npm, componentize-py from PyPI in a venv,
# wit-bindgen-cli and wasm-tools with `cargo install --root`; the latter take
# minutes, once) and reused afterwards.
#
# C, JavaScript, Python and Go plugins are rebuilt only when their sources, the
# WIT files or the toolchain version changed (a stamp next to the build).
#
# - Rust crates are built with `cargo build --profile plugin --target wasm32-wasip2`
#   in their own target directory (target/wasm-build), so this never waits on the
#   lock of the host's own `cargo build`/`cargo test`.
# - Outputs are replaced atomically (copy to a temporary file, then rename) and
#   only when their content changed: a reader never sees half a file, and a file
#   watcher never sees a spurious change.
# - RUSTFLAGS and friends are ignored (they are usually meant for the host);
#   pass plugin flags with CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS.
# - Safe to run from several processes at once (cargo serializes on its build
#   directory lock; the renames are atomic) and fast when nothing changed.
#
# Adding a language: write a `build_<language>` function that builds its
# plugins and calls `produced <built file> <output file>` for each, then call it
# from the "Build" section at the bottom.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
RUST_TARGET=wasm32-wasip2
TOOLCHAINS="$ROOT/target/plugin-toolchains"
COMPONENTIZE_JS_VERSION=0.23.0
COMPONENTIZE_PY_VERSION=0.25.1
WIT_BINDGEN_VERSION=0.63.0
# The Go generator of wit-bindgen-cli: 0.60.0 is the newest whose helper module
# (go.bytecodealliance.org/pkg v0.2.2, shipped inside the crate wit-bindgen-go)
# builds with Go 1.25/1.26; 0.63.0's wants Go 1.27.1. Installed on its own
# (only the `go` feature) into target/plugin-toolchains/go.
WIT_BINDGEN_GO_VERSION=0.60.0
GO_PKG_VERSION=v0.2.2
WASM_TOOLS_VERSION=1.263.0
PROFILE=plugin
WASM_BUILD_DIR="$ROOT/target/wasm-build"
PLUGINS_OUT="$ROOT/target/plugins"
GUESTS_OUT="$ROOT/target/test-guests"

QUIET=()
RUST_ONLY=0
for arg in "$@"; do
    case "$arg" in
        -q | --quiet) QUIET=(--quiet) ;;
        --rust-only) RUST_ONLY=1 ;;
        -h | --help)
            sed -n '2,41p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "plugins/build.sh: unknown argument '$arg' (try --help)" >&2
            exit 2
            ;;
    esac
done

die() {
    echo "plugins/build.sh: error: $*" >&2
    exit 1
}

warn() {
    echo "plugins/build.sh: warning: $*" >&2
}

# Pairs "built-file<TAB>output-file", filled by the language sections.
OUTPUTS=()
produced() {
    OUTPUTS+=("$1"$'\t'"$2")
}

# The `name` of the [package] section of a Cargo.toml.
package_name() {
    sed -n '/^\[package\]/,/^\[/{s/^name[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p;}' "$1" | head -n 1
}

# ---------------------------------------------------------------------------
# Rust: every crate under plugins/ and tests/guests/ (workspace members).
# ---------------------------------------------------------------------------
build_rust() {
    command -v cargo >/dev/null 2>&1 ||
        die "cargo not found: install Rust (https://rustup.rs), then run: rustup target add $RUST_TARGET"
    local sysroot
    sysroot="$(cd "$ROOT" && rustc --print sysroot)" || die "rustc --print sysroot failed"
    [[ -d "$sysroot/lib/rustlib/$RUST_TARGET" ]] ||
        die "the Rust target $RUST_TARGET is not installed for $(cd "$ROOT" && rustc --version); run: rustup target add $RUST_TARGET"

    # Flags meant for the host build (target-cpu=native, coverage
    # instrumentation from `cargo llvm-cov`...) break or bloat a wasm build.
    # Flags for plugins go in CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS.
    unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS

    # Workspace members (with their manifest paths): a crate that is not one
    # cannot be built from the workspace, so it is skipped with a warning.
    local members
    members="$(cd "$ROOT" && cargo metadata --no-deps --format-version 1 --offline)" ||
        die "cargo metadata failed in $ROOT (see above)"

    local packages=() pending=() manifest dir name out_dir
    for manifest in "$ROOT"/plugins/*/Cargo.toml "$ROOT"/tests/guests/*/Cargo.toml; do
        [[ -f "$manifest" ]] || continue
        dir="$(dirname "$manifest")"
        # Libraries (e.g. plugins/sdk, the helper crate) are not components.
        grep -Eq '^crate-type[[:space:]]*=.*"cdylib"' "$manifest" || continue
        if [[ "$members" != *"\"manifest_path\":\"$manifest\""* ]]; then
            warn "skipped ${dir#"$ROOT"/}: not a member of the workspace; add \"${dir#"$ROOT"/}\" to [workspace] members in Cargo.toml"
            continue
        fi
        name="$(package_name "$manifest")"
        [[ -n "$name" ]] || die "no [package] name in ${manifest#"$ROOT"/}"
        case "$dir" in
            "$ROOT"/plugins/*) out_dir="$PLUGINS_OUT" ;;
            *) out_dir="$GUESTS_OUT" ;;
        esac
        packages+=(-p "$name")
        # cargo names a cdylib after the crate, with '-' turned into '_'.
        pending+=("$WASM_BUILD_DIR/$RUST_TARGET/$PROFILE/${name//-/_}.wasm"$'\t'"$out_dir/$name.wasm")
    done
    [[ ${#packages[@]} -gt 0 ]] || return 0

    (cd "$ROOT" && cargo build ${QUIET[@]+"${QUIET[@]}"} --profile "$PROFILE" --target "$RUST_TARGET" \
        --target-dir "$WASM_BUILD_DIR" "${packages[@]}") ||
        die "cargo build of the Rust plugins failed (see above)"

    local entry
    for entry in "${pending[@]}"; do
        produced "${entry%%$'\t'*}" "${entry#*$'\t'}"
    done
}

# ---------------------------------------------------------------------------
# C, JavaScript and Python: shared helpers.
# ---------------------------------------------------------------------------

# Plugin directories holding files that match a pattern, e.g. "app.py". The
# SDKs (plugins/sdk, plugins/sdk-<language>) are libraries, not plugins.
plugin_dirs_with() {
    local dir
    for dir in "$ROOT"/plugins/*/; do
        dir="${dir%/}"
        case "${dir##*/}" in sdk | sdk-*) continue ;; esac
        compgen -G "$dir/$1" >/dev/null && printf '%s\n' "$dir"
    done
    return 0
}

# A digest of the given files (sorted by path) plus extra words: the stamp
# that says whether a build is up to date.
inputs_digest() {
    local words="$1"
    shift
    {
        echo "$words"
        local f
        for f in $(printf '%s\n' "$@" | LC_ALL=C sort); do
            echo "$f"
            cat "$f"
        done
    } | sha256sum | cut -d' ' -f1
}

# up_to_date BUILT STAMP: BUILT exists and was built from inputs with STAMP.
up_to_date() {
    [[ -f "$1" && -f "$1.stamp" && "$(cat "$1.stamp")" == "$2" ]]
}

# Serializes toolchain installs and non-Rust builds between concurrent runs.
lock_toolchains() {
    mkdir -p "$TOOLCHAINS"
    exec 9>"$TOOLCHAINS/.lock"
    flock 9
}

need_command() {
    command -v "$1" >/dev/null 2>&1 || die "$1 not found: $2"
}

# cargo_tool NAME CRATE VERSION [ROOT [INSTALL-FLAGS...]]: the path of a
# cargo-installed tool of that version, installing it into ROOT (default
# target/plugin-toolchains/cargo) with the extra `cargo install` flags if needed.
cargo_tool() {
    local name="$1" crate="$2" version="$3" root="${4:-$TOOLCHAINS/cargo}"
    local local_bin="$root/bin/$1"
    if (($# >= 4)); then shift 4; else shift $#; fi
    if command -v "$name" >/dev/null 2>&1 && "$name" --version 2>/dev/null | grep -q " $version"; then
        command -v "$name"
        return 0
    fi
    if ! { [[ -x "$local_bin" ]] && "$local_bin" --version 2>/dev/null | grep -q " $version"; }; then
        echo "plugins/build.sh: installing $crate $version into ${root#"$ROOT"/} (once; takes minutes)" >&2
        (cd "$ROOT" && unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS &&
            cargo install ${QUIET[@]+"${QUIET[@]}"} --locked "$crate" --version "$version" --root "$root" "$@") >&2 ||
            die "cargo install $crate $version failed (see above)"
    fi
    echo "$local_bin"
}

# The contract a plugin directory targets: its `wit` (a directory, usually a
# symlink to an older version such as ../../wit/v0.1) or the repository's
# wit/, and the world named in its `world` file or `provisioner` (plugins
# that grow volumes say `resizable-provisioner`).
plugin_wit() {
    if [[ -e "$1/wit" ]]; then (cd "$1/wit" && pwd -P); else echo "$ROOT/wit"; fi
}
plugin_world() {
    if [[ -f "$1/world" ]]; then tr -d '[:space:]' <"$1/world"; else echo provisioner; fi
}

# reactor_adapter OUT: writes the wasi_snapshot_preview1 reactor adapter of the
# host's wasmtime release (crate wasi-preview1-component-adapter-provider, see
# plugins/toolchain) to OUT. C and Go core modules become components with it.
reactor_adapter() {
    mkdir -p "$(dirname "$1")"
    (cd "$ROOT" && unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS &&
        cargo run ${QUIET[@]+"${QUIET[@]}"} -p wasmprov-plugin-toolchain --bin wasmprov-adapter \
            --target-dir "$WASM_BUILD_DIR" -- "$1") ||
        die "cannot write the WASI reactor adapter (see above)"
}

# ---------------------------------------------------------------------------
# Python: plugins/<name>/app.py, module `app` defining `class Plugin`.
# ---------------------------------------------------------------------------
build_python() {
    local dirs
    dirs="$(plugin_dirs_with app.py)"
    [[ -n "$dirs" ]] || return 0
    local venv="$TOOLCHAINS/py" tool="$TOOLCHAINS/py/bin/componentize-py"
    if ! { [[ -x "$tool" ]] && "$tool" --version 2>/dev/null | grep -q " $COMPONENTIZE_PY_VERSION"; }; then
        need_command python3 "install Python 3 with venv (apt-get install python3 python3-venv)"
        echo "plugins/build.sh: installing componentize-py $COMPONENTIZE_PY_VERSION into ${venv#"$ROOT"/}" >&2
        python3 -m venv "$venv" >&2 ||
            die "python3 -m venv failed; install the venv module (apt-get install python3-venv)"
        "$venv/bin/pip" install -q "componentize-py==$COMPONENTIZE_PY_VERSION" >&2 ||
            die "pip install componentize-py==$COMPONENTIZE_PY_VERSION failed (see above)"
    fi
    local dir name built stamp wit world
    while IFS= read -r dir; do
        name="$(basename "$dir")"
        built="$WASM_BUILD_DIR/python/$name.wasm"
        wit="$(plugin_wit "$dir")" world="$(plugin_world "$dir")"
        stamp="$(inputs_digest "componentize-py $COMPONENTIZE_PY_VERSION $world" "$wit"/*.wit $(find "$dir" -name '*.py' -not -path '*/__pycache__/*'))"
        if ! up_to_date "$built" "$stamp"; then
            mkdir -p "$(dirname "$built")"
            [[ ${#QUIET[@]} -gt 0 ]] || echo "   Building Python plugin $name (componentize-py)" >&2
            "$tool" -d "$wit" -w "$world" componentize -p "$dir" app -o "$built.tmp" >"$built.log" 2>&1 ||
                { cat "$built.log" >&2; die "componentize-py failed for plugins/$name (see above)"; }
            mv -f "$built.tmp" "$built"
            echo "$stamp" >"$built.stamp"
        fi
        produced "$built" "$PLUGINS_OUT/$name.wasm"
    done <<<"$dirs"
}

# ---------------------------------------------------------------------------
# JavaScript: plugins/<name>/app.js, an ES module exporting `plugin`.
# ---------------------------------------------------------------------------
build_javascript() {
    local dirs
    dirs="$(plugin_dirs_with app.js)"
    [[ -n "$dirs" ]] || return 0
    local prefix="$TOOLCHAINS/js"
    local cli="$prefix/node_modules/@bytecodealliance/componentize-js/src/cli.js"
    local installed="$prefix/node_modules/@bytecodealliance/componentize-js/package.json"
    need_command node "install Node.js 18 or later and npm (apt-get install nodejs npm)"
    if ! { [[ -f "$installed" ]] && grep -q "\"version\": \"$COMPONENTIZE_JS_VERSION\"" "$installed"; }; then
        need_command npm "install npm (apt-get install npm)"
        echo "plugins/build.sh: installing componentize-js $COMPONENTIZE_JS_VERSION into ${prefix#"$ROOT"/}" >&2
        mkdir -p "$prefix"
        [[ -f "$prefix/package.json" ]] || echo '{"name":"wasmprov-plugin-toolchain","private":true}' >"$prefix/package.json"
        (cd "$prefix" && npm install -E --no-audit --no-fund --loglevel=error "@bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION") >&2 ||
            die "npm install @bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION failed (see above)"
    fi
    local dir name built stamp wit world
    while IFS= read -r dir; do
        name="$(basename "$dir")"
        built="$WASM_BUILD_DIR/javascript/$name.wasm"
        wit="$(plugin_wit "$dir")" world="$(plugin_world "$dir")"
        stamp="$(inputs_digest "componentize-js $COMPONENTIZE_JS_VERSION $(node --version) $world" "$wit"/*.wit $(find "$dir" -name '*.js' -not -path '*/node_modules/*'))"
        if ! up_to_date "$built" "$stamp"; then
            mkdir -p "$(dirname "$built")"
            [[ ${#QUIET[@]} -gt 0 ]] || echo "   Building JavaScript plugin $name (componentize-js)" >&2
            # `-d http fetch-event`: no wasi:http import, which the sandbox
            # does not provide.
            node "$cli" --wit "$wit" -n "$world" -d http fetch-event -o "$built.tmp" "$dir/app.js" >"$built.log" 2>&1 ||
                { cat "$built.log" >&2; die "componentize-js failed for plugins/$name (see above)"; }
            mv -f "$built.tmp" "$built"
            echo "$stamp" >"$built.stamp"
        fi
        produced "$built" "$PLUGINS_OUT/$name.wasm"
    done <<<"$dirs"
}

# ---------------------------------------------------------------------------
# C: plugins/<name>/*.c against bindings from `wit-bindgen c`.
# ---------------------------------------------------------------------------
build_c() {
    local dirs
    dirs="$(plugin_dirs_with '*.c')"
    [[ -n "$dirs" ]] || return 0
    need_command clang "install the C toolchain for WebAssembly (apt-get install clang lld wasi-libc libclang-rt-dev-wasm32)"
    command -v wasm-ld >/dev/null 2>&1 || command -v wasm-ld-14 >/dev/null 2>&1 || ls /usr/bin/wasm-ld* >/dev/null 2>&1 ||
        die "wasm-ld not found: apt-get install lld"
    local wit_bindgen wasm_tools
    wit_bindgen="$(cargo_tool wit-bindgen wit-bindgen-cli "$WIT_BINDGEN_VERSION")" || exit 1
    wasm_tools="$(cargo_tool wasm-tools wasm-tools "$WASM_TOOLS_VERSION")" || exit 1

    local adapter="$WASM_BUILD_DIR/c/wasi_snapshot_preview1.reactor.wasm"
    reactor_adapter "$adapter"

    local dir name built stamp work sources wit world bindings bindings_stamp
    while IFS= read -r dir; do
        name="$(basename "$dir")"
        work="$WASM_BUILD_DIR/c/$name"
        built="$work/$name.wasm"
        sources=("$dir"/*.c)
        wit="$(plugin_wit "$dir")" world="$(plugin_world "$dir")"
        # The bindings of the plugin's world: <world>.h, .c and
        # _component_type.o, with dashes as underscores.
        bindings="$work/bindings"
        bindings_stamp="$(inputs_digest "wit-bindgen $WIT_BINDGEN_VERSION $world" "$wit"/*.wit)"
        if ! up_to_date "$bindings/${world//-/_}.h" "$bindings_stamp"; then
            rm -rf "$bindings"
            "$wit_bindgen" c "$wit" --world "$world" --out-dir "$bindings" >/dev/null 2>&1 ||
                die "wit-bindgen c failed for ${wit#"$ROOT"/}, world $world (plugins/$name)"
            echo "$bindings_stamp" >"$bindings/${world//-/_}.h.stamp"
        fi
        stamp="$(inputs_digest "clang $(clang --version | head -n 1) $bindings_stamp $(sha256sum "$adapter" | cut -d' ' -f1)" "$dir"/*.[ch])"
        if ! up_to_date "$built" "$stamp"; then
            mkdir -p "$work"
            [[ ${#QUIET[@]} -gt 0 ]] || echo "   Building C plugin $name (clang, wit-bindgen c)" >&2
            clang --target=wasm32-wasi -mexec-model=reactor -Os -Wall -Wextra -Werror \
                -Wno-unused-parameter -I "$bindings" -I "$dir" -o "$work/core.wasm" \
                "${sources[@]}" "$bindings/${world//-/_}.c" "$bindings/${world//-/_}_component_type.o" ||
                die "clang failed for plugins/$name (see above)"
            "$wasm_tools" component new "$work/core.wasm" \
                --adapt "wasi_snapshot_preview1=$adapter" -o "$built.tmp" ||
                die "wasm-tools component new failed for plugins/$name (see above)"
            "$wasm_tools" strip "$built.tmp" -o "$built.tmp" 2>/dev/null || true
            mv -f "$built.tmp" "$built"
            echo "$stamp" >"$built.stamp"
        fi
        produced "$built" "$PLUGINS_OUT/$name.wasm"
    done <<<"$dirs"
}

# ---------------------------------------------------------------------------
# Go: plugins/<name>/go.mod (module wit_component) with the package
# export_wasmprov_provisioner_plugin defining Capabilities, Provision, Delete.
# ---------------------------------------------------------------------------

# go.bytecodealliance.org/pkg (the runtime helpers the generated bindings
# import) is not on the Go module proxy; the crate wit-bindgen-go ships the
# same sources. Copies them once into target/plugin-toolchains/go and prints
# the directory, for a `replace` directive.
go_helper_pkg() {
    local dest="$TOOLCHAINS/go/pkg-$GO_PKG_VERSION"
    if [[ ! -f "$dest/go.mod" ]]; then
        local crate="wit-bindgen-go-$WIT_BINDGEN_GO_VERSION" src
        src="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$crate"/src/pkg 2>/dev/null | head -n 1 || true)"
        if [[ -z "$src" ]]; then
            # Cargo cleaned its source cache since wit-bindgen-cli was
            # installed: have it download the crate again (no compile).
            local fetch="$TOOLCHAINS/go/fetch"
            mkdir -p "$fetch"
            printf '[package]\nname = "fetch-wit-bindgen-go"\nversion = "0.0.0"\nedition = "2021"\n[lib]\npath = "lib.rs"\n[dependencies]\nwit-bindgen-go = "=%s"\n[workspace]\n' \
                "$WIT_BINDGEN_GO_VERSION" >"$fetch/Cargo.toml"
            : >"$fetch/lib.rs"
            local metadata
            metadata="$(cd "$fetch" && cargo metadata --format-version 1 --manifest-path "$fetch/Cargo.toml")" ||
                die "cargo could not download the crate $crate (see above)"
            src="$(grep -o "\"manifest_path\":\"[^\"]*/$crate/Cargo.toml\"" <<<"$metadata" | head -n 1 |
                sed "s|\"manifest_path\":\"\(.*\)/Cargo.toml\"|\1|")/src/pkg"
        fi
        [[ -f "$src/go.mod" ]] && grep -q "^module go.bytecodealliance.org/pkg" "$src/go.mod" ||
            die "cannot find go.bytecodealliance.org/pkg in the crate $crate (looked in $src)"
        rm -rf "$dest.tmp"
        mkdir -p "$dest.tmp"
        cp -R "$src/go.mod" "$src/LICENSE" "$src/wit" "$dest.tmp/"
        rm -rf "$dest"
        mv "$dest.tmp" "$dest"
    fi
    echo "$dest"
}

build_go() {
    # Plugins, and test guests (tests/guests/<name>/go.mod).
    local dirs
    dirs="$(
        plugin_dirs_with go.mod
        for dir in "$ROOT"/tests/guests/*/; do
            [[ -f "$dir/go.mod" ]] && printf '%s\n' "${dir%/}"
        done
        true
    )"
    [[ -n "$dirs" ]] || return 0
    local go_bin
    go_bin="$(command -v go || true)"
    [[ -n "$go_bin" || ! -x /usr/local/go/bin/go ]] || go_bin=/usr/local/go/bin/go
    [[ -n "$go_bin" ]] || die "go not found: install Go 1.25 or later (https://go.dev/dl), on PATH or in /usr/local/go"
    local go_version
    go_version="$(GOTOOLCHAIN=local "$go_bin" env GOVERSION)" || die "$go_bin env GOVERSION failed"
    [[ "$go_version" =~ ^go1\.([0-9]+) ]] && ((BASH_REMATCH[1] >= 25)) ||
        die "$go_bin is $go_version; Go plugins need Go 1.25 or later (go:wasmexport, the bindings' go.mod)"
    local wit_bindgen wasm_tools pkg
    wit_bindgen="$(cargo_tool wit-bindgen wit-bindgen-cli "$WIT_BINDGEN_GO_VERSION" "$TOOLCHAINS/go" \
        --no-default-features --features go)" || exit 1
    wasm_tools="$(cargo_tool wasm-tools wasm-tools "$WASM_TOOLS_VERSION")" || exit 1
    pkg="$(go_helper_pkg)" || exit 1
    local adapter="$WASM_BUILD_DIR/go/wasi_snapshot_preview1.reactor.wasm"
    reactor_adapter "$adapter"

    local dir name work src built stamp sources out_dir wit world
    while IFS= read -r dir; do
        name="$(basename "$dir")"
        case "$dir" in
            "$ROOT"/plugins/*) out_dir="$PLUGINS_OUT" work="$WASM_BUILD_DIR/go/$name" ;;
            *) out_dir="$GUESTS_OUT" work="$WASM_BUILD_DIR/go/guest-$name" ;;
        esac
        built="$work/$name.wasm"
        mapfile -t sources < <(cd "$dir" && find . -path ./conformance -prune -o -type f \
            \( -name '*.go' -o -name go.mod -o -name go.sum \) -print | LC_ALL=C sort)
        wit="$(plugin_wit "$dir")" world="$(plugin_world "$dir")"
        stamp="$(inputs_digest "$go_version wit-bindgen $WIT_BINDGEN_GO_VERSION $world $(sha256sum "$adapter" | cut -d' ' -f1)" \
            "$wit"/*.wit "${sources[@]/#./$dir}")"
        if ! up_to_date "$built" "$stamp"; then
            [[ ${#QUIET[@]} -gt 0 ]] || echo "   Building Go plugin $name (wit-bindgen go, GOOS=wasip1)" >&2
            # A clean tree each time: the generated bindings, then the
            # plugin's own files (its go.mod replaces the generated one).
            src="$work/src"
            rm -rf "$src"
            mkdir -p "$src"
            "$wit_bindgen" go "$wit" --world "$world" --out-dir "$src" >"$work/bindgen.log" 2>&1 ||
                { cat "$work/bindgen.log" >&2; die "wit-bindgen go failed for ${wit#"$ROOT"/}, world $world (see above)"; }
            (cd "$dir" && cp --parents "${sources[@]}" "$src/")
            (
                cd "$src" &&
                    export GOTOOLCHAIN=local GOWORK=off GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 &&
                    "$go_bin" mod edit -replace "go.bytecodealliance.org/pkg=$pkg" &&
                    "$go_bin" build -trimpath -buildvcs=false -buildmode=c-shared -ldflags="-checklinkname=0 -s -w" \
                        -o "$work/core.wasm" .
            ) || die "go build failed for ${dir#"$ROOT"/} (see above)"
            "$wasm_tools" component embed --world "$world" "$wit" "$work/core.wasm" \
                -o "$work/embedded.wasm" ||
                die "wasm-tools component embed failed for ${dir#"$ROOT"/} (see above)"
            "$wasm_tools" component new "$work/embedded.wasm" \
                --adapt "wasi_snapshot_preview1=$adapter" -o "$built.tmp" ||
                die "wasm-tools component new failed for ${dir#"$ROOT"/} (see above)"
            "$wasm_tools" strip "$built.tmp" -o "$built.tmp" 2>/dev/null || true
            mv -f "$built.tmp" "$built"
            echo "$stamp" >"$built.stamp"
        fi
        produced "$built" "$out_dir/$name.wasm"
    done <<<"$dirs"
}

# ---------------------------------------------------------------------------
# Install: copy each built file to its output, atomically, if it changed.
# ---------------------------------------------------------------------------
install_outputs() {
    local entry built out tmp size
    for entry in ${OUTPUTS[@]+"${OUTPUTS[@]}"}; do
        built="${entry%%$'\t'*}"
        out="${entry#*$'\t'}"
        [[ -f "$built" ]] || die "expected build output $built is missing"
        mkdir -p "$(dirname "$out")"
        if ! cmp -s "$built" "$out"; then
            # The temporary file lives next to the output, so the rename is atomic.
            tmp="$(mktemp "$out.tmp.XXXXXX")"
            cp "$built" "$tmp"
            chmod 0644 "$tmp"
            mv -f "$tmp" "$out"
        fi
        size="$(wc -c <"$out" | tr -d ' ')"
        printf '%-40s %9s bytes (%s KiB)\n' "${out#"$ROOT"/}" "$size" "$(((size + 1023) / 1024))"
    done
}

# Removes outputs whose plugin or guest no longer exists (a renamed or
# deleted directory), so that target/plugins/ lists exactly the plugins here.
remove_stale_outputs() {
    local out entry known
    for out in "$PLUGINS_OUT"/*.wasm "$GUESTS_OUT"/*.wasm; do
        [[ -f "$out" ]] || continue
        known=0
        for entry in ${OUTPUTS[@]+"${OUTPUTS[@]}"}; do
            [[ "${entry#*$'\t'}" == "$out" ]] && known=1 && break
        done
        if [[ $known == 0 ]]; then
            echo "plugins/build.sh: removing ${out#"$ROOT"/}: no such plugin or guest any more" >&2
            rm -f "$out"
        fi
    done
}

# ---------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------
build_rust
if [[ $RUST_ONLY == 0 ]]; then
    lock_toolchains
    build_c
    build_javascript
    build_python
    build_go
fi
install_outputs
# A partial build does not know every plugin: keep what it did not build.
[[ $RUST_ONLY == 1 ]] || remove_stale_outputs
