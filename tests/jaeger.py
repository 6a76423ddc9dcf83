"""Jaeger v2 (all-in-one: OTLP receiver, memory storage, query API) on loopback for the trace tests.

``tools/jaeger/build.sh`` builds it from the Go module proxy into ~/.cache/dap/jaeger once (``make
test`` starts that build in the background, and the first test that needs it waits for it);
without a Go toolchain the tests that need it skip saying so. Every port is a free loopback port,
and its own telemetry (which would bind :8888) is off.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.dex import free_port

ROOT = Path(__file__).parents[1]
BUILD = ROOT / "tools" / "jaeger" / "build.sh"

CONFIG = """
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics: {{level: none}}
    logs: {{level: warn}}
extensions:
  jaeger_query:
    storage: {{traces: mem}}
    http: {{endpoint: "127.0.0.1:{query}"}}
    grpc: {{endpoint: "127.0.0.1:{query_grpc}"}}
  jaeger_storage:
    backends:
      mem:
        memory: {{max_traces: 10000}}
receivers:
  otlp:
    protocols:
      http: {{endpoint: "127.0.0.1:{otlp}"}}
processors:
  batch: {{timeout: 100ms}}
exporters:
  jaeger_storage_exporter: {{trace_storage: mem}}
"""


def binary() -> str:
    """The built Jaeger, or a skip naming why there is none."""
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=3600)
    if done.returncode == 3:
        pytest.skip("no Go toolchain: Jaeger (the trace backend of these tests) cannot be built here")
    if done.returncode != 0:
        raise AssertionError(f"building Jaeger failed: {done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


@dataclass
class Jaeger:
    query: str  # http://127.0.0.1:PORT: the query API
    otlp: str  # http://127.0.0.1:PORT: OTLP/HTTP, for OTEL_EXPORTER_OTLP_ENDPOINT

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """The trace as the query API answers it (``/api/traces/{id}``), ``None`` while unknown."""
        try:
            with urllib.request.urlopen(f"{self.query}/api/traces/{trace_id}", timeout=5) as resp:
                found = json.load(resp).get("data") or []
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        return found[0] if found else None


@contextmanager
def running(directory: Path) -> Iterator[Jaeger]:
    exe = binary()
    ports = {"query": free_port(), "query_grpc": free_port(), "otlp": free_port()}
    config = directory / "jaeger.yaml"
    config.write_text(CONFIG.format(**ports))
    log = (directory / "jaeger.log").open("w")
    proc = subprocess.Popen([exe, "--config", f"file:{config}"], stdout=log, stderr=subprocess.STDOUT)
    jaeger = Jaeger(f"http://127.0.0.1:{ports['query']}", f"http://127.0.0.1:{ports['otlp']}")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{jaeger.query}/api/services", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"Jaeger did not start: {(directory / 'jaeger.log').read_text()[-3000:]}"
                    ) from None
                time.sleep(0.2)
        yield jaeger
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
