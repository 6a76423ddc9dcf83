#!/usr/bin/env bash
# Builds grpcurl (the gRPC command-line client the gRPC tests call through server reflection) with
# `go install` from the Go module proxy into a cache outside the repository, and reuses it after.
#
#   tools/grpcurl/build.sh        build when missing; print the path of the binary last
#
# Exits 3 when no Go toolchain is installed, so that callers can tell "cannot build here" from
# "the build failed" (the tests then skip saying why). Two runs at once: the second waits.
set -euo pipefail
source "$(dirname "$0")/../lock.sh"
version=${GRPCURL_VERSION:-v1.9.3}
out=${XDG_CACHE_HOME:-$HOME/.cache}/dap/grpcurl/$version
take_lock "$out.lock" tools/grpcurl
if [[ -x "$out/grpcurl" ]]; then
    echo "$out/grpcurl"
    exit 0
fi
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    PATH=/usr/local/go/bin:$PATH
fi
if ! command -v go >/dev/null 2>&1; then
    echo "tools/grpcurl: no Go toolchain on PATH (nor /usr/local/go); cannot build grpcurl" >&2
    exit 3
fi
mkdir -p "$out"
echo "tools/grpcurl: building grpcurl $version from the Go module proxy ..." >&2
CGO_ENABLED=0 GOBIN="$out" go install -trimpath -ldflags "-s -w" \
    "github.com/fullstorydev/grpcurl/cmd/grpcurl@$version"
echo "$out/grpcurl"
