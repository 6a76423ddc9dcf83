"""Python bytecodes per create and per update, by step: dap's own work, counted instead of timed.

    .venv/bin/python bench/opcodes.py [--requests 200] [--top 40] [--quick]
    PYTHONPATH=DIR .venv/bin/python bench/opcodes.py   # another source tree (a change's baseline)

A run on this machine cannot resolve a few µs of a server's CPU per request (one server's figure
moves by a third between rounds: docs/performance.md), but the number of Python bytecodes the
interpreter runs per request does not move with the load. This boots the real application
(``web.app.create_server``: pool, migrations, dispatcher, feed) on an embedded Postgres (or
``DAP_BENCH_DSN``), sends ``--requests`` creates and then as many updates of those records, one
at a time over loopback, with ``bench/peers.py``'s bodies, and counts with ``sys.settrace`` the
opcodes run in the task of each request from the front handler in (``web.protocol.FRONT``): the
front, aiohttp's routing, the handler and everything it awaits. HTTP parsing and the socket write
(aiohttp's, the same for any server) are not counted; the events dispatcher's and the feed's
tasks are counted apart (one event per round here, where load batches 50-65: an upper bound).
C code (orjson, asyncpg's protocol, uvloop) runs no bytecodes and is not counted either: the
per-step ``timeit`` figures of docs/decisions.md cover that side.

Each opcode is charged to the innermost frame of dap, aiohttp or asyncpg on its stack (standard
library frames are charged to their caller; ``--inner`` lists them on their own, under it), and
the table lists the functions with the most.
``--quick`` (run by ``make test``) sends a few requests to prove the script runs.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

import aiohttp
import jwt
import rest

BODIES = {  # bench/peers.py's
    "POST": {"code": "@", "title": "new", "price": "12.50", "qty": 3, "category": "red"},
    "PATCH": {"title": "@", "qty": 7},
}
BACKGROUND = "dap-events-"  # the dispatcher's and the feed's task names (counted apart)
WARM = 20  # requests of each kind sent before counting (prepared statements, caches)


class Counter:
    """Opcodes per label, counted in one task only (``task``)."""

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.by_label: collections.Counter[str] = collections.Counter()
        self.total = 0
        self.behind = 0  # opcodes of the events dispatcher's and feed's tasks meanwhile
        self.inner = False  # standard library frames listed on their own (``--inner``)

    def _label(self, frame: FrameType | None) -> str:
        if self.inner and frame is not None:
            code = frame.f_code
            if not any(part in code.co_filename for part in ("/dap/", "/aiohttp/", "/asyncpg/")):
                stem = Path(code.co_filename).stem
                return f"{self._label(frame.f_back)} > {stem}.{code.co_qualname}"
        while frame is not None:
            name = frame.f_code.co_filename
            if "/dap/" in name:
                module = name.rsplit("/dap/", 1)[1].removesuffix(".py").replace("/", ".")
                return f"dap.{module}.{frame.f_code.co_qualname}"
            if "/aiohttp/" in name:
                return f"aiohttp.{frame.f_code.co_qualname}"
            if "/asyncpg/" in name:
                return f"asyncpg.{frame.f_code.co_qualname}"
            frame = frame.f_back
        return "other"

    def _opcode(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            self.total += 1
            self.by_label[self._label(frame)] += 1
        return self._opcode

    def _background(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            self.behind += 1
        return self._background

    def _call(self, frame: FrameType, event: str, arg: Any) -> Any:
        try:
            current = asyncio.current_task()
        except RuntimeError:
            return None
        if current is None:
            return None
        if current is not self.task:
            if not current.get_name().startswith(BACKGROUND):
                return None
            tracer = self._background
        else:
            tracer = self._opcode
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return tracer


async def measure(requests: int, top: int, inner: bool = False) -> int:
    from dap import config
    from dap.server import options
    from dap.server.catalog import Catalog
    from dap.server.web import app, protocol

    tmp = Path(tempfile.mkdtemp(prefix="dap-opcodes-"))
    server_dsn, pg = rest.start_postgres(tmp)
    try:
        dsn = await rest.new_database(server_dsn)
        catalog = Catalog.from_spec(config.load_files({"spec.yaml": rest.SPEC}))
        opts = options.check(
            dsn=dsn,
            addr="127.0.0.1:0",
            metrics_addr="",
            jwt_secret=rest.SECRET,
            cors_origins=["http://localhost:3000"],
            pool_size=rest.POOL,
        )
        server = await app.create_server(opts, catalog)
        counter = Counter()
        counter.inner = inner
        front = server.app[protocol.FRONT]

        async def counted(handler: Any, request: Any) -> Any:
            counter.task = asyncio.current_task()
            try:
                return await front(handler, request)
            finally:
                counter.task = None

        server.app[protocol.FRONT] = counted
        await server.start()
        try:
            return await _drive(server.urls["api"], counter, requests, top)
        finally:
            await server.stop()
    finally:
        rest.clean_up([], pg, tmp)


async def _drive(api: str, counter: Counter, requests: int, top: int) -> int:
    now = int(time.time())
    claims = {"sub": "u", "username": "alice", "iss": "svc", "iat": now, "exp": now + 7200}
    token = jwt.encode(claims, rest.SECRET, algorithm="HS256")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    item = f"{api}/default/api/bench/item"
    ids: list[str] = []
    serial = iter(range(10**9))
    async with aiohttp.ClientSession(headers=headers) as http:

        async def create() -> None:
            body = {**BODIES["POST"], "code": f"O{uuid.uuid4().hex[:8]}{next(serial)}"}
            async with http.post(item, json=body) as resp:
                assert resp.status == 201, await resp.text()
                ids.append((await resp.json())["data"]["id"])

        async def update(i: int) -> None:
            body = {**BODIES["PATCH"], "title": f"T{next(serial)}"}
            async with http.patch(f"{item}/{ids[i % len(ids)]}", json=body) as resp:
                assert resp.status == 200, await resp.text()

        for _ in range(WARM):
            await create()
        for i in range(WARM):
            await update(i)
        figures = {}
        for kind in ("create", "update"):
            counter.by_label.clear()
            counter.total = counter.behind = 0
            sys.settrace(counter._call)
            try:
                for i in range(requests):
                    await (create() if kind == "create" else update(WARM + i))
            finally:
                sys.settrace(None)
            await asyncio.sleep(0.5)  # the last events delivered
            figures[kind] = (counter.total / requests, dict(counter.by_label), counter.behind / requests)
    for kind, (total, labels, behind) in figures.items():
        print(f"\n{kind}: {total:,.0f} bytecodes per request ({requests} requests)")
        print(f"  (and {behind:,.0f} per request in the events dispatcher's and feed's tasks, one a round)")
        libraries = collections.Counter[str]()
        for label, n in labels.items():
            parts = label.split(" > ", 1)[0].split(".")
            libraries[".".join(parts[:3]) if parts[0] == "dap" else parts[0]] += n
        for name, n in libraries.most_common():
            print(f"  {n / requests:8.1f}  {name}")
        print(f"  -- top {top} functions --")
        for label, n in collections.Counter(labels).most_common(top):
            print(f"  {n / requests:8.1f}  {label}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument(
        "--inner", action="store_true", help="standard library functions on their own, under their dap caller"
    )
    parser.add_argument("--quick", action="store_true", help="a few requests (make test)")
    args = parser.parse_args()
    if args.quick:
        args.requests = 5
    from dap.server import loops

    return loops.run(measure(args.requests, args.top, args.inner))


if __name__ == "__main__":
    sys.exit(main())
