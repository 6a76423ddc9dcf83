"""One trace in a real Jaeger from a request to the webhook it caused, across two ``dap serve``
processes: the first answers the request and writes the event (it delivers nothing:
``DAP_EVENTS_DISPATCH=0``), the second delivers it to a webhook receiver on loopback seconds later.
Both export over OTLP to Jaeger (tests/jaeger.py); the test reads the trace back through Jaeger's
query API and checks its spans, their processes and their parent links. Marked ``late`` (it needs
the Jaeger that tools/jaeger/build.sh builds)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests import jaeger as jaeger_tool

from .conftest import ORIGIN, SECRET, token
from .test_serve_cli import DAP, _port, _wait_banner

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING = f"00-{TRACE}-00f067aa0ba902b7-01"
SPEC = {
    "module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: tr}\nspec: {title: Traced}\n",
    "parcel.yaml": """apiVersion: dap.io/v1
kind: Entity
metadata: {name: parcel, module: tr}
spec:
  fields:
    - {name: title, type: string, required: true}
  events:
    - name: created
      deliver:
        - channel: webhook
          webhook: {url_from_config: trace_hook}
  expose:
    - type: rest
""",
}


@pytest.fixture
def receiver() -> Iterator[tuple[list[dict[str, str]], str]]:
    seen: list[dict[str, str]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield seen, f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()


def serve(spec: Path, dsn: str, port: int, env: dict[str, str]) -> subprocess.Popen[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DAP_", "OTEL_"))}
    base |= {"DAP_DSN": dsn, "DAP_JWT_SECRET": SECRET, "DAP_CORS_ORIGIN": ORIGIN, **env}
    return subprocess.Popen(
        [DAP, "serve", "--spec", str(spec), "--addr", f"127.0.0.1:{port}", "--metrics-addr", ""],
        env=base,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )


def until(check: Any, seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_one_trace_in_jaeger_from_the_request_through_the_outbox_to_the_webhook(
    pg_dsn: str, tmp_path: Path, receiver: tuple[list[dict[str, str]], str]
) -> None:
    seen, hook = receiver
    spec = tmp_path / "spec"
    spec.mkdir()
    for name, text in SPEC.items():
        (spec / name).write_text(text)
    with jaeger_tool.running(tmp_path) as jaeger:
        otel = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp,
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "DAP_CONFIG_TRACE_HOOK": hook,
        }
        front_port, back_port = _port(), _port()
        front = serve(
            spec, pg_dsn, front_port, {**otel, "OTEL_SERVICE_NAME": "dap-front", "DAP_EVENTS_DISPATCH": "0"}
        )
        procs = [front]
        try:
            _wait_banner(front)
            back = serve(spec, pg_dsn, back_port, {**otel, "OTEL_SERVICE_NAME": "dap-deliverer"})
            procs.append(back)
            _wait_banner(back)
            request = urllib.request.Request(
                f"http://127.0.0.1:{front_port}/default/api/tr/parcel",
                data=json.dumps({"title": "traced"}).encode(),
                headers={
                    "Authorization": f"Bearer {token()}",
                    "Content-Type": "application/json",
                    "traceparent": INCOMING,
                },
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=30) as resp:
                assert resp.status == 201
            assert until(lambda: seen, 30), "the deliverer sent no webhook"

            def complete() -> dict[str, Any] | None:
                found = jaeger.trace(TRACE)
                names = {s["operationName"] for s in (found or {}).get("spans", [])}
                wanted = ("POST /{ws}/api/", "outbox tr/parcel.created", "deliver ", "webhook POST")
                return found if all(any(n.startswith(w) for n in names) for w in wanted) else None

            trace = until(complete, 30)
            assert trace is not None, jaeger.trace(TRACE)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    spans = {s["spanID"]: s for s in trace["spans"]}
    service = {pid: p["serviceName"] for pid, p in trace["processes"].items()}

    def one(prefix: str) -> dict[str, Any]:
        (found,) = [s for s in spans.values() if s["operationName"].startswith(prefix)]
        return found

    def parent(span: dict[str, Any]) -> str | None:
        refs = [r["spanID"] for r in span["references"] if r["refType"] == "CHILD_OF"]
        return refs[0] if refs else None

    req, outbox, deliver, webhook = (
        one(p) for p in ("POST /{ws}/api/", "outbox ", "deliver ", "webhook POST")
    )
    assert all(s["traceID"] == TRACE for s in spans.values())  # ONE trace
    assert parent(req) == INCOMING.split("-")[2]  # the caller's span, honoured
    assert service[req["processID"]] == "dap-front"
    assert {service[s["processID"]] for s in (outbox, deliver, webhook)} == {"dap-deliverer"}
    assert parent(deliver) == outbox["spanID"] and parent(webhook) == deliver["spanID"]
    at, chain = outbox, []
    while parent(at) in spans:  # outbox → … → the request (the operation between them)
        at = spans[parent(at)]  # type: ignore[index]
        chain.append(at["operationName"])
    assert req["operationName"] in chain, chain
    # the receiver got the webhook span's traceparent: it may continue the same trace
    assert seen[0]["traceparent"].split("-")[1:3] == [TRACE, webhook["spanID"]]
