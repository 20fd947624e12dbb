#!/usr/bin/env bash
# Builds the wasmprov image without a container engine, as an OCI image
# tarball (what CI and the end-to-end tests load into their node with
# `ctr images import`). The same image as deploy/Containerfile describes:
# its final stage's ENTRYPOINT, CMD, USER, EXPOSE and binary path are read
# from that file, and the root filesystem holds what its base image
# (distroless cc-debian12:nonroot) gives the binary: the Debian 12 glibc
# libraries it links, CA certificates, /etc/passwd with `nonroot` (65532),
# /tmp and /home/nonroot. No shell.
#
#   bash deploy/image/build.sh [--out DIR]       # the wasmprov image
#   bash deploy/image/build.sh --busybox [--out DIR]
#   bash deploy/image/build.sh --binary FILE [--out DIR]
#
# Prints the tarball's path on stdout (DIR defaults to target/images).
#
# --binary puts an already built wasmprov in the image, its debug
# information stripped, instead of building the release one: the
# end-to-end tests pass the dev-profile binary cargo built for them (whose
# Wasm compiler is optimised, Cargo.toml), as building the release profile
# as well would add minutes to a run from a cold cache.
#
# --busybox makes the stand-in for docker.io/library/busybox:1.37, the
# image of the Deployment's `hostpath-owner` init container, from Debian's
# busybox-static (1.35; no registry is reachable here to pull the real one).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$root/deploy/image
say() { echo "image: $*" >&2; }
fail() { say "error: $*"; exit 1; }

what=wasmprov out=$root/target/images binary=''
while [[ $# -gt 0 ]]; do
    case $1 in
        --busybox) what=busybox; shift ;;
        --out) out=$2; shift 2 ;;
        --binary) binary=$2; shift 2 ;;
        *) fail "unknown argument '$1' (usage: see the header of $0)" ;;
    esac
done
mkdir -p "$out"
rootfs=$(mktemp -d)
chmod 0755 "$rootfs"  # the image's /: every user must traverse it
trap 'rm -rf "$rootfs"' EXIT

if [[ $what == busybox ]]; then
    busybox=/bin/busybox
    if ! [[ -x $busybox ]] || ! "$busybox" --list >/dev/null 2>&1; then
        fail "no $busybox: install Debian's busybox-static (apt-get install busybox-static)"
    fi
    ! ldd "$busybox" >/dev/null 2>&1 \
        || fail "$busybox is not static: install busybox-static, not busybox"
    mkdir -p "$rootfs/bin" "$rootfs/tmp"
    chmod 1777 "$rootfs/tmp"
    cp "$busybox" "$rootfs/bin/busybox"
    for applet in $("$busybox" --list); do
        [[ -e $rootfs/bin/$applet ]] || ln -s busybox "$rootfs/bin/$applet"
    done
    tar=$out/busybox.oci.tar
    bash "$here/pack.sh" --rootfs "$rootfs" --name docker.io/library/busybox:1.37 --out "$tar" \
        --cmd '["sh"]' --env PATH=/bin
    echo "$tar"
    exit 0
fi

# The final stage of the Containerfile: what the image is.
containerfile=$root/deploy/Containerfile
final=$(awk '/^FROM /{stage=""} {stage = stage $0 "\n"} END{printf "%s", stage}' "$containerfile")
instruction() { # the JSON or word after the last INSTRUCTION of the final stage
    sed -n "s/^$1[[:space:]]\+//p" <<<"$final" | tail -n 1
}
entrypoint=$(instruction ENTRYPOINT)
cmd=$(instruction CMD)
user=$(instruction USER)
expose=$(instruction EXPOSE)
copy=$(sed -n 's/^COPY --from=build[[:space:]]\+\([^[:space:]]\+\)[[:space:]]\+\([^[:space:]]\+\)$/\2/p' <<<"$final")
base=$(sed -n 's/^FROM[[:space:]]\+\([^[:space:]]\+\).*/\1/p' <<<"$final")
[[ $entrypoint == \[* && $cmd == \[* ]] \
    || fail "$containerfile: the final stage needs ENTRYPOINT and CMD in JSON form (found '$entrypoint', '$cmd')"
[[ -n $user && -n $expose && $copy == /* ]] \
    || fail "$containerfile: the final stage needs USER, EXPOSE and one 'COPY --from=build SRC /DEST' (found user '$user', port '$expose', dest '$copy')"
[[ $base == gcr.io/distroless/cc-debian12:nonroot ]] \
    || fail "$containerfile: the final stage is FROM $base; this script lays out gcr.io/distroless/cc-debian12:nonroot's files: update both together"

version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/host/Cargo.toml" | head -n 1)
name=ghcr.io/wasmprov/wasmprov:$version
grep -q "image: $name\$" "$root/deploy/deployment.yaml" \
    || fail "deploy/deployment.yaml does not run $name (host/Cargo.toml's version): make them agree"

if [[ -n $binary ]]; then
    [[ -f $binary && -x $binary ]] || fail "--binary $binary is not an executable file"
    say "using $binary (no release build)"
else
    target=${CARGO_TARGET_DIR:-$root/target}
    say "building the release binary (cargo build --release --locked -p wasmprov)"
    t0=$SECONDS
    (cd "$root" && cargo build --release --locked -q -p wasmprov) >&2 \
        || fail "cargo build --release failed (its output is above)"
    binary=$target/release/wasmprov
    say "release binary ready in $((SECONDS - t0)) s"
fi

# distroless cc-debian12:nonroot's files that the binary uses.
install -D -m 0755 "$binary" "$rootfs$copy"
strip --strip-debug "$rootfs$copy"
interpreter=$(readelf -l "$binary" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
[[ -n $interpreter ]] || fail "$binary names no program interpreter (readelf -l)"
install -D -m 0755 "$(readlink -f "$interpreter")" "$rootfs$interpreter"
while read -r lib; do
    install -D -m 0644 "$(readlink -f "$lib")" "$rootfs$lib"
done < <(ldd "$binary" | sed -n 's/.* => \(\/[^ ]*\) .*/\1/p')
mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/tmp" "$rootfs/home/nonroot"
chmod 1777 "$rootfs/tmp"
chmod 0700 "$rootfs/home/nonroot"
[[ -f /etc/ssl/certs/ca-certificates.crt ]] \
    && install -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
    > "$rootfs/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' > "$rootfs/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$rootfs/etc/nsswitch.conf"

tar=$out/wasmprov.oci.tar
bash "$here/pack.sh" --rootfs "$rootfs" --name "$name" --out "$tar" \
    --entrypoint "$entrypoint" --cmd "$cmd" --user "$user" --expose "$expose" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --owned-by 65532:65532 home/nonroot
echo "$tar"
