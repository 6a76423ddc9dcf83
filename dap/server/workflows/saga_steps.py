"""One call of a saga step to its target, and what its answer means for the saga.

Every call ends in one :class:`Outcome`, decided here and nowhere else:

========== ========================================================================================
done       the target applied it (``result`` is its answer)
refused    the target said no, definitely: nothing was applied (a 4xx, a handler's 500, an
           exception of a native or record step, whose transaction rolled back)
unavailable nothing was sent or applied (connection refused, 503/429, a degraded bridge): retried
unknown    it may or may not have been applied: a timeout after sending, a connection lost after
           sending, a 502/504, a 504 ``SVC.SIDECAR.TIMEOUT`` or an unreadable 200 from the app
========== ========================================================================================

``native``, ``record`` and ``sidecar`` calls run on the engine's connection inside the transaction
that records their outcome (``sagas``), so a step's own writes -- a record created, a handler's
statements, the app's ``/ctx`` writes -- commit together with the progress row or not at all.
Every call carries the step's idempotency key (``Idempotency-Key`` to HTTP and the app process,
``Context.idempotency_key`` to a native handler).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from dap.config.sagas import HttpCall, RecordOp, SagaCall
from dap.server import errors
from dap.server.access import auth, guards
from dap.server.catalog import Catalog
from dap.server.documents import auditing, lifecycle, writing
from dap.server.events import builtin
from dap.server.storage import caching, db, sql
from dap.server.workflows import handlers, recording, sidecars

Kind = Literal["done", "refused", "unavailable", "unknown"]
UNKNOWN_SIDECAR = ("SVC.SIDECAR.TIMEOUT", "SVC.SIDECAR.UNREACHABLE", sidecars.BAD_REPLY)
UNAVAILABLE_SIDECAR = ("SVC.SIDECAR.DEGRADED",)
BACKOFF = 0.2  # seconds before the second attempt; doubled per attempt up to MAX_BACKOFF
MAX_BACKOFF = 5.0


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    result: Any = None
    problem: dict[str, Any] | None = None


@dataclass(frozen=True)
class Env:
    """What a call needs beyond its declaration: the saga, its caller and the process's means."""

    saga_id: uuid.UUID
    tenant: uuid.UUID
    service: str  # module/name
    action: str
    principal: auth.Principal
    params: Mapping[str, Any]  # the saga's params, JSON form
    results: Mapping[str, Any]  # earlier steps' results by step name
    request_id: str | None
    catalog: Catalog
    invoker: Callable[[], sidecars.Invoker | None]
    http: aiohttp.ClientSession


def key_of(saga_id: uuid.UUID, step: str, phase: str) -> str:
    """The idempotency key of one step of one saga: the same at every attempt and after a crash."""
    return f"saga-{saga_id}-{step}" if phase == "do" else f"saga-{saga_id}-{step}-{phase}"


def _problem(code: str, detail: str, status: int = 500) -> dict[str, Any]:
    return {"type": f"urn:dap:error:{code}", "status": status, "code": code, "detail": detail}


def classify_http(status: int) -> Kind:
    """What an HTTP target's status says about the call. Pure."""
    if 200 <= status < 300:
        return "done"
    if status in (429, 503):
        return "unavailable"
    if status in (502, 504, 408):
        return "unknown"
    return "refused"


def classify_problem(code: str) -> Kind:
    """What a problem of the app process's invoke says about the call. Pure."""
    if code in UNKNOWN_SIDECAR:
        return "unknown"
    if code in UNAVAILABLE_SIDECAR:
        return "unavailable"
    return "refused"


async def run(
    env: Env,
    call: SagaCall,
    conn: db.Connection | None,
    step: str,
    phase: str,
    seconds: float,
    begin: Callable[[], Awaitable[None]] | None = None,
) -> Outcome:
    """Make ``call``: inside ``conn``'s transaction for native, record and sidecar targets; an
    HTTP call needs none (``conn`` ``None``: no connection is held while it waits). A sidecar
    call may be given ``conn`` outside a transaction and ``begin``, which the bridge awaits
    before the app's first ``/ctx`` statement joins it."""
    key = key_of(env.saga_id, step, phase if phase != "status" else "do")
    if call.http is not None:
        return await _http(env, call.http, key, step, phase, seconds)
    assert conn is not None, "a native, record or sidecar call runs in the engine's transaction"
    if call.sidecar is not None:
        return await _sidecar(env, call.sidecar, conn, key, step, phase, seconds, begin)
    if call.native is not None:
        return await _native(env, call.native, conn, key, seconds)
    assert call.record is not None
    return await _record(env, call.record, conn)


async def _http(env: Env, http: HttpCall, key: str, step: str, phase: str, seconds: float) -> Outcome:
    body = {
        "saga": str(env.saga_id),
        "step": step,
        "phase": phase,
        "params": dict(env.params),
        "results": dict(env.results),
    }
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    sent = False
    try:
        async with asyncio.timeout(seconds):
            async with env.http.request(
                http.method, http.url, data=json.dumps(body, default=db.json_default), headers=headers
            ) as resp:
                sent = True
                status, raw = resp.status, await resp.read()
    except TimeoutError:
        return Outcome(
            "unknown",
            problem=_problem("SVC.SAGA.STEP_TIMEOUT", f"{http.url} gave no answer within {seconds:g} s", 504),
        )
    except aiohttp.ClientConnectorError as exc:  # never connected: nothing was sent
        return Outcome(
            "unavailable", problem=_problem("SVC.SAGA.STEP_UNREACHABLE", f"{http.url}: {exc}", 503)
        )
    except aiohttp.ClientError as exc:  # connected, then lost: it may have been applied
        what = "after its answer began" if sent else "after the request was sent"
        return Outcome(
            "unknown",
            problem=_problem(
                "SVC.SAGA.STEP_LOST", f"{http.url}: connection lost {what} ({exc.__class__.__name__})", 502
            ),
        )
    try:
        answer = json.loads(raw) if raw else None
    except ValueError:
        answer = raw.decode(errors="replace")[:500]
    kind = classify_http(status)
    if kind == "done":
        return Outcome("done", result=answer)
    return Outcome(
        kind,
        problem=_problem(
            "SVC.SAGA.STEP_FAILED", f"{http.method} {http.url} answered {status}: {answer}", status
        ),
    )


async def _sidecar(
    env: Env,
    target: str,
    conn: db.Connection,
    key: str,
    step: str,
    phase: str,
    seconds: float,
    begin: Callable[[], Awaitable[None]] | None,
) -> Outcome:
    invoker = env.invoker()
    module, name, action = target.split("/")
    if invoker is None:
        return Outcome("unavailable", problem=sidecars.not_configured(f"{module}/{name}", action).problem())
    params = {
        **env.params,
        "_saga": {"id": str(env.saga_id), "step": step, "phase": phase, "results": dict(env.results)},
    }
    try:
        reply = await invoker.invoke(
            sidecars.Invocation(
                conn=conn,
                tenant=env.tenant,
                principal=env.principal.sub,
                username=env.principal.username,
                entity=f"{module}/{name}",
                action=action,
                record_id=None,
                resource=None,
                params=params,
                timeout=seconds,
                idempotency_key=key,
                begin=begin,
            )
        )
    except errors.ApiError as exc:
        return Outcome(classify_problem(exc.code), problem=exc.problem())
    return Outcome("done", result=reply.data)


async def _native(env: Env, name: str, conn: db.Connection, key: str, seconds: float) -> Outcome:
    try:
        handler = handlers.lookup(name)
    except errors.ApiError as exc:
        return Outcome("refused", problem=exc.problem())
    try:
        async with asyncio.timeout(seconds):
            result = await handler(
                handlers.Context(
                    conn=conn,
                    tenant=env.tenant,
                    entity=env.service,
                    action=env.action,
                    record=None,
                    params=env.params,
                    principal_sub=env.principal.sub,
                    principal_username=env.principal.username,
                    idempotency_key=key,
                )
            )
    except TimeoutError:  # its transaction rolls back: nothing of it stays
        return Outcome(
            "unavailable",
            problem=_problem(
                "SVC.SAGA.STEP_TIMEOUT", f"handler {name!r} ran past {seconds:g} s; rolled back", 504
            ),
        )
    except errors.ApiError as exc:
        return Outcome("refused", problem=exc.problem())
    except Exception as exc:  # the handler's own failure: rolled back with the transaction
        return Outcome(
            "refused",
            problem=_problem(
                "SVC.SAGA.STEP_FAILED", f"handler {name!r} raised {exc.__class__.__name__}: {exc}"
            ),
        )
    return Outcome("done", result=result)


async def _record(env: Env, op: RecordOp, conn: db.Connection) -> Outcome:
    resource = env.catalog.any_resource(op.entity)
    if resource is None:
        return Outcome(
            "refused",
            problem=_problem("SVC.SAGA.STEP_FAILED", f"{op.entity} is not served by this spec", 404),
        )
    write = auditing.Write(
        env.catalog, resource, env.tenant, env.principal.sub, env.principal.username, env.request_id
    )
    try:
        async with conn.transaction():  # a savepoint: a refused write leaves the saga's transaction usable
            if op.op == "create":
                access = guards.check(env.principal, resource, "create")
                body = {field: env.params.get(param) for field, param in op.values.items()}
                body = guards.writable(access, body, create=True)
                values = writing.validate_body(resource, body, partial=False, catalog=env.catalog)
                done = await recording.create(conn, write, access, body, values, submit=False)
                return Outcome("done", result={"id": str(done.row["id"])})
            return await _delete(env, op, conn, write)
    except errors.ApiError as exc:
        return Outcome("refused", problem=exc.problem())


async def _delete(env: Env, op: RecordOp, conn: db.Connection, write: auditing.Write) -> Outcome:
    """Delete the record the step ``op.of`` created (already gone: done, a compensation repeats)."""
    resource = write.resource
    created = env.results.get(op.of or "")
    record_id = uuid.UUID(created["id"]) if isinstance(created, dict) and "id" in created else None
    if record_id is None:
        return Outcome("done", result={"deleted": None})
    guards.check(env.principal, resource, "delete")
    try:
        current = await guards.select_record(
            conn, resource, env.tenant, record_id, principal=env.principal, lock=True
        )
    except errors.NotFound:
        return Outcome("done", result={"deleted": None})
    lifecycle.check_delete(resource, current)
    trail = await auditing.begin(conn, write, "delete", current)
    await writing.release_references(conn, env.catalog, resource, env.tenant, record_id)
    for child in resource.children.values():
        await conn.execute(*sql.flat(sql.delete_children(child, env.tenant, record_id)))
    await conn.execute(*sql.flat(sql.delete(resource.table, env.tenant, record_id)))
    await caching.announce(conn, resource, env.tenant, record_id)
    await trail.finish(conn, None)
    await builtin.record(conn, write, "delete", current)
    return Outcome("done", result={"deleted": str(record_id)})


def applied_of(outcome: Outcome) -> bool | None:
    """A status check's answer ``{"applied": true|false, "result"?}``: applied, not, or unknown."""
    if outcome.kind != "done" or not isinstance(outcome.result, dict):
        return None
    found = outcome.result.get("applied")
    return found if isinstance(found, bool) else None


def backoff(attempts: int) -> float:
    return 0.0 if attempts <= 0 else min(MAX_BACKOFF, BACKOFF * 2 ** (attempts - 1))


def parked(code: str, detail: str, saga: Any, cause: Any) -> dict[str, Any]:
    status = 502 if code.endswith("OUTCOME_UNKNOWN") else 500
    """The problem document of a parked saga (its job's ``error``)."""
    return {
        "type": f"urn:dap:error:{code}",
        "title": "Saga parked",
        "status": status,
        "code": code,
        "detail": detail,
        "saga": {"id": str(saga["id"]), "step": saga["step"]},
        "cause": cause,
        "errors": [],
    }
