# The one generic dap image. Entry points (the first argument):
#   dap pod        the generic resource pod (what the operator deploys per workspace)
#   dap operator   the Kubernetes operator
#   dap control    the control plane (serve --mode region|cluster|standalone)
# Build: docker build -t dap:dev .   (kind: kind load docker-image dap:dev)

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY dap ./dap
RUN python -m venv /opt/dap \
 && /opt/dap/bin/pip install --upgrade pip \
 && /opt/dap/bin/pip install .

FROM python:3.11-slim
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
