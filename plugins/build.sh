#!/usr/bin/env bash
# Builds every wasmprov plugin and test guest into a WebAssembly component:
#
#   plugins/<name>/       -> target/plugins/<name>.wasm
#   tests/guests/<name>/  -> target/test-guests/<name>.wasm
#
# Usage: bash plugins/build.sh [--quiet]
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
PROFILE=plugin
WASM_BUILD_DIR="$ROOT/target/wasm-build"
PLUGINS_OUT="$ROOT/target/plugins"
GUESTS_OUT="$ROOT/target/test-guests"

QUIET=()
for arg in "$@"; do
    case "$arg" in
        -q | --quiet) QUIET=(--quiet) ;;
        -h | --help)
            sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
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

# ---------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------
build_rust
# Later: build_c, build_javascript, build_python (see the header).
install_outputs
