"""Workspace reconcile end to end: the real kopf operator against kmock's Kubernetes emulator.

The emulator has no controllers, so where a test needs a rolled-out Deployment it writes the
Deployment's status itself, as the kube-controller-manager would.
"""

from __future__ import annotations

from typing import Any

from tests.operator.conftest import Api, StartOperator, wait_for

NS = "tenants"


def workspace(name: str = "shop", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "dap.io/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def cluster_class(
    name: str = "standard", labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "dap.io/v1alpha1",
        "kind": "ClusterClass",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


async def roll_out(api: Api, name: str, replicas: int) -> None:
    """Play the deployment controller: report ``replicas`` updated and available."""
    status = {
        "observedGeneration": 1,
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
    }
    await api.patch("deployments", NS, name, {"status": status}, sub="status")


def phase(api: Api, name: str = "shop") -> str | None:
    ws = api.get("workspaces", NS, name)
    return (ws or {}).get("status", {}).get("phase")


def condition(api: Api, type_: str, name: str = "shop") -> dict[str, Any]:
    ws = api.get("workspaces", NS, name) or {}
    return next(c for c in ws.get("status", {}).get("conditions", []) if c["type"] == type_)


async def test_workspace_gets_deployment_service_config_map_and_becomes_ready(
    api: Api, start_operator: StartOperator
) -> None:
    await api.create(
        "clusterclasses", cluster_class(labels={"dap.io/pool": "general"}, scaling={"minReplicas": 2})
    )
    await start_operator(control_cluster_url="http://control.test:8443")
    await api.create(
        "workspaces", workspace(clusterClass="standard", resources={"limits": {"memory": "256Mi"}})
    )

    dep = await wait_for(lambda: api.get("deployments", NS, "dap-shop"), what="Deployment")
    ws = api.get("workspaces", NS, "shop")
    assert ws is not None
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 2
    assert pod["nodeSelector"] == {"dap.io/pool": "general"}
    assert "podAntiAffinity" in pod["affinity"]
    assert pod["containers"][0]["image"] == "example.test/dap:1.0"
    assert {"name": "CONTROL_CLUSTER_URL", "value": "http://control.test:8443"} in pod["containers"][0]["env"]
    assert pod["containers"][0]["resources"] == {"limits": {"memory": "256Mi"}}
    assert dep["metadata"]["ownerReferences"][0]["uid"] == ws["metadata"]["uid"]
    await wait_for(lambda: api.get("services", NS, "dap-shop"), what="Service")
    await wait_for(lambda: api.get("configmaps", NS, "dap-shop"), what="ConfigMap")
    assert api.get("horizontalpodautoscalers", NS, "dap-shop") is None

    await wait_for(lambda: phase(api) == "Progressing", what="phase Progressing")
    assert condition(api, "Progressing")["status"] == "True"

    await roll_out(api, "dap-shop", 2)
    await wait_for(lambda: phase(api) == "Ready", what="phase Ready")
    ready = condition(api, "Ready")
    assert ready["status"] == "True"
    assert ready["observedGeneration"] == 1
    assert condition(api, "Degraded")["status"] == "False"


async def test_idle_annotation_scales_to_zero_and_back(api: Api, start_operator: StartOperator) -> None:
    await api.create("clusterclasses", cluster_class(scaling={"minReplicas": 2, "scaleToZero": True}))
    await start_operator()
    await api.create("workspaces", workspace(clusterClass="standard"))
    await wait_for(
        lambda: (api.get("deployments", NS, "dap-shop") or {}).get("spec", {}).get("replicas") == 2
    )

    await api.patch("workspaces", NS, "shop", {"metadata": {"annotations": {"dap.io/idle": "true"}}})
    await wait_for(lambda: api.get("deployments", NS, "dap-shop")["spec"]["replicas"] == 0, what="0 replicas")
    await roll_out(api, "dap-shop", 0)
    await wait_for(lambda: phase(api) == "Idle", what="phase Idle")

    await api.patch("workspaces", NS, "shop", {"metadata": {"annotations": {"dap.io/idle": None}}})
    await wait_for(lambda: api.get("deployments", NS, "dap-shop")["spec"]["replicas"] == 2, what="2 replicas")


async def test_class_change_propagates_to_its_workspaces(api: Api, start_operator: StartOperator) -> None:
    await api.create("clusterclasses", cluster_class(scaling={"minReplicas": 1}))
    await api.create("clusterclasses", cluster_class("other", scaling={"minReplicas": 1}))
    await start_operator()
    await api.create("workspaces", workspace("a", clusterClass="standard"))
    await api.create("workspaces", workspace("b", clusterClass="standard"))
    await api.create("workspaces", workspace("c", clusterClass="other"))
    for name in ("a", "b", "c"):
        await wait_for(lambda name=name: api.get("deployments", NS, f"dap-{name}"), what=f"Deployment {name}")

    await api.patch(
        "clusterclasses",
        None,
        "standard",
        {
            "metadata": {"labels": {"dap.io/zone": "z1"}},
            "spec": {"scaling": {"minReplicas": 3}, "features": ["auto-scaling"]},
        },
    )
    for name in ("a", "b"):
        await wait_for(
            lambda name=name: api.get("horizontalpodautoscalers", NS, f"dap-{name}"), what=f"HPA {name}"
        )
        dep = api.get("deployments", NS, f"dap-{name}")
        assert dep is not None
        assert dep["spec"]["template"]["spec"]["nodeSelector"] == {"dap.io/zone": "z1"}
        assert "podAntiAffinity" in dep["spec"]["template"]["spec"]["affinity"]
    assert api.get("horizontalpodautoscalers", NS, "dap-c") is None
    dep_c = api.get("deployments", NS, "dap-c")
    assert dep_c is not None
    assert dep_c["spec"]["template"]["spec"].get("nodeSelector", {}) == {}


async def test_artifact_hash_annotation_rolls_the_pod_template(
    api: Api, start_operator: StartOperator
) -> None:
    await start_operator()
    await api.create("workspaces", workspace())
    await wait_for(lambda: api.get("deployments", NS, "dap-shop"))

    def template_hash() -> str | None:
        dep = api.get("deployments", NS, "dap-shop") or {}
        annotations = dep["spec"]["template"]["metadata"].get("annotations", {})
        value: str | None = annotations.get("dap.io/artifact-binary-hash")
        return value

    assert template_hash() is None
    await api.patch(
        "workspaces", NS, "shop", {"metadata": {"annotations": {"dap.io/artifact-binary-hash": "sha256:1"}}}
    )
    await wait_for(lambda: template_hash() == "sha256:1", what="hash copied")
    await api.patch(
        "workspaces", NS, "shop", {"metadata": {"annotations": {"dap.io/artifact-binary-hash": "sha256:2"}}}
    )
    await wait_for(lambda: template_hash() == "sha256:2", what="hash updated")


async def test_missing_class_leaves_the_workspace_pending_until_it_appears(
    api: Api, start_operator: StartOperator
) -> None:
    await start_operator()
    await api.create("workspaces", workspace(clusterClass="gold"))
    await wait_for(lambda: phase(api) == "Pending", what="Pending")
    assert condition(api, "Ready")["reason"] == "ClusterClassNotFound"
    assert api.get("deployments", NS, "dap-shop") is None

    await api.create("clusterclasses", cluster_class("gold", scaling={"minReplicas": 1}))
    await wait_for(lambda: api.get("deployments", NS, "dap-shop"), what="Deployment after class appears")


async def test_drift_is_repaired_and_a_deleted_child_recreated(
    api: Api, start_operator: StartOperator
) -> None:
    await start_operator()
    await api.create("workspaces", workspace())
    await wait_for(lambda: api.get("deployments", NS, "dap-shop"))
    await wait_for(lambda: api.get("services", NS, "dap-shop"))

    await api.patch("deployments", NS, "dap-shop", {"spec": {"replicas": 7}})
    await wait_for(
        lambda: api.get("deployments", NS, "dap-shop")["spec"]["replicas"] == 1, what="drift repaired"
    )
    await api.delete("services", NS, "dap-shop")
    await wait_for(lambda: api.get("services", NS, "dap-shop"), what="Service recreated")


async def test_resync_of_unchanged_workspaces_makes_no_write(api: Api, start_operator: StartOperator) -> None:
    await api.create("clusterclasses", cluster_class(scaling={"minReplicas": 1}, features=["auto-scaling"]))
    first = await start_operator()
    for name in ("a", "b", "c"):
        await api.create("workspaces", workspace(name, clusterClass="standard"))
    for name in ("a", "b", "c"):
        await wait_for(lambda name=name: api.get("horizontalpodautoscalers", NS, f"dap-{name}"))
        await roll_out(api, f"dap-{name}", 1)
        await wait_for(lambda name=name: phase(api, name) == "Ready", what=f"{name} Ready")
    assert first.metrics.reconcile_total.labels("workspace")._value.get() > 0
    await start_operator.stop_all()

    # A second operator (a restart: every cache rebuilt, every resume handler run) finds
    # everything as it wants it and must not write a single object.
    mark = api.mark()
    second = await start_operator()
    await wait_for(
        lambda: second.metrics.reconcile_total.labels("workspace")._value.get() >= 3, what="resume reconciles"
    )
    for key in (("tenants", "a"), ("tenants", "b"), ("tenants", "c")):
        await second.reconciler.workspace(key)
    assert api.operator_writes(mark) == []
