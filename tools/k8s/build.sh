#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-controller-manager, kubectl) from the
# Go module proxy into a cache outside the repository, and reuses it when every binary is there.
# The cache key is the Kubernetes release plus a digest of go.sum, so a change of any pinned
# module builds a fresh directory instead of mixing versions.
#
#   tools/k8s/build.sh            build when missing; print the directory of the binaries last
#   DAP_K8S_BIN=DIR build.sh      use (or build into) DIR instead of the cache
#
# Prints its timings on stderr. Exits 3 when no Go toolchain is installed, so that callers can
# tell "cannot build here" from "the build failed".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
release=$(awk '$1 == "k8s.io/kubernetes" { print $2 }' go.mod)
digest=$(sha256sum go.sum | cut -c1-12)
out=${DAP_K8S_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/dap/k8s/$release-$digest}
bins=(etcd kube-apiserver kube-controller-manager kubectl)

missing=0
for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || missing=1; done
if [[ $missing == 0 ]]; then
    echo "tools/k8s: reusing $release binaries in $out" >&2
    echo "$out"
    exit 0
fi

# Go's official tarball installs to /usr/local/go; a non-login shell may lack it on PATH.
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    PATH=/usr/local/go/bin:$PATH
fi
if ! command -v go >/dev/null 2>&1; then
    echo "tools/k8s: no Go toolchain on PATH (nor /usr/local/go); cannot build the test control plane" >&2
    exit 3
fi

minor=${release#v1.}; minor=${minor%%.*}
# The version the binaries report (kubectl warns about skew against "v0.0.0-master" otherwise).
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$release -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean"
done

mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d "$out.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
echo "tools/k8s: downloading modules for $release ..." >&2
go mod download
echo "tools/k8s: modules ready after $((SECONDS - start)) s; building (several minutes cold) ..." >&2
# One invocation, so the linker of one binary overlaps the compiler of the others.
CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
    go.etcd.io/etcd/server/v3 \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl
# etcd's main package is the root of module go.etcd.io/etcd/server/v3; go names it "server".
mv "$tmp/server" "$tmp/etcd"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "tools/k8s: built ${bins[*]} in $((SECONDS - start)) s into $out" >&2
echo "$out"
