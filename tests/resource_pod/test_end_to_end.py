"""End to end on loopback: control plane + proxy + resource pod + Postgres, real signatures.

The scenarios of issue 6: v1 registered and served; v2 (a new field) rolled in under continuous
load with zero failed requests; a tampered artifact fails with a violation while v1 keeps
serving, and recovers once the honest artifact is served; a replayed (rolled-back) snapshot and
an expired one are refused; the control plane going down changes nothing until it returns; a pod
restarted while control is down serves its last verified artifact. Plus the failure paths of the
load step: a pending destructive migration (failed) and a failing self-check (rolled_back).
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from dap.control.trust import snapshots
from dap.resource_pod import backoff, converging, hosting
from dap.resource_pod.converging import Phase
from dap.server import Catalog
from dap.server import state as server_state
from tests.resource_pod.conftest import (
    WORKSPACE,
    Control,
    Proxy,
    StartPod,
    auth,
    pod_settings,
    spec_files,
    wait_for,
)

V1 = spec_files()
V2 = spec_files("price:integer")


def items_url(pod: hosting.Running) -> str:
    return f"{pod.api_url}/{WORKSPACE}/api/shop/item"


async def create(
    http: aiohttp.ClientSession, pod: hosting.Running, **fields: Any
) -> tuple[int, dict[str, Any]]:
    async with http.post(items_url(pod), json={"title": "t", **fields}, headers=auth()) as response:
        return response.status, await response.json(content_type=None)


async def serves_price(http: aiohttp.ClientSession, pod: hosting.Running) -> bool:
    status, body = await create(http, pod, price=7)
    return status == 201 and body["data"].get("price") == 7


def running(pod: hosting.Running, artifact: dict[str, Any]) -> bool:
    return (
        pod.pod.status.running is not None and pod.pod.status.running.artifact_id == artifact["artifact_id"]
    )


async def health(http: aiohttp.ClientSession, pod: hosting.Running) -> tuple[int, dict[str, Any]]:
    async with http.get(f"{pod.api_url}/health") as response:
        return response.status, await response.json()


async def test_register_serve_and_swap_under_load(
    control: Control, proxy: Proxy, start_pod: StartPod, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    v1 = await control.register(V1)
    pod = await start_pod(pod_settings(proxy.url, tmp_path, control.signer))
    await wait_for(lambda: running(pod, v1), what="v1 loaded")
    # its dispatcher delivers its own workspace's events only (pods may share the database)
    tenants = pod.server.app[server_state.EVENTS].dispatcher.settings.tenants
    ws = await pod.server.app[server_state.REGISTRY].resolve(pod.pod.config.workspace)
    assert tenants == frozenset({ws.tenant_id})
    status, body = await create(http, pod)
    assert status == 201, body
    assert not await serves_price(http, pod)

    outcomes: dict[str, int] = {"ok": 0, "failed": 0}
    failures: list[str] = []
    stop = asyncio.Event()

    async def client(n: int) -> None:
        while not stop.is_set():
            try:
                if n % 2:
                    async with http.get(items_url(pod), headers=auth(), params={"limit": "5"}) as response:
                        await response.read()
                        good = response.status == 200
                else:
                    async with http.post(
                        items_url(pod), json={"title": f"load {n}"}, headers=auth()
                    ) as response:
                        await response.read()
                        good = response.status == 201
                if not good:
                    failures.append(f"{response.method} {response.status}")
            except aiohttp.ClientError as exc:
                good = False
                failures.append(repr(exc))
            outcomes["ok" if good else "failed"] += 1

    workers = [asyncio.create_task(client(n)) for n in range(8)]
    await asyncio.sleep(0.3)
    v2 = await control.register(V2)
    assert v2["version"] == 2
    await wait_for(lambda: running(pod, v2), what="v2 loaded")
    await wait_for(lambda: serves_price(http, pod), what="v2 served")
    await asyncio.sleep(0.3)
    stop.set()
    await asyncio.gather(*workers)
    assert outcomes["failed"] == 0, failures[:5]
    assert outcomes["ok"] > 50

    code, report = await health(http, pod)
    assert code == 200
    assert (report["artifact_id"], report["version"]) == (v2["artifact_id"], 2)
    assert report["phase"] in ("loaded", "up_to_date")
    await wait_for(lambda: pod.pod.status.phase is Phase.UP_TO_DATE, what="up_to_date")

    async def phases_reported() -> bool:
        records = await control.evidence("deploy_status")
        seen = {r["phase"] for r in records if r["artifact_id"] == v2["artifact_id"]}
        return {"fetched", "verified", "loaded", "up_to_date"} <= seen

    await wait_for(phases_reported, what="deploy_status evidence of every step")


async def test_tampered_artifact_fails_with_a_violation_and_recovers(
    control: Control, proxy: Proxy, start_pod: StartPod, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    v1 = await control.register(V1)
    pod = await start_pod(pod_settings(proxy.url, tmp_path, control.signer))
    await wait_for(lambda: running(pod, v1), what="v1 loaded")
    proxy.tamper = True
    v2 = await control.register(V2)
    await wait_for(lambda: pod.pod.status.phase is Phase.FAILED, what="failed")
    assert running(pod, v1), "the old version keeps serving"
    assert (await create(http, pod))[0] == 201
    assert not await serves_price(http, pod)
    assert pod.pod.status.message.startswith("verification failed: the signature does not verify")

    async def violation_sent() -> bool:
        return any(r["kind"] == "signature" for r in await control.evidence("violation"))

    await wait_for(violation_sent, what="signature violation at the control plane")
    code, report = await health(http, pod)
    assert code == 200 and report["phase"] == "failed" and report["status"] == "degraded"

    proxy.tamper = False  # the honest artifact is served again: retried after the backoff
    await wait_for(lambda: running(pod, v2), what="recovery to v2")
    assert await serves_price(http, pod)


async def test_rolled_back_and_expired_snapshots_are_refused(
    control: Control, proxy: Proxy, start_pod: StartPod, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    v1 = await control.register(V1)
    pod = await start_pod(pod_settings(proxy.url, tmp_path, control.signer))
    await wait_for(lambda: running(pod, v1), what="v1 loaded")
    old_snapshot = proxy.seen_snapshots[-1]
    v2 = await control.register(V2)
    await wait_for(lambda: running(pod, v2), what="v2 loaded")
    version = pod.pod.status.snapshot_version
    assert version is not None and json.loads(old_snapshot)["version"] < version

    proxy.replay = old_snapshot  # a replay of the genuine, signed v1 snapshot
    violations = lambda kind: control.evidence("violation")  # noqa: E731

    async def reported(kind: str) -> bool:
        return any(r["kind"] == kind for r in await violations(kind))

    await wait_for(lambda: reported("rollback"), what="rollback violation")
    assert running(pod, v2) and pod.pod.status.snapshot_version == version
    assert await serves_price(http, pod)

    # a genuine snapshot of the current version whose lifetime is over: freeze
    issued = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    state = snapshots.State(version=version, issued_at=issued, ttl=timedelta(hours=1), environment="test")
    deployment: snapshots.Deployment = {
        "workspace_id": WORKSPACE,
        "artifact_id": v2["artifact_id"],
        "sha256": v2["sha256"],
        "cluster_id": "local",
    }
    stale = control.signer.sign(snapshots.document(state, [deployment]))
    proxy.replay = json.dumps(stale).encode()
    await wait_for(lambda: reported("freeze"), what="freeze violation")
    assert running(pod, v2)
    records = await control.evidence("violation")
    assert sum(r["kind"] == "rollback" for r in records) == 1, "each refused snapshot is reported once"

    proxy.replay = None
    v3 = await control.register(spec_files("price:integer", "note:text"))
    await wait_for(lambda: running(pod, v3), what="v3 after the replays stop")


async def test_control_down_keeps_serving_and_catches_up(
    control: Control, start_pod: StartPod, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    v1 = await control.register(V1)
    pod = await start_pod(pod_settings(control.url, tmp_path, control.signer))
    await wait_for(lambda: running(pod, v1), what="v1 loaded")
    await control.stop()
    await wait_for(lambda: pod.pod.control_error is not None, what="control seen down")
    for _ in range(5):
        assert (await create(http, pod))[0] == 201
        await asyncio.sleep(0.1)
    code, report = await health(http, pod)
    assert code == 200 and report["status"] == "degraded"
    assert report["checks"]["control"].startswith("unreachable")
    assert report["artifact_id"] == v1["artifact_id"]

    await control.start()  # same port, same database, same key
    v2 = await control.register(V2)
    await wait_for(lambda: running(pod, v2), what="caught up with v2")
    assert await serves_price(http, pod)

    async def buffered_health_delivered() -> bool:
        records = await control.evidence("health")
        return any(r.get("checks", {}).get("control", "").startswith("unreachable") for r in records)

    await wait_for(buffered_health_delivered, what="health evidence buffered while control was down")


async def test_restart_with_control_down_serves_the_last_verified_artifact(
    control: Control, start_pod: StartPod, make_dsn: Any, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    dsn = await make_dsn()
    await control.register(V1)
    v2 = await control.register(V2)
    first = await start_pod(pod_settings(control.url, tmp_path, control.signer), dsn=dsn)
    await wait_for(lambda: running(first, v2), what="v2 loaded")
    # the envelope is persisted after the self-check, which follows the swap that ``running`` sees
    await wait_for(lambda: (tmp_path / WORKSPACE / "current.json").is_file(), what="v2 persisted")
    await first.stop()
    await control.stop()

    second = await start_pod(pod_settings(control.url, tmp_path, control.signer), dsn=dsn)
    assert running(second, v2), "restored before the first pull"
    assert second.pod.status.phase is Phase.LOADED
    assert await serves_price(http, second)
    await asyncio.sleep(0.5)
    code, report = await health(http, second)
    assert code == 200
    assert (report["phase"], report["artifact_id"], report["version"]) == ("loaded", v2["artifact_id"], 2)
    assert report["checks"]["control"].startswith("unreachable")


async def test_a_tampered_state_file_is_refused_at_boot(
    control: Control, start_pod: StartPod, make_dsn: Any, tmp_path: Path
) -> None:
    v1 = await control.register(V1)
    first = await start_pod(pod_settings(control.url, tmp_path, control.signer))
    await wait_for(lambda: running(first, v1), what="v1 loaded")
    saved = tmp_path / WORKSPACE / "current.json"
    await wait_for(saved.is_file, what="v1 persisted")  # the pull's last step, after the swap
    await first.stop()
    await control.stop()
    document = json.loads(saved.read_text())
    document["envelope"]["app"] = "evil"
    saved.write_text(json.dumps(document))
    second = await start_pod(pod_settings(control.url, tmp_path, control.signer))
    assert second.pod.status.running is None
    assert second.pod.sender.buffer.peek()[0]["type"] == "violation"


async def test_destructive_migration_fails_the_step(
    control: Control, start_pod: StartPod, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    v1 = await control.register(spec_files("qty:integer"))
    pod = await start_pod(pod_settings(control.url, tmp_path, control.signer))
    await wait_for(lambda: running(pod, v1), what="v1 loaded")
    dropping = spec_files("qty:integer").copy()
    dropping["shop/item.yaml"] = dropping["shop/item.yaml"].replace(
        b"{name: qty, type: integer}", b"{name: qty, type: integer, removed: true, reason: unused}"
    )
    await control.register(dropping)
    await wait_for(lambda: pod.pod.status.phase is Phase.FAILED, what="failed")
    assert "destructive" in pod.pod.status.message
    assert running(pod, v1)
    status, body = await create(http, pod, qty=3)
    assert status == 201 and body["data"]["qty"] == 3


async def test_a_failing_self_check_rolls_back(
    control: Control, start_pod: StartPod, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    async def refuse_price(catalog: Catalog) -> None:
        resource = catalog.resource("shop", "item")
        if resource is not None and "price" in resource.fields:
            raise RuntimeError("probe request failed")

    v1 = await control.register(V1)
    pod = await start_pod(pod_settings(control.url, tmp_path, control.signer), self_check=refuse_price)
    await wait_for(lambda: running(pod, v1), what="v1 loaded")
    v2 = await control.register(V2)
    await wait_for(lambda: pod.pod.status.phase is Phase.ROLLED_BACK, what="rolled_back")
    assert running(pod, v1)
    assert not await serves_price(http, pod)
    assert (await create(http, pod))[0] == 201
    failure = pod.pod.status.failure
    assert failure is not None and failure.artifact_id == v2["artifact_id"]
    assert not (tmp_path / WORKSPACE / "current.json").read_text().count(v2["artifact_id"])

    async def rolled_back_reported() -> bool:
        records = await control.evidence("deploy_status")
        return any(r["phase"] == "rolled_back" and r["artifact_id"] == v2["artifact_id"] for r in records)

    await wait_for(rolled_back_reported, what="rolled_back evidence")


async def test_dev_pod_trusts_the_published_key_and_reports_health_and_metering(
    control: Control, start_pod: StartPod, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    v1 = await control.register(V1)
    config = pod_settings(
        control.url, tmp_path, None, dev=True, fetch_keys=True, long_poll=True, pull_interval=5.0
    )
    pod = await start_pod(config)
    await wait_for(lambda: running(pod, v1), what="v1 loaded with the fetched key")
    assert (tmp_path / WORKSPACE / "keys.json").is_file()
    for _ in range(3):
        assert (await create(http, pod))[0] == 201
    # long poll: a registration reaches the pod at once, far below the 5 s pull interval
    started = asyncio.get_running_loop().time()
    v2 = await control.register(V2)
    await wait_for(lambda: running(pod, v2), within=3.0, what="v2 via long poll")
    assert asyncio.get_running_loop().time() - started < 1.5, "well within the 5 s pull interval"

    async def reported() -> bool:
        health = await control.evidence("health")
        metering = await control.evidence("metering")
        return bool(health) and any(r["usage"].get("rows", 0) >= 3 for r in metering)

    await wait_for(reported, what="health and metering evidence")
    metering = await control.evidence("metering")
    assert sum(r["usage"]["requests"] for r in metering) >= 3
    assert all(r["usage"]["storage_bytes"] >= 0 for r in metering)

    # restarted while control is down, a dev pod verifies its saved artifact with the remembered key
    await pod.stop()
    await control.stop()
    again = await start_pod(config)
    assert running(again, v2) and again.pod.status.phase is Phase.LOADED


def test_status_json_is_what_health_shows() -> None:
    assert set(converging.Status().as_json()) >= {"phase", "artifact_id", "version"}


async def test_refused_artifact_is_retried_within_the_pull_interval(
    control: Control, proxy: Proxy, start_pod: StartPod, tmp_path: Path
) -> None:
    """A backoff policy far longer than the pull interval (here 20 s after the third failure)
    must not hold the pod back once the honest artifact is served again: retries are clamped to
    the pull interval (0.2 s), so recovery takes about one interval, not the backoff's cap."""
    steep = backoff.Backoff(base=0.2, factor=10.0, cap=60.0, jitter=0.0)
    v1 = await control.register(V1)
    pod = await start_pod(pod_settings(proxy.url, tmp_path, control.signer, retry=steep))
    await wait_for(lambda: running(pod, v1), what="v1 loaded")
    proxy.tamper = True
    v2 = await control.register(V2)

    def refused_three_times() -> bool:
        failure = pod.pod.status.failure
        return failure is not None and failure.count >= 3

    await wait_for(refused_three_times, within=10.0, what="three refusals of the tampered artifact")
    failure = pod.pod.status.failure
    assert failure is not None
    assert failure.retry_at - time.monotonic() <= 0.2, "the next retry is at most one pull interval away"
    proxy.tamper = False
    await wait_for(lambda: running(pod, v2), within=3.0, what="recovery within a few pull intervals")


async def test_ready_only_once_an_artifact_is_served(
    control: Control, proxy: Proxy, start_pod: StartPod, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    pod = await start_pod(pod_settings(proxy.url, tmp_path, control.signer))
    async with http.get(f"{pod.api_url}{hosting.READY_PATH}") as response:
        assert response.status == 503
        body = await response.json()
    assert body["ready"] is False
    assert any("no artifact served yet" in r for r in body["reasons"]), body
    assert (await health(http, pod))[0] == 200  # alive all the same: liveness must not kill it

    v1 = await control.register(V1)
    await wait_for(lambda: running(pod, v1), what="v1 loaded")
    async with http.get(f"{pod.api_url}{hosting.READY_PATH}") as response:
        assert response.status == 200
        assert (await response.json())["ready"] is True

    await pod.stop()
    assert hosting.readiness(pod.pod, None, stopping=True) == ["stopping"]
