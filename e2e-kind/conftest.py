"""A kind cluster with dap's image loaded and the kind overlay applied, for the e2e tests.

Everything comes from this machine: ``make e2e`` (tools/kind/prepare.sh) starts a Docker engine,
builds the dap image, kind's node image, the kind CLI and kubectl, and writes their names to
``.dap/e2e.env``, which this file reads (``DAP_E2E_*`` variables override it). Skipped, with the
reason, where no Docker engine runs (``docker info`` must succeed: a client binary is not enough)
or the prepared parts are missing, and everywhere unless ``DAP_E2E=1`` (``make e2e`` sets it: the
suite creates a cluster of its own, minutes of work kept out of ``make test``). The cluster is
created once per session and deleted at the end unless ``DAP_E2E_KEEP=1``; ``DAP_E2E_CLUSTER``
names it (default ``dap-e2e``), and an existing cluster of that name is reused. The kind CLI is
driven directly (no pytest-kind dependency).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "dap:dev"
ENV_FILE = ROOT / ".dap" / "e2e.env"


def _prepared() -> dict[str, str]:
    """The parts tools/kind/prepare.sh built (DAP_E2E_KIND, _KUBECTL, _NODE_IMAGE)."""
    values: dict[str, str] = {}
    if ENV_FILE.is_file():
        for line in ENV_FILE.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip()
    for key in ("DAP_E2E_KIND", "DAP_E2E_KUBECTL", "DAP_E2E_NODE_IMAGE"):
        if os.environ.get(key):
            values[key] = os.environ[key]
    return values


PARTS = _prepared()
KIND = PARTS.get("DAP_E2E_KIND") or shutil.which("kind") or "kind"
KUBECTL = PARTS.get("DAP_E2E_KUBECTL") or shutil.which("kubectl") or "kubectl"
NODE_IMAGE = PARTS.get("DAP_E2E_NODE_IMAGE", "")


def _missing() -> str | None:
    if os.environ.get("DAP_E2E") != "1":
        return "the kind suite runs with make e2e (DAP_E2E=1), not inside make test"
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


class Kube:
    """kubectl against the kind cluster's kubeconfig."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

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
            except (KeyError, TypeError, IndexError, StopIteration):
                value = None
            if value:
                return value
            time.sleep(2)
        raise AssertionError(f"timed out after {within}s waiting for {what}")


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
    existing = subprocess.run([KIND, "get", "clusters"], capture_output=True, text=True).stdout.split()
    created = name not in existing
    started = time.monotonic()
    if created:
        _sh(KIND, "create", "cluster", "--name", name, "--image", NODE_IMAGE, "--wait", "240s")
        record("kind_create_cluster_s", round(time.monotonic() - started, 1))
    _sh(KIND, "export", "kubeconfig", "--name", name, "--kubeconfig", str(kubeconfig))
    _sh(KIND, "load", "docker-image", IMAGE, "--name", name)
    kube = Kube(kubeconfig)
    kube.run("apply", "-k", str(ROOT / "kustomize" / "overlays" / "kind"))
    kube.run("-n", "dap-system", "rollout", "status", "deployment/dap-operator", "--timeout=240s")
    kube.run("-n", "dap-system", "rollout", "status", "deployment/dap-control", "--timeout=240s")
    record("cluster_ready_s", round(time.monotonic() - started, 1))
    try:
        yield kube
    finally:
        if created and os.environ.get("DAP_E2E_KEEP") != "1":
            subprocess.run([KIND, "delete", "cluster", "--name", name], check=False, timeout=300)
