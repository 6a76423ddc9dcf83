#!/usr/bin/env bash
# Builds every Kubernetes binary a kind node needs (kubelet, kubeadm, kubectl, kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy, etcd) from the Go module proxy, pinned by
# tools/kind/k8s/go.mod: the same release and versions as tools/k8s (which builds the test control
# plane), plus the node's binaries. Output goes to a cache keyed by release and go.sum digest.
#
#   tools/kind/build-k8s.sh     build when missing; print the directory of the binaries last
#
# Exits 3 when no Go toolchain is installed ("cannot build here", not "the build failed").
set -euo pipefail
here=$(cd "$(dirname "$0")/k8s" && pwd)
cd "$here"
release=$(awk '$1 == "k8s.io/kubernetes" { print $2 }' go.mod)
digest=$(sha256sum go.sum | cut -c1-12)
out=${XDG_CACHE_HOME:-$HOME/.cache}/dap/kind/k8s/$release-$digest
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubeadm kubectl)

missing=0
for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || missing=1; done
if [[ $missing == 0 ]]; then
    echo "tools/kind: reusing $release binaries in $out" >&2
    echo "$out"
    exit 0
fi
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null 2>&1 || { echo "tools/kind: no Go toolchain" >&2; exit 3; }

minor=${release#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$release -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean"
done
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d "$out.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
GOTOOLCHAIN=local go mod download
echo "tools/kind: modules ready after $((SECONDS - start)) s; building $release (many minutes cold) ..." >&2
CGO_ENABLED=0 GOTOOLCHAIN=local nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
    go.etcd.io/etcd/server/v3 \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kubeadm \
    k8s.io/kubernetes/cmd/kubectl
mv "$tmp/server" "$tmp/etcd"
echo "$release" > "$tmp/version"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "tools/kind: built ${bins[*]} in $((SECONDS - start)) s into $out" >&2
echo "$out"
