"""Scope transactions: one per sidecar invoke, joined by the ``/ctx`` calls that echo its id.

A :class:`Scope` holds the invoke's transaction (the action's own connection, inside
``actions.run``), who it belongs to (tenant, principal, entity and action) and two unguessable
capabilities made with ``secrets``: the scope id (``X-Svc-Scope-Id``: join the transaction) and
the invoke id (``X-Svc-Invoke-Id``: act for this invoke, each call committing by itself). Both die
with the invoke: a replayed id (after its invoke ended), an expired one (past its deadline), an
unknown one or one presented with another invoke's id (foreign) is refused and runs nothing.

One connection serves one statement at a time, so the calls of a scope take :attr:`Scope.lock`;
closing a scope marks it closed first and then waits for the call in flight, so that the action's
rollback or commit never races a ``/ctx`` statement.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from dap.server import errors
from dap.server.storage import db

REFUSED = "SVC.CTX.SCOPE_REFUSED"
MISSING = "SVC.CTX.SCOPE_MISSING"


@dataclass(eq=False)
class Scope:
    id: str
    invoke_id: str
    conn: db.Connection
    tenant: uuid.UUID
    principal: str
    username: str
    entity: str  # module/name of the invoked action
    action: str
    deadline: float  # time.monotonic()
    # begins ``conn``'s transaction at the first joined call (see ``sidecars.Invocation.begin``)
    begin: Callable[[], Awaitable[None]] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    open: bool = True

    @property
    def entity_scope(self) -> str:
        """``module.entity``: what datastore permission rules match."""
        return self.entity.replace("/", ".", 1)

    def live(self, now: float | None = None) -> bool:
        return self.open and (now if now is not None else time.monotonic()) < self.deadline


def _refused(why: str) -> errors.Forbidden:
    return errors.Forbidden(
        f"scope refused: {why}; a scope is valid only during its own invoke, with the ids that invoke sent",
        code=REFUSED,
    )


class Scopes:
    """The scopes of the invokes in flight in this process."""

    def __init__(self) -> None:
        self._by_scope: dict[str, Scope] = {}
        self._by_invoke: dict[str, Scope] = {}

    def __len__(self) -> int:
        return len(self._by_scope)

    def open(
        self,
        conn: db.Connection,
        *,
        tenant: uuid.UUID,
        principal: str,
        username: str,
        entity: str,
        action: str,
        timeout: float,
        begin: Callable[[], Awaitable[None]] | None = None,
    ) -> Scope:
        scope = Scope(
            id=secrets.token_urlsafe(32),
            invoke_id=secrets.token_urlsafe(32),
            conn=conn,
            tenant=tenant,
            principal=principal,
            username=username,
            entity=entity,
            action=action,
            deadline=time.monotonic() + timeout,
            begin=begin,
        )
        self._by_scope[scope.id] = scope
        self._by_invoke[scope.invoke_id] = scope
        return scope

    async def close(self, scope: Scope) -> None:
        """End ``scope``: refuse every later call, then wait for the one in flight."""
        scope.open = False
        self._by_scope.pop(scope.id, None)
        self._by_invoke.pop(scope.invoke_id, None)
        async with scope.lock:
            pass

    def find(self, scope_id: str | None, invoke_id: str | None) -> tuple[Scope, bool]:
        """The scope a call names and whether it joins the transaction; 401/403 otherwise."""
        now = time.monotonic()
        if scope_id:
            scope = self._by_scope.get(scope_id)
            if scope is None:
                raise _refused("the scope id is unknown, or its invoke has ended")
            if invoke_id and invoke_id != scope.invoke_id:
                raise _refused("the scope id belongs to another invoke")
            if not scope.live(now):
                raise _refused("the scope has expired")
            return scope, True
        if invoke_id:
            scope = self._by_invoke.get(invoke_id)
            if scope is None or not scope.live(now):
                raise _refused("the invoke id is unknown, expired, or its invoke has ended")
            return scope, False
        raise errors.Unauthorized(
            f"a /ctx call must carry {'X-Svc-Scope-Id'} (join the invoke's transaction) or "
            "X-Svc-Invoke-Id (commit by itself), as sent on the invoke",
            code=MISSING,
        )
