"""A workspace served by the dap image in a kind cluster, as an operator of the platform sees it.

``kubectl apply`` of a Workspace becomes the operator's Deployment; its pods run the dap image,
pull the artifact registered with the cluster control (through that control's Service), and serve
the workspace's REST API and UI through the workspace's Service, reached here by ``kubectl
port-forward``. The pods' Postgres runs in the cluster too (manifests/postgres.yaml).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Kube, port_forward, record

pytestmark = pytest.mark.e2e

NS = "e2e"
WS = "books"
MANIFESTS = ROOT / "e2e-kind" / "manifests"
JWT_SECRET = "e2e-jwt-secret-of-at-least-thirty-two-bytes"  # manifests/tenant.yaml


def http(method: str, url: str, token: str | None = None, body: Any = None) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def dap(*args: str) -> str:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "dap"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, f"dap {' '.join(args)}: {result.stderr}"
    return result.stdout


def pods(kube: Kube) -> list[dict[str, Any]]:
    out = kube.run("get", "pods", "-n", NS, "-l", f"dap.io/workspace={WS}", "-o", "json")
    return list(json.loads(out)["items"])


def ready_addresses(kube: Kube) -> list[str]:
    selector = f"kubernetes.io/service-name=dap-{WS}"
    out = kube.run("get", "endpointslices", "-n", NS, "-l", selector, "-o", "json")
    return [
        address
        for item in json.loads(out)["items"]
        for endpoint in item.get("endpoints") or []
        if (endpoint.get("conditions") or {}).get("ready")
        for address in endpoint["addresses"]
    ]


def test_a_workspace_applied_with_kubectl_serves_rest_and_ui_through_its_service(kube: Kube) -> None:
    kube.run("apply", "-f", str(MANIFESTS / "postgres.yaml"))
    kube.run("apply", "-f", str(MANIFESTS / "tenant.yaml"))
    kube.run("-n", NS, "rollout", "status", "deployment/postgres", "--timeout=180s")

    applied = time.monotonic()
    kube.run("apply", "-f", str(MANIFESTS / "workspace.yaml"))
    deployment = kube.wait_for(lambda: kube.get("deployment", f"dap-{WS}", NS), what="its Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "dap:dev"

    kube.wait_for(
        lambda: pods(kube) and all(p["status"].get("phase") == "Running" for p in pods(kube)),
        what="pods Running",
    )
    with port_forward(kube, "svc/dap-control", 8443, "dap-system") as control:
        dap("register", str(ROOT / "examples" / "procurement"), "--control-url", control, "--workspace", WS)
    registered = time.monotonic()

    kube.wait_for(lambda: ready_addresses(kube), within=240, what="a ready endpoint behind the Service")
    token = dap("token", "--workspace", WS, "--secret", JWT_SECRET).strip()
    with port_forward(kube, f"svc/dap-{WS}", 80, NS) as url:
        first = kube.wait_for(
            lambda: http("GET", f"{url}/{WS}/api/stock/item", token)[0] == 200 and time.monotonic(),
            within=120,
            what="the first 200",
        )
        record("apply_to_first_200_s", round(first - applied, 1))
        record("register_to_first_200_s", round(first - registered, 1))

        status, page = http("GET", f"{url}/{WS}/")
        assert status == 200, page[:200]
        assert b"<html" in page.lower(), page[:200]
        assert b"api only" not in page.lower(), page[:200]
        item = {"code": "E2E-1", "title": "Kind", "unit_price": "9.90"}
        status, body = http("POST", f"{url}/{WS}/api/stock/item", token, item)
        assert status in (200, 201), body
        status, body = http("GET", f"{url}/{WS}/api/stock/item", token)
        assert status == 200, body
        assert b"E2E-1" in body, body

    running = pods(kube)
    assert all(c["image"] == "dap:dev" for p in running for c in p["spec"]["containers"])
    assert all(p["spec"]["securityContext"].get("runAsNonRoot") for p in running)
    pod = running[0]["metadata"]["name"]
    rss = kube.run("exec", "-n", NS, pod, "--", "sh", "-c", "grep VmRSS /proc/1/status")
    record("pod_rss_kib", int(rss.split()[1]))


@pytest.mark.xfail(
    strict=True,
    reason="found here: a pod answers /health 200 (so it is Ready) before its first artifact is loaded",
)
def test_a_pod_without_its_artifact_is_not_behind_the_service(kube: Kube) -> None:
    kube.run("apply", "-f", str(MANIFESTS / "postgres.yaml"))
    kube.run("apply", "-f", str(MANIFESTS / "tenant.yaml"))
    unregistered = MANIFESTS.joinpath("workspace.yaml").read_text().replace(f"name: {WS}", "name: empty")
    kube.run("apply", "-f", "-", stdin=unregistered)
    kube.wait_for(
        lambda: any(
            c.get("state", {}).get("running")
            for p in json.loads(
                kube.run("get", "pods", "-n", NS, "-l", "dap.io/workspace=empty", "-o", "json")
            )["items"]
            for c in p["status"].get("containerStatuses") or []
        ),
        what="the unregistered workspace's pod running",
    )
    time.sleep(10)  # two readiness periods
    out = kube.run(
        "get", "endpointslices", "-n", NS, "-l", "kubernetes.io/service-name=dap-empty", "-o", "json"
    )
    endpoints = [e for item in json.loads(out)["items"] for e in item.get("endpoints") or []]
    ready = [e for e in endpoints if e["conditions"].get("ready")]
    assert ready == [], "a pod without its artifact was put behind the Service"
