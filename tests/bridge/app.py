"""The app process of the bridge tests: a real aiohttp app built with examples' Python helper.

``store/order/reserve`` is the example's handler (decrement the item's stock inside the scope).
``store/order/run`` is driven by its params: ``steps`` are /ctx calls made in order (each
``{primitive, op, body, joined}``; a failed call is recorded, not raised, unless ``strict``), then
``fail`` picks an ending: ``error`` (500), ``sleep`` (past the timeout), ``kill`` (the process
dies), ``bad`` (a malformed 200); otherwise 200 with ``new_state`` and ``events`` from the params.
``store/desk/tally`` and ``recount`` (a service's sync and async actions) increment an item's stock;
``store/order/later`` (an async record action) is ``reserve`` run by the job worker.
``GET /ids`` answers the ids of the invokes seen so far (for the replay and foreign-scope tests).
``store/trip/*`` and ``/saga/*`` are the saga steps' target (``saga_target``); a second argument,
a TCP port, serves the app on 127.0.0.1 too (the sagas' HTTP steps).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "bridge" / "python"))
import svc_app

sys.path.insert(0, str(Path(__file__).resolve().parent))
import saga_target

SEEN: list[dict[str, str]] = []


async def reserve(ctx: svc_app.Ctx, request: dict[str, Any]) -> dict[str, Any]:
    order = request["resource"]
    left = await ctx.entity("decrement", "store/item", order["item"], field="stock", amount=order["qty"])
    return {"data": {"stock": left["value"]}, "new_state": "reserved", "events": [{"name": "order.reserved"}]}


async def run(ctx: svc_app.Ctx, request: dict[str, Any]) -> dict[str, Any]:
    SEEN.append(dict(ctx._headers))
    params = request["params"]
    results = []
    for step in params.get("steps") or []:
        try:
            answer = await ctx.call(step["primitive"], step["op"], step.get("joined", True), **step["body"])
            results.append({"status": 200, "answer": answer})
        except svc_app.CtxError as exc:
            if step.get("strict"):
                raise
            results.append({"status": exc.status, "answer": exc.problem})
    fail = params.get("fail")
    if fail == "error":
        raise RuntimeError("the handler failed after its writes")
    if fail == "sleep":
        await asyncio.sleep(float(params.get("sleep") or 5))
    if fail == "kill":
        os._exit(3)
    if fail == "bad":
        return {"events": "not a list"}
    return {
        "data": {"results": results, "resource_id": request["resource_id"]},
        "new_state": params.get("new_state"),
        "events": params.get("events") or [],
    }


async def ship(ctx: svc_app.Ctx, request: dict[str, Any]) -> dict[str, Any]:
    return {"data": "shipped", "new_state": request["params"].get("new_state")}


async def tally(ctx: svc_app.Ctx, request: dict[str, Any]) -> dict[str, Any]:
    """A service action (no record): increment the item's stock in the scope, then maybe fail."""
    params = request["params"]
    left = await ctx.entity("increment", "store/item", params["item"], field="stock", amount=params["amount"])
    if params.get("fail") == "error":
        raise RuntimeError("the tally failed after its write")
    if params.get("fail") == "state":
        return {"data": None, "new_state": "reserved"}
    events = [{"name": "desk.counted", "payload": {"stock": left["value"]}}]
    return {
        "data": {"stock": left["value"], "resource": request["resource"], "id": request["resource_id"]},
        "events": events,
    }


async def later(ctx: svc_app.Ctx, request: dict[str, Any]) -> dict[str, Any]:
    """An async record action run by the job worker: reserve like ``reserve``."""
    return await reserve(ctx, request)


async def stamp(ctx: svc_app.Ctx, request: dict[str, Any]) -> dict[str, Any]:
    """A reliable_event target: note who ran it on the ticket (in the scope), move it to stamped."""
    await ctx.entity("update", "store/ticket", request["resource_id"], fields={"note": "stamped by the app"})
    return {"data": None, "new_state": "stamped"}


def main() -> None:
    application = svc_app.app(
        {
            "store/order/reserve": reserve,
            "store/order/run": run,
            "store/order/touch": run,
            "store/order/ship": ship,
            "store/order/later": later,
            "store/desk/tally": tally,
            "store/desk/recount": tally,
            "store/ticket/stamp": stamp,
            **saga_target.handlers(),
        }
    )
    saga_target.add_routes(application)

    async def ids(_request: web.Request) -> web.Response:
        return web.json_response(SEEN)

    application.router.add_get("/ids", ids)
    listen = sys.argv[1]
    if len(sys.argv) > 2:  # the saga tests' HTTP steps reach the same app over TCP too
        asyncio.run(_both(application, "/" + listen[5:].lstrip("/"), int(sys.argv[2])))
        return
    web.run_app(application, path="/" + listen[5:].lstrip("/"), print=None)


async def _both(application: web.Application, path: str, port: int) -> None:
    runner = web.AppRunner(application)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await web.UnixSite(runner, path).start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    main()
