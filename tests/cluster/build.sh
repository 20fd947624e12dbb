#!/usr/bin/env bash
# Builds a real Kubernetes control plane from source through the Go module
# proxy: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, and
# the kubectl of the same release (the kubectl on PATH may be several minor
# versions older than the server, and says so on every call); a real node
# for it: kubelet, kube-proxy, containerd (with ctr and the runc shim) and a
# pause binary for pod sandboxes (runc and the CNI plugins come from Debian:
# tests/cluster/README.md); the Go provisioner the benchmarks compare
# wasmprov with (tests/go-peer); helm, for the chart (deploy/chart); and
# an OCI registry (distribution's) for plugins pulled from registries.
#
#   tests/cluster/build.sh            # prints the bin directory on stdout
#
# Binaries land in target/k8s/<k8s version>/bin (etcd beside them), keyed by
# version: a second run only checks `--version` and costs well under a second.
# Go's module and build caches stay where `go env` puts them.
#
# Why a wrapper module: k8s.io/kubernetes requires its staging modules
# (k8s.io/api, k8s.io/client-go, …) at v0.0.0 and maps them to ./staging with
# `replace`, which is ignored when it is a dependency. The wrapper pins each
# of them to the published v0.X.Y, read from the published go.mod, never from
# a hand-kept list. etcd's server module has replaces too (`go install` of it
# is refused), so it gets a wrapper as well.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.37.2}
ETCD_VERSION=${ETCD_VERSION:-3.7.3}   # the etcd that Kubernetes 1.37 ships with
CONTAINERD_VERSION=${CONTAINERD_VERSION:-2.4.2}  # kubelet 1.37 needs containerd 2
HELM_VERSION=${HELM_VERSION:-4.3.2}   # built with client-go 0.37, as this cluster
REGISTRY_VERSION=${REGISTRY_VERSION:-3.1.2}  # distribution's, for plugins by OCI reference

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${WASMPROV_K8S_DIR:-$root/target/k8s/$K8S_VERSION}
bin=$out/bin
logs=$out/build-logs
mkdir -p "$bin" "$logs"
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local

say() { echo "cluster build: $*" >&2; }
fail() { say "error: $*"; exit 1; }
command -v go >/dev/null || fail "no 'go' on PATH (Go 1.26 is at /usr/local/go/bin on this machine; add it to PATH)"

# Runs a build step with its output in a log; on failure names the component,
# the log, and its last lines.
step() {
    local component=$1; shift
    local log=$logs/$component.log
    if ! "$@" >"$log" 2>&1; then
        say "building $component failed: $*"
        tail -n 25 "$log" | sed 's/^/  | /' >&2
        fail "$component did not build; full log: $log"
    fi
}

have_version() { # binary, expected substring of its version
    local flag=--version
    [[ ${1##*/} == kubectl ]] && flag="version --client"
    [[ ${1##*/} == containerd-shim-runc-v2 ]] && flag=-v
    [[ ${1##*/} == helm ]] && flag="version --short"
    [[ -x $1 ]] || return 1
    # Read the whole output first: `| grep -q` would stop reading at the
    # match, and the binary's SIGPIPE would fail the pipeline (pipefail).
    local out
    # shellcheck disable=SC2086
    out=$("$1" $flag 2>/dev/null) || return 1
    [[ $out == *"$2"* ]]
}

build_etcd() {
    have_version "$bin/etcd" "etcd Version: $ETCD_VERSION" && return
    local w=$out/src/etcd
    mkdir -p "$w"
    say "etcd v$ETCD_VERSION: building (about a minute on a cold machine)"
    local t0=$SECONDS
    (
        cd "$w"
        printf 'module local/etcdbin\n\ngo 1.26\n' > go.mod
        step etcd go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
        step etcd go build -trimpath -ldflags="-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
    )
    have_version "$bin/etcd" "etcd Version: $ETCD_VERSION" \
        || fail "etcd was built but '$bin/etcd --version' does not say $ETCD_VERSION"
    say "etcd built in $((SECONDS - t0)) s"
}

k8s_components=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)

build_kubernetes() {
    local missing=()
    for c in "${k8s_components[@]}"; do
        have_version "$bin/$c" "v$K8S_VERSION" || missing+=("$c")
    done
    [[ ${#missing[@]} -eq 0 ]] && return
    local w=$out/src/kubernetes staging=v0.${K8S_VERSION#1.} minor
    minor=$(cut -d. -f2 <<<"$K8S_VERSION")
    mkdir -p "$w"
    say "Kubernetes v$K8S_VERSION: building ${missing[*]} (about 8 minutes on a cold 2-core machine)"
    local t0=$SECONDS
    (
        cd "$w"
        printf 'module local/k8sbin\n\ngo 1.26\n' > go.mod
        local modfile goline godebug modules
        modfile=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
        [[ -f $modfile ]] || fail "the Go module proxy did not serve k8s.io/kubernetes@v$K8S_VERSION (set K8S_VERSION to a served release)"
        # Same go and godebug lines as upstream, so GODEBUG defaults match.
        goline=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$modfile")
        godebug=$(sed -n 's/^godebug \(.*\)$/\1/p' "$modfile")
        modules=$(sed -n 's|^[[:space:]]*\(k8s.io/[A-Za-z0-9._-]*\) => \./staging/.*|\1|p' "$modfile")
        [[ -n $modules ]] || fail "no staging replaces found in $modfile"
        printf 'module local/k8sbin\n\ngo %s\n' "$goline" > go.mod
        [[ -z $godebug ]] || go mod edit -godebug="$godebug"
        for m in $modules; do go mod edit -replace="$m=$m@$staging"; done
        step kubernetes-modules go get "k8s.io/kubernetes@v$K8S_VERSION"
        # hack/lib/version.sh stamps these; without them /version says
        # v0.0.0-master and kubectl warns about skew.
        local ld="-s -w" date
        date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
        for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
            ld+=" -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
            ld+=" -X $p.gitTreeState=clean -X $p.buildDate=$date"
        done
        for c in "${missing[@]}"; do
            step "$c" go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags="$ld" \
                -o "$bin/$c" "k8s.io/kubernetes/cmd/$c"
        done
    )
    for c in "${missing[@]}"; do
        have_version "$bin/$c" "v$K8S_VERSION" \
            || fail "$c was built but its version is not v$K8S_VERSION (see $logs/$c.log)"
    done
    say "Kubernetes built in $((SECONDS - t0)) s"
}

# The Go provisioner wasmprov is benchmarked against (tests/go-peer, on
# sig-storage-lib-external-provisioner): rebuilt when its sources change.
build_go_peer() {
    local src=$root/tests/go-peer stamp=$bin/hostpath-peer.sources digest
    digest=$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -d' ' -f1)
    [[ -x $bin/hostpath-peer && -f $stamp && $(cat "$stamp") == "$digest" ]] && return
    say "hostpath-peer (the Go library's hostpath provisioner): building"
    local t0=$SECONDS
    (
        cd "$src"
        # Its go.sum is committed: no module is resolved anew.
        GOFLAGS=-mod=readonly step go-peer go build -trimpath -ldflags="-s -w" -o "$bin/hostpath-peer" .
    )
    echo "$digest" > "$stamp"
    say "hostpath-peer built in $((SECONDS - t0)) s"
}

# containerd's CRI plugin runs the node's pods (with Debian's runc).
build_containerd() {
    local c missing=()
    for c in containerd ctr containerd-shim-runc-v2; do
        have_version "$bin/$c" "v$CONTAINERD_VERSION" || missing+=("$c")
    done
    [[ ${#missing[@]} -eq 0 ]] && return
    local w=$out/src/containerd
    mkdir -p "$w"
    say "containerd v$CONTAINERD_VERSION: building ${missing[*]} (about 3 minutes on a cold machine)"
    local t0=$SECONDS
    (
        cd "$w"
        printf 'module local/containerdbin\n\ngo 1.26\n' > go.mod
        step containerd-modules go get "github.com/containerd/containerd/v2@v$CONTAINERD_VERSION"
        local ld="-s -w -X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION"
        for c in "${missing[@]}"; do
            # no_btrfs: that snapshotter needs cgo and btrfs headers; the node uses overlayfs.
            step "$c" go build -trimpath -tags=no_btrfs -ldflags="$ld" \
                -o "$bin/$c" "github.com/containerd/containerd/v2/cmd/$c"
        done
    )
    for c in "${missing[@]}"; do
        have_version "$bin/$c" "v$CONTAINERD_VERSION" \
            || fail "$c was built but its version is not v$CONTAINERD_VERSION (see $logs/$c.log)"
    done
    say "containerd built in $((SECONDS - t0)) s"
}

# A Go program from the module proxy, in a wrapper module of its own:
# binary NAME of package PACKAGE at module MODULE@vVERSION, with more
# `go build` flags after them; skipped when NAME already says vVERSION.
build_go_program() {
    local name=$1 version=$2 module=$3 package=$4
    shift 4
    have_version "$bin/$name" "v$version" && return
    local w=$out/src/$name
    mkdir -p "$w"
    say "$name v$version: building (about 2 minutes on a cold machine)"
    local t0=$SECONDS
    (
        cd "$w"
        printf 'module local/%sbin\n\ngo 1.26\n' "$name" > go.mod
        step "$name-modules" go get "$module@v$version"
        step "$name" go build -trimpath "$@" -o "$bin/$name" "$package"
    )
    have_version "$bin/$name" "v$version" \
        || fail "$name was built but its version is not v$version (see $logs/$name.log)"
    say "$name built in $((SECONDS - t0)) s"
}

# Helm, for the chart's tests (deploy/chart): lint, template, install.
# Without the -X, `helm version` says only the minor version.
build_helm() {
    build_go_program helm "$HELM_VERSION" helm.sh/helm/v4 helm.sh/helm/v4/cmd/helm \
        -ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION"
}

# An OCI registry (distribution's `registry`) for the tests of plugins
# pushed to and pulled from registries (host/tests/oci.rs).
build_registry() {
    build_go_program registry "$REGISTRY_VERSION" github.com/distribution/distribution/v3 \
        github.com/distribution/distribution/v3/cmd/registry -ldflags="-s -w"
}

# The pod sandbox's process: holds the pod's namespaces until it is killed.
build_pause() {
    local src=$root/tests/cluster/node/pause.c stamp=$bin/pause.sources digest
    digest=$(sha256sum "$src" | cut -d' ' -f1)
    [[ -x $bin/pause && -f $bin/pause.oci.tar && -f $stamp && $(cat "$stamp") == "$digest" ]] && return
    command -v gcc >/dev/null || fail "no 'gcc' on PATH to build the pod sandbox's pause binary"
    step pause gcc -static -Os -s -o "$bin/pause" "$src"
    # The image containerd runs it from (its sandbox image).
    local rootfs=$out/src/pause-rootfs
    rm -rf "$rootfs" && mkdir -p "$rootfs" && cp "$bin/pause" "$rootfs/pause"
    step pause-image bash "$root/deploy/image/pack.sh" --rootfs "$rootfs" \
        --name localhost/wasmprov-test/pause:1 --out "$bin/pause.oci.tar" \
        --entrypoint '["/pause"]' --user 65535:65535
    echo "$digest" > "$stamp"
}

build_etcd
build_kubernetes
build_containerd
build_pause
build_go_peer
build_helm
build_registry
echo "$bin"
