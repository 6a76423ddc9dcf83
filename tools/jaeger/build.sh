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
source "$here/../gobuild.sh"
digest=$(sha256sum go.sum | cut -c1-12)
out=${DAP_JAEGER_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/dap/jaeger/$digest}
go_tool jaeger Jaeger "$out" jaeger github.com/jaegertracing/jaeger/cmd/jaeger
echo "$out/jaeger"
