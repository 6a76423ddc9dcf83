"""A kind cluster with dap's image loaded and the kind overlay applied, for the e2e tests.

Everything comes from this machine: ``make e2e`` (tools/kind/prepare.sh) starts a Docker engine,
builds the dap image, kind's node image, the kind CLI and kubectl, and writes their names to
``.dap/e2e.env``, which this file reads (``DAP_E2E_*`` variables override it). Skipped, with the
reason, where no Docker engine runs (``docker info`` must succeed: a client binary is not enough)
or the prepared parts are missing, and everywhere unless ``DAP_E2E=1`` (``make e2e`` sets it: the
suite creates a cluster of its own, so it runs as its own step, the last of ``make test``, rather
than inside the main pytest run). The cluster is
created once per session and deleted at the end unless ``DAP_E2E_KEEP=1``; ``DAP_E2E_CLUSTER``
names it (default ``dap-e2e``). An existing cluster of that name is reused only under
``DAP_E2E_KEEP=1``; otherwise it is what an interrupted run left (its control holding artifacts
signed by that run's key, its node restarted with the Docker engine) and is deleted first. The kind
CLI is driven directly (no pytest-kind dependency).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "dap:dev"
ENV_FILE = ROOT / ".dap" / "e2e.env"


def _prepared() -> dict[str, str]:
    """The parts tools/kind/prepare.sh built (DAP_E2E_KIND, _KUBECTL, _NODE_IMAGE, _JAEGER_IMAGE)."""
    values: dict[str, str] = {}
    if ENV_FILE.is_file():
        for line in ENV_FILE.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip()
    for key in ("DAP_E2E_KIND", "DAP_E2E_KUBECTL", "DAP_E2E_NODE_IMAGE", "DAP_E2E_JAEGER_IMAGE"):
        if os.environ.get(key):
            values[key] = os.environ[key]
    return values


PARTS = _prepared()
KIND = PARTS.get("DAP_E2E_KIND") or shutil.which("kind") or "kind"
KUBECTL = PARTS.get("DAP_E2E_KUBECTL") or shutil.which("kubectl") or "kubectl"
NODE_IMAGE = PARTS.get("DAP_E2E_NODE_IMAGE", "")
# The in-cluster trace collector (tools/jaeger/image.sh; test_kind_traces.py), loaded when built.
JAEGER_IMAGE = PARTS.get("DAP_E2E_JAEGER_IMAGE", "")


def _missing() -> str | None:
    if os.environ.get("DAP_E2E") != "1":
        return "the kind suite runs in its own step, make e2e (DAP_E2E=1; the last step of make test)"
    if shutil.which("docker") is None:
        return "docker is not installed"
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker info failed: {exc}"
    if info.returncode != 0:
        return "docker engine is not reachable (docker info failed): " + info.stderr.strip()[:200]
    for tool in (KIND, KUBECTL):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make e2e builds it)"
    for image in (IMAGE, NODE_IMAGE):
        if not image or subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode:
            return f"image {image or 'of the kind node'} is not built (make e2e builds it)"
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test's budget includes its fixtures: the first one creates the cluster and serves books."""
    here = Path(__file__).parent
    for item in items:  # the hook sees every item of the session, tests/ included: only ours
        if here in item.path.parents:
            item.add_marker(pytest.mark.timeout(900))


class Kube:
    """kubectl against the kind cluster's kubeconfig; ``node_ip``: its node on the Docker network."""

    def __init__(self, kubeconfig: Path, node_ip: str = "") -> None:
        self.kubeconfig = kubeconfig
        self.node_ip = node_ip

    def run(self, *args: str, stdin: str | None = None, check: bool = True, timeout: int = 300) -> str:
        result = subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result.stdout

    def refused(self, *args: str, stdin: str | None = None) -> str:
        """Run kubectl expecting a failure; return its error output."""
        result = subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode != 0, f"kubectl {' '.join(args)} unexpectedly succeeded: {result.stdout}"
        return result.stderr

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
        out = self.run(*args, check=False)
        return json.loads(out) if out.strip() else None

    def wait_for(self, predicate: Any, within: float = 180, what: str = "condition") -> Any:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                value = predicate()
            except (KeyError, TypeError, IndexError, StopIteration, OSError):  # OSError: not answering yet
                value = None
            if value:
                return value
            time.sleep(2)
        raise AssertionError(f"timed out after {within}s waiting for {what}")


def psql(kube: Kube, sql: str) -> str:
    """``sql`` run by psql as the superuser in the cluster's Postgres (namespace e2e); its output."""
    script = (
        "bin=$(echo /opt/dap/lib/python3*/site-packages/pgserver/pginstall/bin); "
        '"$bin/psql" -h /tmp -U dap -d postgres -v ON_ERROR_STOP=1 -c "$0"'
    )
    return kube.run("exec", "-n", NS, "deploy/postgres", "--", "sh", "-c", script, sql)


def _sh(*args: str, timeout: int = 900) -> None:
    subprocess.run(args, check=True, timeout=timeout, cwd=ROOT)


@contextlib.contextmanager
def port_forward(kube: Kube, target: str, port: int, namespace: str) -> Iterator[str]:
    """``kubectl port-forward`` to ``target`` on a free loopback port; yields its base URL."""
    proc = subprocess.Popen(
        [KUBECTL, "--kubeconfig", str(kube.kubeconfig), "-n", namespace, "port-forward", target, f":{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            found = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line)
            if found:
                yield f"http://127.0.0.1:{found.group(1)}"
                break
            if not line and proc.poll() is not None:
                raise AssertionError(f"kubectl port-forward {target} exited: {proc.returncode}")
        else:
            raise AssertionError(f"kubectl port-forward {target}: no port within 60 s")
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


FIGURES = ROOT / ".dap" / "e2e-figures.json"


def record(name: str, value: Any) -> None:
    """Keep a measured figure (docs/operator.md quotes them) in .dap/e2e-figures.json."""
    figures = json.loads(FIGURES.read_text()) if FIGURES.is_file() else {}
    figures[name] = value
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    FIGURES.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    reason = _missing()
    if reason:
        pytest.skip(f"e2e-kind needs Docker and kind: {reason}")
    name = os.environ.get("DAP_E2E_CLUSTER", "dap-e2e")
    kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
    keep = os.environ.get("DAP_E2E_KEEP") == "1"
    existing = subprocess.run([KIND, "get", "clusters"], capture_output=True, text=True).stdout.split()
    if name in existing and not keep:
        print(f"e2e-kind: deleting cluster {name}, left by an interrupted run", file=sys.stderr)
        _sh(KIND, "delete", "cluster", "--name", name, timeout=300)
        existing.remove(name)
    created = name not in existing
    started = time.monotonic()
    if created:
        _sh(KIND, "create", "cluster", "--name", name, "--image", NODE_IMAGE, "--wait", "240s")
        record("kind_create_cluster_s", round(time.monotonic() - started, 1))
    _sh(KIND, "export", "kubeconfig", "--name", name, "--kubeconfig", str(kubeconfig))
    _sh(KIND, "load", "docker-image", IMAGE, "--name", name)
    if (
        JAEGER_IMAGE
        and not subprocess.run(["docker", "image", "inspect", JAEGER_IMAGE], capture_output=True).returncode
    ):
        _sh(KIND, "load", "docker-image", JAEGER_IMAGE, "--name", name)
    node_ip = subprocess.run(
        [
            "docker",
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            f"{name}-control-plane",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    kube = Kube(kubeconfig, node_ip)
    kube.run("apply", "-k", str(ROOT / "kustomize" / "overlays" / "kind"))
    kube.run("-n", "dap-system", "rollout", "status", "deployment/dap-operator", "--timeout=240s")
    kube.run("-n", "dap-system", "rollout", "status", "deployment/dap-control", "--timeout=240s")
    record("cluster_ready_s", round(time.monotonic() - started, 1))
    try:
        yield kube
    finally:
        if created and not keep:
            subprocess.run([KIND, "delete", "cluster", "--name", name], check=False, timeout=300)


# --- the books workspace, served once per session -----------------------------------------------

NS = "e2e"
WS = "books"
MANIFESTS = ROOT / "e2e-kind" / "manifests"
JWT_SECRET = "e2e-jwt-secret-of-at-least-thirty-two-bytes"  # manifests/tenant.yaml
NODE_PORT = 30080  # manifests/nodeport.yaml


def dap(*args: str) -> str:
    """The ``dap`` CLI of this virtualenv (register, token), as a user runs it."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "dap"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, f"dap {' '.join(args)}: {result.stderr}"
    return result.stdout


def workspace_pods(kube: Kube, ws: str = WS) -> list[dict[str, Any]]:
    out = kube.run("get", "pods", "-n", NS, "-l", f"dap.io/workspace={ws}", "-o", "json")
    return list(json.loads(out)["items"])


def ready_addresses(kube: Kube, ws: str = WS) -> list[str]:
    """Addresses of the workspace Service's endpoints that are Ready (what kube-proxy routes to)."""
    out = kube.run(
        "get", "endpointslices", "-n", NS, "-l", f"kubernetes.io/service-name=dap-{ws}", "-o", "json"
    )
    return [
        address
        for item in json.loads(out)["items"]
        for endpoint in item.get("endpoints") or []
        if (endpoint.get("conditions") or {}).get("ready")
        for address in endpoint["addresses"]
    ]


def register(kube: Kube, directory: Path, ws: str = WS, app: str = "procurement") -> None:
    """``dap register`` through a port-forward to the cluster control: a new version of ``app``."""
    with port_forward(kube, "svc/dap-control", 8443, "dap-system") as control:
        dap("register", str(directory), "--control-url", control, "--workspace", ws, "--app", app)


@dataclasses.dataclass(frozen=True)
class Books:
    """The books workspace serving examples/procurement, reached through the NodePort Service."""

    kube: Kube
    token: str
    site: str  # http://<node>:30080: /ready, /books/, /books/api/...
    timings: dict[str, float]

    @property
    def api(self) -> str:
        return f"{self.site}/{WS}/api"


def serving(site: str, token: str) -> bool:
    from traffic import http

    try:
        return http("GET", f"{site}/{WS}/api/stock/item?limit=1", token, timeout=5)[0] == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def books(kube: Kube) -> Books:
    """Postgres, the tenant Secret and class, the Workspace and its registered artifact, applied as
    the walk-through of docs/operator.md does; timed from ``kubectl apply`` to the first 200."""
    kube.run("apply", "-f", str(MANIFESTS / "postgres.yaml"))
    kube.run("apply", "-f", str(MANIFESTS / "tenant.yaml"))
    kube.run("apply", "-f", str(MANIFESTS / "nodeport.yaml"))
    kube.run("-n", NS, "rollout", "status", "deployment/postgres", "--timeout=180s")
    token = dap("token", "--workspace", WS, "--secret", JWT_SECRET).strip()
    site = f"http://{kube.node_ip}:{NODE_PORT}"
    if serving(site, token):  # a kept cluster (DAP_E2E_KEEP=1) already serves it
        return Books(kube=kube, token=token, site=site, timings={})
    if kube.get("workspace", WS, NS) is not None:  # left half-made by an interrupted run
        kube.run("delete", "workspace", WS, "-n", NS, "--wait=true", "--timeout=120s")
        kube.wait_for(lambda: not workspace_pods(kube), within=120, what="the old pods gone")
    applied = time.monotonic()
    kube.run("apply", "-f", str(MANIFESTS / "workspace.yaml"))
    kube.wait_for(
        lambda: (
            workspace_pods(kube) and all(p["status"].get("phase") == "Running" for p in workspace_pods(kube))
        ),
        what="pods Running",
    )
    running = time.monotonic()
    register(kube, ROOT / "examples" / "procurement")
    registered = time.monotonic()
    first = kube.wait_for(
        lambda: serving(site, token) and time.monotonic(),
        within=240,
        what="the first 200 through the NodePort Service",
    )
    timings = {
        "apply_to_running_s": round(running - applied, 1),
        "apply_to_first_200_s": round(first - applied, 1),
        "register_to_first_200_s": round(first - registered, 1),
    }
    for name, value in timings.items():
        record(name, value)
    return Books(kube=kube, token=token, site=site, timings=timings)
