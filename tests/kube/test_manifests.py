"""The repository's manifests as the real API server takes them: ``kubectl apply -k`` of the kind
overlay, the CRDs of ``crds/`` served as generated, the samples accepted (strict field
validation) and reconciled by the operator, and bad specs refused by the CRDs' schemas.

What ``e2e-kind/`` checks that needs no kubelet runs here too (the samples test below).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from dap.operator import crds
from tests.kube.client import Api, ApiError, wait_for
from tests.kube.conftest import OVERLAY, ROOT, Cluster, Operators
from tests.kube.objects import condition

SAMPLES = ROOT / "kustomize" / "samples"


def test_kind_overlay_is_accepted_and_reapplying_it_changes_nothing(cluster: Cluster) -> None:
    applied = cluster.applied
    for kind in crds.KINDS:
        assert f"customresourcedefinition.apiextensions.k8s.io/{kind.crd_name} created" in applied
    assert "deployment.apps/dap-operator created" in applied
    assert "clusterrole.rbac.authorization.k8s.io/dap-operator created" in applied
    again = cluster.kubectl("apply", "-k", str(OVERLAY)).stdout
    changed = [line for line in again.splitlines() if not line.endswith(" unchanged")]
    assert changed == [], (
        f"a second apply changed objects (server defaults fighting the manifests): {changed}"
    )


def test_prod_overlay_passes_server_side_validation(cluster: Cluster) -> None:
    prod = ROOT / "kustomize" / "overlays" / "prod"
    out = cluster.kubectl("apply", "-k", str(prod), "--dry-run=server").stdout
    assert "poddisruptionbudget.policy/" in out
    assert all(line.endswith("(server dry run)") for line in out.splitlines()), out


async def test_served_crds_are_the_generated_ones(api: Api, cluster: Cluster) -> None:
    for kind in crds.KINDS:
        generated = crds.crd(kind)
        served = await api.get("customresourcedefinitions", None, kind.crd_name)
        assert served is not None
        (version,) = served["spec"]["versions"]
        want = generated["spec"]["versions"][0]
        assert version["schema"] == want["schema"], kind.kind
        assert version.get("subresources") == want.get("subresources"), kind.kind
        established = {c["type"]: c["status"] for c in served["status"]["conditions"]}
        assert established["Established"] == "True"
        assert established["NamesAccepted"] == "True"


def sample_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(SAMPLES.glob("dap_*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


@pytest.mark.parametrize(
    "doc", [pytest.param(d, id=f"{d['kind']}-{d['metadata']['name']}") for d in sample_docs()]
)
async def test_each_sample_passes_strict_server_side_validation(
    api: Api, ns: str, doc: dict[str, Any]
) -> None:
    body = {**doc, "metadata": {**doc["metadata"]}}
    if "namespace" in body["metadata"]:
        body["metadata"]["namespace"] = ns
    plural = {
        "ClusterClass": "clusterclasses",
        "Cluster": "clusters",
        "Workspace": "workspaces",
        "Datastore": "datastores",
        "ResourceClaim": "resourceclaims",
        "Secret": "secrets",
    }[doc["kind"]]
    created = await api.create(plural, body, dry_run=True)
    assert created["metadata"]["name"] == doc["metadata"]["name"]


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        pytest.param({"scaling": {"minReplicas": -1}}, "minReplicas", id="negative-replicas"),
        pytest.param({"scaling": {"minReplicas": "two"}}, "minReplicas", id="string-replicas"),
        pytest.param({"features": "auto-scaling"}, "features", id="features-not-a-list"),
        pytest.param({"unknown": 1}, "unknown", id="unknown-field"),
    ],
)
async def test_bad_class_specs_are_refused_by_the_api_server(
    api: Api, bad: dict[str, Any], field: str
) -> None:
    doc = {
        "apiVersion": "dap.io/v1alpha1",
        "kind": "ClusterClass",
        "metadata": {"name": "broken"},
        "spec": bad,
    }
    with pytest.raises(ApiError) as refused:
        await api.create("clusterclasses", doc)
    assert refused.value.status == 422 or (refused.value.status == 400 and field == "unknown")
    assert field in str(refused.value)


async def test_samples_reconcile_into_a_workspace_with_injected_credentials(
    api: Api, cluster: Cluster, start_operator: Operators
) -> None:
    # The samples name their namespace (tenants); the operator watches it for this test.
    cluster.kubectl("apply", "-k", str(SAMPLES))
    try:
        await start_operator(namespace="tenants")
        await _check_samples(api)
    finally:
        await start_operator.stop_all()
        cluster.kubectl("delete", "-k", str(SAMPLES), "--wait=false", check=False)


async def _check_samples(api: Api) -> None:
    ns = "tenants"

    async def validated() -> bool:
        found = await condition(api, "datastores", ns, "orders", "Validated")
        return found is not None and found["status"] == "True"

    async def claim_ready() -> bool:
        found = await condition(api, "resourceclaims", ns, "shop-orders", "Ready")
        return found is not None and found["status"] == "True"

    await wait_for(validated, what="Datastore Validated")
    await wait_for(claim_ready, what="claim Ready")
    creds = await wait_for(lambda: api.get("secrets", ns, "dap-claim-shop-orders"), what="claim Secret")
    assert base64.b64decode(creds["data"]["PERMISSION"]) == b"read_write"

    async def injected() -> dict[str, Any] | None:
        dep = await api.get("deployments", ns, "dap-shop") or {}
        container = dep["spec"]["template"]["spec"]["containers"][0]
        refs = [s.get("secretRef", {}).get("name") for s in container["envFrom"]]
        return container if "dap-claim-shop-orders" in refs else None

    container = await wait_for(injected, what="credentials injected")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["WORKSPACE_ID"] == "shop"
    assert await api.get("services", ns, "dap-shop") is not None
    assert await api.get("configmaps", ns, "dap-shop") is not None
    assert await wait_for(
        lambda: api.get("horizontalpodautoscalers", ns, "dap-shop"), what="HPA (auto-scaling)"
    )
    workspace = await wait_for(lambda: _status(api, ns), what="Workspace status")
    assert workspace["phase"] in {"Pending", "Progressing"}  # no kubelet here: pods never start
    assert {c["type"] for c in workspace["conditions"]} == {"Ready", "Progressing", "Degraded"}


async def _status(api: Api, ns: str) -> dict[str, Any] | None:
    ws = await api.get("workspaces", ns, "shop") or {}
    found: dict[str, Any] | None = ws.get("status")
    return found
