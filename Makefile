# dap — one entry point per job. Every target installs what it needs by itself.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install dev test lint unit bench bench-quick crds e2e clean k8s ui ui-test chromium wrk java image kind-node grpcurl dex jaeger jaeger-image prometheus

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall only when the dependency list changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

SPEC ?= examples/procurement
ARGS ?=

# The whole local pipeline: embedded Postgres, standalone control, registration, one resource pod.
# ARGS passes options on: make dev SPEC=my-spec ARGS="--watch --reset"
dev: $(STAMP) ui
	$(BIN)/dap dev --spec $(SPEC) $(ARGS)

# The Go builds (the test control plane, Dex, grpcurl, Jaeger, Prometheus, then the kind suite's
# images) run in the background at low priority meanwhile (tools/background.sh). The tests that
# need one of those binaries are marked `late` (tests/conftest.py): they run in a second pass, once
# `make k8s dex grpcurl jaeger prometheus` has waited for the builds; `make e2e` waits for its
# images the same way.
test: $(STAMP) ui chromium wrk java
	@bash tools/background.sh
	$(MAKE) lint
	$(MAKE) ui-test
	$(BIN)/python -m pytest -m "not late"
	@$(MAKE) --no-print-directory k8s dex grpcurl jaeger prometheus
	$(BIN)/python -m pytest -m late
	$(MAKE) bench-quick
	$(MAKE) e2e

# The UI bundle (ui/, TypeScript + Vite) is built into dap/server/web/bundle, which the package
# ships and `dap serve` serves; rebuilt only when its sources change. Without npm make goes on:
# the server then answers the API only and the browser tests skip saying why.
NPM := $(shell command -v npm 2>/dev/null)
UI_BUNDLE := dap/server/web/bundle/.built
UI_SOURCES := $(shell find ui/src ui/index.html ui/vite.config.ts ui/tsconfig.json -type f 2>/dev/null)

ifneq ($(NPM),)
ui: $(UI_BUNDLE)

ui/node_modules/.installed: ui/package.json ui/package-lock.json
	cd ui && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(UI_BUNDLE): ui/node_modules/.installed $(UI_SOURCES)
	cd ui && npm run --silent build
	touch $@

# vitest: the expression evaluator against the vectors the server's tests also run, view logic
ui-test: ui/node_modules/.installed
	cd ui && npm test --silent
else
ui ui-test:
	@echo "npm not found: the UI is not built or unit-tested (dap serve answers the API only)"
endif

# Debian's Chromium for the browser tests (tests/ui) and bench/ui.py; never a browser download.
chromium:
	@command -v chromium >/dev/null || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
		apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || echo "chromium not installed: the browser tests skip"

# The test control plane (etcd, kube-apiserver, kube-controller-manager, kubectl), built by
# `go build` from the Go module proxy into ~/.cache/dap/k8s/ when missing, reused after (a kind
# node's Kubernetes binaries are built into the same directory: tools/k8s/build.sh --node). Where no
# Go toolchain exists (exit 3) make goes on, and the tests that need it skip saying why.
k8s:
	@bash tools/k8s/build.sh >/dev/null || [ $$? -eq 3 ]

# Dex, the OpenID provider of the sign-in tests (tests/dex.py), built by `go build` from the Go
# module proxy into ~/.cache/dap/dex/ when missing; without Go (exit 3) those tests skip.
dex:
	@bash tools/dex/build.sh >/dev/null || [ $$? -eq 3 ]

# grpcurl, the gRPC client tests/server/test_grpcurl.py drives through reflection: `go install` from
# the Go module proxy into ~/.cache/dap/grpcurl/ when missing. Without Go (exit 3) make goes on and
# that test skips saying why.
grpcurl:
	@bash tools/grpcurl/build.sh >/dev/null || [ $$? -eq 3 ]

# Jaeger (the trace backend of tests/server/test_traces_jaeger.py) and Prometheus with promtool (the
# scrape, dashboard and alert-rule tests, tests/server/test_prometheus.py), built by `go build` from
# the Go module proxy into ~/.cache/dap/{jaeger,prometheus}/ when missing; without Go (exit 3) those
# tests skip.
jaeger:
	@bash tools/jaeger/build.sh >/dev/null || [ $$? -eq 3 ]

prometheus:
	@bash tools/prometheus/build.sh >/dev/null || [ $$? -eq 3 ]

# The kind suite's trace collector (dap-jaeger:dev): the Jaeger binary above on the dap image's
# Debian base, no registry (tools/jaeger/image.sh). tools/kind/prepare.sh builds it for make e2e;
# kustomize/overlays/kind-observability runs it in a cluster.
jaeger-image:
	bash tools/jaeger/image.sh

unit: $(STAMP)
	$(BIN)/python -m pytest -x -q

PY_DIRS := $(wildcard dap tests bench e2e-kind)

lint: $(STAMP)
	$(BIN)/ruff check $(PY_DIRS)
	$(BIN)/ruff format --check $(PY_DIRS)
	$(BIN)/mypy
	$(BIN)/lint-imports

# Java and Maven (Debian's packages) for openapi-generator, which tests/server/test_openapi_clients.py
# fetches from Maven Central with mvn (tools/openapi-generator/fetch.sh); without them that check skips.
java:
	@{ command -v java && command -v mvn; } >/dev/null || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
		apt-get update -qq && apt-get install -y -qq default-jre-headless maven >/dev/null; } || echo "java or mvn not installed: the openapi-generator check skips"

# wrk (Debian's package) drives the HTTP benchmarks; without it they fall back to a Python client
# and say so (bench/loadgen.py).
wrk:
	@command -v wrk >/dev/null || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
		apt-get update -qq && apt-get install -y -qq wrk >/dev/null; } || echo "wrk not installed: HTTP figures from a Python client"

bench: $(STAMP) k8s ui chromium wrk
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# Every benchmark once, small and short, so that none can stop running unnoticed (make test).
bench-quick: $(STAMP) k8s ui chromium
	@for b in bench/*.py; do echo "== $$b --quick"; $(BIN)/python $$b --quick || exit 1; done

crds: $(STAMP)
	$(BIN)/python -m dap.operator.crds crds

# The dap image (dap:dev) with no registry: a Debian base from mmdebstrap, wheels from PyPI, the UI
# bundle inside (tools/image/build.sh; starts or installs a Docker engine, tools/kind/dockerd.sh).
# With a registry: docker build --build-arg BASE=python:3.11-slim -t dap:dev .
image: $(STAMP) ui
	bash tools/image/build.sh

# kind's node image, built here (tools/kind/node-image.sh): Debian's systemd, containerd, runc and
# CNI plugins, Kubernetes and CoreDNS from the Go module proxy. Cached under ~/.cache/dap/kind.
kind-node:
	bash tools/kind/node-image.sh

# The kind suite (e2e-kind/): creates a cluster from kind-node, loads dap:dev, applies
# kustomize/overlays/kind and drives Workspaces with kubectl; then, in a pytest run of its own (its
# three clusters replace the first one rather than run beside it), the region suite
# (e2e-kind/test_kind_region.py: a management and two workload clusters; DAP_E2E_REGION=0 skips
# it when time is short). Part of `make test`; skips, saying
# why, where no Docker engine can run (prepare.sh starts dockerd when it is installed but stopped,
# and installs Debian's docker.io as root with apt-get).
e2e: $(STAMP) ui
	@bash tools/kind/prepare.sh; rc=$$?; \
	if [ $$rc -eq 3 ]; then echo "e2e: no Docker engine or Go toolchain here: the suite skips"; \
	elif [ $$rc -ne 0 ]; then exit $$rc; fi
	DAP_E2E=1 $(BIN)/python -m pytest e2e-kind -m e2e -q --ignore=e2e-kind/test_kind_region.py
	DAP_E2E=1 $(BIN)/python -m pytest e2e-kind/test_kind_region.py -m e2e -q

clean:
	rm -rf $(VENV) .dap .pytest_cache .mypy_cache .ruff_cache
