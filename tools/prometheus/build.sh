#!/usr/bin/env bash
# Builds Prometheus v0.316 (3.x: `prometheus` and `promtool`) from the Go module proxy into a cache
# outside the repository, and reuses it when it is there. The observability tests
# (tests/server/test_prometheus.py) let it scrape dap's /metrics, run the dashboard's queries through
# its HTTP API and check the alert rules with promtool. The cache key is a digest of go.sum.
# Built without the `builtinassets` tag: the web UI's assets (an npm build) are not embedded, so
# its pages are absent; the HTTP API, which is all the tests and the scrape need, is complete.
#
#   tools/prometheus/build.sh            build when missing; print the directory of both binaries last
#   DAP_PROMETHEUS_BIN=DIR build.sh      use (or build into) DIR instead of the cache
#
# Exits 3 when no Go toolchain is installed, so that callers can tell "cannot build here" from
# "the build failed". Two runs at once: the second waits for the first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
source "$here/../lock.sh"
source "$here/../gobuild.sh"
digest=$(sha256sum go.sum | cut -c1-12)
out=${DAP_PROMETHEUS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/dap/prometheus/$digest}
go_tool prometheus Prometheus "$out" "prometheus promtool" \
    github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
echo "$out"
