#!/usr/bin/env bash
# Builds the dap image (tag dap:dev) with no image registry:
#   1. a Docker engine (tools/kind/dockerd.sh starts or installs one);
#   2. the base: Debian bookworm minbase with python3 from Debian's packages (mmdebstrap), imported
#      with `docker import` as dap-base:bookworm once and reused after;
#   3. the wheels of dap[embedded] and its dependencies, downloaded from PyPI by the host's pip into
#      tools/image/wheels (the build container then installs them with --no-index);
#   4. docker build with BASE=dap-base:bookworm. The UI bundle must be built before (make image
#      runs make ui), since the dap wheel ships dap/server/web/bundle.
#
#   DAP_IMAGE=dap:dev         the tag to build
#   DAP_IMAGE_BASE=IMAGE      another base (python:3.11-slim where a registry is reachable)
#   build.sh --base-only      step 2 only (the base of other images built here: tools/jaeger/image.sh)
#
# Exits 3 when no Docker engine can run here.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
tag=${DAP_IMAGE:-dap:dev}
base=${DAP_IMAGE_BASE:-dap-base:bookworm}
python=${PYTHON:-$root/.venv/bin/python}
start=$SECONDS

bash tools/kind/dockerd.sh || exit 3

if [[ $base == dap-base:bookworm ]] && ! docker image inspect "$base" >/dev/null 2>&1; then
    command -v mmdebstrap >/dev/null || {
        [[ $(id -u) == 0 ]] && apt-get install -y -qq mmdebstrap >/dev/null; } || {
        echo "tools/image: mmdebstrap is missing (apt-get install mmdebstrap)" >&2; exit 1; }
    echo "tools/image: building $base from Debian's packages (mmdebstrap) ..." >&2
    tar=$(mktemp --suffix=.tar)
    trap 'rm -f "$tar"' EXIT
    nice -n 10 mmdebstrap --quiet --variant=minbase --include=python3,python3-venv \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        bookworm "$tar"
    docker import --change 'CMD ["/usr/bin/python3"]' "$tar" "$base" >/dev/null
    rm -f "$tar"
    trap - EXIT
    echo "tools/image: $base imported after $((SECONDS - start)) s" >&2
fi
[[ ${1:-} == --base-only ]] && exit 0

# What the image is made of: the base and every file of the build context but the downloaded wheels
# (pyproject.toml pins what they are). The same inputs reuse the image: make test prepares it in the
# background and make e2e asks again (tools/background.sh).
key=$( { docker image inspect "$base" --format '{{.Id}}'
         find Dockerfile .dockerignore pyproject.toml README.md setup.py dap -type f \
             -not -path '*/__pycache__/*' -not -name '*.pyc' | sort | xargs sha256sum; } \
    | sha256sum | cut -c1-16)
if [[ $(docker image inspect "$tag" --format '{{index .Config.Labels "dap.image.key"}}' 2>/dev/null) == "$key" ]]; then
    echo "tools/image: reusing $tag (its inputs are unchanged)" >&2
    exit 0
fi

echo "tools/image: downloading wheels (dap[embedded] and its dependencies) ..." >&2
# dependencies already downloaded stay (pip download skips them); dap's own wheel is rebuilt.
rm -f tools/image/wheels/dap-*.whl
# dap's own wheel (with the UI bundle) by the host's pip; its dependencies by pip inside the base,
# so that markers such as python_full_version < "3.11.3" are decided for the image's Python. The
# host's CA bundle is lent read-only to that pip (the registries are reached through it here).
# dap is named by its wheel file: PyPI has an unrelated project called dap.
nice -n 10 "$python" -m pip wheel --quiet --disable-pip-version-check --no-deps \
    --wheel-dir tools/image/wheels .
ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
ca_args=()
[[ -n $ca && -f $ca ]] && ca_args=(-v "$ca:/etc/dap-pip-ca.crt:ro" -e PIP_CERT=/etc/dap-pip-ca.crt)
docker run --rm "${ca_args[@]}" -v "$root/tools/image/wheels:/wheels" --entrypoint sh "$base" -c \
    'python3 -m venv /tmp/venv && /tmp/venv/bin/pip download --quiet --disable-pip-version-check \
        --only-binary=:all: --dest /wheels "$(ls /wheels/dap-*.whl)[embedded]"'
rm -rf build

echo "tools/image: docker build -t $tag (BASE=$base) ..." >&2
DOCKER_BUILDKIT=0 nice -n 10 docker build --quiet --build-arg "BASE=$base" --label "dap.image.key=$key" \
    -t "$tag" . >/dev/null
# The image this one replaces (untagged now), unless a container still runs it: ~530 MB each.
docker image prune --force --filter label=dap.image.key >/dev/null
size=$(docker image inspect "$tag" --format '{{.Size}}')
echo "tools/image: built $tag ($((size / 1024 / 1024)) MiB) in $((SECONDS - start)) s" >&2
