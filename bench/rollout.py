"""Rollout benchmark: registration → new version served, and failed requests during the swap.

    .venv/bin/python bench/rollout.py [--rollouts 5] [--pull-interval 2] [--workers 16] [--quick]

Everything runs in one process on loopback: an embedded Postgres (or ``DAP_BENCH_DSN``), the
control plane in standalone dev mode, and one resource pod (``dap.resource_pod``) hosting the
real server. Each rollout registers the next version of a small app (one more field) while
``--workers`` clients hammer the workspace with list and create requests, and measures the time
from the registration's answer to the first request that sees the new field. Two pod modes:

- polling every ``--pull-interval`` seconds (target: at most interval + 2 s);
- long poll, as ``dap pod --dev`` and ``dap dev`` run (a registration wakes the pod at once).

Baseline, measured in the same run under the same load: a rollout by restarting the server with
the new spec (stop, migrate, start), the way a pod without the atomic swap would do it. Prints
every figure, the ratios, and the failed-request counts (target: 0 for the swap). ``--quick``
(run by ``make test``) does one rollout per mode with few clients, to prove the benchmark runs.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import aiohttp
import asyncpg
import jwt
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dap import config, embedded, logs, server  # noqa: E402
from dap.control.serving import app as control_app  # noqa: E402
from dap.control.serving import settings as control_settings  # noqa: E402
from dap.control.storage import store  # noqa: E402
from dap.control.trust import signing  # noqa: E402
from dap.resource_pod import backoff, hosting, settings  # noqa: E402

SECRET = "bench-rollout-secret-bench-rollout-secret"
WORKSPACE = "bench"
MODULE = "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: shop}\nspec: {title: Shop}\n"


def files(version: int) -> dict[str, bytes]:
    """Version ``n`` of the app: entity ``item`` with ``title`` and fields ``f2`` … ``fn``."""
    extra = "".join(f"    - {{name: f{i}, type: integer}}\n" for i in range(2, version + 1))
    entity = (
        "apiVersion: dap.io/v1\nkind: Entity\nmetadata: {name: item, module: shop}\n"
        "spec:\n  fields:\n    - {name: title, type: string, required: true}\n"
        f"{extra}  expose:\n    - type: rest\n"
    )
    return {"shop/module.yaml": MODULE.encode(), "shop/item.yaml": entity.encode()}


def token() -> str:
    now = int(time.time())
    claims = {"sub": "bench", "username": "bench", "roles": ["admin"], "workspace": WORKSPACE}
    return jwt.encode({**claims, "iss": "svc", "iat": now, "exp": now + 3600}, SECRET, algorithm="HS256")


HEADERS = {"Authorization": f"Bearer {token()}"}


@dataclass
class Load:
    """Bounded load: ``workers`` clients alternating list and create, counting every failure."""

    url: Callable[[], str]
    http: aiohttp.ClientSession
    workers: int
    ok: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def _client(self, n: int) -> None:
        while not self._stop.is_set():
            url = self.url()
            try:
                if n % 2:
                    async with self.http.get(url, params={"limit": "10"}, headers=HEADERS) as response:
                        await response.read()
                        good = response.status == 200
                else:
                    async with self.http.post(url, json={"title": f"w{n}"}, headers=HEADERS) as response:
                        await response.read()
                        good = response.status == 201
                if not good:
                    self.errors.append(f"HTTP {response.status}")
            except (aiohttp.ClientError, OSError) as exc:
                good = False
                self.errors.append(type(exc).__name__)
                await asyncio.sleep(0.005)  # a refused connection fails fast: do not spin
            if good:
                self.ok += 1
            else:
                self.failed += 1

    def start(self) -> None:
        self._stop.clear()
        self._tasks = [asyncio.create_task(self._client(n)) for n in range(self.workers)]

    async def stop(self) -> tuple[int, int]:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        ok, failed = self.ok, self.failed
        self.ok = self.failed = 0
        return ok, failed


async def sees_field(http: aiohttp.ClientSession, url: str, version: int) -> bool:
    body = {"title": "probe", f"f{version}": version} if version > 1 else {"title": "probe"}
    try:
        async with http.post(url, json=body, headers=HEADERS) as response:
            return response.status == 201
    except (aiohttp.ClientError, OSError):
        return False


async def until(check: Callable[[], Awaitable[bool]], limit: float) -> float:
    started = time.perf_counter()
    while not await check():
        if time.perf_counter() - started > limit:
            raise TimeoutError(f"not served within {limit:.0f}s")
        await asyncio.sleep(0.01)
    return time.perf_counter() - started


async def new_database(server_dsn: str, name: str) -> str:
    conn = await asyncpg.connect(server_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return embedded.dsn_for_database(server_dsn, name)


def serve_options(dsn: str, port: int = 0) -> server.options.ServeOptions:
    return server.options.check(
        dsn=dsn,
        addr=f"127.0.0.1:{port}",
        metrics_addr="",
        jwt_secret=SECRET,
        cors_origins=["http://bench.example"],
        pool_size=16,
    )


async def register(http: aiohttp.ClientSession, control_url: str, version: int) -> None:
    body = {
        "app": "shop",
        "workspaces": [WORKSPACE],
        "files": [{"path": p, "content": base64.b64encode(c).decode()} for p, c in files(version).items()],
    }
    async with http.post(f"{control_url}/v1/artifacts", json=body) as response:
        answer = await response.json()
        if response.status != 200 or answer["version"] != version:
            raise RuntimeError(f"registration of version {version} failed: {answer}")


@dataclass
class Result:
    name: str
    seconds: list[float]
    ok: int
    failed: int
    errors: list[str]

    def line(self, target: str) -> str:
        p50 = statistics.median(self.seconds)
        return (
            f"{self.name:<36} {len(self.seconds):>3} rollouts  p50 {p50:6.2f}s  "
            f"max {max(self.seconds):6.2f}s  "
            f"{target:<16} failed {self.failed:>6} of {self.ok + self.failed:>7}"
        )


async def swap_rollouts(
    name: str,
    args: argparse.Namespace,
    server_dsn: str,
    http: aiohttp.ClientSession,
    *,
    long_poll: bool,
    tag: str,
) -> Result:
    """Register v1, then ``--rollouts`` more versions under load, measuring registration → served."""
    signer = signing.Signer.generate()
    pool = await store.connect(await new_database(server_dsn, f"bench_control_{tag}"), min_size=1, max_size=4)
    control = control_app.build_app(
        config=control_settings.Settings(mode="standalone", dev=True, snapshot_ttl=timedelta(minutes=30)),
        pool=pool,
        signer=signer,
    )
    runner = web.AppRunner(control, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    control_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    pod_dsn = await new_database(server_dsn, f"bench_pod_{tag}")
    with tempfile.TemporaryDirectory(prefix="dap-rollout-") as state:
        pod_config = settings.Settings(
            control_url=control_url,
            workspace=WORKSPACE,
            state_dir=Path(state),
            pull_interval=args.pull_interval,
            trusted_keys={signer.key_id: signer.public_key},
            dev=True,
            long_poll=long_poll,
            retry=backoff.Backoff(base=0.5, cap=2.0),
            evidence_interval=0.5,
        )
        await register(http, control_url, 1)
        pod = await hosting.start(serve_options(pod_dsn), pod_config, shutdown_timeout=5.0)
        url = f"{pod.api_url}/{WORKSPACE}/api/shop/item"
        load = Load(lambda: url, http, args.workers)
        seconds: list[float] = []
        try:
            await until(lambda: sees_field(http, url, 1), 30)
            load.start()
            for version in range(2, args.rollouts + 2):
                await asyncio.sleep(0.3)
                await register(http, control_url, version)
                seconds.append(
                    await until(lambda v=version: sees_field(http, url, v), args.pull_interval + 30)
                )
            await asyncio.sleep(0.3)
            ok, failed = await load.stop()
        finally:
            await pod.stop()
            await runner.cleanup()
            await pool.close()
    return Result(name, seconds, ok, failed, load.errors)


async def restart_rollouts(args: argparse.Namespace, server_dsn: str, http: aiohttp.ClientSession) -> Result:
    """Baseline: each new version by stopping the server and starting one with the new spec."""
    dsn = await new_database(server_dsn, "bench_restart")
    catalog = server.Catalog.from_spec(config.load_files(files(1)))
    srv = await server.create_server(serve_options(dsn), catalog)
    srv.shutdown_timeout = 5.0
    await srv.start()
    port = int(srv.urls["api"].rsplit(":", 1)[1])
    url = f"http://127.0.0.1:{port}/{WORKSPACE}/api/shop/item"
    pool = srv.app[server.state.POOL]
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO dap.workspaces (slug, name) VALUES ($1, $1) ON CONFLICT DO NOTHING", WORKSPACE
        )
    load = Load(lambda: url, http, args.workers)
    seconds: list[float] = []
    await until(lambda: sees_field(http, url, 1), 30)
    load.start()
    try:
        for version in range(2, args.rollouts + 2):
            await asyncio.sleep(0.3)
            started = time.perf_counter()
            await srv.stop()
            new = server.Catalog.from_spec(config.load_files(files(version)))
            srv = await server.create_server(serve_options(dsn, port), new)
            srv.shutdown_timeout = 5.0
            await srv.start()
            await until(lambda v=version: sees_field(http, url, v), 30)
            seconds.append(time.perf_counter() - started)
        await asyncio.sleep(0.3)
        ok, failed = await load.stop()
    finally:
        await srv.stop()
    return Result("baseline: restart with the new spec", seconds, ok, failed, load.errors)


async def main(args: argparse.Namespace) -> int:
    logs.configure("error")
    handle = None
    server_dsn = os.environ.get("DAP_BENCH_DSN")
    with tempfile.TemporaryDirectory(prefix="dap-bench-pg-") as tmp:
        if not server_dsn:
            print("starting embedded Postgres ...", flush=True)
            server_dsn, handle = embedded.start(Path(tmp) / "pg")
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=args.workers + 8)) as http:
                print(f"swap, polling every {args.pull_interval:g}s ({args.workers} clients) ...", flush=True)
                polling = await swap_rollouts(
                    f"swap, poll every {args.pull_interval:g}s",
                    args,
                    server_dsn,
                    http,
                    long_poll=False,
                    tag="poll",
                )
                print("swap, long poll (dev) ...", flush=True)
                longpoll = await swap_rollouts(
                    "swap, long poll (dap dev)", args, server_dsn, http, long_poll=True, tag="long"
                )
                print("baseline: restart ...", flush=True)
                restart = await restart_rollouts(args, server_dsn, http)
        finally:
            if handle is not None:
                handle.cleanup()
    target = args.pull_interval + 2.0
    print()
    print(polling.line(f"(target <= {target:g}s)"))
    print(longpoll.line(f"(target <= {target:g}s)"))
    print(restart.line(""))
    worst = max(max(polling.seconds), max(longpoll.seconds))
    print()
    print(
        f"registration -> served, worst of both swap modes: {worst:.2f}s "
        f"(target <= pull interval + 2s = {target:g}s)"
    )
    print(f"failed requests during swaps: {polling.failed + longpoll.failed} (target 0)")
    print(
        f"baseline restart failed {restart.failed} requests; p50 long-poll swap / restart time: "
        f"{statistics.median(longpoll.seconds) / statistics.median(restart.seconds):.2f}x"
    )
    for result in (polling, longpoll):
        if result.failed:
            print(f"  {result.name}: first failures {sorted(set(result.errors))[:5]}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=5)
    parser.add_argument("--pull-interval", type=float, default=2.0)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="one rollout per mode, few clients (make test)")
    parsed = parser.parse_args()
    if parsed.quick:
        parsed.rollouts, parsed.pull_interval, parsed.workers = 1, 0.5, 4
    sys.exit(asyncio.run(main(parsed)))
