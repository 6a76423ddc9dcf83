"""Kubernetes-native control end to end on the real API server (issue 16).

A Workspace applied to the management namespace is routed by the region control over Cluster
resources (spec rule 5), pulled by the chosen cluster's control into its own namespace, run by
that cluster's operator, and its status comes back to the management Workspace. The fixtures are
in ``tests/kube/fleet.py``: two namespaces stand for two workload clusters.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from dap.control.kube import placing, region
from dap.control.storage import store
from tests.conftest import drop_database, new_database
from tests.kube import fleet as fleet_
from tests.kube.audit import Audit, summary
from tests.kube.client import Api, wait_for
from tests.kube.conftest import Cluster, Operators
from tests.kube.objects import cluster_class, run_pods


@pytest.fixture(scope="session")
def control_accounts(cluster: Cluster) -> fleet_.Accounts:
    return fleet_.install_controls(cluster.plane)


@pytest.fixture
async def fleet(
    cluster: Cluster,
    api: Api,
    ns: str,
    pg_server_dsn: str,
    control_accounts: fleet_.Accounts,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[fleet_.Fleet]:
    db_name, dsn = await new_database(pg_server_dsn)
    pool = await store.connect(dsn, max_size=4)
    region_api = fleet_.RegionApi(pool)
    await region_api.start()
    options = region.Options(
        dsn=dsn, namespace=ns, interval=fleet_.INTERVAL, kubeconfig=str(control_accounts.region)
    )
    control = region.Region(options)
    thread = fleet_.RegionThread(control)
    the_fleet = fleet_.Fleet(api, ns, control_accounts, region_api, control, thread)
    thread.start()
    members = [the_fleet.name("a"), the_fleet.name("b")]
    operators = [Operators(cluster, member, monkeypatch) for member in members]
    await api.create("clusterclasses", cluster_class("standard"))
    try:
        for member in members:
            await api.create(
                "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": member}}
            )
        for member, start in zip(members, operators, strict=True):
            await wait_for(_account(api, member), what="default account")
            await start()
        await wait_for(lambda: _running(control), what="the region control logged in")
        yield the_fleet
    finally:
        await the_fleet.close()
        for start in operators:
            await start.stop_all()
        for member in members:
            await api.delete("namespaces", None, member, missing_ok=True)
        await pool.close()
        await drop_database(pg_server_dsn, db_name)


def _account(api: Api, namespace: str) -> Callable[[], Awaitable[dict[str, Any] | None]]:
    return lambda: api.get("serviceaccounts", namespace, "default")


async def _running(control: region.Region) -> bool:
    return control.client is not None and control.pool is not None


@pytest.fixture
def audits(cluster: Cluster) -> tuple[Audit, Audit, int]:
    region_audit = Audit(cluster.plane.audit_log, fleet_.REGION_USER)
    member_audit = Audit(cluster.plane.audit_log, fleet_.MEMBER_USER)
    return region_audit, member_audit, region_audit.mark()


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions", []) if c["type"] == type_)


async def test_a_workspace_is_routed_pulled_run_and_its_status_flows_back(
    fleet: fleet_.Fleet, api: Api, audits: tuple[Audit, Audit, int]
) -> None:
    a = await fleet.add_cluster("a", load=0.1)
    b = await fleet.add_cluster("b", load=0.5)
    await fleet.start_member("a")
    await fleet.start_member("b")
    await fleet.workspace("shop")

    status = await fleet.placed_on("shop", a)  # the lower load wins
    scheduled = _condition(status, "Scheduled")
    assert scheduled["reason"] == placing.REASON_PLACED, scheduled
    copy = await fleet.materialised("shop", a)
    assert copy["metadata"]["labels"] == {
        placing.LABEL_PLACED_BY: placing.PLACED_BY,
        placing.LABEL_CLUSTER: a,
    }
    assert copy["metadata"]["annotations"][placing.ANNOTATION_PLACEMENT] == "shop"
    assert copy["spec"] == {"region": "eu", "clusterClass": "standard"}
    assert await api.get("workspaces", b, "shop") is None

    # The operator of cluster a runs it; playing the kubelet makes it Ready there ...
    await wait_for(lambda: api.get("deployments", a, "dap-shop"), what="the operator's Deployment in a")
    await wait_for(lambda: run_pods(api, a, "shop"), what="pods of shop in a")

    async def ready_in_management() -> dict[str, Any] | None:
        status = await fleet.status("shop")
        return status if status.get("phase") == "Ready" else None

    # ... and the management Workspace says so: phase and Ready come from cluster a.
    status = await wait_for(ready_in_management, within=60, what="Ready reported back to the region")
    assert _condition(status, "Ready")["status"] == "True"
    assert status["cluster"] == a

    cluster_status = await wait_for(
        lambda: _cluster_status(api, a, lambda s: s.get("workspaces") == 1 and s.get("lastPull")),
        what="Cluster a's status",
    )
    assert cluster_status["workspaces"] == 1
    # Management Workspaces are routed, not run.
    assert await api.get("deployments", fleet.management, "dap-shop") is None

    # Pull-based, least privilege: no control ever touched a pod or a Deployment; the region
    # wrote only the status of management objects; each cluster control only its namespace.
    region_audit, member_audit, mark = audits
    region_calls, member_calls = region_audit.calls(mark), member_audit.calls(mark)
    assert region_calls and member_calls
    assert not region_audit.forbidden(mark), summary(region_audit.forbidden(mark))
    assert not member_audit.forbidden(mark), summary(member_audit.forbidden(mark))
    for call in region_audit.writes(mark):
        assert call.uri.split("?")[0].endswith("/status") or "/leases" in call.uri or "/events" in call.uri, (
            call
        )
        assert f"/namespaces/{a}/" not in call.uri and f"/namespaces/{b}/" not in call.uri, call
    for call in member_calls:
        assert "/pods" not in call.uri and "/deployments" not in call.uri, call
        assert "/workspaces" in call.uri or "/leases" in call.uri, call
    for call in member_audit.writes(mark):
        assert f"/namespaces/{a}/" in call.uri or f"/namespaces/{b}/" in call.uri, call


async def _cluster_status(api: Api, name: str, ok: Any) -> dict[str, Any] | None:
    body = await api.get("clusters", None, name) or {}
    status: dict[str, Any] = body.get("status") or {}
    return status if ok(status) else None


async def test_a_full_cluster_refuses_and_an_unschedulable_workspace_says_why(
    fleet: fleet_.Fleet, api: Api
) -> None:
    a = await fleet.add_cluster("a", max_workspaces=1, load=0.1)
    b = await fleet.add_cluster("b", max_workspaces=1, load=0.5)
    await fleet.start_member("a")
    await fleet.start_member("b")
    await fleet.workspace("one")
    await fleet.placed_on("one", a)
    await fleet.workspace("two")
    await fleet.placed_on("two", b)  # a is full, although its load is lower
    await fleet.workspace("three")

    status = await fleet.placed_on("three", None)
    scheduled = _condition(status, "Scheduled")
    assert scheduled["reason"] == placing.REASON_UNSCHEDULABLE
    assert f"{a}: full (1/1)" in scheduled["message"] and f"{b}: full (1/1)" in scheduled["message"]
    assert status["phase"] == "Pending"
    await asyncio.sleep(5 * fleet_.INTERVAL)
    assert await api.get("workspaces", a, "three") is None and await api.get("workspaces", b, "three") is None

    # Room made on b: the waiting workspace is placed there; the placed ones stay where they are.
    await api.patch("clusters", None, b, {"spec": {"maxWorkspaces": 3}})
    await fleet.placed_on("three", b)
    await fleet.materialised("three", b)
    assert (await fleet.status("one"))["cluster"] == a

    # a's maximum lowered below what it hosts: the excess moves to b, which has room for it.
    await api.patch("clusters", None, a, {"spec": {"maxWorkspaces": 0}})
    await fleet.placed_on("one", b)
    await fleet.materialised("one", b)
    await _handed_over(fleet, api, "one", a, b)


async def _handed_over(fleet: fleet_.Fleet, api: Api, name: str, source: str, target: str) -> None:
    """A moved workspace stays in the cluster it leaves until its new cluster runs it Ready."""
    await asyncio.sleep(5 * fleet_.INTERVAL)
    assert await api.get("workspaces", source, name) is not None, "cut over before the new one was Ready"
    await wait_for(lambda: run_pods(api, target, name), what=f"pods of {name} in {target}")
    await fleet.gone(name, source)  # removed by the old cluster's own control once handed over


async def test_an_inactive_cluster_is_drained_into_the_other(fleet: fleet_.Fleet, api: Api) -> None:
    a = await fleet.add_cluster("a", load=0.1)
    b = await fleet.add_cluster("b", load=0.5)
    await fleet.start_member("a")
    await fleet.start_member("b")
    for name in ("one", "two"):
        await fleet.workspace(name)
        await fleet.placed_on(name, a)
        await fleet.materialised(name, a)

    await api.patch("clusters", None, a, {"spec": {"state": "inactive"}})
    for name in ("one", "two"):
        await fleet.placed_on(name, b)
        await fleet.materialised(name, b)
        await _handed_over(fleet, api, name, a, b)
    await wait_for(
        lambda: _cluster_status(api, a, lambda s: s.get("workspaces") == 0), what="a counted empty"
    )


async def test_a_region_outage_leaves_clusters_serving_and_they_converge_after(
    fleet: fleet_.Fleet, api: Api
) -> None:
    a = await fleet.add_cluster("a", load=0.1)
    await fleet.add_cluster("b", load=0.5, max_workspaces=0)
    control = await fleet.start_member("a")
    await fleet.workspace("shop")
    await fleet.placed_on("shop", a)
    await fleet.materialised("shop", a)

    await fleet.region_api.stop()
    rounds = control.state["rounds"]
    await wait_for(
        lambda: _later(control, rounds + 3), what="cluster control rounds while the region is down"
    )
    assert "unreachable" in control.state["pull_error"]
    # Still serving what it had: the Workspace and the operator's Deployment are untouched.
    assert await api.get("workspaces", a, "shop") is not None
    assert await api.get("deployments", a, "dap-shop") is not None
    # The last placements stay in force: a Workspace deleted by hand comes back without the region.
    uid = (await api.get("workspaces", a, "shop") or {})["metadata"]["uid"]
    await api.delete("workspaces", a, "shop")

    async def recreated() -> bool:
        again = await api.get("workspaces", a, "shop")
        return again is not None and again["metadata"]["uid"] != uid

    await wait_for(recreated, what="shop re-created from the cached placements")

    # Meanwhile the region control still routes (Postgres and the API server are up) ...
    await fleet.workspace("late")
    await fleet.placed_on("late", a)
    await asyncio.sleep(5 * fleet_.INTERVAL)
    assert await api.get("workspaces", a, "late") is None  # ... but nothing reaches a cluster

    await fleet.region_api.start()
    await fleet.materialised("late", a)
    await wait_for(lambda: run_pods(api, a, "late"), within=30, what="pods of late")

    async def ready() -> bool:
        return (await fleet.status("late")).get("phase") == "Ready"

    await wait_for(ready, within=60, what="late's status after the region came back")
    assert control.state["pull_error"] is None


async def _later(control: Any, rounds: int) -> bool:
    return bool(control.state["rounds"] >= rounds)


async def test_a_deleted_management_workspace_is_removed_and_others_are_never_touched(
    fleet: fleet_.Fleet, api: Api
) -> None:
    a = await fleet.add_cluster("a")
    control = await fleet.start_member("a")
    # Workspaces of the cluster that are not the control's own: one unrelated, one of the same
    # name as a placement. Neither is taken over, changed or deleted.
    for name in ("local", "clash"):
        body = {
            "apiVersion": "dap.io/v1alpha1",
            "kind": "Workspace",
            "metadata": {"name": name, "namespace": a},
        }
        await api.create("workspaces", {**body, "spec": {"environment": "by-hand"}})
    await fleet.workspace("shop")
    await fleet.workspace("clash")
    await fleet.materialised("shop", a)

    async def refused() -> bool:
        return f"{a}/clash" in control.state.get("failed", {})

    await wait_for(refused, what="the clashing placement refused")
    await api.delete("workspaces", fleet.management, "shop")
    await api.delete("workspaces", fleet.management, "clash")
    await fleet.gone("shop", a)
    await asyncio.sleep(5 * fleet_.INTERVAL)
    for name in ("local", "clash"):
        kept = await api.get("workspaces", a, name) or {}
        assert kept["spec"] == {"environment": "by-hand"} and not kept["metadata"].get("labels"), kept


async def test_one_cluster_control_replica_leads_and_another_takes_over(
    fleet: fleet_.Fleet, api: Api
) -> None:
    a = await fleet.add_cluster("a")
    lease = f"dap-cluster-control-{a}"
    replicas = [
        await fleet.start_member("a", leader_elect=True, lease_name=lease, lease_seconds=3) for _ in range(2)
    ]
    await fleet.workspace("shop")
    await fleet.materialised("shop", a)
    held = await wait_for(lambda: api.get("leases", "dap-system", lease), what="the cluster control's Lease")
    leader = next(
        r for r in replicas if r.elector is not None and r.elector.me == held["spec"]["holderIdentity"]
    )
    follower = next(r for r in replicas if r is not leader)
    # a round counts once it has also reported, after the Workspace it created is visible
    await wait_for(lambda: _later(leader, 1), what="the leader's first whole round")
    assert follower.state["rounds"] == 0  # the follower did nothing

    await fleet.stop_member(leader)
    await fleet.workspace("late")
    await fleet.materialised("late", a)  # the follower took over and converged
    await wait_for(lambda: _later(follower, 1), what="the follower's first whole round")

    taken = await api.get("leases", "dap-system", lease) or {}
    assert follower.elector is not None and taken["spec"]["holderIdentity"] == follower.elector.me


async def test_what_the_region_cannot_place_or_reach_says_why_on_the_management_cluster(
    fleet: fleet_.Fleet, api: Api
) -> None:
    # Issue 41: a workspace id that no pod could serve, and a cluster control that never pulls
    # (a wrong DAP_CLUSTER_ID or region URL), are conditions with a reason, not silence.
    a = await fleet.add_cluster("a")

    async def connected(reason: str) -> dict[str, Any] | None:
        body = await api.get("clusters", None, a) or {}
        found = [c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == "Connected"]
        return found[0] if found and found[0]["reason"] == reason else None

    never = await wait_for(lambda: connected(placing.REASON_NEVER_PULLED), what="a NeverPulled condition")
    assert never["status"] == "False" and f"DAP_CLUSTER_ID={a}" in never["message"]
    await fleet.start_member("a")
    await wait_for(lambda: connected(placing.REASON_PULLING), what="a Pulling condition")

    await fleet.workspace("my.shop")
    status = await fleet.placed_on("my.shop", None)
    refused = _condition(status, "Scheduled")
    assert refused["reason"] == placing.REASON_REFUSED and "DNS label" in refused["message"]
    await fleet.workspace("shop")
    await fleet.placed_on("shop", a)
