"""Native action handlers: Python callables registered by entry point in the group ``dap.actions``.

An action with ``impl: {type: native, handler: NAME}`` runs the callable that an installed
distribution registers under ``NAME`` (``[project.entry-points."dap.actions"] NAME =
"pkg.module:function"``); without ``handler`` the name is ``module/entity/action``. The handler is
``async def handler(ctx: Context) -> Any``: it runs inside the action's transaction on the locked
record (``ctx.conn`` joins it), and what it returns (JSON) is the answer's ``result``. An exception
rolls the action back. A handler run as a tracked job (``call: async``) reports how far it got with
``await ctx.progress(percent)`` (0 to 100; a lower value than the last is ignored: progress only
goes up); elsewhere that call does nothing. A name no distribution registers is a 501 naming the
entry point to add, checked before anything runs, as the spec says a native action without its handler fails.

Found handlers are kept per process; a missing one is looked up again on the next request, so a
distribution installed later is picked up without a restart only on a new process (entry points
are read from the installed metadata).
"""

from __future__ import annotations

import importlib.metadata
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from dap.server import errors
from dap.server.storage import db

GROUP = "dap.actions"
NOT_REGISTERED = "SVC.ACTION.HANDLER_NOT_REGISTERED"


@dataclass(frozen=True)
class Context:
    """What a native handler is given."""

    conn: db.Connection  # in the action's transaction; the record's row is locked
    tenant: uuid.UUID
    entity: str  # module/name
    action: str
    record: Mapping[str, Any] | None  # the record as the API shows it, before the action
    params: Mapping[str, Any]  # validated params, as column values
    principal_sub: str
    principal_username: str
    report: Report | None = None  # set when the action runs as a job
    idempotency_key: str | None = None  # a saga step's key (the step commits with its progress)

    async def progress(self, percent: float) -> None:
        """Report the job's progress (0 to 100); nothing when the action is not running as a job."""
        if self.report is not None:
            await self.report(max(0.0, min(100.0, float(percent))))


Report = Callable[[float], Awaitable[None]]
Handler = Callable[[Context], Awaitable[Any]]
_found: dict[str, Handler] = {}


def name_of(entity: str, action: str, declared: str | None) -> str:
    return declared or f"{entity}/{action}"


def lookup(name: str) -> Handler:
    """The handler registered as ``name``; 501 ``SVC.ACTION.HANDLER_NOT_REGISTERED`` when none is."""
    handler = _found.get(name)
    if handler is not None:
        return handler
    found = [ep for ep in importlib.metadata.entry_points(group=GROUP) if ep.name == name]
    if not found:
        raise errors.NotImplementedHere(
            f"no native handler {name!r} is registered: install a distribution that declares "
            f'[project.entry-points."{GROUP}"] {name!r} = "package.module:function"',
            code=NOT_REGISTERED,
        )
    loaded = found[0].load()
    if not callable(loaded):
        raise errors.NotImplementedHere(
            f"the entry point {name!r} of {GROUP} is not a callable", code=NOT_REGISTERED
        )
    handler = _found[name] = cast(Handler, loaded)
    return handler
