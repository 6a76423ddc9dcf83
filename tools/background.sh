#!/usr/bin/env bash
# Starts, in the background at the lowest priority, the Go builds that later steps of `make test`
# need: the test control plane (tools/k8s), Dex, grpcurl, Jaeger and Prometheus (the tests marked
# `late`, run in a second pytest pass) and the kind suite's preparation (its last step: the dap
# image, Kubernetes for the node, CoreDNS, the node image, kind). On a cold machine they are tens of
# minutes of compiling; at nice 19 they take only the CPU that the lint, the first pytest pass and
# the benchmarks leave idle, so that time goes into the test run instead of before and after it. A
# step that needs one of them runs the same script when it gets there: that run waits for the build
# in flight (tools/lock.sh) and reuses its result, and if the background build failed it builds
# again and fails in the open; while it waits, the build it waits for runs at its priority. On a
# warm machine every build is a reuse and this ends within seconds. Log: .dap/background.log.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p .dap
log=.dap/background.log
# The Docker engine first, at normal priority: dockerd, and every container it starts later, must
# not inherit nice 19. Without an engine (exit 3) the preparation below says so in its log, and
# `make e2e` says so again when it skips.
bash tools/kind/dockerd.sh >"$log" 2>&1
low=(nice -n 19)
command -v ionice >/dev/null && low+=(ionice -c 3)
# Its own output only: no descriptor of make's (a CI log pipe would stay open until it ends).
steps='bash tools/k8s/build.sh; bash tools/dex/build.sh; bash tools/grpcurl/build.sh; bash tools/jaeger/build.sh; bash tools/prometheus/build.sh; bash tools/kind/prepare.sh'
# Its own process group (setsid), which a step waiting for one of these builds raises to its own
# priority (tools/lock.sh).
nohup setsid "${low[@]}" bash -c "$steps" \
    </dev/null >>"$log" 2>&1 9>&- &
echo "make test: the Go builds and the kind suite's images run in the background at low priority (log: $log)"
