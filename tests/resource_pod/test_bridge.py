"""The app-process bridge hosted in a resource pod: control plane + pod + a real app process.

The pod boots with an empty catalog and swaps each artifact in; the bridge must serve the sidecar
actions and follow the datastores of whatever catalog is current. ``dap pod`` and ``dap dev`` read
the sidecar options from the environment the operator (or a developer) sets.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dap.dev import cli as dev_cli
from dap.resource_pod import cli, hosting
from dap.server import options
from tests.bridge.conftest import SPEC, AppProcess
from tests.resource_pod.conftest import (
    ORIGIN,
    SECRET,
    WORKSPACE,
    Control,
    MakeDsn,
    Proxy,
    auth,
    pod_settings,
    wait_for,
)


def datastores(*names: str) -> bytes:
    docs = [
        f"apiVersion: dap.io/v1\nkind: Datastore\nmetadata: {{name: {n}}}\nspec: {{driver: memory}}\n"
        for n in names
    ]
    return "---\n".join(docs).encode()


def files(*stores: str) -> dict[str, bytes]:
    """The bridge tests' store module, with memory datastores named ``stores``."""
    out = {f"store/{p.name}": p.read_bytes() for p in sorted((SPEC / "store").glob("*.yaml"))}
    out["datastores.yaml"] = datastores(*stores)
    return out


@pytest.fixture
def app_process() -> Iterator[AppProcess]:
    with tempfile.TemporaryDirectory(prefix="dap-pod-app-") as tmp:
        process = AppProcess(Path(tmp))
        process.start()
        try:
            yield process
        finally:
            process.stop()


@pytest.fixture
async def pod(
    control: Control, proxy: Proxy, make_dsn: MakeDsn, app_process: AppProcess, tmp_path: Path
) -> AsyncIterator[hosting.Running]:
    opts = options.check(
        dsn=await make_dsn(),
        addr="127.0.0.1:0",
        metrics_addr="127.0.0.1:0",
        jwt_secret=SECRET,
        cors_origins=[ORIGIN],
        pool_size=8,
        sidecar_endpoint=app_process.endpoint,
        invoke_timeout="5s",
    )
    running = await hosting.start(
        opts, pod_settings(proxy.url, tmp_path, control.signer), shutdown_timeout=5.0
    )
    try:
        yield running
    finally:
        await running.stop()


async def call(
    http: aiohttp.ClientSession, pod: hosting.Running, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    url = f"{pod.api_url}/{WORKSPACE}/api/store/{path}"
    async with http.request(method, url, json=body, headers=auth()) as response:
        return response.status, await response.json(content_type=None)


def running(pod: hosting.Running, artifact: dict[str, Any]) -> bool:
    status = pod.pod.status.running
    return status is not None and status.artifact_id == artifact["artifact_id"]


def cache_set(store: str) -> dict[str, Any]:
    return {"primitive": "cache", "op": "set", "body": {"named": store, "key": "k", "value": store}}


async def test_sidecar_actions_and_datastores_follow_the_swapped_catalog(
    control: Control, pod: hosting.Running, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    v1 = await control.register(files("first"))
    await wait_for(lambda: running(pod, v1), what="v1 loaded")
    status, answer = await call(http, pod, "POST", "item", {"sku": "a", "stock": 5})
    assert status == 201, answer
    item = answer["data"]
    status, answer = await call(http, pod, "POST", "order", {"item": item["id"], "qty": 2})
    assert status == 201, answer
    order = answer["data"]
    # the app process answers through the bridge hosted in the pod, its /ctx write in the scope
    status, answer = await call(http, pod, "POST", f"order/{order['id']}/reserve")
    assert status == 200, answer
    assert answer["result"] == {"stock": 3} and answer["transition"] == {"from": "new", "to": "reserved"}
    # a service action reaches the app process too
    status, answer = await call(http, pod, "POST", "desk/tally", {"item": item["id"], "amount": 4})
    assert status == 200 and answer["result"]["stock"] == 7, answer
    # the datastores are the artifact's, not those of the empty catalog the pod booted with
    steps = [cache_set("first"), cache_set("second")]
    status, answer = await call(http, pod, "POST", f"order/{order['id']}/run", {"steps": steps})
    assert status == 200, answer
    assert [r["status"] for r in answer["result"]["results"]] == [200, 404]
    # described as runnable: a bridge is attached
    async with http.get(f"{pod.api_url}/{WORKSPACE}/api/openapi.json") as response:
        assert "/api/store/order/{id}/reserve" in (await response.json())["paths"]

    v2 = await control.register(files("second"))
    await wait_for(lambda: running(pod, v2), what="v2 loaded")
    status, answer = await call(http, pod, "POST", f"order/{order['id']}/run", {"steps": steps})
    assert status == 200, answer
    assert [r["status"] for r in answer["result"]["results"]] == [404, 200]

    # file fields keep their bytes under the pod's state directory
    url = f"{pod.api_url}/{WORKSPACE}/api/store/item/{item['id']}/_files/manual"
    async with http.put(url, data=b"guide", headers={**auth(), "Content-Type": "text/plain"}) as r:
        assert r.status == 200, await r.text()
    assert list((tmp_path / "files").glob(f"*/*/{item['id']}/manual/*"))


def test_pod_and_dev_read_the_sidecar_options_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DAP_SIDECAR_ENDPOINT", "unix:///run/app/app.sock")
    monkeypatch.setenv("DAP_INVOKE_TIMEOUT", "7s")
    with cli.pod.make_context("pod", ["--control-url", "http://control"]) as ctx:
        assert ctx.params["sidecar_endpoint"] == "unix:///run/app/app.sock"
        assert ctx.params["invoke_timeout"] == "7s"
    monkeypatch.setenv("DAP_RUNTIME", "python")
    with dev_cli.dev.make_context("dev", ["--spec", str(SPEC)]) as ctx:
        assert ctx.params["sidecar_endpoint"] == "unix:///run/app/app.sock"
        assert ctx.params["runtime"] == "python" and ctx.params["invoke_timeout"] == "7s"
