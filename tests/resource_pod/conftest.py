"""Fixtures of the resource-pod tests: a real control plane, a tampering proxy, real pods.

Everything runs on loopback in the test's event loop: the control plane (``dap.control``, standalone
dev mode, its own fresh database), an aiohttp proxy between pod and control that can tamper with
artifacts, replay an old snapshot or play dead, and pods (``dap.resource_pod.hosting``) hosting the
real server on another fresh database. Intervals are tenths of seconds so the suite stays fast.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp import web

from dap.control.serving import app as control_app
from dap.control.serving import settings as control_settings
from dap.control.storage import store
from dap.control.trust import signing
from dap.resource_pod import backoff, hosting, loading, settings
from dap.server import options
from tests.conftest import drop_database, fresh_database

SECRET = "pod-test-secret-of-at-least-thirty-two-bytes"
ORIGIN = "http://ui.example"
WORKSPACE = "acme"

MODULE = "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: shop}\nspec: {title: Shop}\n"


def item_entity(*fields: str) -> str:
    extra = "".join(
        f"    - {{name: {name}, type: {kind}}}\n" for name, _, kind in (f.partition(":") for f in fields)
    )
    return (
        "apiVersion: dap.io/v1\nkind: Entity\nmetadata: {name: item, module: shop}\n"
        "spec:\n  title: Item\n  fields:\n    - {name: title, type: string, required: true}\n"
        f"{extra}  expose:\n    - type: rest\n"
    )


def spec_files(*fields: str) -> dict[str, bytes]:
    """The test app: module ``shop`` with entity ``item`` (``title`` plus ``fields`` as name:type)."""
    return {"shop/module.yaml": MODULE.encode(), "shop/item.yaml": item_entity(*fields).encode()}


def token(workspace: str = WORKSPACE) -> str:
    now = int(time.time())
    claims = {
        "sub": "u-1",
        "username": "tester",
        "roles": ["admin"],
        "iss": "svc",
        "iat": now,
        "exp": now + 3600,
    }
    return jwt.encode({**claims, "workspace": workspace}, SECRET, algorithm="HS256")


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {token()}"}


async def wait_for(
    condition: Callable[[], Awaitable[bool] | bool], within: float = 15.0, what: str = ""
) -> None:
    deadline = time.monotonic() + within
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what or condition}")
        await asyncio.sleep(0.05)


MakeDsn = Callable[[], Awaitable[str]]


@pytest.fixture
def make_dsn(pg_server_dsn: str) -> Iterator[MakeDsn]:
    """Factory of fresh, empty databases (created off the loop, dropped after the test)."""
    created: list[str] = []

    async def make() -> str:
        name, dsn = await asyncio.to_thread(fresh_database, pg_server_dsn)
        created.append(name)
        return dsn

    yield make
    for name in created:
        asyncio.run(drop_database(pg_server_dsn, name))


@dataclass
class Control:
    """A standalone dev-mode control plane that can be stopped and started again on its port."""

    dsn: str
    signer: signing.Signer
    http: aiohttp.ClientSession
    port: int = 0
    runner: web.AppRunner | None = None
    pool: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        config = control_settings.Settings(
            mode="standalone", dev=True, environment="test", snapshot_ttl=timedelta(minutes=10)
        )
        self.pool = await store.connect(self.dsn, min_size=1, max_size=4)
        app = control_app.build_app(config=config, pool=self.pool, signer=self.signer)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        self.port = self.runner.addresses[0][1]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
        if self.pool is not None:
            await self.pool.close()
            self.pool = None

    async def register(self, files: dict[str, bytes], workspace: str = WORKSPACE) -> dict[str, Any]:
        body = {
            "app": "shop",
            "workspaces": [workspace],
            "files": [{"path": p, "content": base64.b64encode(c).decode()} for p, c in files.items()],
        }
        async with self.http.post(f"{self.url}/v1/artifacts", json=body) as response:
            answer: dict[str, Any] = await response.json()
            assert response.status == 200, answer
            return answer

    async def evidence(self, kind: str | None = None, workspace: str = WORKSPACE) -> list[dict[str, Any]]:
        params = {"workspace": workspace, "limit": "1000", **({"type": kind} if kind else {})}
        async with self.http.get(f"{self.url}/v1/evidence", params=params) as response:
            assert response.status == 200, await response.text()
            records: list[dict[str, Any]] = (await response.json())["records"]
            return records


@dataclass
class Proxy:
    """Forwards the pod's requests to the control plane; can tamper, replay or play dead."""

    control: Control
    http: aiohttp.ClientSession
    tamper: bool = False  # change one file of every artifact (its declared hash kept)
    replay: bytes | None = None  # serve these snapshot bytes instead of the control's answer
    down: bool = False
    forge_log: bool = False  # flip a byte of every inclusion proof
    seen_snapshots: list[bytes] = field(default_factory=list)
    runner: web.AppRunner | None = None
    url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.down:
            return web.Response(status=503, text="proxy: control plane down")
        if request.path == "/v1/snapshot" and self.replay is not None:
            return web.Response(body=self.replay, content_type="application/json")
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("if-none-match", "content-type")}
        try:
            async with self.http.request(
                request.method,
                f"{self.control.url}{request.path_qs}",
                data=await request.read(),
                headers=headers,
            ) as upstream:
                body = await upstream.read()
                status = upstream.status
                etag = upstream.headers.get("ETag")
        except aiohttp.ClientError:
            return web.Response(status=502, text="proxy: cannot reach the control plane")
        if request.path == "/v1/snapshot" and status == 200:
            self.seen_snapshots.append(body)
        if request.path.startswith("/v1/artifacts/") and status == 200 and self.tamper:
            envelope = json.loads(body)
            first = envelope["files"][-1]
            first["content"] = base64.b64encode(base64.b64decode(first["content"]) + b"\n# evil\n").decode()
            body = json.dumps(envelope).encode()
        if request.path == "/v1/log/proof" and status == 200 and self.forge_log:
            answer = json.loads(body)
            first = bytearray.fromhex(answer["inclusion"][0])
            first[0] ^= 1
            answer["inclusion"][0] = first.hex()
            body = json.dumps(answer).encode()
        response = web.Response(status=status, body=body, content_type="application/json")
        if etag:
            response.headers["ETag"] = etag
        return response

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def control(make_dsn: MakeDsn, http: aiohttp.ClientSession) -> AsyncIterator[Control]:
    running = Control(await make_dsn(), signing.Signer.generate(), http)
    await running.start()
    yield running
    await running.stop()


@pytest.fixture
async def proxy(control: Control, http: aiohttp.ClientSession) -> AsyncIterator[Proxy]:
    running = Proxy(control, http)
    await running.start()
    yield running
    await running.stop()


def serve_options(dsn: str) -> options.ServeOptions:
    return options.check(
        dsn=dsn,
        addr="127.0.0.1:0",
        metrics_addr="127.0.0.1:0",
        jwt_secret=SECRET,
        cors_origins=[ORIGIN],
        pool_size=8,
    )


def pod_settings(
    control_url: str, state_dir: Path, trusted: signing.Signer | None, **overrides: Any
) -> settings.Settings:
    values: dict[str, Any] = {
        "control_url": control_url,
        "workspace": WORKSPACE,
        "state_dir": state_dir,
        "pull_interval": 0.2,
        "trusted_keys": {trusted.key_id: trusted.public_key} if trusted is not None else {},
        "pod_name": "pod-test",
        "cluster_id": "local",
        "health_interval": 0.5,
        "metering_interval": 1.0,
        "evidence_interval": 0.1,
        "request_timeout": 2.0,
        "retry": backoff.Backoff(base=0.2, cap=1.0, jitter=0.0),
        "evidence_retry": backoff.Backoff(base=0.1, cap=0.5, jitter=0.0),
    }
    values.update(overrides)
    return settings.Settings(**values)


StartPod = Callable[..., Awaitable[hosting.Running]]


@pytest.fixture
async def start_pod(make_dsn: MakeDsn) -> AsyncIterator[StartPod]:
    """Start pods (each stopped after the test); ``dsn`` defaults to a fresh database per call."""
    pods: list[hosting.Running] = []

    async def start(
        config: settings.Settings, *, dsn: str | None = None, self_check: loading.SelfCheck | None = None
    ) -> hosting.Running:
        running = await hosting.start(
            serve_options(dsn or await make_dsn()), config, self_check=self_check, shutdown_timeout=5.0
        )
        pods.append(running)
        return running

    yield start
    for running in pods:
        await running.stop()
