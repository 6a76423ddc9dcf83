"""The database half of a boot: the pool, the platform tables, the entity schema, ``default``;
and the ``reliable_event`` runner the events dispatcher is given (events never import workflows).

Kept free of the web stack so that ``dap serve`` reaches Postgres having imported only what the
migration needs; the HTTP modules load while Postgres creates the tables (see ``cli.serve``).
"""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import asyncpg

from dap.server import errors, options
from dap.server.access import accounts, periods, resets, signins, throttling
from dap.server.catalog import Catalog
from dap.server.documents import archive, auditing, idempotency, summaries
from dap.server.events import outbox, slots
from dap.server.storage import db, migrations, numbering, schema_sync, workspaces
from dap.server.workflows import approvals_schema, granting, jobs, saga_store

if TYPE_CHECKING:
    from dap.config.events import DeliveryTarget
    from dap.server.events import channels
    from dap.server.workflows import actions, sidecars


def tls_context(opts: options.ServeOptions) -> ssl.SSLContext | None:
    """The server's TLS context (minimum TLS 1.2), or ``None`` without certificate and key."""
    if opts.tls_cert is None or opts.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(opts.tls_cert, opts.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise errors.BootRefused(f"cannot load --tls-cert/--tls-key: {exc}") from exc
    return context


async def open_database(
    opts: options.ServeOptions,
    catalog: Catalog,
    *,
    confirm: Callable[[], Awaitable[None]] | None = None,
) -> asyncpg.Pool:
    """The process's pool over a prepared database; every expected failure is ``BootRefused``.

    Unreadable TLS material is refused before Postgres is touched.
    """
    tls_context(opts)
    pool = await db.open_pool(opts.dsn, opts.pool_size)
    try:
        await prepare_database(pool, catalog, confirm=confirm)
    except errors.MigrationError as exc:
        await pool.close()
        raise errors.BootRefused(str(exc)) from exc
    except BaseException:
        await pool.close()
        raise
    return pool


async def prepare_database(
    pool: asyncpg.Pool,
    catalog: Catalog,
    *,
    allow_destructive: bool = False,
    confirm: Callable[[], Awaitable[None]] | None = None,
) -> migrations.Plan:
    """Platform tables, the entity schema (safe steps only unless allowed) and ``default``.

    ``confirm`` runs while the schema change executes and must succeed for it to commit (see
    ``schema_sync.sync``).
    """
    async with pool.acquire() as conn:
        await workspaces.ensure_schema(conn)
        await accounts.ensure_schema(conn)
        await signins.ensure_schema(conn)
        await resets.ensure_schema(conn)
        await throttling.ensure_schema(conn)
        await periods.ensure_schema(conn)
        await summaries.ensure_schema(conn)
        await archive.ensure_schema(conn)
        await auditing.ensure_schema(conn)
        await idempotency.ensure_schema(conn)
        await numbering.ensure_schema(conn)
        await outbox.ensure_schema(conn)
        if outbox.selected():  # events as WAL messages: the slot exists before any write emits one
            await slots.ensure(conn, slots.slot_name(await conn.fetchval("SELECT current_database()")))
        await approvals_schema.ensure_schema(conn)
        await granting.ensure_schema(conn)
        await jobs.ensure_schema(conn)
        await saga_store.ensure_schema(conn)
        plan = await schema_sync.sync(
            conn, catalog.tables, catalog.entities, allow_destructive=allow_destructive, confirm=confirm
        )
        await workspaces.seed_default(conn)
        # the catalog's apps ask each other's owners for what they consume (issue 47)
        await granting.request_workspaces(conn, catalog, "boot of the served spec")
        # the workspaces' declared calendars: the periods up to the current one (issue 43); imported
        # here, as its actor is a Principal (access.auth, jwt): reaching Postgres loads no web stack
        from dap.server.workflows import calendars

        await calendars.ensure(conn, catalog)
    return plan


SYSTEM_SUB, SYSTEM_USERNAME = "dap:events", "dap-events"  # who runs reliable_event targets


def reliable_runner(
    current: Callable[[], Catalog], invoker: Callable[[], sidecars.Invoker | None] = lambda: None
) -> channels.Runner:
    """The ``reliable_event`` runner: the target action (``module.entity`` + action) run on the
    dispatcher's connection, inside its transaction, as the system principal ``dap-events``.

    The record is the event's own when the target is the same entity; otherwise the record the
    event's record refers to through its first relation field to the target entity. The action's
    params are the event's ``params`` (those the target declares). Workflows load here, on the
    first call, not at boot (reaching Postgres imports no more than the migration needs).
    ``invoker`` gives the process's ``sidecars.Invoker`` (the bridge) for ``impl.type: sidecar``
    targets, or None (those fail then, naming ``--sidecar-endpoint``).
    """

    async def run(conn: db.Connection, event: channels.Event, target: DeliveryTarget) -> None:
        from dap.server.access import auth, guards  # loaded on the first delivery
        from dap.server.workflows import actions

        system = auth.Principal(sub=SYSTEM_SUB, username=SYSTEM_USERNAME, roles=("admin",))
        catalog = current()
        assert target.action is not None  # validation requires it (resource: the event's entity)
        module, _, name = (target.resource or event.entity.replace("/", ".")).rpartition(".")
        resource = catalog.resource(module or event.entity.split("/")[0], name)
        if resource is None:
            raise RuntimeError(f"reliable_event target {target.resource} is not an entity served here")
        plan = resource.workflow.get(target.action)
        if plan is None:
            raise RuntimeError(f"{resource.key} has no custom action or transition {target.action!r}")
        record_id = _target_record(catalog, resource, event)
        given = event.payload.get("params") or {}
        params = actions.parse_params(plan, {k: v for k, v in given.items() if k in plan.params})
        call = actions.Call(
            write=auditing.Write(
                catalog, resource, event.tenant, system.sub, system.username, event.request_id
            ),
            principal=system,
            access=guards.check(system, resource, target.action),
            plan=plan,
            record_id=record_id,
            params=params,
            expected=None,
            idempotency=None,
        )
        await actions.run(conn, call, actions.runner(resource.key, plan, invoker()), _silent)

    return run


def _silent(_outcome: actions.Outcome) -> idempotency.Answer:  # the answer nobody reads
    return idempotency.Answer(200, "", {})


def _target_record(catalog: Catalog, resource: Any, event: channels.Event) -> uuid.UUID:
    if resource.key == event.entity and event.record_id is not None:
        return event.record_id
    record = event.payload.get("record") or {}
    source = catalog.entities.get(event.entity)
    for f in source.fields if source is not None else ():
        relation = getattr(f, "relation", None)
        target = getattr(relation, "entity", None)
        if target is not None and target.replace(".", "/").endswith(resource.key) and record.get(f.name):
            return uuid.UUID(str(record[f.name]))
    raise RuntimeError(f"event {event.event} of {event.entity} names no {resource.key} record")
