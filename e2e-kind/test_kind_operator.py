"""The operator on a real cluster: objects, conditions, injected credentials, garbage collection.

Everything here that needs no kubelet also runs in ``make test`` on the loopback control plane of
``tests/kube`` (CRD validation, status subresources, garbage collection, the samples reconciled);
what only a kind cluster shows is the operator in its own pod, from the image, and a Deployment
really rolling out.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from conftest import ROOT, Kube

pytestmark = pytest.mark.e2e

SAMPLES = ROOT / "kustomize" / "samples"
NS = "tenants"


def condition(obj: dict[str, Any] | None, type_: str) -> str | None:
    for c in (obj or {}).get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return str(c["status"])
    return None


def test_samples_reconcile_into_a_workspace_with_injected_credentials(kube: Kube) -> None:
    kube.run("apply", "-k", str(SAMPLES))

    store = kube.wait_for(
        lambda: condition(kube.get("datastore", "orders", NS), "Validated") == "True",
        what="Datastore Validated",
    )
    assert store
    kube.wait_for(
        lambda: condition(kube.get("resourceclaims.dap.io", "shop-orders", NS), "Ready") == "True",
        what="claim Ready",
    )
    secret = kube.wait_for(lambda: kube.get("secret", "dap-claim-shop-orders", NS), what="claim Secret")
    assert base64.b64decode(secret["data"]["PERMISSION"]) == b"read_write"

    dep = kube.wait_for(lambda: kube.get("deployment", "dap-shop", NS), what="Deployment")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "dap:dev"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["WORKSPACE_ID"] == "shop"
    kube.wait_for(
        lambda: any(
            s.get("secretRef", {}).get("name") == "dap-claim-shop-orders"
            for s in kube.get("deployment", "dap-shop", NS)["spec"]["template"]["spec"]["containers"][0][
                "envFrom"
            ]
        ),
        what="credentials injected",
    )
    assert kube.get("service", "dap-shop", NS) is not None
    assert kube.get("configmap", "dap-shop", NS) is not None
    assert kube.get("horizontalpodautoscaler", "dap-shop", NS) is not None  # the class has auto-scaling

    workspace = kube.wait_for(lambda: (kube.get("workspace", "shop", NS) or {}).get("status"), what="status")
    assert workspace["phase"] in {"Pending", "Progressing", "Ready", "Degraded"}
    assert {c["type"] for c in workspace["conditions"]} == {"Ready", "Progressing", "Degraded"}


def test_deleting_the_claim_removes_the_credentials(kube: Kube) -> None:
    kube.run("apply", "-k", str(SAMPLES))
    kube.wait_for(lambda: kube.get("secret", "dap-claim-shop-orders", NS), what="claim Secret")
    kube.run("delete", "resourceclaims.dap.io", "shop-orders", "-n", NS)
    kube.wait_for(lambda: kube.get("secret", "dap-claim-shop-orders", NS) is None, what="claim Secret gone")
    kube.wait_for(
        lambda: all(
            s.get("secretRef", {}).get("name") != "dap-claim-shop-orders"
            for s in kube.get("deployment", "dap-shop", NS)["spec"]["template"]["spec"]["containers"][0][
                "envFrom"
            ]
        ),
        what="credentials removed from the Deployment",
    )


def test_deleting_the_workspace_garbage_collects_its_objects(kube: Kube) -> None:
    kube.run("apply", "-k", str(SAMPLES))
    kube.wait_for(lambda: kube.get("deployment", "dap-shop", NS), what="Deployment")
    kube.run("delete", "workspace", "shop", "-n", NS, "--wait=true")
    for kind in ("deployment", "service", "configmap"):
        kube.wait_for(lambda kind=kind: kube.get(kind, "dap-shop", NS) is None, what=f"{kind} collected")
    assert kube.get("secret", "orders-endpoint", NS) is not None  # Secrets are retained


def test_bad_spec_is_refused_by_the_api_server(kube: Kube) -> None:
    bad = """
apiVersion: dap.io/v1alpha1
kind: ClusterClass
metadata: {name: broken}
spec: {scaling: {minReplicas: -1}}
"""
    error = kube.refused("apply", "-f", "-", stdin=bad)
    assert "minReplicas" in error
