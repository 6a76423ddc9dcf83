#!/usr/bin/env bash
# Everything the kind suite (e2e-kind/) needs, built here and cached: a Docker engine, the dap image
# (dap:dev), the trace collector's image (dap-jaeger:dev), kind's node image, the kind CLI and
# kubectl. Writes their names to .dap/e2e.env, which e2e-kind/conftest.py reads. Exits 3 when no
# Docker engine or Go toolchain can run here (the suite then skips, saying so); any other failure
# is a failure. A second run while one is under way (make test starts one in the background,
# tools/background.sh) waits for it, then reuses what it built.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
start=$SECONDS
bash tools/kind/dockerd.sh || exit 3
source tools/lock.sh
take_lock .dap/e2e-prepare.lock tools/kind
bash tools/image/build.sh
jaeger=$(bash tools/jaeger/image.sh | tail -n 1)
node=$(bash tools/kind/node-image.sh | tail -n 1)
kind=$(bash tools/kind/kind.sh | tail -n 1)
bins=$(bash tools/k8s/build.sh --node 2>/dev/null | tail -n 1)
mkdir -p .dap
printf 'DAP_E2E_KIND=%s\nDAP_E2E_KUBECTL=%s\nDAP_E2E_NODE_IMAGE=%s\nDAP_E2E_JAEGER_IMAGE=%s\n' \
    "$kind" "$bins/kubectl" "$node" "$jaeger" >.dap/e2e.env
echo "tools/kind: e2e prepared in $((SECONDS - start)) s (.dap/e2e.env)" >&2
