#!/usr/bin/env bash
# Builds Kubernetes from the Go module proxy into a cache outside the repository, and reuses what is
# there: the test control plane (etcd, kube-apiserver, kube-controller-manager, kubectl) and, with
# --node, a kind node's binaries as well (kubelet, kubeadm, kube-proxy, kube-scheduler). Both come
# from the one module pinned here, into one directory, so a node build reuses the test plane's
# binaries and Go's cache of their packages instead of building them again. The cache key is the
# Kubernetes release plus a digest of go.sum: a change of any pinned module builds a fresh directory.
#
#   tools/k8s/build.sh            build what is missing; print the directory of the binaries last
#   tools/k8s/build.sh --node     the same, with the node's binaries
#   DAP_K8S_BIN=DIR build.sh      use (or build into) DIR instead of the cache
#
# Prints its timings on stderr. Exits 3 when no Go toolchain is installed, so that callers can
# tell "cannot build here" from "the build failed". Two runs at once: the second waits for the first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
source "$here/../lock.sh"
release=$(awk '$1 == "k8s.io/kubernetes" { print $2 }' go.mod)
digest=$(sha256sum go.sum | cut -c1-12)
out=${DAP_K8S_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/dap/k8s/$release-$digest}
# binary name -> the package that builds it
declare -A packages=(
    [etcd]=go.etcd.io/etcd/server/v3
    [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
    [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
    [kubectl]=k8s.io/kubernetes/cmd/kubectl
)
if [[ ${1:-} == --node ]]; then
    for b in kubelet kubeadm kube-proxy kube-scheduler; do packages[$b]=k8s.io/kubernetes/cmd/$b; done
fi

reuse_when_complete() {
    missing=()
    for b in "${!packages[@]}"; do [[ -x "$out/$b" ]] || missing+=("$b"); done
    if [[ ${#missing[@]} == 0 ]]; then
        echo "tools/k8s: reusing $release binaries in $out" >&2
        echo "$out"
        exit 0
    fi
}
# A binary appears only whole (moved in when linked): what is there is reused without waiting for a
# build of other binaries into the same directory (the node's, in the background of make test).
reuse_when_complete
take_lock "$out.lock" tools/k8s
reuse_when_complete

# Go's official tarball installs to /usr/local/go; a non-login shell may lack it on PATH.
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    PATH=/usr/local/go/bin:$PATH
fi
if ! command -v go >/dev/null 2>&1; then
    echo "tools/k8s: no Go toolchain on PATH (nor /usr/local/go); cannot build Kubernetes" >&2
    exit 3
fi

minor=${release#v1.}; minor=${minor%%.*}
# The version the binaries report (kubectl warns about skew against "v0.0.0-master" otherwise).
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$release -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean"
done

mkdir -p "$out"
tmp=$(mktemp -d "$out.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
echo "tools/k8s: downloading modules for $release ..." >&2
GOTOOLCHAIN=local go mod download
echo "tools/k8s: modules ready after $((SECONDS - start)) s; building ${missing[*]} (many minutes cold) ..." >&2
targets=()
for b in "${missing[@]}"; do targets+=("${packages[$b]}"); done
# One invocation, so the linker of one binary overlaps the compiler of the others.
CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${targets[@]}"
# etcd's main package is the root of module go.etcd.io/etcd/server/v3; go names it "server".
[[ -e "$tmp/server" ]] && mv "$tmp/server" "$tmp/etcd"
echo "$release" >"$out/version"
mv "$tmp"/* "$out/"
echo "tools/k8s: built ${missing[*]} in $((SECONDS - start)) s into $out" >&2
echo "$out"
