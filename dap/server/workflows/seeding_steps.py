"""The steps a seed row takes after its create: ``_actions`` and ``_votes`` (see ``seeding``).

Each is the operation its REST route runs, so a seeded document reaches its state the way a
person's would: ``submit``/``cancel`` are ``documents.lifecycle.move`` with the built-in event;
custom actions and transitions are ``actions.run`` (a gated transition opens its approval and
waits); a vote is ``approvals_flow.decide``, cast by the account the row names, as that account's own
principal (the ``sub`` its sign-in carries, its roles): a seeded vote is hers, so she cannot vote
a second time and be counted twice (never the seed's own principal either, which requested the
approval: the requester may not approve). A refusal is an
``ApiError`` whose field is ``_actions`` or ``_votes``, which ``seeding`` turns into the row's
problem with its file and line.
"""

from __future__ import annotations

import uuid
from typing import Any

from dap.server import errors
from dap.server.access import accounts, auth, guards
from dap.server.documents import auditing, idempotency, lifecycle
from dap.server.events import builtin
from dap.server.storage import db
from dap.server.workflows import actions, approvals_flow, seeds


def _refused(key: str, why: str) -> errors.ValidationFailed:
    return errors.ValidationFailed(why, code="SVC.SEED.STEP", errors=[errors.FieldProblem(key, why)])


async def act(
    conn: db.Connection, write: auditing.Write, principal: auth.Principal, record_id: uuid.UUID, action: str
) -> None:
    """One ``_actions`` entry on a record just made, as ``POST …/{id}/{action}`` would run it."""
    resource = write.resource
    access = guards.check(principal, resource, action)
    if action in lifecycle.MOVES and resource.lifecycle:

        async def emit(conn: db.Connection, moved: Any, kids: Any) -> None:
            await builtin.record(conn, write, action, moved, kids)

        await lifecycle.move(conn, write, principal, action, record_id, expected=None, after=emit)
        return
    plan = resource.workflow.get(action)
    declared = resource.spec.action(action)
    if plan is None or (declared is not None and declared.disabled):
        raise _refused("_actions", f"{resource.key} has no action {action!r}")
    handler = actions.runner(resource.key, plan, None)
    call = actions.Call(
        write=write,
        principal=principal,
        access=access,
        plan=plan,
        record_id=record_id,
        params={},
        expected=None,
        idempotency=None,
    )
    await actions.run(conn, call, handler, lambda _outcome: idempotency.Answer(200, "", {}))


async def vote(conn: db.Connection, write: auditing.Write, record_id: uuid.UUID, given: seeds.Vote) -> None:
    """One ``_votes`` entry: the vote of ``given.username`` on the record's pending approval."""
    approval = await conn.fetchval(
        "SELECT id FROM dap.approvals WHERE tenant_id = $1 AND entity = $2 AND record_id = $3 "
        "AND status = 'pending'",
        write.tenant,
        write.resource.key,
        record_id,
    )
    if approval is None:
        raise _refused("_votes", "no approval of this record is pending: let _actions request one first")
    account = await accounts.find(conn, write.tenant, given.username)
    if account is None:
        raise _refused(
            "_votes",
            f"no account {given.username!r} in this workspace: a seeded vote is the account's own, so "
            "seed it first (an entity: users document loaded before this one)",
        )
    lacking = [r for r in given.roles if r not in account.roles]
    if lacking:
        raise _refused(
            "_votes",
            f"{given.username} does not hold the role {', '.join(lacking)} (holds: "
            f"{', '.join(account.roles) or 'none'}); a seeded vote counts the account's own roles",
        )
    voter = auth.Principal(sub=account.sub, username=account.username, roles=account.roles)
    decided = await approvals_flow.decide(
        conn,
        approvals_flow.Vote(
            catalog=write.catalog,
            tenant=write.tenant,
            approval_id=approval,
            principal=voter,
            approve=given.approve,
            comment=given.comment or (None if given.approve else "rejected in the seed data"),
            request_id=write.request_id,
        ),
    )
    if decided.cancelled is not None:
        raise _refused("_votes", f"the approval was cancelled: {decided.cancelled}")
