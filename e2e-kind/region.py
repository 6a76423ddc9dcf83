"""A region on three kind clusters, installed as docs/control.md's "Install" says.

``dap-mgmt`` is the management cluster: Postgres (the region's control database, each workload
cluster's control database and the tenants' database, reached by the workload clusters through a
NodePort, as a region's database would be), ``kubectl apply -k kustomize/overlays/kind-management``
(the region control and the region-mode control API, the latter on NodePort 30443) and one
``Cluster`` resource per workload cluster. ``dap-eu-1`` and ``dap-eu-2`` are workload clusters:
each gets its ConfigMap ``dap-control`` (region URL, cluster id, the region's public key) in an
overlay of ``kustomize/overlays/kind-workload`` of its own, its Secrets, the tenant namespace and
the ClusterClass, then ``kubectl apply -k``. The three share kind's Docker network; every address
used is a node's on it, or loopback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conftest import IMAGE, JWT_SECRET, KIND, MANIFESTS, NODE_IMAGE, NS, ROOT, Kube, dap, psql, record

MGMT = "dap-mgmt"
WORKLOADS = {"eu-1": "dap-eu-1", "eu-2": "dap-eu-2"}  # cluster id -> kind cluster
PG_PORT, REGION_PORT = 30432, 30443
SITE_PORTS = {"books": 30080, "ledger": 30081}  # manifests/region-nodeports.yaml
PG_PASSWORD = "e2e-postgres-password"  # manifests/postgres.yaml
STATE = ROOT / ".dap" / "e2e-region"  # generated overlays and the region's signing key


@dataclasses.dataclass(frozen=True)
class Region:
    mgmt: Kube
    workloads: dict[str, Kube]  # cluster id -> its cluster
    public_key: str

    @property
    def region_url(self) -> str:
        return f"http://{self.mgmt.node_ip}:{REGION_PORT}"

    def site(self, cluster: str, workspace: str) -> str:
        """A workspace's NodePort in a workload cluster (http://<node>:<port>)."""
        return f"http://{self.workloads[cluster].node_ip}:{SITE_PORTS[workspace]}"


def _sh(*args: str, timeout: int = 900) -> str:
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed: {result.stderr[-2000:]}")
    return result.stdout


def _node_ip(name: str) -> str:
    fmt = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
    return _sh("docker", "inspect", "-f", fmt, f"{name}-control-plane").strip()


def _cluster(name: str, workdir: Path, keep: bool) -> tuple[Kube, bool]:
    existing = _sh(KIND, "get", "clusters").split()
    if name in existing and not keep:
        print(f"e2e-kind region: deleting cluster {name}, left by an interrupted run", file=sys.stderr)
        _sh(KIND, "delete", "cluster", "--name", name, timeout=300)
        existing.remove(name)
    created = name not in existing
    if created:
        _sh(KIND, "create", "cluster", "--name", name, "--image", NODE_IMAGE, "--wait", "240s")
    kubeconfig = workdir / f"{name}.kubeconfig"
    _sh(KIND, "export", "kubeconfig", "--name", name, "--kubeconfig", str(kubeconfig))
    _sh(KIND, "load", "docker-image", IMAGE, "--name", name)
    return Kube(kubeconfig, _node_ip(name)), created


def _apply(kube: Kube, text: str) -> None:
    kube.run("apply", "-f", "-", stdin=text)


def _secret(kube: Kube, namespace: str, name: str, **data: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": data,
    }
    _apply(kube, json.dumps(body))


def _namespace(kube: Kube, name: str) -> None:
    _apply(kube, json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))


def _wait_for_crds(kube: Kube) -> None:
    kube.run(
        "wait",
        "--for",
        "condition=established",
        "--timeout=120s",
        "crd/clusters.dap.io",
        "crd/workspaces.dap.io",
    )


def _rollout(kube: Kube, *deployments: str, namespace: str = "dap-system") -> None:
    for deployment in deployments:
        kube.run("-n", namespace, "rollout", "status", f"deployment/{deployment}", "--timeout=300s")


def install_management(mgmt: Kube, key_file: Path) -> str:
    """Postgres, the Secrets, kustomize/overlays/kind-management and the Cluster resources; the
    region's public key."""
    mgmt.run("apply", "-f", str(MANIFESTS / "postgres.yaml"))
    _apply(mgmt, (ROOT / "e2e-kind" / "manifests" / "region-postgres.yaml").read_text())
    _rollout(mgmt, "postgres", namespace=NS)
    existing = psql(mgmt, "SELECT string_agg(datname, ',') FROM pg_database")
    for database in ("region", "eu1", "eu2", "tenants"):
        if database not in existing:
            psql(mgmt, f"CREATE DATABASE {database}")
    if not key_file.exists():
        dap("control", "key", "generate", "--out", str(key_file))
    public_key = json.loads(dap("control", "key", "show", str(key_file)))["public_key"]
    _namespace(mgmt, "dap-system")
    dsn = f"postgresql://dap:{PG_PASSWORD}@postgres.{NS}.svc:5432/region"
    _secret(mgmt, "dap-system", "dap-control-db", dsn=dsn)
    _secret(mgmt, "dap-system", "dap-control-signing", key=key_file.read_text().strip())
    mgmt.run("apply", "-k", str(ROOT / "kustomize" / "overlays" / "kind-management"))
    _rollout(mgmt, "dap-region", "dap-region-control")
    _wait_for_crds(mgmt)
    for cluster in WORKLOADS:
        _apply(mgmt, cluster_resource(cluster))
    return public_key


def cluster_resource(cluster: str, state: str = "active") -> str:
    return json.dumps(
        {
            "apiVersion": "dap.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {
                "name": cluster,
                "labels": {"dap.io/region": "eu", "dap.io/cluster-class": "standard"},
            },
            "spec": {"maxWorkspaces": 10, "state": state},
        }
    )


def workload_overlay(cluster: str, region_url: str, public_key: str) -> Path:
    """The overlay a workload cluster's administrator writes: kind-workload plus its ConfigMap."""
    where = STATE / cluster
    where.mkdir(parents=True, exist_ok=True)
    base = os.path.relpath(ROOT / "kustomize" / "overlays" / "kind-workload", where)
    data = {"DAP_REGION_URL": region_url, "DAP_CLUSTER_ID": cluster, "DAP_TRUSTED_KEYS": public_key}
    patch = [{"op": "replace", "path": "/data", "value": data}]
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [base],
        "patches": [{"target": {"kind": "ConfigMap", "name": "dap-control"}, "patch": json.dumps(patch)}],
    }
    (where / "kustomization.yaml").write_text(json.dumps(kustomization, indent=2) + "\n")
    return where


def install_workload(kube: Kube, cluster: str, mgmt_ip: str, region_url: str, public_key: str) -> None:
    database = cluster.replace("-", "")
    _namespace(kube, "dap-system")
    control_dsn = f"postgresql://dap:{PG_PASSWORD}@{mgmt_ip}:{PG_PORT}/{database}"
    _secret(kube, "dap-system", "dap-control-db", dsn=control_dsn)
    kube.run("apply", "-k", str(workload_overlay(cluster, region_url, public_key)))
    _wait_for_crds(kube)
    _namespace(kube, NS)
    _secret(
        kube,
        NS,
        "dap-pod",
        DAP_DSN=f"postgresql://dap:{PG_PASSWORD}@{mgmt_ip}:{PG_PORT}/tenants",
        DAP_JWT_SECRET=JWT_SECRET,
        DAP_PULL_INTERVAL="2s",
        DAP_CORS_ORIGIN="http://127.0.0.1",
    )
    _apply(kube, (ROOT / "e2e-kind" / "manifests" / "region-class.yaml").read_text())
    kube.run("apply", "-f", str(ROOT / "e2e-kind" / "manifests" / "region-nodeports.yaml"))
    _rollout(kube, "dap-operator", "dap-control", "dap-cluster-control")


@contextlib.contextmanager
def region_clusters(workdir: Path) -> Iterator[Region]:
    """The three clusters, installed; deleted afterwards unless DAP_E2E_KEEP=1."""
    keep = os.environ.get("DAP_E2E_KEEP") == "1"
    STATE.mkdir(parents=True, exist_ok=True)
    made: list[str] = []
    try:
        started = time.monotonic()
        mgmt, created = _cluster(MGMT, workdir, keep)
        made += [MGMT] if created else []
        workloads: dict[str, Kube] = {}
        for cluster, name in WORKLOADS.items():
            workloads[cluster], created = _cluster(name, workdir, keep)
            made += [name] if created else []
        record("region_clusters_created_s", round(time.monotonic() - started, 1))
        public_key = install_management(mgmt, STATE / "signing.key")
        region = Region(mgmt, workloads, public_key)
        for cluster, kube in workloads.items():
            install_workload(kube, cluster, mgmt.node_ip, region.region_url, public_key)
        record("region_installed_s", round(time.monotonic() - started, 1))
        yield region
    finally:
        if not keep:
            for name in made:
                subprocess.run([KIND, "delete", "cluster", "--name", name], check=False, timeout=300)


def workspace(name: str, **spec: Any) -> str:
    body = {
        "apiVersion": "dap.io/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "owner": "e2e@example.com",
            "region": "eu",
            "clusterClass": "standard",
            "environment": "dev",
            "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
            **spec,
        },
    }
    return json.dumps(body)
