#!/usr/bin/env bash
# Packs a root filesystem directory as a single-layer OCI image tarball
# (an OCI image layout: oci-layout, index.json, blobs/), without a container
# engine: what `ctr images import`, `skopeo copy oci-archive:` and
# `podman load` read.
#
#   deploy/image/pack.sh --rootfs DIR --name REF --out FILE.tar \
#       [--entrypoint JSON] [--cmd JSON] [--user USER] [--expose PORT] \
#       [--env KEY=VALUE]... [--owned-by UID:GID PATH]...
#
# REF is the full image name (ghcr.io/wasmprov/wasmprov:0.1.0), stored as the
# index's `io.containerd.image.name` and (its tag) `org.opencontainers.image
# .ref.name` annotations, so an import names the image exactly. Every file
# is owned by 0:0 unless listed with --owned-by (a path relative to DIR).
# Reproducible: names sorted, times SOURCE_DATE_EPOCH (default 0), gzip
# without a name or time; the same inputs give the same digest.
set -euo pipefail

say() { echo "pack: $*" >&2; }
fail() { say "error: $*"; exit 1; }

rootfs='' name='' out='' entrypoint=null cmd=null user='' expose=''
envs=() owned=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --rootfs) rootfs=$2; shift 2 ;;
        --name) name=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --entrypoint) entrypoint=$2; shift 2 ;;
        --cmd) cmd=$2; shift 2 ;;
        --user) user=$2; shift 2 ;;
        --expose) expose=$2; shift 2 ;;
        --env) envs+=("$2"); shift 2 ;;
        --owned-by) owned+=("$2" "$3"); shift 3 ;;
        *) fail "unknown argument '$1' (see the header of $0)" ;;
    esac
done
[[ -d $rootfs ]] || fail "--rootfs '$rootfs' is not a directory"
[[ -n $name && -n $out ]] || fail "--name and --out are required"
[[ $name == *:* ]] || fail "--name '$name' has no tag (NAME:TAG)"
epoch=${SOURCE_DATE_EPOCH:-0}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/layout/blobs/sha256"
blobs=$work/layout/blobs/sha256

# A JSON string (the inputs here are paths, names and flags: no control
# characters to escape beyond quotes and backslashes).
json_string() { local s=${1//\\/\\\\}; printf '"%s"' "${s//\"/\\\"}"; }

# The layer: everything as 0:0, then the --owned-by paths again with their
# owners (a later entry for the same path wins when unpacked).
# shellcheck disable=SC2054 # the commas are pax-option's own
tar_flags=(--sort=name --mtime="@$epoch" --numeric-owner --format=posix
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime)
tar "${tar_flags[@]}" --owner=0 --group=0 -cf "$work/layer.tar" -C "$rootfs" .
for ((i = 0; i < ${#owned[@]}; i += 2)); do
    ids=${owned[i]} path=${owned[i+1]}
    [[ -e $rootfs/$path ]] || fail "--owned-by path '$path' is not in $rootfs"
    tar "${tar_flags[@]}" --no-recursion --owner="${ids%%:*}" --group="${ids##*:}" \
        -rf "$work/layer.tar" -C "$rootfs" "./${path#/}"
done
diff_id=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -n -9 -c "$work/layer.tar" > "$work/layer.tar.gz"
layer=$(sha256sum "$work/layer.tar.gz" | cut -d' ' -f1)
mv "$work/layer.tar.gz" "$blobs/$layer"

env_json=$(for e in "${envs[@]}"; do json_string "$e"; echo; done | paste -sd, -)
config="{\"created\":\"$created\",\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{"
config+="\"Env\":[${env_json}],\"Entrypoint\":$entrypoint,\"Cmd\":$cmd,\"WorkingDir\":\"/\""
[[ -z $user ]] || config+=",\"User\":$(json_string "$user")"
[[ -z $expose ]] || config+=",\"ExposedPorts\":{\"$expose/tcp\":{}}"
config+="},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$diff_id\"]},"
config+="\"history\":[{\"created\":\"$created\",\"created_by\":\"deploy/image/pack.sh\"}]}"
printf '%s' "$config" > "$work/config"
config_digest=$(sha256sum "$work/config" | cut -d' ' -f1)
mv "$work/config" "$blobs/$config_digest"

manifest="{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
manifest+="\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:$config_digest\",\"size\":$(stat -c %s "$blobs/$config_digest")},"
manifest+="\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$layer\",\"size\":$(stat -c %s "$blobs/$layer")}]}"
printf '%s' "$manifest" > "$work/manifest"
manifest_digest=$(sha256sum "$work/manifest" | cut -d' ' -f1)
mv "$work/manifest" "$blobs/$manifest_digest"

printf '{"imageLayoutVersion":"1.0.0"}' > "$work/layout/oci-layout"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":%s,"org.opencontainers.image.ref.name":%s}}]}' \
    "$manifest_digest" "$(stat -c %s "$blobs/$manifest_digest")" \
    "$(json_string "$name")" "$(json_string "${name##*:}")" > "$work/layout/index.json"

mkdir -p "$(dirname "$out")"
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
    -cf "$out.tmp" -C "$work/layout" oci-layout index.json blobs
mv "$out.tmp" "$out"
say "$name: $(du -h "$out" | cut -f1) (manifest sha256:$manifest_digest)"
