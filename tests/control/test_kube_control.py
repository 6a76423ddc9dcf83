"""Kubernetes-native control without Kubernetes: the pure parts, the bindings on real Postgres,
and ``GET /v1/placements`` served by a real region-mode control on loopback."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import asyncpg
import pytest

from dap.control.clusters.routing import CLASS_LABEL, REGION_LABEL
from dap.control.kube import bindings, leases, placing
from dap.control.storage import store
from tests.control.conftest import Start, json_upload, manifests

NOW = "2026-11-24T05:00:00Z"
LABELS = {REGION_LABEL: "eu", CLASS_LABEL: "standard"}
SPEC = {"region": "eu", "clusterClass": "standard"}


def owned(namespace: str, name: str, cluster: str, spec: dict[str, Any]) -> dict[str, Any]:
    body = placing.materialise(placing.Placement(name, "m", spec), cluster, namespace)
    body["metadata"]["resourceVersion"] = "7"
    return body


# -- pure ------------------------------------------------------------------------------------


def test_materialise_keeps_the_spec_and_marks_the_copy_as_the_cluster_controls() -> None:
    body = placing.materialise(placing.Placement("shop", "mgmt", SPEC), "eu-1", None)
    assert body["metadata"]["namespace"] == "mgmt" and body["metadata"]["name"] == "shop"
    assert body["spec"] == SPEC
    assert placing.owned_by(body, "eu-1") and not placing.owned_by(body, "eu-2")
    assert placing.placement_of(body) == "shop"  # the workspace id its status is reported under
    assert (
        placing.materialise(placing.Placement("shop", "mgmt", SPEC), "eu-1", "c1")["metadata"]["namespace"]
        == "c1"
    )


def test_plan_creates_updates_and_deletes_only_its_own() -> None:
    placements = [
        placing.Placement("new", "m", SPEC),
        placing.Placement("same", "m", SPEC),
        placing.Placement("drifted", "m", {**SPEC, "environment": "prod"}),
    ]
    live = [
        owned("c1", "same", "eu-1", SPEC),
        owned("c1", "drifted", "eu-1", SPEC),
        owned("c1", "moved", "eu-1", SPEC),
        owned("c1", "someone-elses", "eu-2", SPEC),
        {"metadata": {"namespace": "c1", "name": "by-hand", "labels": {}}, "spec": {}},
    ]
    todo = placing.plan(placements, live, "eu-1", "c1")
    assert [b["metadata"]["name"] for b in todo.create] == ["new"]
    assert [b["metadata"]["name"] for b in todo.update] == ["drifted"]
    assert todo.delete == [("c1", "moved")]
    assert placing.plan([], [], "eu-1", "c1").empty()


def test_management_status_scheduled_unschedulable_and_reported() -> None:
    waiting = placing.management_status(placing.Binding("a", "m", None, "eu-1: full (1/1)"), {}, NOW)
    assert waiting["cluster"] is None and waiting["phase"] == "Pending"
    (scheduled,) = waiting["conditions"]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    assert scheduled["message"] == "eu-1: full (1/1)"

    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": NOW}
    placed = placing.management_status(
        placing.Binding("a", "m", "eu-1", None, report=("Ready", [ready])), waiting, "2026-11-24T06:00:00Z"
    )
    assert placed["cluster"] == "eu-1" and placed["phase"] == "Ready"
    types = {c["type"]: c for c in placed["conditions"]}
    assert types["Scheduled"]["status"] == "True" and types["Scheduled"]["reason"] == "Placed"
    assert types["Scheduled"]["lastTransitionTime"] == "2026-11-24T06:00:00Z"  # it changed
    assert types["Ready"] == ready

    again = placing.management_status(
        placing.Binding("a", "m", "eu-1", None, report=("Ready", [ready])), placed, "2026-11-24T07:00:00Z"
    )
    assert placing.same_status(again, placed)  # nothing to write: transition times are kept
    direct = placing.management_status(
        placing.Binding("a", "m", "eu-9", None, requested_cluster="eu-9"), {}, NOW
    )
    assert direct["conditions"][0]["reason"] == "Assigned"


def test_a_lease_is_taken_when_free_held_or_expired() -> None:
    now = datetime(2026, 11, 24, 5, 0, tzinfo=UTC)
    fresh = (now - timedelta(seconds=5)).strftime(leases.MICRO)
    stale = (now - timedelta(seconds=20)).strftime(leases.MICRO)
    assert leases.decide({}, "me", now)
    assert leases.decide({"holderIdentity": "me", "renewTime": fresh, "leaseDurationSeconds": 15}, "me", now)
    assert not leases.decide(
        {"holderIdentity": "you", "renewTime": fresh, "leaseDurationSeconds": 15}, "me", now
    )
    assert leases.decide({"holderIdentity": "you", "renewTime": stale, "leaseDurationSeconds": 15}, "me", now)


# -- Postgres and HTTP -----------------------------------------------------------------------


async def test_route_places_by_rule_five_and_the_cluster_pulls_its_placements(
    start_control: Start, db_dsn: str, http: aiohttp.ClientSession
) -> None:
    region = await start_control(mode="region")
    pool = await store.connect(db_dsn, max_size=2)
    try:
        async with pool.acquire() as conn:
            await bindings.record_cluster(conn, "eu-1", LABELS, {"maxWorkspaces": 1, "load": 0.1})
            await bindings.record_cluster(conn, "eu-2", LABELS, {"maxWorkspaces": 5, "load": 0.9})
            await bindings.record_cluster(conn, "us-1", {**LABELS, REGION_LABEL: "us"}, {"load": 0.0})
        for name in ("a", "b"):
            assert await bindings.record_workspace(pool, "m", name, SPEC) is None
        assert await bindings.record_workspace(pool, "m", "pinned", {"cluster": "us-1"}) is None
        assert await bindings.route(pool)
        placed = {b.workspace: b.cluster for b in await bindings.bindings(pool)}
        assert placed == {"a": "eu-1", "b": "eu-2", "pinned": "us-1"}
        assert not await bindings.route(pool)  # stable: nothing moves without a reason

        async with http.get(f"{region.url}/v1/placements", params={"cluster": "eu-2"}) as answer:
            assert answer.status == 200
            etag = answer.headers["ETag"]
            body = await answer.json()
        assert body["placements"] == [{"workspace": "b", "namespace": "m", "name": "b", "spec": SPEC}]
        headers = {"If-None-Match": etag}
        async with http.get(
            f"{region.url}/v1/placements", params={"cluster": "eu-2"}, headers=headers
        ) as answer:
            assert answer.status == 304
        views = await bindings.cluster_views(pool)
        assert views["eu-2"][1] == 1 and views["eu-2"][2] is not None  # counted, pulled
        assert views["eu-1"][2] is None  # never pulled

        # eu-1 drained: its workspace moves to eu-2, and eu-2's answer changes.
        async with pool.acquire() as conn:
            await bindings.record_cluster(conn, "eu-1", LABELS, {"maxWorkspaces": 1, "state": "inactive"})
        assert await bindings.route(pool)
        assert {b.workspace: b.cluster for b in await bindings.bindings(pool)}["a"] == "eu-2"
        async with http.get(
            f"{region.url}/v1/placements", params={"cluster": "eu-2"}, headers=headers
        ) as answer:
            assert answer.status == 200
            assert [p["workspace"] for p in (await answer.json())["placements"]] == ["a", "b"]
        async with http.get(f"{region.url}/v1/placements", params={"cluster": "eu-1"}) as answer:
            assert [p["workspace"] for p in (await answer.json())["placements"]] == ["a"]  # handing over

        await bindings.forget_workspace(pool, "m", "a")
        assert "a" not in {b.workspace for b in await bindings.bindings(pool)}
    finally:
        await pool.close()


async def test_placements_without_a_cluster_is_a_problem(
    start_control: Start, http: aiohttp.ClientSession
) -> None:
    region = await start_control(mode="region")
    async with http.get(f"{region.url}/v1/placements") as answer:
        assert answer.status == 400
        problem = await answer.json()
    assert "cluster=ID" in problem["detail"]


@pytest.mark.parametrize("state", ["draining", "inactive"])
async def test_a_workspace_with_nowhere_to_go_carries_the_reason(db_dsn: str, state: str) -> None:
    pool = await store.connect(db_dsn, max_size=2)
    try:
        async with pool.acquire() as conn:
            await bindings.record_cluster(conn, "eu-1", LABELS, {"state": state})
        await bindings.record_workspace(pool, "m", "a", SPEC)
        await bindings.route(pool)
        (binding,) = await bindings.bindings(pool)
        assert binding.cluster is None
        assert binding.error is not None and f"eu-1: status {state}" in binding.error
    finally:
        await pool.close()


async def test_a_fractional_load_is_stored_as_given(db_dsn: str) -> None:
    # Regression: the parameter was typed integer by coalesce($5, 0), so 0.37 was stored as 0.
    from dap.control.clusters import registry

    pool = await store.connect(db_dsn, max_size=2)
    try:
        async with pool.acquire() as conn:
            await bindings.record_cluster(conn, "eu-1", LABELS, {"load": 0.37})
            assert [c.load for c in await registry.clusters(conn)] == [0.37]
            await registry.upsert_cluster(
                conn, "eu-1", labels=LABELS, status="active", max_workspaces=9, load=0.61
            )
            assert [c.load for c in await registry.clusters(conn)] == [0.61]
    finally:
        await pool.close()


# -- one workspace, one binding (issue 41) ---------------------------------------------------


async def _report(http: aiohttp.ClientSession, url: str, cluster: str, workspace: str, phase: str) -> None:
    """What a cluster control posts when the Workspace it keeps changes phase."""
    report = {"cluster": cluster, "workspace": workspace, "phase": phase, "at": "2026-11-24T05:00:00Z"}
    async with http.post(f"{url}/v1/workspace-status", json=report) as answer:
        assert answer.status == 202, await answer.text()


async def _snapshot_workspaces(
    http: aiohttp.ClientSession, url: str, pool: store.Pool, cluster: str
) -> list[str]:
    """The workspaces of ``cluster``'s snapshot, once the control took the last change in (it
    reloads on the NOTIFY of a snapshot bump, a moment after the commit)."""
    wanted = await pool.fetchval("SELECT version FROM dap_control.snapshot_state")
    for _ in range(100):
        async with http.get(f"{url}/v1/snapshot", params={"cluster": cluster}) as answer:
            assert answer.status == 200
            body = await answer.json()
        if body["version"] >= wanted:
            return [d["workspace_id"] for d in body["deployments"]]
        await asyncio.sleep(0.05)
    raise AssertionError(f"the control still serves snapshot {body['version']}, not {wanted}")


@pytest.mark.parametrize("registered_first", [True, False])
async def test_a_registration_and_a_management_workspace_of_the_same_name_are_one_binding(
    start_control: Start, db_dsn: str, http: aiohttp.ClientSession, registered_first: bool
) -> None:
    # Issue 41: `dap register --workspace vault` and the Workspace `vault` applied on the
    # management cluster were two bindings routed apart; the placed pods got no artifact.
    region = await start_control(mode="region")
    pool = await store.connect(db_dsn, max_size=2)
    try:
        async with pool.acquire() as conn:
            await bindings.record_cluster(conn, "eu-1", LABELS, {"load": 0.1})
            await bindings.record_cluster(conn, "eu-2", LABELS, {"load": 0.5})

        async def register() -> None:
            upload = json_upload("vault", manifests(), ["vault"])
            async with http.post(f"{region.url}/v1/artifacts", json=upload) as answer:
                assert answer.status == 200, await answer.text()

        if registered_first:
            await register()
        assert await bindings.record_workspace(pool, "tenants", "vault", SPEC) is None
        if not registered_first:
            await register()
        await bindings.route(pool)
        (binding,) = await bindings.bindings(pool)
        assert (binding.workspace, binding.namespace) == ("vault", "tenants")
        assert len(await store.deployments(pool)) == 1
        async with http.get(f"{region.url}/v1/placements", params={"cluster": binding.cluster}) as answer:
            assert [p["workspace"] for p in (await answer.json())["placements"]] == ["vault"]
        assert await _snapshot_workspaces(http, region.url, pool, str(binding.cluster)) == ["vault"]

        # A drain takes the artifact along, and hands over: the cluster left keeps the workspace
        # (placement and artifact) until the new one reports it Ready.
        source = str(binding.cluster)
        other = "eu-2" if source == "eu-1" else "eu-1"
        async with pool.acquire() as conn:
            await bindings.record_cluster(conn, source, LABELS, {"state": "draining"})
        assert await bindings.route(pool)
        assert await _snapshot_workspaces(http, region.url, pool, other) == ["vault"]
        assert await _snapshot_workspaces(http, region.url, pool, source) == ["vault"]
        for cluster in (source, other):
            async with http.get(f"{region.url}/v1/placements", params={"cluster": cluster}) as answer:
                assert [p["workspace"] for p in (await answer.json())["placements"]] == ["vault"]
        (moving,) = await bindings.bindings(pool)
        assert (moving.cluster, moving.handing_over_from) == (other, source)
        assert source in placing.management_status(moving, {}, NOW)["conditions"][0]["message"]
        await _report(http, region.url, other, "vault", "Progressing")
        assert not await bindings.route(pool)  # not Ready yet: still handing over
        await _report(http, region.url, other, "vault", "Ready")
        assert await bindings.route(pool)
        assert await _snapshot_workspaces(http, region.url, pool, source) == []
        async with http.get(f"{region.url}/v1/placements", params={"cluster": source}) as answer:
            assert (await answer.json())["placements"] == []

        # Deleting the Workspace leaves the registration's binding (and its artifact) in place.
        await bindings.forget_workspace(pool, "tenants", "vault")
        assert await bindings.bindings(pool) == []
        (row,) = await store.deployments(pool)
        assert row.workspace_id == "vault" and row.artifact_id is not None
    finally:
        await pool.close()


async def test_a_workspace_id_is_held_by_one_namespace_and_must_be_a_dns_label(db_dsn: str) -> None:
    pool = await store.connect(db_dsn, max_size=2)
    try:
        assert await bindings.record_workspace(pool, "team-a", "shop", SPEC) is None
        why = await bindings.record_workspace(pool, "team-b", "shop", SPEC)
        assert why is not None and "team-a/shop" in why
        assert await bindings.record_workspace(pool, "team-a", "shop", {**SPEC, "x": "1"}) is None
        assert [(b.namespace, b.workspace) for b in await bindings.bindings(pool)] == [("team-a", "shop")]
        await bindings.forget_workspace(pool, "team-b", "shop")  # not the holder: nothing happens
        assert len(await bindings.bindings(pool)) == 1
        await bindings.forget_workspace(pool, "team-a", "shop")
        assert await bindings.record_workspace(pool, "team-b", "shop", SPEC) is None  # now free
        why = await bindings.record_workspace(pool, "team-a", "my.shop", SPEC)
        assert why is not None and "DNS label" in why
    finally:
        await pool.close()


def test_a_refused_workspace_says_why_in_its_scheduled_condition() -> None:
    status = placing.refused_status("workspace id 'shop' is the Workspace a/shop", {}, NOW)
    assert status["cluster"] is None and status["phase"] == "Pending"
    (scheduled,) = status["conditions"]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Refused")
    assert "a/shop" in scheduled["message"]


async def test_migration_seven_merges_the_old_namespace_slash_name_bindings(pg_server_dsn: str) -> None:
    from dap.control.storage import schema
    from tests.conftest import drop_database, new_database

    name, dsn = await new_database(pg_server_dsn)
    try:
        conn = await asyncpg.connect(dsn)  # no store.connect: it would migrate all the way at once
        try:
            await conn.execute(f"CREATE SCHEMA {schema.SCHEMA}")
            await conn.execute(f"CREATE TABLE {schema.SCHEMA}.schema_version (version integer NOT NULL)")
            for number, script in enumerate(schema.MIGRATIONS[:6], start=1):
                await conn.execute(script)
                await conn.execute(f"INSERT INTO {schema.SCHEMA}.schema_version VALUES ($1)", number)
            spec = '{"region": "eu"}'
            await conn.execute(
                "INSERT INTO dap_control.deployments (workspace_id, app, cluster_id, workspace_spec)"
                " VALUES ('m/vault', '', 'eu-2', $1::jsonb), ('vault', 'vault', 'eu-1', NULL),"
                " ('m/shop', '', 'eu-1', $1::jsonb), ('z/shop', '', 'eu-2', $1::jsonb)",
                spec,
            )
            await conn.execute(
                "INSERT INTO dap_control.workspace_status VALUES ('m/shop', 'eu-1', 'Ready', '[]', now())"
            )
            await schema.migrate(conn)
            rows = await conn.fetch(
                "SELECT workspace_id, app, namespace, cluster_id FROM dap_control.deployments ORDER BY 1"
            )
            status = await conn.fetch("SELECT workspace_id FROM dap_control.workspace_status")
        finally:
            await conn.close()
        assert [tuple(r) for r in rows] == [("shop", "", "m", "eu-1"), ("vault", "vault", "m", "eu-1")]
        assert [r["workspace_id"] for r in status] == ["shop"]
    finally:
        await drop_database(pg_server_dsn, name)


async def test_a_cluster_resource_wins_over_its_cluster_controls_announcement(
    start_control: Start, db_dsn: str, http: aiohttp.ClientSession
) -> None:
    # Issue 41: the workload cluster's control announced itself without labels every sync and
    # so erased the labels of the Cluster resource that routing reads.
    from dap.control.clusters import registry

    region = await start_control(mode="region")
    pool = await store.connect(db_dsn, max_size=2)
    try:
        async with pool.acquire() as conn:
            await bindings.record_cluster(conn, "eu-1", LABELS, {"maxWorkspaces": 3, "state": "draining"})
        announcement = {"labels": {}, "status": "active", "max_workspaces": 50, "load": 0.4}
        async with http.put(f"{region.url}/v1/clusters/eu-1", json=announcement) as answer:
            assert answer.status == 200, await answer.text()
        async with http.put(f"{region.url}/v1/clusters/eu-9", json=announcement) as answer:
            assert answer.status == 200
        clusters = {c.cluster_id: c for c in await registry.clusters(pool)}
        declared = clusters["eu-1"]
        assert (declared.labels, declared.status, declared.max_workspaces) == (LABELS, "draining", 3)
        assert declared.load == 0.4  # the announcement is still its heartbeat and load
        assert (clusters["eu-9"].max_workspaces, clusters["eu-9"].status) == (50, "active")
        async with pool.acquire() as conn:  # the resource edited: its values apply at once
            await bindings.record_cluster(conn, "eu-1", LABELS, {"maxWorkspaces": 4})
        assert {c.cluster_id: c.status for c in await registry.clusters(pool)}["eu-1"] == "active"
    finally:
        await pool.close()


def test_a_clusters_connected_condition_says_why_it_is_not_pulling() -> None:
    now = datetime(2026, 11, 24, 5, 0, tzinfo=UTC)
    never = placing.connection("eu-9", None, now, 60, [])
    assert (never["status"], never["reason"]) == ("False", "NeverPulled")
    assert "DAP_CLUSTER_ID=eu-9" in never["message"]
    fresh = placing.connection("eu-1", now - timedelta(seconds=10), now, 60, [never])
    assert (fresh["status"], fresh["reason"]) == ("True", "Pulling")
    stale = placing.connection("eu-1", now - timedelta(seconds=90), now, 60, [fresh])
    assert (stale["status"], stale["reason"]) == ("False", "PullsStopped")
    assert "90 s" in stale["message"]
    later = placing.connection("eu-1", now - timedelta(seconds=95), now + timedelta(seconds=5), 60, [stale])
    assert later["lastTransitionTime"] == stale["lastTransitionTime"]


async def test_a_pull_for_a_cluster_no_resource_declares_is_a_problem_naming_the_fix(
    start_control: Start, db_dsn: str, http: aiohttp.ClientSession
) -> None:
    region = await start_control(mode="region")
    announcement = {"labels": LABELS, "status": "active", "max_workspaces": 5}
    async with http.put(f"{region.url}/v1/clusters/eu-9", json=announcement) as answer:
        assert answer.status == 200  # announced by its own control, but declared by no resource
    async with http.get(f"{region.url}/v1/placements", params={"cluster": "eu-9"}) as answer:
        assert answer.status == 404
        problem = await answer.json()
    assert problem["code"] == "SVC.CONTROL.NOT_FOUND"
    assert "DAP_CLUSTER_ID" in problem["detail"] and "eu-9" in problem["detail"]
