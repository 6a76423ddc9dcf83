"""A kind cluster with dap's image loaded and the kind overlay applied, for the e2e tests.

Skipped, with the reason, where Docker (a *running* engine: ``docker info`` must succeed, a client
binary is not enough), kind or kubectl is missing. The cluster is created once per session and
deleted at the end unless ``DAP_E2E_KEEP=1``; ``DAP_E2E_CLUSTER`` names it (default ``dap-e2e``),
and an existing cluster of that name is reused. The kind CLI is driven directly (no pytest-kind
dependency), which is all pytest-kind would do here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "dap:dev"


def _missing() -> str | None:
    for tool in ("docker", "kind", "kubectl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker info failed: {exc}"
    if info.returncode != 0:
        return "docker engine is not reachable (docker info failed): " + info.stderr.strip()[:200]
    return None


class Kube:
    """kubectl against the kind cluster's kubeconfig."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def run(self, *args: str, stdin: str | None = None, check: bool = True, timeout: int = 300) -> str:
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
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
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
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


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    reason = _missing()
    if reason:
        pytest.skip(f"e2e-kind needs Docker and kind: {reason}")
    name = os.environ.get("DAP_E2E_CLUSTER", "dap-e2e")
    kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
    existing = subprocess.run(["kind", "get", "clusters"], capture_output=True, text=True).stdout.split()
    created = name not in existing
    if created:
        _sh("kind", "create", "cluster", "--name", name, "--wait", "120s")
    _sh("kind", "export", "kubeconfig", "--name", name, "--kubeconfig", str(kubeconfig))
    _sh("docker", "build", "-t", IMAGE, ".")
    _sh("kind", "load", "docker-image", IMAGE, "--name", name)
    kube = Kube(kubeconfig)
    kube.run("apply", "-k", str(ROOT / "kustomize" / "overlays" / "kind"))
    kube.run("-n", "dap-system", "rollout", "status", "deployment/dap-operator", "--timeout=180s")
    try:
        yield kube
    finally:
        if created and os.environ.get("DAP_E2E_KEEP") != "1":
            subprocess.run(["kind", "delete", "cluster", "--name", name], check=False, timeout=300)
