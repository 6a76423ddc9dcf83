"""A workspace served by the dap image in a kind cluster, as an operator of the platform sees it.

``kubectl apply`` of a Workspace becomes the operator's Deployment; its pods run the dap image,
pull the artifact registered with the cluster control (through that control's Service), and serve
the workspace's REST API and UI through the workspace's Service, reached here by ``kubectl
port-forward`` and through a NodePort Service (kube-proxy). The pods' Postgres runs in the cluster
too (manifests/postgres.yaml). Readiness: a pod is behind its Service only once it serves its
artifact (``/ready``), so no request ever reaches a pod that would answer "unknown workspace".
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import pytest
from conftest import (
    JWT_SECRET,
    MANIFESTS,
    NS,
    WS,
    Books,
    Kube,
    dap,
    port_forward,
    ready_addresses,
    record,
    register,
)
from traffic import http

pytestmark = pytest.mark.e2e


def test_a_workspace_applied_with_kubectl_serves_rest_and_ui_through_its_service(books: Books) -> None:
    kube = books.kube
    deployment = kube.get("deployment", f"dap-{WS}", NS)
    assert deployment is not None
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "dap:dev"
    assert ready_addresses(kube), "no ready endpoint behind the Service"

    with port_forward(kube, f"svc/dap-{WS}", 80, NS) as url:
        status, page = http("GET", f"{url}/{WS}/")
        assert status == 200, page[:200]
        assert b"<html" in page.lower(), page[:200]
        assert b"api only" not in page.lower(), page[:200]
        item = {"code": "E2E-1", "title": "Kind", "unit_price": "9.90"}
        status, body = http("POST", f"{url}/{WS}/api/stock/item", books.token, item)
        assert status in (200, 201, 409), body  # 409: a kept cluster already has it
        status, body = http("GET", f"{url}/{WS}/api/stock/item?code=E2E-1", books.token)
        assert status == 200, body
        assert b"E2E-1" in body, body

    running = json.loads(kube.run("get", "pods", "-n", NS, "-l", f"dap.io/workspace={WS}", "-o", "json"))[
        "items"
    ]
    assert all(c["image"] == "dap:dev" for p in running for c in p["spec"]["containers"])
    assert all(p["spec"]["securityContext"].get("runAsNonRoot") for p in running)
    pod = running[0]["metadata"]["name"]
    rss = kube.run("exec", "-n", NS, pod, "--", "sh", "-c", "grep VmRSS /proc/1/status")
    record("pod_rss_kib", int(rss.split()[1]))


def _empty(kube: Kube) -> list[dict[str, object]]:
    out = kube.run("get", "pods", "-n", NS, "-l", "dap.io/workspace=empty", "-o", "json")
    return list(json.loads(out)["items"])


PROBE_APP = {
    "probe/module.yaml": (
        "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: probe}\nspec: {title: Probe}\n"
    ),
    "probe/ping.yaml": (
        "apiVersion: dap.io/v1\nkind: Entity\nmetadata: {name: ping, module: probe}\n"
        "spec:\n  title: Ping\n  fields:\n    - {name: title, type: string, required: true}\n"
        "  expose:\n    - type: rest\n"
    ),
}


def test_a_pod_without_its_artifact_is_not_behind_the_service(books: Books, tmp_path: Path) -> None:
    """Its own app (module probe): the workspaces share one database, and books' tables may be at
    another version by now (test_kind_lifecycle), which procurement's v1 would have to undo."""
    kube = books.kube
    unregistered = MANIFESTS.joinpath("workspace.yaml").read_text().replace(f"name: {WS}", "name: empty")
    node_port = MANIFESTS.joinpath("nodeport.yaml").read_text()
    node_port = node_port.replace("books", "empty").replace("30080", "30081")
    kube.run("apply", "-f", "-", stdin=unregistered)
    kube.run("apply", "-f", "-", stdin=node_port)
    try:
        kube.wait_for(
            lambda: any(
                c.get("state", {}).get("running")
                for p in _empty(kube)
                for c in p["status"]["containerStatuses"]
            ),
            what="the unregistered workspace's pod running",
        )
        pod = str(_empty(kube)[0]["metadata"]["name"])
        # listening first: kubectl port-forward ends at the first connection the pod refuses
        kube.wait_for(
            lambda: '"pod serving"' in kube.run("logs", "-n", NS, pod, check=False),
            within=120,
            what="pod serving",
        )
        # alive (liveness /health 200), not ready (/ready 503, saying why)
        with port_forward(kube, f"pod/{pod}", 8080, NS) as url:
            kube.wait_for(lambda: http("GET", f"{url}/health")[0] == 200, within=60, what="/health 200")
            status, body = http("GET", f"{url}/ready")
        assert status == 503, body
        assert "no artifact served yet" in body.decode(), body

        # through kube-proxy: for 10 s (five readiness periods) no request reaches the pod at all
        site = f"http://{kube.node_ip}:30081"
        answered: list[int] = []
        until = time.monotonic() + 10
        while time.monotonic() < until:
            with contextlib.suppress(OSError):  # refused: no endpoint, as it should be
                answered.append(http("GET", f"{site}/empty/api/stock/item", books.token, timeout=2)[0])
            time.sleep(0.5)
        out = kube.run(
            "get", "endpointslices", "-n", NS, "-l", "kubernetes.io/service-name=dap-empty", "-o", "json"
        )
        endpoints = [e for item in json.loads(out)["items"] for e in item.get("endpoints") or []]
        assert endpoints, "the pod is not even listed behind its Service"
        assert [e for e in endpoints if e["conditions"].get("ready")] == [], (
            "a pod without its artifact is Ready"
        )
        assert answered == [], f"requests reached a pod that serves nothing: {answered}"

        # once registered, it becomes Ready, and the first answer through the Service is a 200
        for name, text in PROBE_APP.items():
            (tmp_path / "probe" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "probe" / name).write_text(text)
        register(kube, tmp_path / "probe", ws="empty", app="probe")
        kube.wait_for(lambda: ready_addresses(kube, "empty"), within=120, what="the pod Ready once it serves")
        status, body = http("GET", f"{site}/empty/api/probe/ping", _token("empty"))
        assert status == 200, body
    finally:
        kube.run("delete", "workspace", "empty", "-n", NS, "--wait=false", check=False)
        kube.run("delete", "service", "empty-nodeport", "-n", NS, "--wait=false", check=False)


def _token(ws: str) -> str:
    return dap("token", "--workspace", ws, "--secret", JWT_SECRET).strip()
