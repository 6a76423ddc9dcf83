#!/usr/bin/env bash
# Everything the kind suite (e2e-kind/) needs, built here and cached: a Docker engine, the dap image
# (dap:dev), kind's node image, the kind CLI and kubectl. Writes their names to .dap/e2e.env, which
# e2e-kind/conftest.py reads. Exits 3 when no Docker engine or Go toolchain can run here (the suite
# then skips, saying so); any other failure is a failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
start=$SECONDS
bash tools/kind/dockerd.sh || exit 3
bash tools/image/build.sh
node=$(bash tools/kind/node-image.sh | tail -n 1)
kind=$(bash tools/kind/kind.sh | tail -n 1)
bins=$(bash tools/kind/build-k8s.sh 2>/dev/null | tail -n 1)
mkdir -p .dap
printf 'DAP_E2E_KIND=%s\nDAP_E2E_KUBECTL=%s\nDAP_E2E_NODE_IMAGE=%s\n' "$kind" "$bins/kubectl" "$node" >.dap/e2e.env
echo "tools/kind: e2e prepared in $((SECONDS - start)) s (.dap/e2e.env)" >&2
