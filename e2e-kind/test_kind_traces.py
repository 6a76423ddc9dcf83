"""One request through the Service, one trace: the pod's request span, the outbox, the webhook
delivery and the in-cluster receiver's own span, read back from the in-cluster collector.

The collector is Jaeger's all-in-one built here (tools/jaeger/image.sh, loaded into kind by the
``kube`` fixture), applied as a user applies it (``kustomize/overlays/kind-observability``: the
``kustomize/observability/collector`` Deployment and Service). The workspace ``traced`` lives in a
namespace of its own, whose pod Secret (``dap-pod``, read by every workspace pod of the namespace)
gets its ``OTEL_*`` environment from the ``kustomize/observability/tracing`` component, so the
other tests' pods are not traced. Its app delivers ``parcel.created`` to a webhook receiver in the
cluster (the dap image's Python with the OpenTelemetry SDK it ships), which continues the
``traceparent`` it receives in a span of its own and exports it to the same collector.

One POST without a ``traceparent`` through the NodePort Service (the pod decides the trace), then,
through Jaeger's query API (a port-forward to the collector's Service): every span has the trace id
the receiver got; the request span is the root and carries the request id the answer named; the
outbox span descends from the request (through the operation), the delivery from the outbox, the
webhook from the delivery, and the receiver's span from the webhook, each in the process it ran in.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import JAEGER_IMAGE, JWT_SECRET, ROOT, Books, Kube, dap, port_forward, record, register
from traffic import http

pytestmark = pytest.mark.e2e

NS = "traced"  # a namespace of its own: its pod Secret carries the OTEL_* environment
WS = "traced"
WS_PORT = 30084
HOOK_PORT = 30085
COLLECTOR = ROOT / "kustomize" / "overlays" / "kind-observability"
TRACING = ROOT / "kustomize" / "observability" / "tracing"

APP = {
    "module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: tr}\nspec: {title: Traced}\n",
    "parcel.yaml": (
        "apiVersion: dap.io/v1\nkind: Entity\nmetadata: {name: parcel, module: tr}\n"
        "spec:\n  title: Parcel\n  fields:\n    - {name: title, type: string, required: true}\n"
        "  events:\n    - name: created\n      deliver:\n        - channel: webhook\n"
        f"          webhook: {{url: 'http://hook.{NS}.svc:8080/hook'}}\n"
        "          retry: {max_attempts: 20, backoff: 200ms, max_backoff: 2s}\n"
        "  expose:\n    - type: rest\n"
    ),
}

# The receiver: continues the traceparent it is sent in a span of its own, exported at once to
# the collector named by OTEL_EXPORTER_OTLP_ENDPOINT; GET answers what it received.
RECEIVER = """
import http.server, json, threading
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
provider = TracerProvider(resource=Resource.create({'service.name': 'hook'}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer('hook')
seen, lock = [], threading.Lock()
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get('content-length') or 0)) or b'null')
        parent = TraceContextTextMapPropagator().extract({'traceparent': self.headers.get('traceparent', '')})
        with tracer.start_as_current_span('hook receive', context=parent, kind=SpanKind.SERVER):
            with lock:
                seen.append({'traceparent': self.headers.get('traceparent'), 'body': body})
        self.send_response(204)
        self.end_headers()
    def do_GET(self):
        with lock:
            data = json.dumps(seen).encode()
        self.send_response(200)
        self.send_header('content-type', 'application/json')
        self.send_header('content-length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(('', 8080), Hook).serve_forever()
"""

# What every workspace pod of the namespace reads (as e2e-kind/manifests/tenant.yaml gives the e2e
# namespace), the OTEL_* keys added by the tracing component; spans batched for 200 ms, not 5 s.
POD_SECRET = f"""apiVersion: v1
kind: Secret
metadata: {{name: dap-pod, namespace: {NS}}}
stringData:
  DAP_DSN: postgresql://dap:e2e-postgres-password@postgres.e2e.svc:5432/postgres
  DAP_JWT_SECRET: {JWT_SECRET}
  DAP_LOG_LEVEL: info
  DAP_PULL_INTERVAL: 2s
  DAP_CORS_ORIGIN: http://127.0.0.1
  OTEL_BSP_SCHEDULE_DELAY: "200"
"""


def _manifests() -> str:
    return f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: hook, namespace: {NS}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: hook}}}}
  template:
    metadata: {{labels: {{app: hook}}}}
    spec:
      containers:
        - name: hook
          image: dap:dev
          imagePullPolicy: Never
          command: [/opt/dap/bin/python, -c, {json.dumps(RECEIVER)}]
          env: [{{name: OTEL_EXPORTER_OTLP_ENDPOINT, value: "http://otel-collector.observability.svc:4318"}}]
          ports: [{{name: http, containerPort: 8080}}]
          readinessProbe: {{tcpSocket: {{port: 8080}}, periodSeconds: 1}}
---
apiVersion: v1
kind: Service
metadata: {{name: hook, namespace: {NS}}}
spec:
  type: NodePort
  selector: {{app: hook}}
  ports: [{{name: http, port: 8080, targetPort: 8080, nodePort: {HOOK_PORT}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: traced-nodeport, namespace: {NS}}}
spec:
  type: NodePort
  selector: {{dap.io/workspace: {WS}}}
  ports: [{{name: http, port: 80, targetPort: http, nodePort: {WS_PORT}}}]
---
apiVersion: dap.io/v1alpha1
kind: Workspace
metadata: {{name: {WS}, namespace: {NS}}}
spec: {{owner: e2e@example.com, clusterClass: kind}}
"""


def _apply_pod_secret(kube: Kube, directory: Path) -> None:
    """The namespace's pod Secret through a kustomization that uses the tracing component, as a
    cluster administrator adds it (kustomize loads a component by a relative path)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "secret.yaml").write_text(POD_SECRET)
    (directory / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [secret.yaml]\n"
        f"components: [{os.path.relpath(TRACING, directory)}]\n"
    )
    kube.run("apply", "-k", str(directory))


def _post(site: str, token: str) -> tuple[str, str]:
    """One POST through the Service: the record id and the answer's X-Request-Id."""
    request = urllib.request.Request(
        f"{site}/{WS}/api/tr/parcel",
        data=json.dumps({"title": "traced"}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 201, resp.status
        return str(json.load(resp)["data"]["id"]), resp.headers["X-Request-Id"]


def _trace(query: str, trace_id: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{query}/api/traces/{trace_id}", timeout=5) as resp:
            found = json.load(resp).get("data") or []
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return found[0] if found else None


WANTED = ("POST /{ws}/api/", "outbox tr/parcel.created", "deliver ", "webhook POST", "hook receive")


def _complete(query: str, trace_id: str) -> dict[str, Any] | None:
    found = _trace(query, trace_id)
    names = {s["operationName"] for s in (found or {}).get("spans", [])}
    return found if all(any(n.startswith(w) for n in names) for w in WANTED) else None


def test_one_request_through_the_service_is_one_trace_to_the_webhook_receiver(
    books: Books, tmp_path: Path
) -> None:
    kube = books.kube  # the suite's cluster, with its Postgres (namespace e2e) and control
    assert JAEGER_IMAGE, "no collector image: tools/kind/prepare.sh builds it (make e2e)"
    try:
        # what an interrupted run on a kept cluster (DAP_E2E_KEEP=1) left goes first
        kube.run("delete", "-k", str(COLLECTOR), "--ignore-not-found", "--timeout=180s")
        kube.run("delete", "namespace", NS, "--ignore-not-found", "--timeout=180s")
        kube.run("apply", "-k", str(COLLECTOR))
        kube.run("-n", "observability", "rollout", "status", "deployment/otel-collector", "--timeout=120s")
        kube.run("create", "namespace", NS)
        _apply_pod_secret(kube, tmp_path / "pod-env")
        kube.run("apply", "-f", "-", stdin=_manifests())
        for name, text in APP.items():
            (tmp_path / "app" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "app" / name).write_text(text)
        kube.wait_for(
            lambda: json.loads(
                kube.run("get", "pods", "-n", NS, "-l", f"dap.io/workspace={WS}", "-o", "json")
            )["items"],
            what="the traced workspace's pod",
        )
        register(kube, tmp_path / "app", ws=WS, app="traced")
        kube.run("-n", NS, "rollout", "status", "deployment/hook", "--timeout=120s")
        token = dap("token", "--workspace", WS, "--secret", JWT_SECRET).strip()
        site = f"http://{kube.node_ip}:{WS_PORT}"

        def serving() -> bool:
            try:
                return http("GET", f"{site}/{WS}/api/tr/parcel?limit=1", token, timeout=5)[0] == 200
            except OSError:
                return False

        kube.wait_for(serving, within=240, what="the traced workspace serving through its Service")

        posted = time.monotonic()
        record_id, request_id = _post(site, token)

        def delivered() -> dict[str, Any] | None:
            status, body = http("GET", f"http://{kube.node_ip}:{HOOK_PORT}/seen", timeout=5)
            got = (
                [d for d in json.loads(body) if d["body"]["record_id"] == record_id] if status == 200 else []
            )
            return got[0] if got else None

        delivery = kube.wait_for(delivered, within=60, what="the webhook at the in-cluster receiver")
        assert delivery["traceparent"], "the webhook came without a traceparent header"
        received = time.monotonic()
        _, trace_id, webhook_span, _ = delivery["traceparent"].split("-")

        with port_forward(kube, "svc/otel-collector", 16686, "observability") as query:
            try:
                trace = kube.wait_for(
                    lambda: _complete(query, trace_id), within=60, what="the whole trace in the collector"
                )
            except AssertionError as exc:  # say which spans did arrive
                spans = (_trace(query, trace_id) or {}).get("spans", [])
                raise AssertionError(
                    f"{exc}; trace {trace_id} has {[s['operationName'] for s in spans]}"
                ) from None
        record(
            "trace_in_kind",
            {
                "post_to_webhook_s": round(received - posted, 2),
                "post_to_complete_trace_s": round(time.monotonic() - posted, 2),
                "spans": len(trace["spans"]),
            },
        )
    finally:
        kube.run("delete", "namespace", NS, "--wait=false", check=False)
        kube.run("delete", "-k", str(COLLECTOR), "--wait=false", check=False)

    spans = {s["spanID"]: s for s in trace["spans"]}
    service = {pid: p["serviceName"] for pid, p in trace["processes"].items()}

    def one(prefix: str) -> dict[str, Any]:
        found = [s for s in spans.values() if s["operationName"].startswith(prefix)]
        assert len(found) == 1, (prefix, [s["operationName"] for s in spans.values()])
        return found[0]

    def parent(span: dict[str, Any]) -> str | None:
        refs = [r["spanID"] for r in span["references"] if r["refType"] == "CHILD_OF"]
        return refs[0] if refs else None

    req, outbox, deliver, webhook, hook = (one(p) for p in WANTED)
    assert {s["traceID"] for s in spans.values()} == {trace_id}  # ONE trace
    assert parent(req) is None, "the request span is the root: the request came without a traceparent"
    tags = {t["key"]: t["value"] for t in req["tags"]}
    assert tags.get("dap.request_id") == request_id, tags
    assert {service[s["processID"]] for s in (req, outbox, deliver, webhook)} == {"dap-pod"}
    assert service[hook["processID"]] == "hook"
    assert parent(deliver) == outbox["spanID"]
    assert parent(webhook) == deliver["spanID"]
    assert webhook["spanID"] == webhook_span  # the header the receiver got names the webhook span
    assert parent(hook) == webhook["spanID"]
    at, chain = outbox, []
    while parent(at) in spans:  # outbox → … → the request (the operation between them)
        at = spans[parent(at)]  # type: ignore[index]
        chain.append(at["operationName"])
    assert req["operationName"] in chain, chain
