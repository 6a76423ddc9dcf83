"""The app process of the saga example: the budget (reserve, release, reserved) and the supplier.

Run: ``python examples/sagas/app.py unix:///tmp/buying.sock [PORT]`` -- the app actions on the
socket, ``POST /suppliers/notify`` on 127.0.0.1:PORT (default 8091). Each call is applied once per
``Idempotency-Key`` (a repeated key gets the first answer): the saga engine sends the same key on
every attempt of a step, so a retry after a timeout never reserves twice. The ledger is kept in
memory for the example; a real app keeps it where its effects live, keyed the same way.
"""

from __future__ import annotations

import asyncio
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bridge" / "python"))
import svc_app

BUDGET = Decimal("10000.00")
RESERVED: dict[str, Decimal] = {}  # the reserve step's key -> amount
NOTIFIED: dict[str, dict[str, Any]] = {}  # the notify step's key -> what the supplier was told


def left() -> Decimal:
    return BUDGET - sum(RESERVED.values(), Decimal(0))


async def reserve(ctx: svc_app.Ctx, request: dict[str, Any]) -> dict[str, Any]:
    key, amount = ctx.idempotency_key, Decimal(str(request["params"]["amount"]))
    if key not in RESERVED:
        if amount > left():
            raise RuntimeError(f"the budget has {left()} left, {amount} asked")
        RESERVED[key] = amount
    return {"data": {"reserved": str(RESERVED[key]), "left": str(left())}}


async def release(ctx: svc_app.Ctx, request: dict[str, Any]) -> dict[str, Any]:
    RESERVED.pop(ctx.idempotency_key.removesuffix("-undo"), None)  # the reserve step's key
    return {"data": {"left": str(left())}}


async def reserved(ctx: svc_app.Ctx, request: dict[str, Any]) -> dict[str, Any]:
    found = RESERVED.get(ctx.idempotency_key)
    return {"data": {"applied": found is not None, "result": {"reserved": str(found)} if found else None}}


async def notify(request: web.Request) -> web.Response:
    key, body = request.headers["Idempotency-Key"], await request.json()
    NOTIFIED.setdefault(key, {"supplier": body["params"]["supplier"], "order": body["results"]["order"]})
    return web.json_response(NOTIFIED[key])


async def state(_request: web.Request) -> web.Response:
    return web.json_response(
        {"left": str(left()), "reserved": len(RESERVED), "notified": list(NOTIFIED.values())}
    )


async def main(listen: str, port: int) -> None:
    application = svc_app.app(
        {
            "buying/budget/reserve": reserve,
            "buying/budget/release": release,
            "buying/budget/reserved": reserved,
        }
    )
    application.router.add_post("/suppliers/notify", notify)
    application.router.add_get("/state", state)
    runner = web.AppRunner(application)
    await runner.setup()
    await web.UnixSite(runner, "/" + listen[len("unix:") :].lstrip("/")).start()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8091))
