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
source "$here/../gobuild.sh"
digest=$(sha256sum go.sum | cut -c1-12)
out=${DAP_DEX_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/dap/dex/$digest}
# No cgo: Dex's sqlite storage drops out; the tests use its memory storage.
go_tool dex Dex "$out" dex github.com/dexidp/dex/cmd/dex
echo "$out/dex"
