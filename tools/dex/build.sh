#!/usr/bin/env bash
# Builds Dex (the OpenID provider of the sign-in tests) from the Go module proxy into a cache
# outside the repository, and reuses it when it is there. The cache key is a digest of go.sum.
#
#   tools/dex/build.sh            build when missing; print the path of the dex binary last
#   DAP_DEX_BIN=DIR build.sh      use (or build into) DIR instead of the cache
#
# Exits 3 when no Go toolchain is installed, so that callers can tell "cannot build here" from
# "the build failed". Two runs at once: the second waits for the first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
source "$here/../lock.sh"
digest=$(sha256sum go.sum | cut -c1-12)
out=${DAP_DEX_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/dap/dex/$digest}
take_lock "$out.lock" tools/dex
if [[ -x "$out/dex" ]]; then
    echo "tools/dex: reusing $out/dex" >&2
    echo "$out/dex"
    exit 0
fi
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    PATH=/usr/local/go/bin:$PATH
fi
if ! command -v go >/dev/null 2>&1; then
    echo "tools/dex: no Go toolchain on PATH (nor /usr/local/go); cannot build Dex" >&2
    exit 3
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d "$out.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
echo "tools/dex: building Dex (about two minutes cold) ..." >&2
# No cgo: Dex's sqlite storage drops out; the tests use its memory storage.
CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -ldflags "-s -w" -o "$tmp/" github.com/dexidp/dex/cmd/dex
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "tools/dex: built in $((SECONDS - start)) s into $out" >&2
echo "$out/dex"
