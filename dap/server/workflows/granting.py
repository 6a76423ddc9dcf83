"""Grant requests between apps (``dap.app_grants``): asked on deployment, decided by the owner.

An app that ``consumes`` another app's offered service (``dap.config.offers``) asks its owner for
the actions; nothing of the owner's runs on the consumer's behalf until one of the owner's
administrators grants them. The shape is OAuth consent and dap's own ResourceClaim flow: a
request, a decision by the owner, and the decision's conditions (here: exactly the actions granted).

One row per workspace (tenant), consumer, owner and service, moved by these steps::

    (deployment asks) ──▶ pending ──grant──▶ granted ──revoke──▶ revoked ──grant──▶ granted
                             │                  ▲
                             └──refuse──▶ refused ──grant──┘

- :func:`request_all` runs when a workspace's artifact is deployed (``resource_pod`` after its
  self-check), when ``dap serve`` starts and when a workspace is registered (the admin listener):
  a new consumption inserts a pending row; a consumption that now asks
  other actions updates ``actions`` and goes back to ``pending``, keeping what was ``granted``
  (which still holds, no more) until the owner decides again.
- :func:`decide` grants (a subset of what is asked may be given), refuses or revokes (a granted
  request, or a pending one still holding earlier grants); refuse and revoke need a reason; a
  step that does not apply to the row's status is 409 ``SVC.APP.GRANT_CONFLICT``.
- :func:`check` is what every protocol asks before a service action runs on behalf of an app:
  403 ``SVC.APP.GRANT_MISSING`` unless the action is in the row's ``granted`` (revoke and refuse
  empty it).

Every step writes a row of ``dap.audit_log`` (``entity`` :data:`AUDIT_ENTITY`, ``record_id`` the
request's id, ``action`` requested, granted, refused or revoked, ``changes`` status, actions asked
and granted and the reason), in the transaction of the step.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import asyncpg

from dap.config import offers
from dap.config.offers import Ask
from dap.server import errors
from dap.server.catalog import Catalog
from dap.server.documents import auditing
from dap.server.storage import db, workspaces

if TYPE_CHECKING:  # the boot path creates the table without the request stack (JWT; test_booting)
    from dap.server.access import auth

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.app_grants (
    tenant_id uuid NOT NULL,
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    consumer text NOT NULL,
    owner text NOT NULL,
    service text NOT NULL,
    actions text[] NOT NULL,
    granted text[] NOT NULL DEFAULT '{}',
    status text NOT NULL DEFAULT 'pending',
    reason text,
    requested_by text NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    decided_by text,
    decided_at timestamptz,
    PRIMARY KEY (tenant_id, id)
);
CREATE UNIQUE INDEX IF NOT EXISTS app_grants_one ON dap.app_grants (tenant_id, consumer, owner, service);
"""

GRANT_MISSING: Final = "SVC.APP.GRANT_MISSING"
GRANT_CONFLICT: Final = "SVC.APP.GRANT_CONFLICT"
GRANT_NOT_FOUND: Final = "SVC.APP.GRANT_NOT_FOUND"
APP_NOT_FOUND: Final = "SVC.APP.NOT_FOUND"
REASON_REQUIRED: Final = "SVC.APP.REASON_REQUIRED"
AUDIT_ENTITY: Final = "dap/app_grant"
SYSTEM: Final = ("dap:deploy", "dap-deploy")  # who a deployment's requests are recorded as

Status = Literal["pending", "granted", "refused", "revoked"]
Verb = Literal["grant", "refuse", "revoke"]
# which statuses each step leaves from, and the status it reaches
STEPS: Final[dict[str, tuple[frozenset[str], Status]]] = {
    "grant": (frozenset({"pending", "refused", "revoked", "granted"}), "granted"),  # granted: other actions
    "refuse": (frozenset({"pending"}), "refused"),
    "revoke": (frozenset({"granted", "pending"}), "revoked"),
}
COLUMNS: Final = (
    "id, consumer, owner, service, actions, granted, status, reason, requested_by, requested_at,"
    " decided_by, decided_at"
)


def asks(catalog: Catalog) -> list[Ask]:
    """What the catalog's apps ask of each other (``config.offers.asks``). Pure."""
    return list(offers.asks(catalog.apps, catalog.offers))


async def request_workspaces(conn: db.Connection, catalog: Catalog, by: str) -> int:
    """:func:`request_all` for every active workspace served with ``catalog`` (``dap serve``)."""
    wanted = asks(catalog)
    if not wanted:
        return 0
    return sum([await request_all(conn, w.tenant_id, wanted, by) for w in await workspaces.list_active(conn)])


def administered(catalog: Catalog, principal: auth.Principal) -> list[str]:
    """The apps of ``catalog`` whose grant requests ``principal`` sees and decides. Pure."""
    return sorted(a for a in catalog.apps if catalog.grants.allows(principal.roles, permission(a)))


def permission(app: str) -> str:
    """The permission that makes a principal an administrator of ``app`` (``module/name``): who
    sees and decides the grant requests made to it (``admin`` holds it, as every permission)."""
    module, _, name = app.partition("/")
    return f"{module}.{name}.administer"


@dataclass(frozen=True)
class Target:
    """What a grant step was asked to do: ``verb``, the ``reason``, and for a grant the actions
    given (``None``: all that are asked)."""

    verb: Verb
    reason: str | None
    actions: tuple[str, ...] | None = None


def view(row: asyncpg.Record) -> dict[str, Any]:
    """A grant request as the API shows it."""
    return {
        "id": str(row["id"]),
        "consumer": row["consumer"],
        "owner": row["owner"],
        "service": row["service"],
        "actions": list(row["actions"]),
        "granted": list(row["granted"]),
        "status": row["status"],
        "reason": row["reason"],
        "requested_by": row["requested_by"],
        "requested_at": row["requested_at"].isoformat(),
        "decided_by": row["decided_by"],
        "decided_at": row["decided_at"].isoformat() if row["decided_at"] is not None else None,
    }


def next_state(
    status: str, asked: tuple[str, ...], target: Target, granted: tuple[str, ...] = ()
) -> tuple[Status, tuple[str, ...]]:
    """The status and granted actions a step leads to (409 where it does not apply, 422 for a
    grant of actions not asked, or a refuse or revoke without a reason). A pending request is
    revoked only while it still holds actions granted before its ask changed. Pure."""
    sources, reached = STEPS[target.verb]
    if status not in sources or (target.verb == "revoke" and status == "pending" and not granted):
        raise errors.Conflict(
            f"a {status} grant request cannot be {reached}; "
            + {"refuse": "only a pending one is refused", "revoke": "nothing of it is granted"}.get(
                target.verb, "it is granted already"
            ),
            code=GRANT_CONFLICT,
        )
    if target.verb != "grant" and not (target.reason or "").strip():
        raise errors.ValidationFailed(
            f'to {target.verb} a grant request, say why: send {{"reason": "..."}}', code=REASON_REQUIRED
        )
    if target.verb != "grant":
        return reached, ()
    given = asked if target.actions is None else target.actions
    unasked = [a for a in given if a not in asked]
    if unasked:
        raise errors.ValidationFailed(
            f"{', '.join(unasked)} not asked; a grant gives some or all of {', '.join(asked)}",
            code="SVC.APP.GRANT_NOT_ASKED",
        )
    if not given:
        raise errors.ValidationFailed(
            "a grant gives at least one action; refuse it instead", code=REASON_REQUIRED
        )
    return reached, tuple(a for a in asked if a in given)


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)


async def _audit(
    conn: db.Connection,
    tenant: uuid.UUID,
    grant_id: uuid.UUID,
    action: str,
    who: tuple[str, str],
    changes: dict[str, list[Any]],
    request_id: str | None,
) -> None:
    await conn.execute(
        auditing.INSERT, tenant, AUDIT_ENTITY, grant_id, action, who[0], who[1], None, changes, request_id
    )


async def request_all(conn: db.Connection, tenant: uuid.UUID, asks: Iterable[Ask], by: str) -> int:
    """Record every ``asks`` of the booted artifact for workspace ``tenant``: a new one pending,
    one whose actions changed back to pending (see the module's docstring). Returns how many rows
    were created or changed. ``by`` says what asked (the deployment)."""
    changed = 0
    async with db.committed(conn):
        for ask in asks:
            row = await conn.fetchrow(
                "SELECT id, actions, granted, status FROM dap.app_grants"
                " WHERE tenant_id = $1 AND consumer = $2 AND owner = $3 AND service = $4 FOR UPDATE",
                tenant,
                ask.consumer,
                ask.owner,
                ask.service,
            )
            asked = list(ask.actions)
            if row is None:
                grant_id = await conn.fetchval(
                    "INSERT INTO dap.app_grants (tenant_id, consumer, owner, service, actions, requested_by)"
                    " VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                    tenant,
                    ask.consumer,
                    ask.owner,
                    ask.service,
                    asked,
                    by,
                )
                before: list[Any] = [None, None]
            elif sorted(row["actions"]) != sorted(asked):
                grant_id = row["id"]
                covered = set(asked) <= set(row["granted"])
                status = row["status"] if covered or row["status"] == "pending" else "pending"
                await conn.execute(
                    "UPDATE dap.app_grants SET actions = $3, status = $4, requested_by = $5,"
                    " requested_at = now() WHERE tenant_id = $1 AND id = $2",
                    tenant,
                    grant_id,
                    asked,
                    status,
                    by,
                )
                before = [row["status"], list(row["actions"])]
            else:
                continue
            changed += 1
            await _audit(
                conn,
                tenant,
                grant_id,
                "requested",
                SYSTEM,
                {
                    "status": [before[0], "pending" if row is None else status],
                    "actions": [before[1], asked],
                    "consumer": [None, ask.consumer],
                    "service": [None, ask.service],
                    "requested_by": [None, by],
                },
                None,
            )
    return changed


async def listed(
    conn: db.Connection, tenant: uuid.UUID, owners: list[str] | None, status: str | None
) -> list[dict[str, Any]]:
    """The requests made to ``owners`` (``None``: every app), of ``status`` when given, newest
    first."""
    rows = await conn.fetch(
        f"SELECT {COLUMNS} FROM dap.app_grants WHERE tenant_id = $1"
        " AND ($2::text[] IS NULL OR owner = ANY($2)) AND ($3::text IS NULL OR status = $3)"
        " ORDER BY requested_at DESC, id",
        tenant,
        owners,
        status,
    )
    return [view(r) for r in rows]


async def found(conn: db.Connection, tenant: uuid.UUID, grant_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {COLUMNS} FROM dap.app_grants WHERE tenant_id = $1 AND id = $2", tenant, grant_id
    )


async def decide(
    conn: db.Connection,
    tenant: uuid.UUID,
    grant_id: uuid.UUID,
    target: Target,
    principal: auth.Principal,
    owners: list[str],
    request_id: str | None,
) -> dict[str, Any]:
    """Apply one step to request ``grant_id`` in one transaction with its audit row. ``owners``
    are the apps ``principal`` administers (:func:`administered`): a request to another app is
    404, as one that does not exist."""
    async with db.committed(conn):
        row = await conn.fetchrow(
            f"SELECT {COLUMNS} FROM dap.app_grants WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
            tenant,
            grant_id,
        )
        if row is None or row["owner"] not in owners:
            raise errors.NotFound(
                "no such grant request among those of the apps you administer", code=GRANT_NOT_FOUND
            )
        status, granted = next_state(row["status"], tuple(row["actions"]), target, tuple(row["granted"]))
        updated = await conn.fetchrow(
            "UPDATE dap.app_grants SET status = $3, granted = $4, reason = $5, decided_by = $6,"
            f" decided_at = now() WHERE tenant_id = $1 AND id = $2 RETURNING {COLUMNS}",
            tenant,
            grant_id,
            status,
            list(granted),
            target.reason,
            principal.username,
        )
        await _audit(
            conn,
            tenant,
            grant_id,
            status,
            (principal.sub, principal.username),
            {
                "status": [row["status"], status],
                "granted": [list(row["granted"]), list(granted)],
                "reason": [row["reason"], target.reason],
            },
            request_id,
        )
    assert updated is not None
    return view(updated)


async def trail(conn: db.Connection, tenant: uuid.UUID, grant_id: uuid.UUID) -> list[dict[str, Any]]:
    """The audit rows of request ``grant_id``, newest first (the last 100)."""
    rows = await conn.fetch(auditing.SELECT, tenant, AUDIT_ENTITY, grant_id, 100, 0)
    return [
        {
            "id": str(r["public_id"]),
            "action": r["action"],
            "at": r["at"].isoformat(),
            "actor": {"sub": r["actor_sub"], "username": r["actor_username"]},
            "changes": r["changes"],
            "request_id": r["request_id"],
        }
        for r in rows
    ]


def refusal(consumer: str, owner: str, service: str, action: str, status: str | None) -> errors.Forbidden:
    """The 403 of a call on behalf of ``consumer`` that its grant does not cover. Pure."""
    why = {
        None: f"{consumer} does not declare consuming {action!r} of {service} of {owner}",
        "not_offered": f"{owner} does not offer {action!r} of {service} to other apps",
        "pending": f"the grant request of {consumer} to {owner} for {service} is pending",
        "refused": f"{owner} refused the grant request of {consumer} for {service}",
        "revoked": f"{owner} revoked the grant of {consumer} for {service}",
        "granted": f"{owner} granted {consumer} other actions of {service}, not {action!r}",
    }[status]
    return errors.Forbidden(
        f"{why}; an administrator of {owner} decides it (GET /{{ws}}/api/_grants), or call through {owner}",
        code=GRANT_MISSING,
    )


async def check(
    conn: db.Connection, tenant: uuid.UUID, consumer: str, owner: str, service: str, action: str
) -> None:
    """403 ``SVC.APP.GRANT_MISSING`` unless ``owner`` granted ``consumer`` ``action`` of ``service``."""
    row = await conn.fetchrow(
        "SELECT status, granted FROM dap.app_grants"
        " WHERE tenant_id = $1 AND consumer = $2 AND owner = $3 AND service = $4",
        tenant,
        consumer,
        owner,
        service,
    )
    if row is not None and action in row["granted"]:
        return  # granted (or pending again after a wider ask: what was granted still holds)
    raise refusal(consumer, owner, service, action, row["status"] if row is not None else None)


def consumed(key: str, catalog: Catalog, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What app ``key`` consumes of other apps and how far each owner granted it (``rows``: its
    grant requests, :func:`view`): the UI disables the blocks that need an action
    not granted, saying why (issue 47). Pure."""
    spec = catalog.apps[key]
    out = []
    for service, offer in sorted(catalog.offers.items()):
        asked = offers.consumed(spec, key, offer.app, service)
        if offer.app == key or asked is None:
            continue
        row = next((r for r in rows if r["owner"] == offer.app and r["service"] == service), None)
        owner = catalog.apps.get(offer.app)
        out.append(
            {
                "service": service,
                "owner": offer.app,
                "owner_title": (owner.title if owner is not None else None) or offer.app,
                "asked": list(asked or offer.actions),
                "status": row["status"] if row is not None else "not_requested",
                "granted": row["granted"] if row is not None else [],
            }
        )
    return out
