#!/usr/bin/env bash
# Builds Jaeger v1.76 (the all-in-one `jaeger` binary: OTLP receiver, memory storage, query API)
# from the Go module proxy into a cache outside the repository, and reuses it when it is there. The
# observability tests (tests/server/test_tracing_jaeger.py) send dap's traces to it and read them
# back through its query API. The cache key is a digest of go.sum.
#
#   tools/jaeger/build.sh            build when missing; print the path of the jaeger binary last
#   DAP_JAEGER_BIN=DIR build.sh      use (or build into) DIR instead of the cache
#
# Exits 3 when no Go toolchain is installed, so that callers can tell "cannot build here" from
# "the build failed". Two runs at once: the second waits for the first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
source "$here/../lock.sh"
digest=$(sha256sum go.sum | cut -c1-12)
out=${DAP_JAEGER_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/dap/jaeger/$digest}
take_lock "$out.lock" tools/jaeger
if [[ -x "$out/jaeger" ]]; then
    echo "tools/jaeger: reusing $out/jaeger" >&2
    echo "$out/jaeger"
    exit 0
fi
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    PATH=/usr/local/go/bin:$PATH
fi
if ! command -v go >/dev/null 2>&1; then
    echo "tools/jaeger: no Go toolchain on PATH (nor /usr/local/go); cannot build Jaeger" >&2
    exit 3
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d "$out.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
echo "tools/jaeger: building Jaeger (several minutes cold) ..." >&2
CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -ldflags "-s -w" -o "$tmp/" github.com/jaegertracing/jaeger/cmd/jaeger
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "tools/jaeger: built in $((SECONDS - start)) s into $out" >&2
echo "$out/jaeger"
