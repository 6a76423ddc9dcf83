"""The saga steps' target inside the test app process: effects kept by idempotency key, faults on demand.

Reached two ways, with one logic: as app-process actions (``store/trip/{step}`` and
``store/trip/{step}_undo``, key in the invoke's ``Idempotency-Key``) and over HTTP
(``POST /saga/do/{step}``, ``/saga/undo/{step}``, ``/saga/status/{step}``, key in the header).
A key seen before is answered as the first time (nothing applied twice). Each saga carries its own
faults in its params (``faults: {"charge": "fail", "charge.undo": "fail:2", ...}``), so the cases of
a table run side by side:

``fail``                 the target refuses (HTTP 422 / a handler error): nothing applied
``timeout_applied``      applied, then no answer in time (the caller's timeout passes)
``timeout_not_applied``  no answer in time, nothing applied
``slow``                 applied after ``slow_s`` seconds (the kill -9 loop's window)
``drop_applied``         applied, then the connection is dropped without an answer (HTTP only)

``mode:N`` applies the fault to the first N attempts of that key only. ``GET /saga/effects?saga=ID``
answers what was applied and undone, per step, with how many times each key was applied.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

SLEEP = 30.0  # "no answer in time": far past any step's timeout in the tests
EFFECTS: dict[str, dict[str, Any]] = {}  # key -> {saga, step, phase, applied, answer}
ATTEMPTS: dict[str, int] = {}
APPLYING: dict[str, asyncio.Event] = {}  # keys being applied now: a repeat waits for the first


def _fault(params: dict[str, Any], step: str, phase: str, key: str) -> str:
    faults = params.get("faults") or {}
    raw = str(faults.get(step if phase == "do" else f"{step}.{phase}", ""))
    mode, _, times = raw.partition(":")
    seen = ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
    if times and seen > int(times):
        return ""
    return mode


async def apply(saga: str, step: str, phase: str, key: str, params: dict[str, Any]) -> tuple[int, Any]:
    """One call: (status, answer). A repeated key gets the first answer, applied once."""
    if key in APPLYING:  # the same key again while the first is applying: answer as it will
        await APPLYING[key].wait()
    if key in EFFECTS:
        return 200, EFFECTS[key]["answer"]
    mode = _fault(params, step, phase, key)
    if mode == "fail":
        return 422, {"error": f"{step} {phase} refused"}
    if mode == "timeout_not_applied":
        await asyncio.sleep(SLEEP)
        return 200, None
    APPLYING[key] = asyncio.Event()
    try:
        if mode == "slow":
            await asyncio.sleep(float(params.get("slow_s") or 0.3))
        answer = {"step": step, "phase": phase, "key": key}
        applied = EFFECTS.get(key, {}).get("applied", 0) + 1  # more than 1: applied twice (a bug)
        EFFECTS[key] = {"saga": saga, "step": step, "phase": phase, "applied": applied, "answer": answer}
    finally:
        APPLYING.pop(key).set()
    if mode == "timeout_applied":
        await asyncio.sleep(SLEEP)
    return (599 if mode == "drop_applied" else 200), answer


def status(key: str) -> dict[str, Any]:
    found = EFFECTS.get(key)
    return {"applied": found is not None, "result": found["answer"] if found else None}


def effects(saga: str) -> dict[str, Any]:
    """Per step: applied (done and not undone), undone, and the most times one key was applied."""
    mine = [e for e in EFFECTS.values() if e["saga"] == saga]
    done = {e["step"] for e in mine if e["phase"] == "do"}
    undone = {e["step"] for e in mine if e["phase"] == "undo"}
    return {
        "applied": sorted(done - undone),
        "undone": sorted(undone),
        "max_per_key": max((e["applied"] for e in mine), default=0),
    }


# --- over HTTP ---------------------------------------------------------------------------------


async def _http(request: web.Request) -> web.Response:
    body = await request.json()
    phase, step = request.match_info["phase"], request.match_info["step"]
    key = request.headers["Idempotency-Key"]
    if phase == "status":
        return web.json_response(status(key))
    code, answer = await apply(body["saga"], step, phase, key, body["params"])
    if code == 599 and request.transport is not None:  # drop_applied: applied, and no answer
        request.transport.abort()
        code = 200
    return web.json_response(answer, status=code)


async def _effects(request: web.Request) -> web.Response:
    return web.json_response(effects(request.query["saga"]))


def add_routes(application: web.Application) -> None:
    application.router.add_post("/saga/{phase}/{step}", _http)
    application.router.add_get("/saga/effects", _effects)


# --- as app-process actions --------------------------------------------------------------------


def handlers() -> dict[str, Any]:
    """``store/trip/<step>`` (do), ``<step>_undo`` and ``<step>_status`` for the steps of the tests."""
    found: dict[str, Any] = {}
    for step in ("hold", "charge", "notify"):
        for phase in ("do", "undo", "status"):
            name = step if phase == "do" else f"{step}_{phase}"
            found[f"store/trip/{name}"] = _invoke(step, phase)
    return found


def _invoke(step: str, phase: str) -> Any:
    async def handler(ctx: Any, request: dict[str, Any]) -> dict[str, Any]:
        params = request["params"]
        saga = params["_saga"]["id"]
        key = ctx.idempotency_key
        if phase == "status":
            return {"data": status(key)}
        code, answer = await apply(saga, step, phase, key, params)
        if code != 200:
            raise RuntimeError(answer["error"])
        return {"data": answer}

    return handler
