"""Kubernetes-native control without Kubernetes: the pure parts, the bindings on real Postgres,
and ``GET /v1/placements`` served by a real region-mode control on loopback."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from dap.control import store
from dap.control.kube import bindings, leases, placing
from dap.control.routing import CLASS_LABEL, REGION_LABEL
from tests.control.conftest import Start

NOW = "2026-11-24T05:00:00Z"
LABELS = {REGION_LABEL: "eu", CLASS_LABEL: "standard"}
SPEC = {"region": "eu", "clusterClass": "standard"}


def owned(namespace: str, name: str, cluster: str, spec: dict[str, Any], placement: str) -> dict[str, Any]:
    body = placing.materialise(placing.Placement(placement, spec), cluster, namespace)
    body["metadata"]["resourceVersion"] = "7"
    return body


# -- pure ------------------------------------------------------------------------------------


def test_materialise_keeps_the_spec_and_marks_the_copy_as_the_cluster_controls() -> None:
    body = placing.materialise(placing.Placement("mgmt/shop", SPEC), "eu-1", None)
    assert body["metadata"]["namespace"] == "mgmt" and body["metadata"]["name"] == "shop"
    assert body["spec"] == SPEC
    assert placing.owned_by(body, "eu-1") and not placing.owned_by(body, "eu-2")
    assert placing.placement_of(body) == "mgmt/shop"
    assert (
        placing.materialise(placing.Placement("mgmt/shop", SPEC), "eu-1", "c1")["metadata"]["namespace"]
        == "c1"
    )


def test_plan_creates_updates_and_deletes_only_its_own() -> None:
    placements = [
        placing.Placement("m/new", SPEC),
        placing.Placement("m/same", SPEC),
        placing.Placement("m/drifted", {**SPEC, "environment": "prod"}),
    ]
    live = [
        owned("c1", "same", "eu-1", SPEC, "m/same"),
        owned("c1", "drifted", "eu-1", SPEC, "m/drifted"),
        owned("c1", "moved", "eu-1", SPEC, "m/moved"),
        owned("c1", "someone-elses", "eu-2", SPEC, "m/someone-elses"),
        {"metadata": {"namespace": "c1", "name": "by-hand", "labels": {}}, "spec": {}},
    ]
    todo = placing.plan(placements, live, "eu-1", "c1")
    assert [b["metadata"]["name"] for b in todo.create] == ["new"]
    assert [b["metadata"]["name"] for b in todo.update] == ["drifted"]
    assert todo.delete == [("c1", "moved")]
    assert placing.plan([], [], "eu-1", "c1").empty()


def test_management_status_scheduled_unschedulable_and_reported() -> None:
    waiting = placing.management_status(placing.Binding("m/a", None, "eu-1: full (1/1)"), {}, NOW)
    assert waiting["cluster"] is None and waiting["phase"] == "Pending"
    (scheduled,) = waiting["conditions"]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    assert scheduled["message"] == "eu-1: full (1/1)"

    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": NOW}
    placed = placing.management_status(
        placing.Binding("m/a", "eu-1", None, report=("Ready", [ready])), waiting, "2026-11-24T06:00:00Z"
    )
    assert placed["cluster"] == "eu-1" and placed["phase"] == "Ready"
    types = {c["type"]: c for c in placed["conditions"]}
    assert types["Scheduled"]["status"] == "True" and types["Scheduled"]["reason"] == "Placed"
    assert types["Scheduled"]["lastTransitionTime"] == "2026-11-24T06:00:00Z"  # it changed
    assert types["Ready"] == ready

    again = placing.management_status(
        placing.Binding("m/a", "eu-1", None, report=("Ready", [ready])), placed, "2026-11-24T07:00:00Z"
    )
    assert placing.same_status(again, placed)  # nothing to write: transition times are kept
    direct = placing.management_status(
        placing.Binding("m/a", "eu-9", None, requested_cluster="eu-9"), {}, NOW
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
            await bindings.record_workspace(pool, f"m/{name}", SPEC)
        await bindings.record_workspace(pool, "m/pinned", {"cluster": "us-1"})
        assert await bindings.route(pool)
        placed = {b.workspace: b.cluster for b in await bindings.bindings(pool)}
        assert placed == {"m/a": "eu-1", "m/b": "eu-2", "m/pinned": "us-1"}
        assert not await bindings.route(pool)  # stable: nothing moves without a reason

        async with http.get(f"{region.url}/v1/placements", params={"cluster": "eu-2"}) as answer:
            assert answer.status == 200
            etag = answer.headers["ETag"]
            body = await answer.json()
        assert body["placements"] == [{"workspace": "m/b", "namespace": "m", "name": "b", "spec": SPEC}]
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
        assert {b.workspace: b.cluster for b in await bindings.bindings(pool)}["m/a"] == "eu-2"
        async with http.get(
            f"{region.url}/v1/placements", params={"cluster": "eu-2"}, headers=headers
        ) as answer:
            assert answer.status == 200
            assert [p["workspace"] for p in (await answer.json())["placements"]] == ["m/a", "m/b"]

        await bindings.forget_workspace(pool, "m/a")
        assert "m/a" not in {b.workspace for b in await bindings.bindings(pool)}
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
        await bindings.record_workspace(pool, "m/a", SPEC)
        await bindings.route(pool)
        (binding,) = await bindings.bindings(pool)
        assert binding.cluster is None
        assert binding.error is not None and f"eu-1: status {state}" in binding.error
    finally:
        await pool.close()


async def test_a_fractional_load_is_stored_as_given(db_dsn: str) -> None:
    # Regression: the parameter was typed integer by coalesce($5, 0), so 0.37 was stored as 0.
    from dap.control import registry

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
