"""The floor: the least a server can do for ``bench__item``'s find by id, filtered page, create
and update -- one aiohttp handler each, sending the SQL dap builds, one autocommitted statement per
request, no auth, no validation, no event -- run in its own process by ``rest.spawn_baseline``:

    .venv/bin/python bench/floor.py PORT DSN TENANT [--fifo] [--events] [--wal]

``--events``: the floor that does a write's whole work, as dap must -- each create and update
sends dap's own statement that also writes the ``created``/``updated`` event, its record built
from the row in SQL (``events.builtin.written``, what ``dap serve`` sends for ``bench/item``: one
statement, the event atomic with the row), and the events are delivered by the dispatcher of a
``dap serve`` running beside it on the same database. With ``--wal`` the statement is the one
``DAP_EVENTS_SOURCE=wal`` gives (the event as a logical WAL message, no outbox row), delivered by
a ``dap serve`` reading the slot; without it, the outbox row. What is left between dap and this
floor is dap's own work per request; between this floor and the plain one, what an event costs.

It runs on the event loop and with the JSON encoder that ``dap serve`` uses, so that a ratio
against it measures dap's own work and nothing a library choice would give either side.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from decimal import Decimal
from typing import Any

import rest


def _floor_dumps(value: Any) -> bytes:
    import orjson

    from dap.server.storage import db

    return orjson.dumps(value, default=db.json_default)


FLOOR_DUMPS = _floor_dumps


def FLOOR_LOOP() -> asyncio.AbstractEventLoop:  # noqa: N802 -- the loop dap serve runs on
    from dap.server import loops

    return loops.factory()()


def serve(
    port_: int, dsn: str, tenant: str, fifo: bool = False, events: bool = False, wal: bool = False
) -> None:
    """The floor; ``fifo`` puts dap's first-come, first-served gate (``storage.gates``) in front of
    its pool, as ``db.connection`` does: the floor that also serves its callers in arrival order.
    ``wal``: its events as WAL messages (``builtin.written`` reads the source at each call)."""
    import contextlib
    import os

    if wal:
        os.environ["DAP_EVENTS_SOURCE"] = "wal"

    from aiohttp import web

    from dap import config
    from dap.server.catalog import Catalog
    from dap.server.documents import auditing
    from dap.server.events import builtin
    from dap.server.storage import db, gates, sql
    from dap.server.workflows import filters

    catalog = Catalog.from_spec(config.load_files({"spec.yaml": rest.SPEC}))
    resource = catalog.resources["bench/item"]
    tenant_id = uuid.UUID(tenant)
    pairs = [tuple(p.split("=", 1)) for p in rest.LIST_QUERY.split("&")]
    list_sql, list_args = sql.select_list(resource.table, filters.parse(resource, pairs), tenant_id, None)  # type: ignore[arg-type]
    one_sql, _ = sql.select_one(resource.table, tenant_id, uuid.uuid4())

    dumps = FLOOR_DUMPS
    gate: Any = gates.Gate(rest.POOL) if fifo else contextlib.nullcontext()

    async def find(request: web.Request) -> web.Response:
        async with gate, request.app["pool"].acquire() as conn:
            row = await conn.fetchrow(one_sql, tenant_id, uuid.UUID(request.match_info["id"]))
        return web.Response(body=dumps({"data": dict(row)}), content_type="application/json")

    async def many(request: web.Request) -> web.Response:
        async with gate, request.app["pool"].acquire() as conn:
            rows = await conn.fetch(list_sql, *list_args)
        body = {"data": [dict(r) for r in rows], "limit": 50, "offset": 0, "total": None}
        return web.Response(body=dumps(body), content_type="application/json")

    # the floor's writes: dap's own INSERT/UPDATE … RETURNING, one autocommitted statement each
    # (no transaction around it, no event, no audit: what a hand-written endpoint would send)
    def columns_of(body: dict[str, Any]) -> dict[str, Any]:
        out = {k: body[k] for k in ("code", "title", "qty", "category") if k in body}
        if "price" in body:
            out["price"] = Decimal(str(body["price"]))
        return out

    record = builtin.rendering(resource)
    assert record is not None  # bench/item: every shown column has an exact SQL rendering
    write = auditing.Write(catalog, resource, tenant_id, "u", "alice", None)

    def with_event(
        statement: str, args: list[Any], action: str, values: dict[str, Any]
    ) -> tuple[str, list[Any]]:
        """``statement`` joined with its built-in event, as dap sends it (no NOTIFY: dap's
        dispatcher, draining under load, finds the rows, as it finds dap's own; the stream needs
        none)."""
        if not events:
            return statement, args
        changed = list(values) if action == "update" else None
        return builtin.written(statement, args, write, action, record, changed=changed, notify=False)

    async def create(request: web.Request) -> web.Response:
        body = await request.json()
        values = columns_of(body)
        statement, args = with_event(
            *sql.insert(resource.table, tenant_id, values, owner="alice"), "create", values
        )
        async with gate, request.app["pool"].acquire() as conn:
            row = await conn.fetchrow(statement, *args)
        return web.Response(status=201, body=dumps({"data": dict(row)}), content_type="application/json")

    async def update(request: web.Request) -> web.Response:
        body = await request.json()
        record_id = uuid.UUID(request.match_info["id"])
        values = columns_of(body)
        statement, args = with_event(
            *sql.update(resource.table, tenant_id, record_id, values, expected_version=None), "update", values
        )
        async with gate, request.app["pool"].acquire() as conn:
            row = await conn.fetchrow(statement, *args)
        if row is None:
            raise web.HTTPNotFound()
        return web.Response(body=dumps({"data": dict(row)}), content_type="application/json")

    async def make() -> web.Application:
        app = web.Application()
        # dap's pool (its reset, see storage.db.keep_session, and its codecs: an event's payload
        # is a jsonb parameter): the ratio is dap's own work
        app["pool"] = await db.open_pool(dsn, rest.POOL)
        app.router.add_get("/default/api/bench/item", many)
        app.router.add_get("/default/api/bench/item/{id}", find)
        app.router.add_post("/default/api/bench/item", create)
        app.router.add_patch("/default/api/bench/item/{id}", update)
        return app

    web.run_app(make(), host="127.0.0.1", port=port_, access_log=None, print=None, loop=FLOOR_LOOP())


if __name__ == "__main__":
    if len(sys.argv) < 4 or not sys.argv[1].isdigit():  # ``make bench`` runs every script here
        print("bench/floor.py: the floor of bench/rest.py and bench/peers.py, started by them")
        sys.exit(0)
    flags = sys.argv[4:]
    serve(
        int(sys.argv[1]),
        sys.argv[2],
        sys.argv[3],
        fifo="--fifo" in flags,
        events="--events" in flags,
        wal="--wal" in flags,
    )
