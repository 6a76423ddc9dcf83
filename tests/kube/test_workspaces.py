"""Workspaces on a real API server: the operator (as its ServiceAccount) against kube-apiserver,
with the real deployment, replicaset and garbage-collector controllers.

Only the kubelet is played (``objects.run_pods``): everything the emulator tests had to fake —
Deployment status, generations, uids, owner-reference garbage collection — is the real thing.
"""

from __future__ import annotations

import functools
from typing import Any

from tests.kube import objects
from tests.kube.client import Api, wait_for
from tests.kube.conftest import Cluster, Operators
from tests.kube.objects import cluster_class, condition, phase, workspace


async def deployment(api: Api, ns: str, name: str = "shop") -> dict[str, Any] | None:
    return await api.get("deployments", ns, f"dap-{name}")


async def test_workspace_gets_its_objects_and_becomes_ready_through_real_controllers(
    api: Api, ns: str, start_operator: Operators
) -> None:
    await api.create(
        "clusterclasses", cluster_class(labels={"dap.io/pool": "general"}, scaling={"minReplicas": 2})
    )
    # A loopback URL nothing listens on: reports fail here, and no name is looked up off the machine.
    await start_operator(control_cluster_url="http://127.0.0.1:9")
    ws = await api.create(
        "workspaces", workspace(ns, clusterClass="standard", resources={"limits": {"memory": "256Mi"}})
    )

    dep = await wait_for(lambda: deployment(api, ns), what="Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 2
    assert pod["nodeSelector"] == {"dap.io/pool": "general"}
    assert "podAntiAffinity" in pod["affinity"]
    assert pod["containers"][0]["image"] == "example.test/dap:1.0"
    assert pod["containers"][0]["resources"] == {"limits": {"memory": "256Mi"}}
    owner = dep["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Workspace", ws["metadata"]["uid"], True)
    await wait_for(lambda: api.get("services", ns, "dap-shop"), what="Service")
    await wait_for(lambda: api.get("configmaps", ns, "dap-shop"), what="ConfigMap")
    assert await api.get("horizontalpodautoscalers", ns, "dap-shop") is None

    async def progressing() -> bool:
        return await phase(api, "workspaces", ns, "shop") == "Progressing"

    await wait_for(progressing, what="phase Progressing")

    async def starting() -> bool:
        found = await condition(api, "workspaces", ns, "shop", "Progressing")
        return found is not None and found["reason"] == "ReplicasStarting"

    # The deployment controller reports both replicas updated, none available: pods starting is
    # progress, not degradation.
    await wait_for(starting, what="Progressing/ReplicasStarting once the pods exist")
    assert await phase(api, "workspaces", ns, "shop") == "Progressing"
    # The replicaset controller made the pods; the kubelet (played) starts them.
    await wait_for(lambda: objects.run_pods(api, ns, "shop"), what="pods of the ReplicaSet")

    async def ready() -> bool:
        await objects.run_pods(api, ns, "shop")
        return await phase(api, "workspaces", ns, "shop") == "Ready"

    await wait_for(ready, what="phase Ready")
    status = await objects.status(api, "workspaces", ns, "shop")
    assert (status["replicas"], status["readyReplicas"], status["observedGeneration"]) == (2, 2, 1)
    ready_condition = await condition(api, "workspaces", ns, "shop", "Ready")
    assert ready_condition is not None
    assert (ready_condition["status"], ready_condition["observedGeneration"]) == ("True", 1)


async def test_spec_change_bumps_generation_and_status_follows_it(
    api: Api, ns: str, start_operator: Operators
) -> None:
    await start_operator()
    await api.create("workspaces", workspace(ns))
    await wait_for(lambda: deployment(api, ns))
    await api.patch("workspaces", ns, "shop", {"spec": {"resources": {"limits": {"cpu": "1"}}}})

    async def observed() -> bool:
        return (await objects.status(api, "workspaces", ns, "shop")).get("observedGeneration") == 2

    await wait_for(observed, what="observedGeneration 2")
    dep = await deployment(api, ns)
    assert dep is not None
    assert dep["spec"]["template"]["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "1"}}


async def test_status_is_written_through_the_subresource_and_spec_is_left_alone(
    api: Api, ns: str, start_operator: Operators
) -> None:
    await start_operator()
    await api.create("workspaces", workspace(ns, owner="alice"))
    await wait_for(lambda: phase(api, "workspaces", ns, "shop"), what="a phase")
    # A status patch through the main resource is ignored by the API server: only the operator's
    # writes to /status set it. And a write to /status cannot change spec.
    await api.patch("workspaces", ns, "shop", {"status": {"phase": "Failed"}})
    assert await phase(api, "workspaces", ns, "shop") != "Failed"
    await api.patch("workspaces", ns, "shop", {"spec": {"owner": "mallory"}}, sub="status")
    ws = await api.get("workspaces", ns, "shop")
    assert ws is not None
    assert ws["spec"]["owner"] == "alice"


async def test_idle_annotation_scales_to_zero_and_back(api: Api, ns: str, start_operator: Operators) -> None:
    await api.create("clusterclasses", cluster_class(scaling={"minReplicas": 2, "scaleToZero": True}))
    await start_operator()
    await api.create("workspaces", workspace(ns, clusterClass="standard"))

    async def replicas(n: int) -> bool:
        return bool(((await deployment(api, ns)) or {}).get("spec", {}).get("replicas") == n)

    await wait_for(lambda: replicas(2), what="2 replicas")
    await api.patch("workspaces", ns, "shop", {"metadata": {"annotations": {"dap.io/idle": "true"}}})
    await wait_for(lambda: replicas(0), what="0 replicas")

    async def idle() -> bool:
        return await phase(api, "workspaces", ns, "shop") == "Idle"

    await wait_for(idle, what="phase Idle (after the deployment controller reports 0 replicas)")
    await api.patch("workspaces", ns, "shop", {"metadata": {"annotations": {"dap.io/idle": None}}})
    await wait_for(lambda: replicas(2), what="2 replicas again")


async def test_class_change_reaches_its_workspaces_by_watch(
    api: Api, ns: str, start_operator: Operators
) -> None:
    await api.create("clusterclasses", cluster_class(scaling={"minReplicas": 1}))
    await api.create("clusterclasses", cluster_class("other", scaling={"minReplicas": 1}))
    await start_operator()
    for name, cls in (("a", "standard"), ("b", "standard"), ("c", "other")):
        await api.create("workspaces", workspace(ns, name, clusterClass=cls))
    for name in ("a", "b", "c"):
        await wait_for(functools.partial(deployment, api, ns, name), what=f"Deployment {name}")

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
        hpa = await wait_for(
            functools.partial(api.get, "horizontalpodautoscalers", ns, f"dap-{name}"), what=f"HPA {name}"
        )
        assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 9)

        async def spread(name: str = name) -> bool:
            spec = ((await deployment(api, ns, name)) or {})["spec"]["template"]["spec"]
            return spec.get("nodeSelector") == {"dap.io/zone": "z1"} and "podAntiAffinity" in spec.get(
                "affinity", {}
            )

        await wait_for(spread, what=f"node selector and anti-affinity on {name}")
    assert await api.get("horizontalpodautoscalers", ns, "dap-c") is None
    dep_c = await deployment(api, ns, "c")
    assert dep_c is not None
    assert dep_c["spec"]["template"]["spec"].get("nodeSelector", {}) == {}


async def test_artifact_hash_rolls_out_a_new_replica_set(
    api: Api, ns: str, start_operator: Operators
) -> None:
    await start_operator()
    await api.create("workspaces", workspace(ns))
    await wait_for(lambda: deployment(api, ns))

    async def template_hash() -> str | None:
        dep = await deployment(api, ns) or {}
        value: str | None = (
            dep["spec"]["template"]["metadata"].get("annotations", {}).get("dap.io/artifact-binary-hash")
        )
        return value

    async def replica_sets() -> int:
        return len(await api.list("replicasets", ns, "dap.io/workspace=shop"))

    await wait_for(replica_sets, what="the first ReplicaSet")
    assert await template_hash() is None
    for value in ("sha256:1", "sha256:2"):
        annotations = {"dap.io/artifact-binary-hash": value}
        await api.patch("workspaces", ns, "shop", {"metadata": {"annotations": annotations}})

        async def copied(value: str = value) -> bool:
            return await template_hash() == value

        await wait_for(copied, what=f"hash {value} on the pod template")

    async def one_per_template() -> bool:
        return await replica_sets() >= 3

    # The deployment controller answers each template change with a ReplicaSet of its own.
    await wait_for(one_per_template, what="a ReplicaSet per template")


async def test_missing_class_leaves_the_workspace_pending_until_it_appears(
    api: Api, ns: str, start_operator: Operators
) -> None:
    await start_operator()
    await api.create("workspaces", workspace(ns, clusterClass="gold"))

    async def pending() -> bool:
        return await phase(api, "workspaces", ns, "shop") == "Pending"

    await wait_for(pending, what="Pending")
    ready = await condition(api, "workspaces", ns, "shop", "Ready")
    assert ready is not None
    assert ready["reason"] == "ClusterClassNotFound"
    assert await deployment(api, ns) is None
    await api.create("clusterclasses", cluster_class("gold", scaling={"minReplicas": 1}))
    await wait_for(lambda: deployment(api, ns), what="Deployment after the class appears")


async def test_drift_is_repaired_and_a_deleted_child_recreated(
    api: Api, ns: str, start_operator: Operators
) -> None:
    await start_operator()
    await api.create("workspaces", workspace(ns))
    await wait_for(lambda: deployment(api, ns))
    await wait_for(lambda: api.get("services", ns, "dap-shop"))

    await api.patch("deployments", ns, "dap-shop", {"spec": {"replicas": 7}})

    async def repaired() -> bool:
        return bool(((await deployment(api, ns)) or {}).get("spec", {}).get("replicas") == 1)

    await wait_for(repaired, what="drift repaired")
    old = await api.get("services", ns, "dap-shop")
    assert old is not None
    await api.delete("services", ns, "dap-shop")

    async def recreated() -> bool:
        new = await api.get("services", ns, "dap-shop")
        return new is not None and new["metadata"]["uid"] != old["metadata"]["uid"]

    await wait_for(recreated, what="Service recreated")


async def test_an_object_in_the_way_gets_409_and_is_taken_over(
    api: Api, ns: str, start_operator: Operators
) -> None:
    # A ConfigMap of the child's name that the operator's caches do not know (it lacks the
    # managed-by label): the operator's create answers 409 AlreadyExists, and it must read the
    # object and patch it into shape instead of failing or looping.
    await api.create(
        "configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "dap-shop", "namespace": ns},
            "data": {"x": "1"},
        },
    )
    await start_operator()
    mark = start_operator.cluster.audit.mark()
    await api.create("workspaces", workspace(ns))

    async def adopted() -> dict[str, Any] | None:
        cm = await api.get("configmaps", ns, "dap-shop") or {}
        return cm if cm.get("data", {}).get("WORKSPACE_ID") == "shop" else None

    cm = await wait_for(adopted, what="the ConfigMap patched into shape")
    assert "x" not in cm["data"]
    assert cm["metadata"]["ownerReferences"][0]["kind"] == "Workspace"
    calls = start_operator.cluster.audit.calls(mark)
    assert any(c.verb == "create" and c.code == 409 and "configmaps" in c.uri for c in calls), calls


async def test_deleting_a_workspace_collects_its_objects_and_keeps_secrets(
    api: Api, ns: str, start_operator: Operators
) -> None:
    await api.create("clusterclasses", cluster_class(scaling={"minReplicas": 1}, features=["auto-scaling"]))
    await api.create("secrets", objects.secret(ns))
    await api.create("datastores", objects.datastore(ns))
    await start_operator()
    await api.create("workspaces", workspace(ns, clusterClass="standard"))
    await api.create("resourceclaims", objects.claim(ns))
    for plural in ("deployments", "services", "configmaps", "horizontalpodautoscalers"):
        await wait_for(functools.partial(api.get, plural, ns, "dap-shop"), what=plural)
    await wait_for(lambda: api.get("secrets", ns, "dap-claim-shop-orders"), what="the claim's Secret")
    await wait_for(lambda: api.list("pods", ns, "dap.io/workspace=shop"), what="pods of the ReplicaSet")
    await api.delete("workspaces", ns, "shop")

    async def collected() -> bool:
        for plural in ("deployments", "services", "configmaps", "horizontalpodautoscalers"):
            if await api.get(plural, ns, "dap-shop") is not None:
                return False
        # ...and what the Deployment owned in turn: ReplicaSets, and their pods.
        for plural in ("replicasets", "pods"):
            if await api.list(plural, ns, "dap.io/workspace=shop"):
                return False
        return True

    await wait_for(collected, within=60, what="the garbage collector to delete every child")
    assert await api.get("workspaces", ns, "shop") is None
    # Credentials are not the workspace's: the endpoint Secret and the claim's Secret (owned by
    # the claim, spec rule 4) stay.
    assert await api.get("secrets", ns, "orders-endpoint") is not None
    assert await api.get("secrets", ns, "dap-claim-shop-orders") is not None


async def test_restart_makes_no_write_and_nothing_was_forbidden(
    api: Api, ns: str, cluster: Cluster, start_operator: Operators
) -> None:
    await api.create("clusterclasses", cluster_class(scaling={"minReplicas": 1}, features=["auto-scaling"]))
    start = cluster.audit.mark()
    first = await start_operator()
    # Quantities the API server rewrites (0.5 → 500m, 1024Mi → 1Gi) and the empty control URL
    # (an env value the server drops) are not differences.
    resources = {"limits": {"cpu": "0.5", "memory": "1024Mi"}, "requests": {"cpu": "100m"}}
    for name in ("a", "b", "c"):
        await api.create("workspaces", workspace(ns, name, clusterClass="standard", resources=resources))
    for name in ("a", "b", "c"):
        await wait_for(functools.partial(api.get, "horizontalpodautoscalers", ns, f"dap-{name}"))

        async def ready(name: str = name) -> bool:
            await objects.run_pods(api, ns, name)
            return await phase(api, "workspaces", ns, name) == "Ready"

        await wait_for(ready, what=f"{name} Ready")
    assert first.metrics.reconcile_total.labels("workspace")._value.get() > 0
    await start_operator.stop_all()

    # A restart rebuilds every cache and runs every resume handler; with nothing changed it
    # must not write a single object (kopf's own bookkeeping included: the log is the server's).
    mark = cluster.audit.mark()
    second = await start_operator()

    async def resumed() -> bool:
        return bool(second.metrics.reconcile_total.labels("workspace")._value.get() >= 3)

    await wait_for(resumed, what="resume reconciles")
    for key in ((ns, "a"), (ns, "b"), (ns, "c")):
        await second.reconciler.workspace(key)
    assert cluster.audit.calls(mark), "the audit log shows no request of the operator at all"
    writes = cluster.audit.writes(mark)
    assert writes == [], "\n".join(map(str, writes))
    assert cluster.audit.forbidden(start) == [], "RBAC of kustomize/base refused the operator"
