"""The entity verbs, protocol-neutral: list, find, create, update and delete of one record.

Every protocol is an adapter over these functions (ARCHITECTURE.md, "Protocols are adapters"):
REST (``web.rest``) and gRPC (``rpc``) decode their request into a :class:`Call` and plain
values, call the verb, and encode what it returns; none of them holds a rule of its own. A verb
checks the caller's permission, row scope and field permissions (``access.guards``), runs the
write pipeline (``recording``) in one transaction with its ``Idempotency-Key`` claim, announces the
cache invalidation and says which built-in event to wait for (:func:`settle`). Errors are the
package's (``dap.server.errors``), each with its ``SVC.*`` code; the adapters map them to their
protocol (a problem document, a gRPC status).

What stays with a protocol: finding the workspace and verifying the token, which entities and
verbs it exposes (``expose``), reading ids, bodies and ``If-Match``, and the shape of its answers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from dap import tracing
from dap.config.enums import CallMode
from dap.server import errors
from dap.server.access import auth, guards
from dap.server.catalog import Catalog, Resource, machines
from dap.server.documents import archive, auditing, filling, idempotency, lifecycle, reading, writing
from dap.server.events import builtin, feed, plans
from dap.server.storage import caching, db, deferred, files, guarding, sql
from dap.server.storage.workspaces import Workspace
from dap.server.workflows import actions, filters, recording

SETTLE_WAIT = 10.0  # seconds a write waits for its sync event's delivery (``Event-Delivery``)


@dataclass(slots=True)
class Call:
    """One call of a verb: where (pool, workspace), who, on which resource, and the process's caches.

    Made per request and never assigned to. Not a frozen dataclass: its ``__init__`` sets each field
    through ``object.__setattr__``, 2.4 µs for these eight against 0.3 µs (``timeit``), on every
    request of every protocol."""

    pool: asyncpg.Pool
    cache: caching.FindCache
    workspace: Workspace
    principal: auth.Principal
    catalog: Catalog
    resource: Resource
    request_id: str | None = None
    # the process's running dispatcher's wake (``state.Events.local_wake``): a create or update
    # then wakes it after its commit instead of NOTIFYing every process inside its transaction,
    # which would make commits wait for one another (``builtin.joined``). ``None``: NOTIFY.
    wake: Callable[[], None] | None = None

    @property
    def tenant(self) -> uuid.UUID:
        return self.workspace.tenant_id

    def write(self) -> auditing.Write:
        """Who writes what, for the audit rows of a write (the request id ties them to the logs)."""
        return auditing.Write(
            self.catalog,
            self.resource,
            self.tenant,
            self.principal.sub,
            self.principal.username,
            self.request_id,
        )

    def location(self, record_id: Any) -> str:
        """The record's REST path (the ``Location`` of a create; an idempotent answer keeps it)."""
        return f"/{self.workspace.slug}/api/{self.resource.module}/{self.resource.name}/{record_id}"


def encode(data: Any) -> bytes:
    """The JSON of an answer, as the bytes sent: orjson where it can, the standard encoder where not.

    orjson encodes a record several times faster than ``json`` and writes the same JSON for what
    records hold (strings, numbers, booleans, lists, objects; ``Decimal`` through
    ``db.json_default`` as exact strings). What it refuses -- integers past 64 bits from a jsonb
    value, keys that are not strings -- goes to ``json.dumps``, which writes them as before.
    """
    try:
        return orjson.dumps(data, default=db.json_default)
    except TypeError:  # orjson.JSONEncodeError: see above
        return json.dumps(data, default=db.json_default, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Page:
    """A list's answer: the visible records of one window, and the count when asked for."""

    data: list[dict[str, Any]]
    limit: int
    offset: int
    total: int | None


@dataclass(slots=True)
class Found:
    """A find's answer, encoded once (``{"data": …}``) so that the read-through cache can keep it.
    Never assigned to; not frozen for the cost of a frozen ``__init__`` (see :class:`Call`)."""

    body: bytes
    etag: str  # the version in quotes


@dataclass(slots=True)  # made per write, never assigned to: see operations.Call
class Stored:
    """A create's or update's answer as kept text (an ``Idempotency-Key`` may replay it) and the
    built-in event to settle (``None`` for a replay: the first answer settled it)."""

    answer: idempotency.Answer
    event: uuid.UUID | None

    @property
    def replayed(self) -> bool:
        return self.event is None


@dataclass(slots=True)  # made per write, never assigned to: see operations.Call
class Updated:
    """An update's record (visible fields) with its version, and the built-in event to settle."""

    data: dict[str, Any]
    version: int
    event: uuid.UUID | None


@tracing.operation("list")
async def list_records(call: Call, pairs: list[tuple[str, str]]) -> Page:
    """One page of records matching the query ``pairs`` (filters, ``limit``, ``offset``, ``fields``,
    ``count``, ``order``), narrowed to the caller's row scope and field permissions."""
    resource, tenant = call.resource, call.tenant
    access = guards.check(call.principal, resource, "list")  # permission, hidden fields, row scope
    guards.check_named(access, pairs)
    query = guards.scoped(access, filters.parse(resource, pairs))
    columns = None
    if query.fields is not None:
        wanted = (
            set(query.fields) | {"id"} | {f"ext_{ns}" for ns in query.fields if ns in resource.extensions}
        )
        columns = [c.name for c in resource.table.columns if (c.field or c.name) in wanted]
    statement, args = sql.select_list(resource.table, query, tenant, columns)
    async with db.connection(call.pool) as conn:
        try:
            rows = await conn.fetch(statement, *args)
        except asyncpg.DataError as exc:  # a value Postgres cannot compare (out of its range)
            raise errors.BadRequest(
                f"a filter value is out of range: {exc}", code="SVC.QUERY.INVALID"
            ) from exc
        await guarding.GUARD.check(conn, resource.table, query, tenant, (statement, args))
        total = None
        if query.count:
            count_sql, count_args = sql.count(resource.table, query, tenant)
            total = await conn.fetchval(count_sql, *count_args)
        kids: dict[uuid.UUID, dict[str, list[dict[str, Any]]]] = {}
        if resource.children and (query.fields is None or set(query.fields) & set(resource.children)):
            kids = await reading.load_children(conn, resource, tenant, [r["id"] for r in rows], call.catalog)
    data = [
        access.view(reading.present(resource, r, kids.get(r["id"]), surface="list", only=query.fields))
        for r in rows
    ]
    return Page(data, query.limit, query.offset, total)


@tracing.operation("find")
async def find(call: Call, record_id: str | uuid.UUID) -> Found:
    """One record by id (404 outside the caller's row scope, or for an id that is not one), through
    the read-through cache where the entity declares one and the caller's view is not narrowed."""
    resource, tenant = call.resource, call.tenant
    access = guards.check(call.principal, resource, "find")
    if isinstance(record_id, str):
        record_id = parse_id(record_id)
    ttl = resource.cache_ttl
    if ttl is not None and access.narrowed:  # a narrowed view is neither served nor kept
        ttl = None
    if ttl is not None:  # the epoch read before the row: an invalidation meanwhile voids the put
        cache, key = call.cache, (resource.table.name, tenant, record_id)
        epoch = cache.epoch
        if (hit := await cache.lookup(key, call.catalog)) is not None:
            return Found(hit.body, hit.etag)
    async with db.connection(call.pool) as conn:
        row = await guards.select_record(
            conn, resource, tenant, record_id, principal=call.principal, scope=access.scope
        )
        kids = (
            await reading.load_children(conn, resource, tenant, [record_id], call.catalog)
            if resource.children
            else {}
        )
    body = encode({"data": access.view(reading.present(resource, row, kids.get(record_id)))})
    etag = f'"{row["version"]}"'
    if ttl is not None:
        cache.put(key, epoch=epoch, ttl=ttl, catalog=call.catalog, body=body, etag=etag)
    return Found(body, etag)


@tracing.operation("create")
async def create(
    call: Call,
    body: dict[str, Any],
    *,
    submit: bool,
    key: str | None = None,
    target: str = "",
) -> Stored:
    """Create one record (submitted at once when ``submit``) in its own transaction.

    ``key`` is the caller's idempotency key: a repeat of the same caller, ``target`` (the REST path
    with its query, which every protocol names alike) and body answers the stored answer again
    (its ``event`` is ``None``); another body under the same key is 422.
    """
    resource, tenant = call.resource, call.tenant
    digest = idempotency.fingerprint(call.principal.sub, target, body) if key is not None else b""
    access = guards.check(call.principal, resource, "create", *(["submit"] if submit else []))
    body = guards.writable(access, body, create=True)  # row-scope fields filled from the caller
    values = writing.validate_body(resource, body, partial=False, catalog=call.catalog)
    write = call.write()
    async with db.connection(call.pool) as pooled:
        try:
            if key is None:  # the transaction deferred: a plain create may be one lone statement
                async with deferred.deferred(pooled) as conn:
                    done = await recording.create(
                        conn, write, access, body, values, submit=submit, notify=call.wake is None
                    )
            else:
                async with db.committed(pooled):
                    stored = await idempotency.claim(pooled, tenant, key, digest)
                    if stored is not None:
                        return Stored(stored, None)
                    done = await recording.create(
                        pooled, write, access, body, values, submit=submit, notify=call.wake is None
                    )
                    answer = _created(call, access, done)
                    await idempotency.store(pooled, tenant, key, digest, answer)
        except asyncpg.PostgresError as exc:
            raise writing.translate(resource, exc) from exc
    if key is None:
        answer = _created(call, access, done)
    if call.wake is not None:  # committed: this process's dispatcher delivers the event
        call.wake()
    return Stored(answer, done.event)


def _created(call: Call, access: guards.Access, done: recording.Written) -> idempotency.Answer:
    """A create's answer: 201, the record in the caller's view, its ``Location`` and ``ETag``."""
    row = done.row
    return idempotency.Answer(
        201,
        encode({"data": access.view(done.presented(call.resource))}).decode(),
        {"Location": call.location(row["id"]), "ETag": f'"{row["version"]}"'},
    )


@tracing.operation("update")
async def update(
    call: Call, record_id: str | uuid.UUID, body: dict[str, Any], *, expected: int | None
) -> Updated:
    """Update the fields ``body`` names on one record (drafts only, for documents) in its own
    transaction; ``expected`` is the version the caller read (412 when another write came first)."""
    resource, tenant = call.resource, call.tenant
    access = guards.check(call.principal, resource, "update")
    record_id = parse_id(record_id) if isinstance(record_id, str) else record_id
    body = guards.writable(access, body)
    values = writing.validate_body(resource, body, partial=True, catalog=call.catalog)
    write = call.write()
    async with db.connection(call.pool) as pooled:
        try:  # the transaction deferred: a plain update reads unlocked and writes in one statement
            async with deferred.deferred(pooled) as conn:
                done = await recording.update(
                    conn, write, access, record_id, body, values, expected=expected, notify=call.wake is None
                )
        except asyncpg.PostgresError as exc:
            raise writing.translate(resource, exc) from exc
    if call.wake is not None:  # committed: this process's dispatcher delivers the event
        call.wake()
    call.cache.invalidate((resource.table.name, tenant, record_id))
    data = access.view(done.presented(resource))
    return Updated(data, done.row["version"], done.event)


@tracing.operation("delete")
async def delete(call: Call, record_id: str | uuid.UUID, store: files.FileStore | None) -> uuid.UUID:
    """Delete one record (drafts only, for documents) and what its ``on_delete: cascade`` relations
    take with it, their stored files included; the built-in event's id."""
    resource, tenant, principal = call.resource, call.tenant, call.principal
    guards.check(principal, resource, "delete")
    record_id = parse_id(record_id) if isinstance(record_id, str) else record_id
    async with db.connection(call.pool) as conn:
        try:
            async with db.committed(conn):
                try:
                    current = await guards.select_record(
                        conn, resource, tenant, record_id, principal=principal, lock=True
                    )
                except errors.NotFound:
                    await archive.refuse_if_archived(conn, resource, tenant, record_id)  # 409 while kept
                    raise
                lifecycle.check_delete(resource, current)  # drafts only
                await guards.check_period(conn, resource, tenant, principal, current)  # a closed period
                await filling.check_action(conn, resource, tenant, principal, current, "delete")
                write = call.write()
                trail = await auditing.begin(conn, write, "delete", current)
                cascaded = await writing.release_references(conn, call.catalog, resource, tenant, record_id)
                for child in resource.children.values():
                    await conn.execute(*sql.flat(sql.delete_children(child, tenant, record_id)))
                result = await conn.execute(*sql.flat(sql.delete(resource.table, tenant, record_id)))
                await caching.announce(conn, resource, tenant, record_id)
                await trail.finish(conn, None)
                event = await builtin.record(conn, write, "delete", current)
        except asyncpg.PostgresError as exc:
            raise writing.translate(resource, exc) from exc
    call.cache.invalidate((resource.table.name, tenant, record_id))
    if not result.endswith(" 1"):
        raise errors.NotFound("no such record", code="SVC.RECORD.NOT_FOUND")
    if store is not None:  # the file bytes of the record and of those cascaded with it
        for table, gone in [(resource.table.name, record_id), *cascaded]:
            store.remove_record(tenant, table, gone)
    return event


async def settle(
    events: feed.Feed, resource: Resource, event: str, public_id: uuid.UUID | None
) -> str | None:
    """Wait for a sync event's delivery (up to :data:`SETTLE_WAIT` seconds): ``"settled"``,
    ``"pending"`` past the wait (the change is committed; the event is delivered later), ``None``
    for an async event or none. 422 ``SVC.EVENT.TYPE_MISSING``/``TYPE_MISMATCH``: ``plans.event_type``."""
    if public_id is None:
        return None
    key = (__name__, "event_type", event)  # a declaration's answer, asked by every write
    mode = resource.derived.get(key)
    if mode is None:
        mode = resource.derived[key] = plans.event_type(resource.spec, event)  # raises: not kept
    if mode is not CallMode.SYNC:
        return None
    done = await events.delivered([public_id], SETTLE_WAIT)
    return "settled" if done else "pending"


def parse_id(value: str) -> uuid.UUID:
    """A record id; a malformed one cannot name a record: 404, as for any id that does not exist."""
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise errors.NotFound("no such record", code="SVC.RECORD.NOT_FOUND") from exc


# --- actions on one record: lifecycle moves, custom actions and transitions ------------------


async def move(
    call: Call, access: guards.Access, action: str, record_id: str | uuid.UUID, *, expected: int | None
) -> Updated:
    """``submit`` or ``cancel`` of a lifecycle document (``documents.lifecycle.move``) in its own
    transaction; ``access`` is the action's permission check (the caller made it first)."""
    resource, tenant = call.resource, call.tenant
    record_id = parse_id(record_id) if isinstance(record_id, str) else record_id
    write = call.write()
    emitted: list[uuid.UUID] = []

    async def emit(conn: db.Connection, row: Any, kids: dict[str, list[dict[str, Any]]] | None) -> None:
        emitted.append(await builtin.record(conn, write, action, row, kids))

    async with db.connection(call.pool) as conn:
        row, kids = await lifecycle.move(
            conn, write, call.principal, action, record_id, expected=expected, after=emit
        )
    call.cache.invalidate((resource.table.name, tenant, record_id))
    data = access.view(reading.present(resource, row, kids))
    return Updated(data, row["version"], emitted[0] if emitted else None)


@dataclass(frozen=True)
class Acted:
    """A custom action's answer as kept text (``{"data", "result", "transition"?, "event"?,
    "approval"?}``, 202 for a gated transition) and the event to settle, if it emits one."""

    answer: idempotency.Answer
    event: uuid.UUID | None


@tracing.operation("act")
async def act(
    call: Call,
    access: guards.Access,
    plan: machines.ActionPlan,
    handler: actions.Runner | None,
    record_id: uuid.UUID,
    body: dict[str, Any],
    *,
    expected: int | None,
    key: str | None,
    target: str,
    ip: str,
) -> Acted:
    """A synchronous custom action or transition on one record (``workflows.actions.run``): its
    params from ``body``, its rate limit, its idempotency key (``idempotent`` actions), one
    transaction. ``handler`` is ``actions.runner``'s (the caller resolved it first: 501 before
    anything is read)."""
    resource, tenant, principal = call.resource, call.tenant, call.principal
    declared = plan.declared
    params = actions.parse_params(plan, body)
    keyed = (key, idempotency.fingerprint(principal.sub, target, body)) if key is not None else None
    run = actions.Call(
        write=call.write(),
        principal=principal,
        access=access,
        plan=plan,
        record_id=record_id,
        params=params,
        expected=expected,
        idempotency=keyed,
    )

    def render(outcome: actions.Outcome) -> idempotency.Answer:
        data: dict[str, object] = {
            "data": access.view(reading.present(resource, outcome.row, outcome.children)),
            "result": outcome.result,
        }
        if outcome.moved is not None:
            data["transition"] = {"from": outcome.moved[0], "to": outcome.moved[1]}
        if outcome.event is not None:
            data["event"] = str(outcome.event)
        if outcome.approval is not None:  # a gated transition: accepted, waiting for its votes
            data["approval"] = outcome.approval
        status = 202 if outcome.approval is not None else 200
        return idempotency.Answer(status, encode(data).decode(), {"ETag": f'"{outcome.row["version"]}"'})

    async with db.connection(call.pool) as conn:
        await actions.limit(conn, resource.key, plan, tenant=tenant, sub=principal.sub, ip=ip)
        answer = await actions.run(conn, run, handler, render)
    call.cache.invalidate((resource.table.name, tenant, record_id))
    event = json.loads(answer.body).get("event") if declared is not None and declared.emits else None
    return Acted(answer, uuid.UUID(event) if event else None)
