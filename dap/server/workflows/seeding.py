"""Loading seed rows into a workspace: the API's rules, one transaction, idempotent.

``dap seed``, ``dap dev`` (on start) and a CSV import call :func:`load` with ``seeds``' rows:

- **Same rules as the API.** A new record goes through ``recording.create`` (validation, derived
  values and natural-key numbering, scopes, backdating, children, the lifecycle, the audit trail,
  the built-in event), ``_submit`` is the API's create-and-submit, ``_actions`` run through
  ``lifecycle.move`` (submit, cancel) and ``actions.run`` (custom actions and transitions; a gated
  one opens its approval and waits for its votes, as over REST). The writer is :data:`SEEDER`, an
  ``admin`` principal named ``seed``; the audit rows and events carry ``seed-<run id>`` as their
  request id, so a run can be found in the trail.
- **One transaction per run.** Each row runs in a savepoint so that one bad row does not hide
  the next one's problem; at the end, any problem rolls the whole run back and
  :class:`SeedError` lists each problem with its file, line and field. Nothing is loaded.
- **Idempotent.** ``dap.seed_records`` remembers, per workspace, entity and seed key, the record a
  row made and the digest of the row. A second run with the same row does nothing; a changed row
  updates the record where the API would (a draft, or an entity without a lifecycle), else the
  report says why not (a submitted document cannot change; a record deleted since it was seeded
  is not made again). A row whose natural key names a record the seed did not make (on a
  database in use) adopts that record, updating it the same way.
- **References by natural key.** A relation's value that is not a uuid names the target by its
  seed key (rows of this run or an earlier one) or by the target's natural key field.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from dap.config.enums import FieldType
from dap.server import errors
from dap.server.access import auth, guards
from dap.server.catalog import Catalog, Resource
from dap.server.documents import auditing, lifecycle, writing
from dap.server.storage import db, tables
from dap.server.workflows import recording, seeding_periods, seeding_rows, seeding_steps, seeding_users, seeds

log = logging.getLogger(__name__)
_RowError = seeds.RowError

SEEDER = auth.Principal(sub="dap-seed", username="seed", roles=("admin",))
MAX_PROBLEMS = 50  # a run stops collecting after this many: the first ones say what to fix
# the codes of the problems only a seed row can have; the rest are the API's own refusals
NO_ENTITY = "SVC.ENTITY.NOT_FOUND"  # as REST answers a route of an entity it does not expose
NO_KEY = "SVC.SEED.KEY"  # a row a second run could not find again
NO_SUBMIT = "SVC.DOC.CREATE_SUBMIT_NOT_AVAILABLE"  # as POST …?submit=true answers
NO_TARGET = "SVC.VALIDATE.RELATION_NOT_FOUND"  # as a write naming a record that is not there

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.seed_records (
    tenant_id uuid NOT NULL,
    entity text NOT NULL,
    key text NOT NULL,
    record_id uuid NOT NULL,
    digest text NOT NULL,
    source text NOT NULL,
    seeded_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, entity, key)
);
"""


class SeedError(errors.ServerError):
    """A run that loaded nothing: every problem found, each naming file, line and field."""

    def __init__(self, problems: Sequence[seeds.Problem]) -> None:
        self.problems = list(problems)
        more = f" (first {MAX_PROBLEMS} shown)" if len(self.problems) >= MAX_PROBLEMS else ""
        super().__init__(f"{len(self.problems)} problem(s){more}; nothing was loaded")


@dataclass
class Report:
    """What a run did; ``notes`` say why a changed row was not applied."""

    created: int = 0
    updated: int = 0
    unchanged: int = 0
    adopted: int = 0
    actions: int = 0
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    by_entity: dict[str, int] = field(default_factory=dict)  # rows created, per entity

    @property
    def rows(self) -> int:
        return self.created + self.updated + self.unchanged + len(self.notes)

    def summary(self) -> str:
        rate = f", {self.created / self.seconds:.0f} records/s" if self.created and self.seconds else ""
        return (
            f"{self.created} created, {self.updated} updated, {self.unchanged} unchanged"
            f"{f', {self.adopted} adopted' if self.adopted else ''}"
            f"{f', {len(self.notes)} not applied' if self.notes else ''}"
            f"{f', {self.actions} action(s) run' if self.actions else ''} in {self.seconds:.2f}s{rate}"
        )


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)


@dataclass
class _Run:
    conn: db.Connection
    catalog: Catalog
    tenant: uuid.UUID
    principal: auth.Principal
    request_id: str
    today: dt.date
    by_table: dict[str, Resource]
    report: Report
    verbs: frozenset[str] | None = None  # the entity's exposed verbs an import stands for (None: a seed)
    resolved: dict[tuple[str, str], uuid.UUID] = field(default_factory=dict)  # (table, key) → id
    # what earlier runs seeded: (entity, seed key) → (record id, digest of its row)
    known: dict[tuple[str, str], tuple[uuid.UUID, str]] = field(default_factory=dict)
    natural: dict[tuple[str, str], uuid.UUID] = field(default_factory=dict)  # (entity, natural key) → id
    prefetched: set[str] = field(default_factory=set)  # entities whose natural keys ``natural`` holds
    remembered: list[tuple[Any, ...]] = field(default_factory=list)  # rows of dap.seed_records to write

    def write(self, resource: Resource) -> auditing.Write:
        return auditing.Write(
            self.catalog, resource, self.tenant, self.principal.sub, self.principal.username, self.request_id
        )


async def load(
    conn: db.Connection,
    catalog: Catalog,
    tenant: uuid.UUID,
    rows: Sequence[seeds.Row],
    *,
    principal: auth.Principal = SEEDER,
    today: dt.date | None = None,
    verbs: frozenset[str] | None = None,
) -> Report:
    """Load ``rows`` into the workspace ``tenant`` in one transaction; :class:`SeedError` when any row
    has a problem (then nothing is loaded). ``verbs``: the entity's exposed ones, for an import."""
    started = time.perf_counter()
    await ensure_schema(conn)
    run = _Run(
        conn=conn,
        catalog=catalog,
        tenant=tenant,
        principal=principal,
        request_id=f"seed-{uuid.uuid4().hex[:12]}",
        today=today or dt.date.today(),
        by_table={r.table.name: r for r in catalog.resources.values()},
        report=Report(),
        verbs=verbs,
    )
    problems: list[seeds.Problem] = []
    async with conn.transaction():
        await _prefetch(run, rows)
        for row in rows:
            try:
                async with conn.transaction():  # a savepoint: a failed row leaves no trace
                    await _one(run, row)
            except _RowError as failed:
                problems += failed.problems
            except errors.ApiError as exc:
                problems += _problems(row, exc)
            except asyncpg.PostgresError as exc:
                resource = catalog.resources.get(row.entity)
                if resource is None:
                    raise
                problems += _problems(row, writing.translate(resource, exc))
            if len(problems) >= MAX_PROBLEMS:
                break
        if problems:
            raise SeedError(problems[:MAX_PROBLEMS])
        await conn.executemany(
            "INSERT INTO dap.seed_records (tenant_id, entity, key, record_id, digest, source) "
            "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant_id, entity, key) "
            "DO UPDATE SET record_id = EXCLUDED.record_id, digest = EXCLUDED.digest, "
            "source = EXCLUDED.source, updated_at = now()",
            run.remembered,
        )
    run.report.seconds = time.perf_counter() - started
    log.info(
        "seed loaded",
        extra={"ctx": {"request_id": run.request_id, "summary": run.report.summary()}},
    )
    return run.report


async def _prefetch(run: _Run, rows: Sequence[seeds.Row]) -> None:
    """What the rows will look up, in one statement per entity instead of one per row: the seed
    records of earlier runs, and the records whose natural keys the rows give (a record the seed
    did not make is adopted)."""
    entities = sorted({row.entity for row in rows})
    for record in await run.conn.fetch(
        "SELECT entity, key, record_id, digest FROM dap.seed_records "
        "WHERE tenant_id = $1 AND entity = ANY($2::text[])",
        run.tenant,
        entities,
    ):
        run.known[(record["entity"], record["key"])] = (record["record_id"], record["digest"])
    for entity in entities:
        resource = run.catalog.resources.get(entity)
        name = _natural_key(resource) if resource is not None else None
        if resource is None or name is None or resource.fields[name].type is not FieldType.STRING:
            continue
        column = resource.column(name)
        values = sorted({str(r.values[name]) for r in rows if r.entity == entity and r.values.get(name)})
        if column is None or not values:
            continue
        for record in await run.conn.fetch(
            f"SELECT {tables.quote(column)} AS k, id FROM {tables.quote(resource.table.name)} "
            f"WHERE tenant_id = $1 AND {tables.quote(column)} = ANY($2::text[])",
            run.tenant,
            values,
        ):
            run.natural[(entity, record["k"])] = record["id"]
        run.prefetched.add(entity)


def coded(row: seeds.Row, path: str | None, message: str, code: str, status: int = 422) -> seeds.Problem:
    """A problem of ``row`` whose line ends with its code: every line a run reports carries one."""
    return dataclasses.replace(row.problem(path, f"{message} ({code})"), code=code, status=status)


def _problems(row: seeds.Row, exc: errors.ApiError) -> list[seeds.Problem]:
    said: list[tuple[str | None, str]] = [(p.path, p.message) for p in exc.errors] or [(None, exc.detail)]
    return [coded(row, at, m, exc.code, exc.status) for at, m in said]


def _resource(run: _Run, row: seeds.Row) -> Resource:
    resource = run.catalog.resources.get(row.entity)
    if resource is None:
        known = ", ".join(sorted(run.catalog.resources)) or "none"
        why = f"no entity {row.entity} (one exposed over REST) in this spec; known: {known}"
        raise _RowError([coded(row, None, why, NO_ENTITY)])
    return resource


def _natural_key(resource: Resource) -> str | None:
    return next((name for name, f in resource.fields.items() if f.natural_key and f.child is None), None)


def seed_key(resource: Resource, row: seeds.Row) -> str:
    """The row's seed key: ``_key``, else its natural key field's value, else its ``id``."""
    if row.key is not None:
        return row.key
    name = _natural_key(resource)
    if name is not None and row.values.get(name) not in (None, ""):
        return str(row.values[name])
    if row.record_id is not None:  # an exported row: its record's id
        return row.record_id
    why = (
        f"its natural key {name!r} is numbered by the engine"
        if name is not None
        else "the entity has no natural key"
    )
    raise _RowError([coded(row, "_key", f"give _key: {why}, so a second run can find the record", NO_KEY)])


async def _account(run: _Run, row: seeds.Row) -> None:
    """A row of ``entity: users``: one password account (``seeding_users``)."""
    problems = seeding_users.check(run.catalog, row)
    if problems:
        raise _RowError(problems)
    key = str(row.values["username"])
    seen = run.known.get((seeding_users.ENTITY, key))
    known = seen[1] if seen is not None else None
    user_id, wrote = await seeding_users.load(run.conn, run.tenant, row, known)
    if not wrote:
        run.report.unchanged += 1
        return
    await _remember(run, seeding_users.ENTITY, key, user_id, row)
    if known is None:
        run.report.created += 1
        run.report.by_entity[seeding_users.ENTITY] = run.report.by_entity.get(seeding_users.ENTITY, 0) + 1
    else:
        run.report.updated += 1


async def _remember(run: _Run, entity: str, key: str, record_id: uuid.UUID, row: seeds.Row) -> None:
    """The row that made (or last changed) ``record_id``, for the next run to compare with; written
    to ``dap.seed_records`` in one statement once every row is loaded."""
    digest = row.digest()
    run.known[(entity, key)] = (record_id, digest)
    run.remembered.append((run.tenant, entity, key, record_id, digest, f"{row.source}:{row.line}"))


async def _one(run: _Run, row: seeds.Row) -> None:
    if row.entity == seeding_users.ENTITY:
        await _account(run, row)
        return
    if row.entity == seeding_periods.ENTITY:
        await seeding_periods.seed(run, row, _remember)
        return
    resource = _resource(run, row)
    if row.cells:
        row = seeding_rows.typed(resource, row)
    key = seed_key(resource, row)
    digest = row.digest()
    found = await _existing(run, resource, row, key)
    if found is not None:
        record_id, known, adopted = found
        run.resolved[(resource.table.name, key)] = record_id
        await _change(run, resource, row, key, record_id, known == digest, adopted=adopted)
        return
    seeding_rows.exposes(run.verbs, resource, "create")
    if row.version is not None or row.docstatus not in (None, tables.DOCSTATUS[lifecycle.DRAFT]):
        column = "version" if row.version is not None else "docstatus"
        raise _RowError([row.problem(column, "a new record has none: leave it empty (_submit submits)")])
    if row.submit and not resource.lifecycle:
        why = f"{resource.key} has no lifecycle, so there is nothing to submit"
        raise _RowError([coded(row, "_submit", why, NO_SUBMIT)])
    if row.submit and run.verbs is not None:  # an import's row: as ``POST …?submit=true`` answers
        lifecycle.create_submits(resource, {"submit": "true"}, {})
    access = guards.check(run.principal, resource, "create", *(["submit"] if row.submit else []))
    guards.writable(access, row.values)  # hidden fields refused before a reference is looked up
    body = guards.writable(access, await _resolved(run, resource, row), create=True)
    values = writing.validate_body(resource, body, partial=False, catalog=run.catalog)
    write = run.write(resource)
    conn = run.conn
    done = await recording.create(conn, write, access, body, values, submit=row.submit)
    record_id = done.row["id"]
    run.resolved[(resource.table.name, key)] = record_id
    for action in row.actions:
        seeding_rows.exposes_action(run.verbs, resource, action)
        await seeding_steps.act(conn, run.write(resource), run.principal, record_id, action)
        run.report.actions += 1
    for vote in row.votes:
        await seeding_steps.vote(conn, run.write(resource), record_id, vote)
        run.report.actions += 1
    await _remember(run, resource.key, key, record_id, row)
    run.report.created += 1
    run.report.by_entity[resource.key] = run.report.by_entity.get(resource.key, 0) + 1


async def _existing(
    run: _Run, resource: Resource, row: seeds.Row, key: str
) -> tuple[uuid.UUID, str | None, bool] | None:
    """The record the row names, the digest of the row that last wrote it (if any), and whether
    the row adopts it (found by natural key, not made by a seed or import); ``None``: a new one."""
    known = run.known.get((resource.key, key))
    record_id = seeding_rows.named(row)
    if record_id is not None:
        return record_id, known[1] if known is not None and known[0] == record_id else None, False
    if known is not None:
        return known[0], known[1], False
    found = await _by_natural_key(run, resource, row)
    return (found, None, True) if found is not None else None


async def _change(
    run: _Run,
    resource: Resource,
    row: seeds.Row,
    key: str,
    record_id: uuid.UUID,
    same_row: bool,
    *,
    adopted: bool,
) -> None:
    """A row whose record exists: update it where the API would, else say why not. ``expose``, the
    update permission and the field guards come before any comparison with what is stored (the
    row that last wrote the record, its values): no answer depends on a value the caller may not read."""
    conn, tenant = run.conn, run.tenant
    seeding_rows.exposes(run.verbs, resource, "update")
    access = guards.check(run.principal, resource, "update")
    guards.writable(access, row.values)  # hidden fields refused before a reference is looked up
    name = f"{resource.key} {key!r} ({row.source}:{row.line})"
    try:
        current = await guards.select_record(
            conn, resource, tenant, record_id, principal=run.principal, lock=True, scope=access.scope
        )
    except errors.NotFound:
        if row.record_id is not None:
            raise
        if same_row:
            run.report.unchanged += 1
        else:
            run.report.notes.append(f"{name}: deleted since it was seeded; not made again")
        return
    seeding_rows.as_written(resource, row, current)
    body = await _resolved(run, resource, row)
    for field_name in [n for n, f in resource.fields.items() if f.natural_key]:
        body.pop(field_name, None)  # the key that found the record, never rewritten
    body = seeding_rows.unwritten(resource, current, guards.writable(access, body))
    values = writing.validate_body(resource, body, partial=True, catalog=run.catalog)
    if same_row or seeding_rows.same(resource, current, values):
        if not same_row:
            await _remember(run, resource.key, key, record_id, row)
        run.report.unchanged += 1
        return
    if run.verbs is not None:  # an import's row is the PATCH it stands for: 409 past draft
        recording.refuse_unless_draft(access, current)
    if resource.lifecycle and current["docstatus"] != lifecycle.DRAFT:
        now = tables.DOCSTATUS[current["docstatus"]]
        run.report.notes.append(
            f"{name}: changed in the seed, but a {now} document cannot change; "
            "cancel it and seed a new key to replace it"
        )
        return
    await recording.update(conn, run.write(resource), access, record_id, body, values, expected=row.version)
    if row.actions:
        run.report.notes.append(
            f"{name}: updated; its _actions ran when it was first seeded and are not repeated"
        )
    await _remember(run, resource.key, key, record_id, row)
    if adopted:
        run.report.adopted += 1  # one of the updated rows: counted once, in ``updated``
    run.report.updated += 1


async def _by_natural_key(run: _Run, resource: Resource, row: seeds.Row) -> uuid.UUID | None:
    name = _natural_key(resource)
    if name is None or row.values.get(name) in (None, ""):
        return None
    if resource.key in run.prefetched:
        return run.natural.get((resource.key, str(row.values[name])))
    column = resource.column(name)
    if column is None:
        return None
    table = tables.quote(resource.table.name)
    found: uuid.UUID | None = await run.conn.fetchval(
        f"SELECT id FROM {table} WHERE tenant_id = $1 AND {tables.quote(column)} = $2",
        run.tenant,
        str(row.values[name]),
    )
    return found


async def _target(run: _Run, row: seeds.Row, path: str, table: str, value: Any) -> Any:
    """A relation's value: a uuid as it is, else the id of the target record with that seed key or
    natural key; a problem at ``path`` when there is none."""
    if value is None or isinstance(value, uuid.UUID):
        return value
    text = str(value)
    try:
        return str(uuid.UUID(text))
    except ValueError:
        pass
    hit = run.resolved.get((table, text))
    if hit is not None:
        return str(hit)
    target = run.by_table.get(table)
    if target is None:
        why = f"refers to {table}, which the seed cannot reach by key"
        raise _RowError([coded(row, path, why, NO_TARGET)])
    seeded = run.known.get((target.key, text))
    found = seeded[0] if seeded is not None else None
    name = _natural_key(target)
    column = target.column(name) if name is not None else None
    if found is None and column is not None:
        found = await run.conn.fetchval(
            f"SELECT id FROM {tables.quote(table)} WHERE tenant_id = $1 AND {tables.quote(column)} = $2",
            run.tenant,
            text,
        )
    if found is None:
        by = f"seed key or {name}" if name else "seed key"
        why = f"no {target.key} with {by} {text!r} (seeded above, or in the database)"
        raise _RowError([coded(row, path, why, NO_TARGET)])
    run.resolved[(table, text)] = found
    return str(found)


async def _resolved(run: _Run, resource: Resource, row: seeds.Row) -> dict[str, Any]:
    """The row's values with relative dates resolved and relations named by key turned into ids."""
    body: dict[str, Any] = seeds.resolve_dates(row.values, run.today)
    for slot in resource.relation_slots:
        if slot.kind == "record":
            places: list[tuple[str, dict[str, Any]]] = [("", body)]
        elif slot.kind == "child":
            kids = body.get(slot.container)
            places = (
                [(f"{slot.container}[{i}].", r) for i, r in enumerate(kids) if isinstance(r, dict)]
                if isinstance(kids, list)
                else []
            )
        else:
            data = body.get(slot.container)
            places = [(f"{slot.container}.", data)] if isinstance(data, dict) else []
        for prefix, place in places:
            if slot.field not in place:
                continue
            value, path = place[slot.field], f"{prefix}{slot.field}"
            if slot.multiple and isinstance(value, list):
                place[slot.field] = [await _target(run, row, path, slot.target, v) for v in value]
            else:
                place[slot.field] = await _target(run, row, path, slot.target, value)
    return body
