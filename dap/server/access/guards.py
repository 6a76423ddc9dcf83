"""The access checks of one REST request, called from the handlers with one line per step.

The decisions are pure and live elsewhere — ``permissions`` (who holds what), ``scoping`` (which
rows), ``txdates`` (which transaction dates) — and this module applies them to a request:

1. :func:`check` — the action's ``required_permission`` (a standard action re-declared in
   ``actions`` by name carries one too) → 403 ``SVC.AUTH.FORBIDDEN``, or 401 for an anonymous
   caller; it returns the request's :class:`Access`: the fields hidden from this caller and its
   bound row scope.
2. Reads: :func:`check_named` refuses filters, sorts and ``fields=`` on hidden fields (a filter
   would reveal the value) and :func:`scoped` appends the row scope to the list's ``WHERE``;
   :meth:`Access.view` drops hidden fields from every answer; :func:`select_record` is the one
   lookup by id (find, update, delete, submit/cancel, the audit trail), with the scope in its
   ``WHERE`` and the 403 ``SVC.AUTH.ROW_SCOPE`` of a record that exists outside it (:func:`missing`).
3. Writes: :func:`writable` refuses hidden fields in a body and, on create, fills a left-out
   scope field with the caller's one value; :func:`before_create` and :func:`before_update` run in
   the write's transaction on the final values: row scope (403), create scope (403
   ``SVC.AUTH.CREATE_SCOPE``), backdate policy (422 ``SVC.TXN.*``), on update the periods (422
   ``SVC.PERIOD.CLOSED``; a create's is in its ``INSERT``); :func:`check_period` for submit, cancel, delete.

Per-resource facts (which fields need which permission, the scope rules, the create-scope
tables) are derived once per catalog (:func:`policy`), so a request pays dictionary lookups.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from dap.config.entities import EntitySpec
from dap.config.enums import Characteristic, FilterOp
from dap.server import errors, fieldvalues
from dap.server.access import auth, periods, permissions, scoping, txdates
from dap.server.catalog import Catalog, Resource
from dap.server.storage import db, queries, sql, tables

ROW_SCOPE = "SVC.AUTH.ROW_SCOPE"
CREATE_SCOPE = "SVC.AUTH.CREATE_SCOPE"
FORBIDDEN = "SVC.AUTH.FORBIDDEN"
CROSS_CATEGORY = "SVC.PERSIST.CROSS_CATEGORY"
READ_ACTIONS = frozenset({"list", "find"})
MAX_ACCESSES = 10_000  # kept accesses per catalog (see ``check``); emptied when full
# System columns whose value a create cannot know before the insert; a scope on them is judged by SQL.
_UNKNOWN_AT_CREATE = frozenset({"id", "version", "docstatus", "created_at", "updated_at"})


@dataclass(frozen=True)
class CreateScope:
    field: str
    ref_field: str
    via: str  # module/name
    via_table: str
    via_column: str


@dataclass(frozen=True)
class Policy:
    """What one resource asks of its callers, derived once per catalog."""

    open_reads: bool  # ``auth: {required: false}``: list and find without a token
    actions: Mapping[str, str]  # action → required permission
    guarded: tuple[tuple[str, str], ...]  # (field, permission) of REST-visible fields
    rules: tuple[scoping.Rule, ...]
    all_rows: str  # the permission that lifts the row scope
    fillable: frozenset[str]  # fields a create may fill from the caller's identity
    create_scope: CreateScope | None
    date_field: str | None  # the transaction date of a backdate policy
    period_field: str | None = None  # the transaction date accounting periods judge (``periods``)


def _create_scope(resource: Resource) -> CreateScope | None:
    decl = resource.spec.create_scope
    if decl is None:
        return None
    via = tables.resolve_ref(decl.via, resource.module)
    table = tables.ident(tables.table_name(*via.split("/", 1)))  # as tables.entity_tables names it
    return CreateScope(decl.field, decl.ref_field, via, table, tables.ident(decl.via_field))


def _derive(resource: Resource) -> Policy:
    spec: EntitySpec = resource.spec
    date = spec.transaction_date_field() if spec.backdate is not None else None
    fillable = frozenset(
        a.field
        for a in spec.assignments
        if (f := resource.fields.get(a.field)) is not None and not f.read_only and f.computed is None
    ) | frozenset(
        r.field
        for r in scoping.rules(spec)
        if (f := resource.fields.get(r.field)) is not None and not f.read_only and f.computed is None
    )
    return Policy(
        open_reads=spec.auth is not None and not spec.auth.required,
        actions={
            a.name: a.required_permission for a in spec.actions if a.required_permission and not a.disabled
        },
        guarded=tuple(
            (name, f.required_permission) for name, f in resource.fields.items() if f.required_permission
        ),
        rules=scoping.rules(spec),
        all_rows=permissions.all_rows(resource.module, resource.name),
        fillable=fillable,
        create_scope=_create_scope(resource),
        date_field=date.name if date is not None else None,
        period_field=periods.field_of(spec),
    )


def policy(resource: Resource) -> Policy:
    """The resource's policy, derived on first use and kept with the catalog's grants."""
    found = resource.grants.policies.get(resource.key)
    if found is None:
        found = resource.grants.policies[resource.key] = _derive(resource)
    assert isinstance(found, Policy)
    return found


def is_anonymous(principal: auth.Principal) -> bool:
    return not principal.sub


def anonymous(workspace: str) -> auth.Principal:
    """The caller without a token, in ``workspace``: no roles, no identity values."""
    return auth.Principal(sub="", username="", roles=(), workspace=workspace)


def open_to_anonymous(catalog: Catalog, match_info: Mapping[str, str], action: str | None) -> bool:
    """Whether ``action`` (list or find) on the entity of the path may be called without a token."""
    resource = catalog.resource(match_info.get("module", ""), match_info.get("entity", ""))
    return action in READ_ACTIONS and resource is not None and policy(resource).open_reads


def _refuse(
    principal: auth.Principal, detail: str, *, problems: tuple[errors.FieldProblem, ...] = ()
) -> errors.ApiError:
    if is_anonymous(principal):
        return errors.Unauthorized(f"{detail}; send 'Authorization: Bearer <token>'")
    return errors.Forbidden(detail, code=FORBIDDEN, errors=problems)


@dataclass(frozen=True)
class Access:
    """One caller's view of one resource for one request."""

    resource: Resource
    principal: auth.Principal
    policy: Policy
    hidden: Mapping[str, str]  # field → the permission it needs, for fields this caller may not read
    scope: tuple[scoping.Bound, ...]  # empty: the caller sees every row

    @property
    def narrowed(self) -> bool:
        """Whether this caller sees less than everything (such answers are never cached)."""
        return bool(self.hidden or self.scope)

    def allows(self, permission: str) -> bool:
        return self.resource.grants.allows(self.principal.roles, permission)

    def sees(self, record: Mapping[str, Any]) -> bool:
        """Whether a record as the REST API shows it (ids, decimals as text) is in this caller's
        row scope; a field the scope needs and the record lacks fails (used for pushed events)."""
        return all(
            scoping.admits(b, record.get(b.field))
            or (b.op is FilterOp.IN and any(str(v) == str(record.get(b.field)) for v in b.values))
            for b in self.scope
        )

    def view(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` without the fields this caller may not read."""
        if not self.hidden:
            return data
        return {k: v for k, v in data.items() if k not in self.hidden}


def scope_of(resource: Resource, principal: auth.Principal) -> tuple[scoping.Bound, ...]:
    """The row scope of ``principal`` on ``resource``: empty when unscoped or holding ``all_rows``."""
    pol = policy(resource)
    if not pol.rules or resource.grants.allows(principal.roles, pol.all_rows):
        return ()
    identity = scoping.Identity(
        username=principal.username,
        principal_id=principal.sub,
        workspace=principal.workspace or "",
        attrs=principal.attrs,
    )
    return scoping.bind(pol.rules, resource, identity)


def check(principal: auth.Principal, resource: Resource, action: str, *also: str) -> Access:
    """Enforce the required permission of ``action`` (and of ``also``: create-and-submit asks for
    submit's too) and return the caller's :class:`Access`.

    A granted :class:`Access` is kept with the catalog's grants for the principal object it was
    derived for (the token verifier keeps one per token), so a caller's next read of the
    resource skips the derivation; a new catalog starts with none.
    """
    kept = resource.grants.accesses
    key = (id(principal), resource.key, action, also)
    hit = kept.get(key)
    # the entry holds the principal and the resource, so their ids cannot be reused while it lives
    if hit is not None and hit.principal is principal and hit.resource is resource:
        return hit  # type: ignore[no-any-return]
    access = _derive_access(principal, resource, action, also)
    if principal.sub:  # the anonymous caller is a new object per request: nothing to find again
        if len(kept) >= MAX_ACCESSES:
            kept.clear()
        kept[key] = access
    return access


def _derive_access(
    principal: auth.Principal, resource: Resource, action: str, also: tuple[str, ...]
) -> Access:
    if action not in READ_ACTIONS and resource.spec.characteristic is Characteristic.SUMMARY:
        raise cross_category(resource, action)
    pol = policy(resource)
    allows = resource.grants.allows
    for name in (action, *also):
        needed = pol.actions.get(name)
        if needed is not None and not allows(principal.roles, needed):
            raise _refuse(principal, f"{name} on {resource.key} needs the permission {needed}")
    return Access(resource, principal, pol, hidden(principal, resource), scope_of(resource, principal))


def cross_category(resource: Resource, action: str) -> errors.ApiError:
    """409 ``SVC.PERSIST.CROSS_CATEGORY``: a summary is written by the engine alone."""
    decl = resource.spec.summary
    source = f" from submitted {decl.source} documents" if decl is not None else ""
    return errors.Conflict(
        f"{resource.key} is a summary the engine maintains{source}: {action} is refused on every path; "
        "submit or cancel the documents it sums instead",
        code=CROSS_CATEGORY,
    )


def hidden(principal: auth.Principal, resource: Resource) -> dict[str, str]:
    """Field → the permission it needs, for the fields of ``resource`` that ``principal`` may not read."""
    allows = resource.grants.allows
    return {name: p for name, p in policy(resource).guarded if not allows(principal.roles, p)}


async def missing(
    conn: db.Connection, resource: Resource, tenant: Any, record_id: Any, scope: tuple[scoping.Bound, ...]
) -> errors.ApiError:
    """The error for a record the scoped lookup did not find: 403 when it exists outside the scope."""
    if scope and await conn.fetchval(*sql.flat(sql.exists(resource.table, tenant, record_id))) is not None:
        return errors.Forbidden(
            f"this {resource.key} record is outside your row scope ({_rules_text(scope)})", code=ROW_SCOPE
        )
    return errors.NotFound("no such record", code="SVC.RECORD.NOT_FOUND")


def _rules_text(scope: tuple[scoping.Bound, ...]) -> str:
    parts = []
    for b in scope:
        source = f"your {b.rule.attr}" if b.rule.attr else "a fixed filter"
        parts.append(f"{b.field} by {source}")
    return ", ".join(dict.fromkeys(parts))


# --- reads ---------------------------------------------------------------------------------------


def _named(params: Sequence[tuple[str, str]]) -> set[str]:
    names: set[str] = set()
    for param, raw in params:
        if param in ("limit", "offset", "count"):
            continue
        if param in ("sort", "fields"):
            names.update(part.strip().lstrip("-") for part in raw.split(","))
        else:
            names.add(param.split("[", 1)[0])
    return names


def check_named(access: Access, params: Iterable[tuple[str, str]]) -> None:
    """403 when a list query filters, sorts or selects a field hidden from the caller."""
    if not access.hidden:
        return
    refused = sorted(_named(list(params)) & set(access.hidden))
    if refused:
        raise _refuse(
            access.principal,
            f"{', '.join(refused)} cannot be filtered, sorted or selected without its permission",
            problems=tuple(
                errors.FieldProblem(n, f"needs the permission {access.hidden[n]}") for n in refused
            ),
        )


def scoped(access: Access, query: queries.ListQuery) -> queries.ListQuery:
    """The parsed list query with the caller's row scope appended to its conditions."""
    if not access.scope:
        return query
    return dataclasses.replace(query, conditions=query.conditions + scoping.conditions(access.scope))


async def select_record(
    conn: db.Connection,
    resource: Resource,
    tenant: uuid.UUID,
    record_id: uuid.UUID,
    *,
    principal: auth.Principal,
    lock: bool = False,
    scope: tuple[scoping.Bound, ...] | None = None,
) -> asyncpg.Record:
    """The one lookup of a record by id — find, update, delete, submit/cancel, the audit trail — or 404.

    ``lock`` reads it ``FOR UPDATE``, for a write in the caller's transaction. Rules on which rows a
    caller may name (row scope) belong here, so that every path by id applies them alike;
    ``scope`` is the principal's, when the caller holds it already (``Access.scope``).
    """
    scope = scope_of(resource, principal) if scope is None else scope
    statement, args = sql.select_one(resource.table, tenant, record_id, scope=scoping.conditions(scope))
    row = await conn.fetchrow(f"{statement} FOR UPDATE" if lock else statement, *args)
    if row is None:
        raise await missing(conn, resource, tenant, record_id, scope)
    return row


async def select_for_write(
    conn: db.Connection,
    resource: Resource,
    tenant: uuid.UUID,
    record_id: uuid.UUID,
    *,
    principal: auth.Principal,
    expected: int | None,
    lock: bool = True,
) -> asyncpg.Record:
    """The record locked ``FOR UPDATE`` for a write; 412 unless it is at the ``If-Match`` version.
    ``lock`` ``False``: for a write whose statement checks the version it read (``recording``)."""
    current = await select_record(conn, resource, tenant, record_id, principal=principal, lock=lock)
    if expected is not None and current["version"] != expected:
        raise errors.PreconditionFailed(
            f"the record is at version {current['version']}, not {expected}",
            headers={"ETag": f'"{current["version"]}"'},
        )
    return current


# --- writes --------------------------------------------------------------------------------------


def writable(access: Access, body: dict[str, Any], *, create: bool = False) -> dict[str, Any]:
    """``body`` checked for hidden fields (403) and, on create, with left-out scope fields filled."""
    refused = [name for name in body if name in access.hidden] if access.hidden else None
    if refused:
        raise _refuse(
            access.principal,
            f"{', '.join(refused)} cannot be written without its permission",
            problems=tuple(
                errors.FieldProblem(n, f"needs the permission {access.hidden[n]}") for n in refused
            ),
        )
    if not (create and access.scope):
        return body
    filled = dict(body)
    for b in access.scope:
        value = b.single
        if b.field in access.policy.fillable and filled.get(b.field) is None and value is not None:
            filled[b.field] = fieldvalues.to_json(access.resource.fields[b.field], value)
    return filled


def _scope_refusal(access: Access, values: Mapping[str, Any]) -> None:
    problems = scoping.refusals(access.scope, values)
    if problems:
        raise errors.Forbidden(
            "the record would be outside your row scope",
            code=ROW_SCOPE,
            errors=[errors.FieldProblem(p, m) for p, m in problems],
        )


def _same(a: Any, b: Any) -> bool:
    if a == b:
        return True
    if a is None or b is None:
        return False
    shown = fieldvalues.to_json(queries.SYSTEM["id"], a), fieldvalues.to_json(queries.SYSTEM["id"], b)
    return str(shown[0]) == str(shown[1])


async def _check_create_scope(
    conn: db.Connection, access: Access, tenant: Any, field_value: Any, ref: Any
) -> None:
    cs = access.policy.create_scope
    if cs is None or ref is None:
        return
    statement = sql.values_of(cs.via_table, [cs.via_column], tenant, ref, share=True)
    row = await conn.fetchrow(*sql.flat(statement))
    if row is None:  # the relation check answers for a reference to nothing
        return
    expected = row[cs.via_column]
    if not _same(field_value, expected) and expected is None:  # say so in words, not "(None)"
        raise errors.Forbidden(
            f"the {cs.via} named by {cs.ref_field} has no {cs.via_column}, so {cs.field} must be left "
            f"out; or give that {cs.via} a {cs.via_column} first",
            code=CREATE_SCOPE,
            errors=[errors.FieldProblem(cs.field, f"must be left out: the referenced {cs.via} has none")],
        )
    if not _same(field_value, expected):
        shown = fieldvalues.to_json(queries.SYSTEM["id"], expected)
        raise errors.Forbidden(
            f"{cs.field} must equal the {cs.via_column} of the {cs.via} named by {cs.ref_field} ({shown!r})",
            code=CREATE_SCOPE,
            errors=[errors.FieldProblem(cs.field, f"must be {shown!r}, as on the referenced {cs.via}")],
        )


def _check_date(access: Access, value: Any) -> None:
    spec = access.resource.spec
    override = spec.backdate.override_permission if spec.backdate is not None else None
    refusal = txdates.check(
        spec,
        value,
        today=txdates.today(),
        may_override=override is not None and access.allows(override),
    )
    if refusal is not None:
        raise errors.ValidationFailed(
            refusal.message, code=refusal.code, errors=[errors.FieldProblem(refusal.field, refusal.message)]
        )


async def before_create(conn: db.Connection, access: Access, tenant: Any, values: Mapping[str, Any]) -> None:
    """Row scope, create scope and backdate policy on the values a create is about to insert."""
    if access.scope:
        judged = {b.field for b in access.scope} - _UNKNOWN_AT_CREATE
        probe = {name: values.get(name) for name in judged}
        if "owner" in judged:  # the insert makes the caller the owner
            probe["owner"] = access.principal.username
        _scope_refusal(access, probe)
    cs = access.policy.create_scope
    if cs is not None:
        await _check_create_scope(conn, access, tenant, values.get(cs.field), values.get(cs.ref_field))
    if access.policy.date_field is not None:
        _check_date(access, values.get(access.policy.date_field))


async def before_update(
    conn: db.Connection,
    access: Access,
    tenant: Any,
    current: asyncpg.Record | Mapping[str, Any],
    values: Mapping[str, Any],
) -> None:
    """Row scope, create scope and backdate policy on what an update changes of the ``current`` row."""
    if access.scope:
        _scope_refusal(access, values)
    resource = access.resource

    def stored(name: str) -> Any:
        column = resource.column(name)
        return current[column] if column is not None else None

    cs = access.policy.create_scope
    if cs is not None and (cs.field in values or cs.ref_field in values):
        field_value = values[cs.field] if cs.field in values else stored(cs.field)
        ref = values[cs.ref_field] if cs.ref_field in values else stored(cs.ref_field)
        await _check_create_scope(conn, access, tenant, field_value, ref)
    date = access.policy.date_field
    if date is not None and date in values and values[date] != stored(date):
        _check_date(access, values[date])
    period = access.policy.period_field
    if period is not None:  # the period it is in, and the one it moves to
        await _check_period(conn, access, tenant, stored(period))
        if period in values and txdates.day_of(values[period]) != txdates.day_of(stored(period)):
            await _check_period(conn, access, tenant, values[period])


async def _check_period(conn: db.Connection, access: Access, tenant: Any, value: Any) -> None:
    field = access.policy.period_field
    assert field is not None
    await periods.guard(conn, tenant, field, value, may_post_closing=access.allows(periods.POST_CLOSING))


async def check_period(
    conn: db.Connection,
    resource: Resource,
    tenant: Any,
    principal: auth.Principal,
    current: asyncpg.Record | Mapping[str, Any],
) -> None:
    """422 ``SVC.PERIOD.CLOSED`` when the stored record ``current`` is dated in a period closed to
    ``principal`` (submit, cancel, delete): in the caller's transaction, its period locked."""
    field = policy(resource).period_field
    if field is None:
        return
    column = resource.column(field)
    may = resource.grants.allows(principal.roles, periods.POST_CLOSING)
    await periods.guard_record(conn, tenant, resource.spec, column, current, may_post_closing=may)
