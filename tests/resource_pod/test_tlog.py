"""The pod and the transparency log, end to end on loopback (control, proxy, pod, Postgres).

An artifact the log does not record, or one whose inclusion proof is forged, is refused with a
``log`` violation while the old version keeps serving; a control that shows a rewritten history
(a fork of the log signed with the same key) is refused as a ``split_view``; the last accepted
head survives a restart.
"""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import asyncpg

from dap.resource_pod import persisting
from dap.resource_pod.converging import Phase
from tests.resource_pod.conftest import (
    WORKSPACE,
    Control,
    MakeDsn,
    Proxy,
    StartPod,
    pod_settings,
    spec_files,
    wait_for,
)
from tests.resource_pod.test_end_to_end import running, serves_price

V1 = spec_files()
V2 = spec_files("price:integer")


def saved_head(state_dir: Path) -> dict[str, object]:
    head: dict[str, object] = json.loads((state_dir / WORKSPACE / persisting.LOG).read_bytes())
    return head


async def test_the_pod_accepts_logged_artifacts_and_remembers_the_head(
    control: Control, proxy: Proxy, start_pod: StartPod, tmp_path: Path
) -> None:
    v1 = await control.register(V1)
    pod = await start_pod(pod_settings(proxy.url, tmp_path, control.signer))
    await wait_for(lambda: running(pod, v1), what="v1 loaded")
    assert pod.pod.log_head is not None and pod.pod.log_head.tree_size == 2  # key + v1
    v2 = await control.register(V2)
    await wait_for(lambda: running(pod, v2), what="v2 loaded")
    assert pod.pod.log_head.tree_size == 3
    assert saved_head(tmp_path)["tree_size"] == 3
    await pod.stop()
    again = await start_pod(pod_settings(proxy.url, tmp_path, control.signer))
    assert again.pod.log_head is not None and again.pod.log_head.tree_size == 3


async def test_an_artifact_missing_from_the_log_is_refused(
    control: Control, proxy: Proxy, start_pod: StartPod, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    v1 = await control.register(V1)
    pod = await start_pod(pod_settings(proxy.url, tmp_path, control.signer))
    await wait_for(lambda: running(pod, v1), what="v1 loaded")
    v2 = await control.register(V2)
    connection = await asyncpg.connect(control.dsn)
    try:  # a region that registers without logging (compromised, or a bug)
        await connection.execute(
            "DELETE FROM dap_control.log_leaves WHERE artifact_id = $1", v2["artifact_id"]
        )
    finally:
        await connection.close()
    await wait_for(lambda: pod.pod.status.phase is Phase.FAILED, what="refused")
    assert running(pod, v1) and not await serves_price(http, pod)
    assert "no transparency-log proof" in pod.pod.status.message

    async def violation() -> bool:
        return any(r["kind"] == "log" for r in await control.evidence("violation"))

    await wait_for(violation, what="log violation at the control")


async def test_a_forged_inclusion_proof_is_refused_and_the_honest_one_converges(
    control: Control, proxy: Proxy, start_pod: StartPod, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    v1 = await control.register(V1)
    pod = await start_pod(pod_settings(proxy.url, tmp_path, control.signer))
    await wait_for(lambda: running(pod, v1), what="v1 loaded")
    proxy.forge_log = True
    v2 = await control.register(V2)
    await wait_for(lambda: pod.pod.status.phase is Phase.FAILED, what="refused")
    assert running(pod, v1)
    assert "inclusion proof" in pod.pod.status.message
    proxy.forge_log = False
    await wait_for(lambda: running(pod, v2), what="v2 with the honest proof")
    assert await serves_price(http, pod)


async def test_a_forked_log_is_a_split_view(
    control: Control,
    proxy: Proxy,
    start_pod: StartPod,
    http: aiohttp.ClientSession,
    make_dsn: MakeDsn,
    tmp_path: Path,
) -> None:
    v1 = await control.register(V1)
    pod = await start_pod(pod_settings(proxy.url, tmp_path, control.signer))
    await wait_for(lambda: running(pod, v1), what="v1 loaded")
    accepted = pod.pod.log_head
    assert accepted is not None
    # The same key, another history: the region rewrote its log (or shows this pod a fork).
    fork = Control(await make_dsn(), control.signer, http)
    await fork.start()
    try:
        await fork.register(spec_files("other:string"), workspace="elsewhere")
        await fork.register(V1)
        v2 = await fork.register(V2)
        proxy.control = fork
        await wait_for(lambda: pod.pod.status.phase is Phase.FAILED, what="split view refused")
        assert running(pod, v1) and not await serves_price(http, pod)
        assert "does not extend the accepted one" in pod.pod.status.message
        assert pod.pod.log_head == accepted  # the fork's head was not taken

        async def violation() -> bool:
            return any(r["kind"] == "split_view" for r in await fork.evidence("violation"))

        await wait_for(violation, what="split_view violation")
        assert not running(pod, v2)
    finally:
        proxy.control = control
        await fork.stop()
