"""Fixtures of the real-control-plane tests: the cluster (once per session), a namespace per
test, the administrator's client, and the operator running as its own ServiceAccount.

Session: ``control_plane`` builds or reuses the binaries and starts etcd, kube-apiserver and
kube-controller-manager; ``cluster`` applies ``kustomize/overlays/kind`` with ``kubectl apply -k``
(CRDs, namespace, RBAC, the operator's Deployment — which stays Pending: there is no kubelet)
and asks the TokenRequest API for a token of the ``dap-operator`` ServiceAccount. Every operator
a test starts logs in with that token, so the ClusterRole of ``kustomize/base`` is what it may do.

Per test: a fresh namespace (operators are started with ``--namespace`` set to it, so leftovers
of earlier tests being purged elsewhere are not theirs to see), and ClusterClasses are deleted
at the end, being cluster-scoped.
"""

from __future__ import annotations

import dataclasses
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from dap.operator import options as operator_options
from dap.operator import running
from tests.kube import binaries, controlplane, installing
from tests.kube.audit import Audit
from tests.kube.client import Api, wait_for
from tests.operators import OperatorTasks

ROOT = installing.ROOT
OVERLAY = installing.OVERLAY
IMAGE = "example.test/dap:1.0"


@dataclasses.dataclass
class Cluster:
    plane: controlplane.ControlPlane
    applied: str  # what `kubectl apply -k kustomize/overlays/kind` printed
    operator_kubeconfig: Path
    audit: Audit

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, as_operator: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl as the administrator (or with the operator's token)."""
        config = self.operator_kubeconfig if as_operator else None
        return installing.kubectl(self.plane, *args, kubeconfig=config, stdin=stdin, check=check)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[controlplane.ControlPlane]:
    try:
        directory = binaries.ensure()
    except binaries.NoToolchainError as exc:
        pytest.skip(f"no real Kubernetes control plane: {exc}")
    plane = controlplane.start(directory, tmp_path_factory.mktemp("k8s"))
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def cluster(control_plane: controlplane.ControlPlane) -> Cluster:
    installed = installing.install(control_plane)
    return Cluster(
        control_plane, installed.applied, installed.operator_kubeconfig, Audit(control_plane.audit_log)
    )


@pytest.fixture
async def api(cluster: Cluster) -> AsyncIterator[Api]:
    client = Api(cluster.plane.url, cluster.plane.ssl_context())
    try:
        yield client
    finally:
        for cls in await client.list("clusterclasses"):
            await client.delete("clusterclasses", None, cls["metadata"]["name"], missing_ok=True)
        await client.close()


@pytest.fixture
async def ns(api: Api) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # Pods need the namespace's default ServiceAccount, which the controller-manager creates.
    await wait_for(lambda: api.get("serviceaccounts", name, "default"), what="default ServiceAccount")
    yield name
    await api.delete("namespaces", None, name, missing_ok=True)


class Operators(OperatorTasks):
    """Starts the real kopf operator, logged in as its ServiceAccount; stops them at teardown.

    The operator runs in the test's event loop (so a test can read its metrics and caches) and
    logs in through ``KUBECONFIG`` exactly as it does outside a cluster. Operators are
    cancelled rather than stopped by flag (a graceful kopf stop waits for "hung" tasks).
    """

    def __init__(self, cluster: Cluster, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.cluster = cluster
        self.namespace = namespace
        monkeypatch.setenv("KUBECONFIG", str(cluster.operator_kubeconfig))
        super().__init__()

    async def __call__(self, **overrides: Any) -> running.Runtime:
        settings: dict[str, Any] = {
            "namespace": self.namespace,
            "health_probe_bind_address": "127.0.0.1:0",
            "metrics_bind_address": "127.0.0.1:0",
            "resource_image": IMAGE,
            **overrides,
        }
        runtime, task = self.start(operator_options.Options(**settings))

        async def ready() -> bool:
            return runtime.ready() or task.done()

        await wait_for(ready, within=30, what="operator ready")
        if task.done():
            task.result()  # raise what stopped it
        return runtime


@pytest.fixture
async def start_operator(
    cluster: Cluster, ns: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Operators]:
    operators = Operators(cluster, ns, monkeypatch)
    yield operators
    await operators.stop_all()
