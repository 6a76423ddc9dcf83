"""A freeze at the pod: deployments are held, the pod keeps serving, a lift converges in one pull."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp

from dap.resource_pod.converging import Phase
from tests.control.test_cli import run
from tests.resource_pod.conftest import Control, Proxy, StartPod, pod_settings, spec_files, wait_for
from tests.resource_pod.test_end_to_end import create, running, serves_price

PULL = 1.0


async def test_a_freeze_holds_the_pod_and_lifting_converges_in_one_pull_interval(
    control: Control, proxy: Proxy, start_pod: StartPod, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    v1 = await control.register(spec_files())
    pod = await start_pod(pod_settings(proxy.url, tmp_path, control.signer, pull_interval=PULL))
    await wait_for(lambda: running(pod, v1), what="v1 loaded")
    code, out, err = await run(
        "control", "freeze", "set", "--app", "shop", "--for", "1h", "--reason", "audit", "--db", control.dsn
    )
    assert code == 0, err
    v2 = await control.register(spec_files("price:integer"))
    await asyncio.sleep(3 * PULL)
    assert running(pod, v1), "held by the freeze"
    assert pod.pod.status.phase is Phase.UP_TO_DATE
    assert (await create(http, pod))[0] == 201  # and still serving
    code, _, err = await run("control", "freeze", "lift", json.loads(out)["freeze_id"], "--db", control.dsn)
    assert code == 0, err
    lifted = time.monotonic()
    await wait_for(lambda: running(pod, v2), within=3 * PULL, what="v2 after the lift")
    took = time.monotonic() - lifted
    # one pull interval, plus the load of v2 and the notification's way to the control
    assert took < PULL + 1.0, f"converged {took:.2f}s after the lift"
    assert await serves_price(http, pod)
