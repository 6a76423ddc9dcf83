#!/usr/bin/env bash
# Builds the image of the in-cluster trace collector (tag dap-jaeger:dev) with no image registry:
# the Jaeger all-in-one binary that tools/jaeger/build.sh builds from the Go module proxy (cached
# in ~/.cache/dap/jaeger/) on the base of the dap image (dap-base:bookworm: Debian's packages by
# mmdebstrap, tools/image/build.sh --base-only). The kind suite loads it with `kind load` as it
# does dap:dev (tools/kind/prepare.sh builds it; e2e-kind/test_kind_traces.py runs it, with
# kustomize/overlays/kind-observability). Reused while the binary and the base are unchanged.
#
#   tools/jaeger/image.sh          build when missing or stale; print the tag last
#   DAP_JAEGER_IMAGE=TAG           another tag
#
# Exits 3 when no Docker engine or no Go toolchain is here (nothing can be built).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
tag=${DAP_JAEGER_IMAGE:-dap-jaeger:dev}
base=dap-base:bookworm
start=$SECONDS

bash tools/kind/dockerd.sh || exit 3
binary=$(bash tools/jaeger/build.sh | tail -n 1) # exits 3 without Go: so does this script
docker image inspect "$base" >/dev/null 2>&1 || bash tools/image/build.sh --base-only

dockerfile="FROM $base
COPY jaeger /usr/local/bin/jaeger
USER 10001:10001
# OTLP over gRPC and HTTP, the query API and UI
EXPOSE 4317 4318 16686
ENTRYPOINT [\"/usr/local/bin/jaeger\"]
"
key=$( { docker image inspect "$base" --format '{{.Id}}'
         sha256sum "$binary"
         echo "$dockerfile"; } | sha256sum | cut -c1-16)
if [[ $(docker image inspect "$tag" --format '{{index .Config.Labels "dap.jaeger.key"}}' 2>/dev/null) == "$key" ]]; then
    echo "tools/jaeger: reusing $tag (its inputs are unchanged)" >&2
    echo "$tag"
    exit 0
fi
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$binary" "$context/jaeger"
echo "$dockerfile" >"$context/Dockerfile"
DOCKER_BUILDKIT=0 nice -n 10 docker build --quiet --label "dap.jaeger.key=$key" -t "$tag" "$context" >/dev/null
# The image this one replaces (untagged now), unless a container still runs it.
docker image prune --force --filter label=dap.jaeger.key >/dev/null
echo "tools/jaeger: built $tag in $((SECONDS - start)) s" >&2
echo "$tag"
