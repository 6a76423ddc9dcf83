#!/usr/bin/env bash
# Installs the kind CLI (pinned) from the Go module proxy into ~/.cache/dap/kind/bin when missing,
# and prints its path. Exits 3 without a Go toolchain.
set -euo pipefail
version=v0.30.0
bin=${XDG_CACHE_HOME:-$HOME/.cache}/dap/kind/bin/kind-$version
if [[ ! -x $bin ]]; then
    if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then PATH=/usr/local/go/bin:$PATH; fi
    command -v go >/dev/null 2>&1 || { echo "tools/kind: no Go toolchain to build kind" >&2; exit 3; }
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    GOBIN=$tmp GOTOOLCHAIN=local nice -n 10 go install "sigs.k8s.io/kind@$version"
    mkdir -p "$(dirname "$bin")"
    mv "$tmp/kind" "$bin"
fi
echo "$bin"
