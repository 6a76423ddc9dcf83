"""Events of a workspace at two replicas: the websocket and the webhook across pods.

The ``relay`` workspace (a ClusterClass of two replicas) serves an app whose ``message`` entity
delivers its ``created`` event to a webhook: a small receiver in the cluster (the dap image's
Python, stdlib only; Service ``hook``, cluster-internal), which keeps what it got. Events are
written in the write's transaction (the outbox in the shared Postgres); the dispatchers of both
pods claim undelivered rows (``FOR UPDATE SKIP LOCKED``) and NOTIFY the feed, which every pod
LISTENs to (``dap/server/events``). So:

- a websocket client connected to one pod receives the events of writes served by the other pod,
  each exactly once (by ``seq`` and by record);
- writes through the NodePort Service while one replica is deleted reach the receiver, every
  acknowledged one, each event under one ``webhook-id`` (the event's id, stable over retries):
  delivery is at least once, so a receiver that keeps the ids sees every event once (a POST
  answered just as its pod shut down is delivered again by the other replica, same id; counted).

Found by this test: the pods of a namespace share one database, and the dispatcher of another
workspace's pod (books) claimed relay's rows and settled them with its own catalog, which has no
webhook for them: lost. The dispatcher of a resource pod now claims its workspace's rows only
(``dispatcher.Settings.tenants``, set by ``dap.resource_pod.loading.ensure_workspace``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import (
    JWT_SECRET,
    NS,
    Books,
    Kube,
    dap,
    port_forward,
    psql,
    ready_addresses,
    record,
    register,
    workspace_pods,
)
from traffic import http

pytestmark = pytest.mark.e2e

RELAY = "relay"
HOOK_PORT = 30082
RELAY_PORT = 30083

APP = {
    "relay/module.yaml": (
        "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: relay}\nspec: {title: Relay}\n"
    ),
    "relay/message.yaml": (
        "apiVersion: dap.io/v1\nkind: Entity\nmetadata: {name: message, module: relay}\n"
        "spec:\n  title: Message\n  fields:\n    - {name: title, type: string, required: true}\n"
        "  events:\n    - name: created\n      deliver:\n        - channel: webhook\n"
        f"          webhook: {{url: 'http://hook.{NS}.svc:8080/hook'}}\n"
        "          retry: {max_attempts: 20, backoff: 200ms, max_backoff: 2s}\n"
        "  expose:\n    - type: rest\n"
    ),
}

RECEIVER = """
import http.server, json, threading
seen, lock = [], threading.Lock()
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get('content-length') or 0)) or b'null')
        with lock:
            seen.append({'webhook_id': self.headers.get('webhook-id'), 'body': body})
        self.send_response(204)
        self.end_headers()
    do_PUT = do_POST
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


def _manifests() -> str:
    receiver = json.dumps(RECEIVER)
    return f"""apiVersion: dap.io/v1alpha1
kind: ClusterClass
metadata: {{name: kind-pair}}
spec:
  sla: standard
  nodeType: kind
  scaling: {{minReplicas: 2, maxReplicas: 2}}
---
apiVersion: apps/v1
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
          command: [/opt/dap/bin/python, -c, {receiver}]
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
metadata: {{name: relay-nodeport, namespace: {NS}}}
spec:
  type: NodePort
  selector: {{dap.io/workspace: {RELAY}}}
  ports: [{{name: http, port: 80, targetPort: http, nodePort: {RELAY_PORT}}}]
---
apiVersion: dap.io/v1alpha1
kind: Workspace
metadata: {{name: {RELAY}, namespace: {NS}}}
spec: {{owner: e2e@example.com, clusterClass: kind-pair}}
"""


def _write(base: str, token: str, title: str) -> str | None:
    """POST one message; its record id when acknowledged."""
    try:
        status, body = http("POST", f"{base}/{RELAY}/api/relay/message", token, {"title": title}, timeout=5)
    except OSError:
        return None
    return str(json.loads(body)["data"]["id"]) if status in (200, 201) else None


async def _listen(url: str, token: str, written: list[str], post: Any) -> list[dict[str, Any]]:
    """Subscribe on one pod, have ``post`` write through the other; every event frame received."""
    frames: list[dict[str, Any]] = []
    ws_url = url.replace("http://", "ws://") + f"/{RELAY}/_ws?access_token={token}"
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url, heartbeat=10) as ws:
        assert (await ws.receive_json(timeout=10))["type"] == "welcome"
        await ws.send_json({"type": "subscribe", "id": "s1", "entity": "relay/message"})
        answer = await ws.receive_json(timeout=10)
        assert answer["type"] == "subscribed", answer
        await asyncio.to_thread(post)
        deadline = time.monotonic() + 30
        settle: float | None = None
        while time.monotonic() < (settle or deadline):
            try:
                frame = await ws.receive_json(timeout=1)
            except TimeoutError:
                frame = None
            if frame and frame.get("type") == "event":
                frames.append(frame)
            got = {f["event"]["record_id"] for f in frames}
            if settle is None and set(written) <= got:
                settle = time.monotonic() + 3  # a while longer: a repeat would show now
    return frames


_OUTBOX_OF = (
    "SELECT id, record_id, event, attempts, next_at, delivered_at, left(last_error, 200) AS last_error "
    "FROM dap.outbox WHERE record_id IN ({ids}) ORDER BY id"
)


def _received(kube: Kube) -> list[dict[str, Any]]:
    status, body = http("GET", f"http://{kube.node_ip}:{HOOK_PORT}/seen", timeout=5)
    assert status == 200, body
    return list(json.loads(body))


def _relay_pods(kube: Kube) -> list[str]:
    return sorted(
        str(p["metadata"]["name"])
        for p in workspace_pods(kube, RELAY)
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in p["status"].get("conditions", [])
        )
    )


def test_two_replicas_share_websocket_events_and_webhooks_survive_a_killed_replica(
    books: Books, tmp_path: Path
) -> None:
    kube = books.kube
    kube.run("apply", "-f", "-", stdin=_manifests())
    try:
        for name, text in APP.items():
            (tmp_path / "relay" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "relay" / name).write_text(text)
        kube.wait_for(lambda: len(workspace_pods(kube, RELAY)) == 2, what="two relay pods")
        register(kube, tmp_path / "relay", ws=RELAY, app="relay")
        kube.wait_for(lambda: len(ready_addresses(kube, RELAY)) == 2, within=240, what="both replicas Ready")
        kube.run("-n", NS, "rollout", "status", "deployment/hook", "--timeout=120s")
        token = dap("token", "--workspace", RELAY, "--secret", JWT_SECRET).strip()
        one, other = _relay_pods(kube)

        # 1. a websocket on one pod, writes served by the other
        written: list[str] = []
        with (
            port_forward(kube, f"pod/{one}", 8080, NS) as listen,
            port_forward(kube, f"pod/{other}", 8080, NS) as write,
        ):

            def post() -> None:
                for n in range(10):
                    rid = _write(write, token, f"ws-{n}")
                    assert rid is not None, f"write {n} through {other} failed"
                    written.append(rid)

            frames = asyncio.run(_listen(listen, token, written, post))
        created = [f for f in frames if f["event"]["event"] == "created"]
        by_record = [f["event"]["record_id"] for f in created]
        assert sorted(by_record) == sorted(written), (by_record, written)  # each once, none missing
        assert len({f["seq"] for f in frames}) == len(frames), "an event frame repeated"
        record("ws_cross_pod_events", {"written": len(written), "received": len(created)})

        # 2. writes through the Service while one replica is deleted; the receiver gets them all
        acknowledged: list[str] = list(written)
        failed = 0
        stop = threading.Event()

        def load() -> None:
            nonlocal failed
            n = 0
            while not stop.is_set():
                rid = _write(f"http://{kube.node_ip}:{RELAY_PORT}", token, f"kill-{n}")
                if rid is None:
                    failed += 1
                else:
                    acknowledged.append(rid)
                n += 1
                stop.wait(0.2)

        writer = threading.Thread(target=load, daemon=True)
        writer.start()
        try:
            time.sleep(4)
            kube.run("delete", "pod", "-n", NS, one, "--wait=false")
            kube.wait_for(
                lambda: len(_relay_pods(kube)) == 2 and one not in _relay_pods(kube),
                within=180,
                what="the deleted replica replaced and Ready",
            )
            time.sleep(3)
        finally:
            stop.set()
            writer.join(timeout=30)

        def all_delivered() -> bool:
            return set(acknowledged) <= {d["body"]["record_id"] for d in _received(kube)}

        try:
            kube.wait_for(all_delivered, within=120, what="every acknowledged write's event at the receiver")
        except AssertionError as exc:  # say where the missing events are
            missing = set(acknowledged) - {d["body"]["record_id"] for d in _received(kube)}
            rows = psql(kube, _OUTBOX_OF.format(ids=",".join(f"'{rid}'" for rid in sorted(missing))))
            raise AssertionError(f"{exc}; {len(missing)} missing; their outbox rows:\n{rows}") from None
        deliveries = [d for d in _received(kube) if d["body"]["record_id"] in set(acknowledged)]
        ids_of: dict[str, set[str]] = {}
        for d in deliveries:
            assert d["webhook_id"] == d["body"]["id"], d  # the webhook-id is the event's id
            ids_of.setdefault(d["body"]["record_id"], set()).add(d["webhook_id"])
        assert all(len(ids) == 1 for ids in ids_of.values()), "one record's event under two ids"
        duplicates = len(deliveries) - len(ids_of)
        record(
            "webhook_under_kill",
            {
                "acknowledged": len(acknowledged),
                "failed_writes": failed,
                "deliveries": len(deliveries),
                "duplicate_deliveries": duplicates,
            },
        )
        # at least once, under one id: a receiver keeping webhook-ids (as Standard Webhooks asks)
        # sees each event once. A delivery whose POST was answered but whose settling was cut by
        # the pod's shutdown is delivered again by the other replica, with the same id.
        assert len({d["webhook_id"] for d in deliveries}) == len(set(acknowledged))
    finally:
        for kind, name in (
            ("workspace", RELAY),
            ("deployment", "hook"),
            ("service", "hook"),
            ("service", "relay-nodeport"),
        ):
            kube.run("delete", kind, name, "-n", NS, "--wait=false", check=False)
        kube.run("delete", "clusterclass", "kind-pair", "--wait=false", check=False)
