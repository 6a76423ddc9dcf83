#!/usr/bin/env bash
# Builds dap's kind node image (dap-kind-node:<release>) with no image registry, and prints its tag.
#
#   - the node's root file system: Debian bookworm minbase with Debian's systemd, containerd, runc
#     and containernetworking-plugins (mmdebstrap), dap's node files (tools/kind/node/files: the
#     entrypoint, kubelet units, containerd's configuration, a bridge CNI), and kubelet, kubeadm,
#     kubectl built from the Go module proxy (tools/k8s/build.sh --node);
#   - the images a node runs, built here under the names kubeadm asks for (registry.k8s.io/...):
#     kube-apiserver, kube-controller-manager, kube-scheduler, etcd (static binaries, one file each),
#     kube-proxy (its binary on a Debian minbase with iptables), CoreDNS (go build from the proxy),
#     pause (tools/kind/pause.c); saved into /kind/images and imported into containerd at boot
#     (dap-images.service), so a node never pulls.
# The result is imported with `docker import` and labelled with a digest of its inputs: a second
# run with the same inputs reuses it. Caches: ~/.cache/dap/kind.
#
# Exits 3 when no Docker engine or Go toolchain is available here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/dap/kind
mkdir -p "$cache"
start=$SECONDS

bash "$here/dockerd.sh" || exit 3
bins=$(bash "$here/../k8s/build.sh" --node | tail -n 1) || exit $?
release=$(cat "$bins/version")
tag=dap-kind-node:$release
key=$( { echo "$bins"; cd "$here" && find node pause.c node-image.sh coredns -type f | sort | xargs sha256sum; } \
    | sha256sum | cut -c1-16)
if [[ $(docker image inspect "$tag" --format '{{index .Config.Labels "dap.kind.key"}}' 2>/dev/null) == "$key" ]]; then
    echo "tools/kind: reusing $tag" >&2
    echo "$tag"
    exit 0
fi
command -v mmdebstrap >/dev/null || apt-get install -y -qq mmdebstrap >/dev/null
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then PATH=/usr/local/go/bin:$PATH; fi

work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/images"
kubeadm_images=$("$bins/kubeadm" config images list --kubernetes-version "$release" 2>/dev/null)
image_of() { grep -E "/$1:" <<<"$kubeadm_images" | head -n 1; }

# An image of one static binary (and /tmp), saved for the node's containerd.
single() { # NAME IMAGE BINARY [ENTRYPOINT]
    local name=$1 image=$2 binary=$3 entry=${4:-}
    local root="$work/rootfs-$name"
    mkdir -p "$root/usr/local/bin" "$root/tmp" "$root/etc"
    install -m 0755 "$binary" "$root/usr/local/bin/$name"
    echo 'root:x:0:0:root:/:/usr/local/bin/nologin' >"$root/etc/passwd"
    echo 'nobody:x:65534:65534:nobody:/:/usr/local/bin/nologin' >>"$root/etc/passwd"
    chmod 1777 "$root/tmp"
    local changes=(--change 'ENV PATH=/usr/local/bin:/usr/bin:/bin')
    [[ -n $entry ]] && changes+=(--change "ENTRYPOINT [\"$entry\"]")
    tar -C "$root" -c . | docker import "${changes[@]}" - "$image" >/dev/null
    docker save "$image" -o "$work/images/$name.tar"
    docker image rm "$image" >/dev/null # only its saved copy is used; a rebuild would leave it dangling
}

# The node's base: Debian's packages only (cached as a Docker image keyed by this list).
packages=systemd,systemd-sysv,dbus,containerd,runc,containernetworking-plugins,iptables,nftables,conntrack,iproute2,ethtool,kmod,libseccomp2,ca-certificates,procps,e2fsprogs
base=dap-kind-base:bookworm-$(echo "$packages" | sha256sum | cut -c1-12)
if ! docker image inspect "$base" >/dev/null 2>&1; then
    echo "tools/kind: building $base from Debian's packages (mmdebstrap) ..." >&2
    nice -n 10 mmdebstrap --quiet --variant=minbase --include="$packages" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        bookworm "$work/base.tar"
    docker import \
        --change 'ENV container=docker' \
        --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
        "$work/base.tar" "$base" >/dev/null
    rm -f "$work/base.tar"
fi

echo "tools/kind: building the node's images ..." >&2
for b in kube-apiserver kube-controller-manager kube-scheduler etcd; do
    single "$b" "$(image_of "$b")" "$bins/$b"
done
gcc -static -Os -o "$work/pause" "$here/pause.c"
single pause "$(image_of pause)" "$work/pause" /usr/local/bin/pause

coredns_image=$(image_of coredns)
coredns_version=${coredns_image##*:}
# tools/kind/coredns/main.go links only the plugins kubeadm's Corefile uses (why: in that file).
grep -q "github.com/coredns/coredns $coredns_version\$" "$here/coredns/go.mod" \
    || { echo "tools/kind: kubeadm deploys CoreDNS $coredns_version: pin it in tools/kind/coredns/go.mod" >&2; exit 1; }
coredns_key=$(cat "$here/coredns/main.go" "$here/coredns/go.sum" | sha256sum | cut -c1-12)
coredns="$cache/coredns/$coredns_version-$coredns_key/coredns"
if [[ ! -x $coredns ]]; then
    echo "tools/kind: building CoreDNS $coredns_version (go build, a few minutes cold) ..." >&2
    mkdir -p "$(dirname "$coredns")"
    (cd "$here/coredns" && CGO_ENABLED=0 GOTOOLCHAIN=local nice -n 10 go build -trimpath -ldflags '-s -w' \
        -o "$coredns.tmp" .)
    mv "$coredns.tmp" "$coredns"
fi
single coredns "$coredns_image" "$coredns" /usr/local/bin/coredns

# kube-proxy programs iptables: its binary on the node's base (Debian's iptables and conntrack).
mkdir -p "$work/kube-proxy"
install -m 0755 "$bins/kube-proxy" "$work/kube-proxy/kube-proxy"
printf 'FROM %s\nCOPY kube-proxy /usr/local/bin/kube-proxy\nENTRYPOINT []\n' "$base" >"$work/kube-proxy/Dockerfile"
DOCKER_BUILDKIT=0 docker build --quiet -t "$(image_of kube-proxy)" "$work/kube-proxy" >/dev/null
docker save "$(image_of kube-proxy)" -o "$work/images/kube-proxy.tar"
docker image rm "$(image_of kube-proxy)" >/dev/null

# The node: dap's files, the Kubernetes binaries and the images, on that base.
echo "tools/kind: building $tag ..." >&2
ctx=$work/context
mkdir -p "$ctx/bin"
cp -a "$here/node/files" "$ctx/files"
install -m 0755 "$bins/kubelet" "$bins/kubeadm" "$bins/kubectl" "$ctx/bin/"
mv "$work/images" "$ctx/images"
cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $base
COPY files/ /
COPY bin/ /usr/bin/
COPY images/ /kind/images/
RUN echo "$release" >/kind/version \\
 && mkdir -p /etc/kubernetes/manifests \\
 && rm -f /etc/systemd/system/*.wants/* /lib/systemd/system/multi-user.target.wants/* \\
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/basic.target.wants/* \\
      /lib/systemd/system/sockets.target.wants/*udev* /lib/systemd/system/sockets.target.wants/*initctl* \\
      /lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service \\
 && systemctl enable containerd.service dap-images.service kubelet.service \\
 && systemctl mask systemd-binfmt.service getty@tty1.service console-getty.service \\
 && echo ReadKMsg=no >>/etc/systemd/journald.conf
STOPSIGNAL SIGRTMIN+3
LABEL dap.kind.key=$key
DOCKERFILE
DOCKER_BUILDKIT=0 nice -n 10 docker build --quiet -t "$tag" "$ctx" >/dev/null
# The node image this one replaces (untagged now), unless a container still runs it: ~1 GB each.
docker image prune --force --filter label=dap.kind.key >/dev/null
echo "tools/kind: built $tag in $((SECONDS - start)) s" >&2
echo "$tag"
