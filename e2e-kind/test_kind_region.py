"""The region as users deploy it: a management cluster and two workload clusters in kind (issue 41).

A Workspace is applied only on the management cluster; the region control places it on a
workload cluster by rule 5; that cluster's control creates it there; its operator runs pods; the
pods pull the artifact registered on the region through their cluster's control, check the
transparency log, and serve the tenant through that cluster's NodePort. Then: a second workspace
pinned to the other cluster gets the same registration; the region API goes down for a minute
while both clusters keep serving; a drain moves a workspace under load; the region control's and
a cluster control's leaders are killed.

Its own pytest run (``make e2e`` runs it after the one-cluster suite; ``DAP_E2E_REGION=0`` skips
it when time is short): its three clusters are made and deleted by this module.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import JWT_SECRET, NS, ROOT, Kube, _missing, dap, record
from region import Region, cluster_resource, region_clusters, workspace
from traffic import http

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Region]:
    reason = _missing()
    if reason:
        pytest.skip(f"e2e-kind needs Docker and kind: {reason}")
    if os.environ.get("DAP_E2E_REGION") == "0":
        pytest.skip("DAP_E2E_REGION=0: the three-cluster region suite is skipped")
    with region_clusters(tmp_path_factory.mktemp("region")) as made:
        yield made


@pytest.fixture(scope="module")
def token() -> str:
    return dap("token", "--workspace", "", "--secret", JWT_SECRET).strip()


def placed_on(region: Region, name: str) -> str | None:
    body = region.mgmt.get("workspace", name, NS) or {}
    return (body.get("status") or {}).get("cluster")


def serves(site: str, ws: str, token: str) -> bool:
    try:
        return http("GET", f"{site}/{ws}/api/stock/item?limit=1", token, timeout=5)[0] == 200
    except OSError:
        return False


def health(site: str) -> dict[str, Any]:
    status, body = http("GET", f"{site}/health", timeout=5)
    assert status == 200, body
    return dict(json.loads(body))


def register(region: Region, *workspaces: str) -> str:
    """``dap register`` on the region for ``workspaces``; the new artifact's id."""
    args = [a for ws in workspaces for a in ("--workspace", ws)]
    out = dap(
        "register",
        str(ROOT / "examples" / "procurement"),
        "--control-url",
        region.region_url,
        *args,
        "--app",
        "procurement",
    )
    found = re.search(r"artifact_id:\s*(\S+)", out)
    assert found, out
    return found.group(1)


def other(cluster: str) -> str:
    return "eu-2" if cluster == "eu-1" else "eu-1"


def materialised(kube: Kube, name: str) -> bool:
    return kube.get("workspace", name, NS) is not None


# -- 1. apply on mgmt -> served in a workload cluster -------------------------------------------


def test_a_workspace_applied_on_mgmt_is_served_by_the_workload_cluster_it_is_placed_on(
    region: Region, token: str
) -> None:
    applied = time.monotonic()
    region.mgmt.run("apply", "-f", "-", stdin=workspace("books"))
    artifact = register(region, "books")
    cluster = region.mgmt.wait_for(lambda: placed_on(region, "books"), within=60, what="books placed")
    site = region.site(cluster, "books")
    region.mgmt.wait_for(lambda: serves(site, "books", token), within=300, what=f"books served on {cluster}")
    first = round(time.monotonic() - applied, 1)
    record("region_apply_to_first_200_s", first)
    assert health(site)["artifact_id"] == artifact
    assert not materialised(region.workloads[other(cluster)], "books")

    def reported() -> dict[str, Any] | None:
        status = (region.mgmt.get("workspace", "books", NS) or {}).get("status") or {}
        return status if status.get("phase") == "Ready" else None

    status = region.mgmt.wait_for(reported, within=120, what="Ready reported back to mgmt")
    scheduled = next(c for c in status["conditions"] if c["type"] == "Scheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("True", "Placed"), scheduled
    listed = region.mgmt.run("get", "dws", "-n", NS)
    assert "books" in listed, listed
    assert cluster in listed, listed


# -- 2. one registration, pods in both clusters --------------------------------------------------


def test_a_registration_reaches_pods_in_both_clusters(region: Region, token: str) -> None:
    books_on = placed_on(region, "books")
    assert books_on is not None
    ledger_on = other(books_on)
    region.mgmt.run("apply", "-f", "-", stdin=workspace("ledger", cluster=ledger_on))
    artifact = register(region, "books", "ledger")
    sites = {"books": region.site(books_on, "books"), "ledger": region.site(ledger_on, "ledger")}
    for ws, site in sites.items():
        region.mgmt.wait_for(
            lambda site=site, ws=ws: serves(site, ws, token) and health(site)["artifact_id"] == artifact,
            within=300,
            what=f"{ws} serving {artifact}",
        )
    scheduled = next(
        c
        for c in region.mgmt.get("workspace", "ledger", NS)["status"]["conditions"]
        if c["type"] == "Scheduled"
    )
    assert scheduled["reason"] == "Assigned"


# -- 3. the region API down for a minute ----------------------------------------------------------


def test_workload_clusters_keep_serving_while_the_region_api_is_down(region: Region, token: str) -> None:
    sites = {ws: region.site(str(placed_on(region, ws)), ws) for ws in ("books", "ledger")}
    region.mgmt.run("-n", "dap-system", "scale", "deployment/dap-region", "--replicas=0")
    region.mgmt.wait_for(
        lambda: (
            not json.loads(
                region.mgmt.run(
                    "get", "pods", "-n", "dap-system", "-l", "app.kubernetes.io/name=dap-region", "-o", "json"
                )
            )["items"]
        ),
        within=120,
        what="the region API gone",
    )
    down_at = time.monotonic()
    ok = failed = 0
    while time.monotonic() - down_at < 60:
        for ws, site in sites.items():
            if serves(site, ws, token):
                ok += 1
            else:
                failed += 1
        time.sleep(0.5)
    for cluster, kube in region.workloads.items():  # nothing deleted meanwhile
        hosted = [ws for ws in ("books", "ledger") if placed_on(region, ws) == cluster]
        assert all(materialised(kube, ws) for ws in hosted), cluster
    region.mgmt.run("-n", "dap-system", "scale", "deployment/dap-region", "--replicas=2")
    back = time.time()
    region.mgmt.run("-n", "dap-system", "rollout", "status", "deployment/dap-region", "--timeout=240s")

    def caught_up() -> bool:
        for cluster in region.workloads:
            pulled = ((region.mgmt.get("cluster", cluster) or {}).get("status") or {}).get("lastPull")
            if not pulled or time.mktime(time.strptime(pulled, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone < back:
                return False
        return True

    returned = time.monotonic()
    region.mgmt.wait_for(caught_up, within=180, what="every cluster pulling again")
    record("region_down_reads", {"ok": ok, "failed": failed})
    record("region_back_to_pulls_s", round(time.monotonic() - returned, 1))
    assert failed == 0, (ok, failed)
    assert ok > 100, (ok, failed)


# -- 4. a drain under load ------------------------------------------------------------------------


@dataclass
class FrontDoor:
    """Reads and writes of books through both clusters' NodePorts, as a load balancer with health
    checks would send them: the cluster the region placed books on first, the other on failure."""

    token: str
    sites: list[str]
    prefix: str
    ok: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def _one(self, n: int) -> None:
        for site in self.sites:
            base = f"{site}/books/api/stock/item"
            try:
                if n % 2:
                    code = f"{self.prefix}-{n}"
                    status, _ = http(
                        "POST", base, self.token, {"code": code, "title": "d", "unit_price": "1.00"}, 5
                    )
                    if status in (200, 201):
                        self.acknowledged.append(code)
                else:
                    status, _ = http("GET", f"{base}?limit=1", self.token, timeout=5)
            except OSError:
                status = 0
            if 200 <= status < 300:
                self.ok += 1
                return
        self.failed += 1
        self.failures.append(time.strftime("%H:%M:%S"))

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            self._one(n)
            n += 1
            self.stop.wait(0.2)


def test_a_drain_moves_the_workspace_under_load(region: Region, token: str) -> None:
    source = placed_on(region, "books")
    assert source is not None
    target = other(source)
    sites = [region.site(source, "books"), region.site(target, "books")]
    door = FrontDoor(token, sites, prefix=f"DRAIN{int(time.time())}")
    worker = threading.Thread(target=door.run, daemon=True)
    worker.start()
    try:
        time.sleep(5)
        drained = time.monotonic()
        region.mgmt.run("apply", "-f", "-", stdin=cluster_resource(source, state="draining"))
        region.mgmt.wait_for(lambda: placed_on(region, "books") == target, within=60, what="books re-placed")
        assert materialised(region.workloads[source], "books"), (
            "cut over: the cluster left dropped it at once"
        )
        region.mgmt.wait_for(
            lambda: serves(region.site(target, "books"), "books", token),
            within=300,
            what=f"books served on {target}",
        )
        region.mgmt.wait_for(
            lambda: not materialised(region.workloads[source], "books"),
            within=180,
            what=f"books gone from {source}",
        )
        record("region_drain_to_moved_s", round(time.monotonic() - drained, 1))
        time.sleep(5)
    finally:
        door.stop.set()
        worker.join(timeout=30)
        region.mgmt.run("apply", "-f", "-", stdin=cluster_resource(source, state="active"))
    record("region_drain_requests", {"ok": door.ok, "failed": door.failed, "failed_at": door.failures[:40]})
    query = f"stock/item?code[like]={door.prefix}-%25&limit=1000&fields=code"
    status, body = http("GET", f"{region.site(target, 'books')}/books/api/{query}", token)
    assert status == 200, body
    lost = sorted(set(door.acknowledged) - {row["code"] for row in json.loads(body)["data"]})
    assert lost == [], f"acknowledged writes lost: {lost[:10]}"
    assert door.ok > 0
    # A handover, not a cut-over: the cluster left serves until the new one reports Ready.
    assert door.failed == 0, (door.ok, door.failed, door.failures[:20])


# -- 5. leaders killed -------------------------------------------------------------------------


def _holder(kube: Kube, lease: str) -> str:
    body = kube.get("lease", lease, "dap-system") or {}
    return str((body.get("spec") or {}).get("holderIdentity") or "")


def _kill_leader(kube: Kube, lease: str, app: str) -> float:
    """Delete the pod holding ``lease``; seconds until another replica holds it."""
    holder = kube.wait_for(lambda: _holder(kube, lease), within=60, what=f"a holder of {lease}")
    pods = json.loads(
        kube.run("get", "pods", "-n", "dap-system", "-l", f"app.kubernetes.io/name={app}", "-o", "json")
    )
    (leader,) = [p["metadata"]["name"] for p in pods["items"] if holder.startswith(p["metadata"]["name"])]
    killed = time.monotonic()
    kube.run("delete", "pod", "-n", "dap-system", leader, "--wait=false")
    kube.wait_for(
        lambda: _holder(kube, lease) not in ("", holder), within=90, what=f"a new holder of {lease}"
    )
    return round(time.monotonic() - killed, 1)


def test_the_controls_fail_over_to_their_followers_without_duplicates(region: Region, token: str) -> None:
    record("region_control_failover_s", _kill_leader(region.mgmt, "dap-region-control", "dap-region-control"))
    workload = region.workloads["eu-1"]
    record("cluster_control_failover_s", _kill_leader(workload, "dap-cluster-control", "dap-cluster-control"))
    region.mgmt.run("apply", "-f", "-", stdin=workspace("late", cluster="eu-1"))
    try:
        workload.wait_for(
            lambda: materialised(workload, "late"), within=90, what="late made by the new leaders"
        )
        for name in ("books", "ledger", "late"):
            copies = sum(materialised(kube, name) for kube in region.workloads.values())
            assert copies == 1, (name, copies)
    finally:
        region.mgmt.run("delete", "workspace", "late", "-n", NS, "--wait=false")
