# The one generic dap image. Entry points (the first argument):
#   dap pod        the generic resource pod (what the operator deploys per workspace)
#   dap operator   the Kubernetes operator
#   dap control    the control plane (serve --mode region|cluster|standalone)
#
# Build here (no image registry): make image  (tools/image/build.sh: a Debian base from mmdebstrap,
# the wheels from PyPI through the host's pip, the UI bundle built by npm; tag dap:dev).
# Build with a registry:  make ui && docker build -t dap:dev .   (BASE defaults to python:3.11-slim;
# the UI bundle is whatever dap/server/web/bundle holds: without it a pod answers the API only).
# kind: kind load docker-image dap:dev
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# "embedded" brings pgserver's Postgres for standalone/dev control planes (kind); "" leaves it out.
ARG EXTRAS=embedded
WORKDIR /src
COPY pyproject.toml README.md ./
COPY dap ./dap
# tools/image/wheels holds the wheels make image downloaded on the host (its pip reaches PyPI);
# when it holds none, pip installs from the index as usual.
COPY tools/image/wheels /wheels
RUN python3 -m venv /opt/dap \
 && if ls /wheels/*.whl >/dev/null 2>&1; then \
        /opt/dap/bin/pip install --no-index --find-links /wheels "$(ls /wheels/dap-*.whl)${EXTRAS:+[$EXTRAS]}"; \
    else \
        /opt/dap/bin/pip install --upgrade pip && /opt/dap/bin/pip install ".${EXTRAS:+[$EXTRAS]}"; \
    fi \
 && /opt/dap/bin/python -c "import dap.cli"

FROM ${BASE}
# A fixed non-root UID so that runAsNonRoot can be verified by the kubelet.
RUN groupadd --system --gid 10001 dap \
 && useradd --system --uid 10001 --gid dap --home-dir /home/dap --create-home dap
COPY --from=build /opt/dap /opt/dap
ENV PATH=/opt/dap/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /home/dap
EXPOSE 8080 8081 8443
ENTRYPOINT ["dap"]
CMD ["--help"]
