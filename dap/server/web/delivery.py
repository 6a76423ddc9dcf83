"""Sync events: a request answers only once the sync events it emitted are delivered.

An event is ``sync`` or ``async`` (``EventDecl.type``, else derived from the name: ``async_*`` and
``async.*`` are async, the rest sync; an undeclared built-in event is async). After the write's
commit, a request that emitted a sync event waits for the dispatcher (of any process) to settle
it (``Event-Delivery: settled``: every delivery done or dead-lettered) through the feed. Past
``WAIT`` seconds it answers anyway (the change is committed; the event is delivered later) with
``Event-Delivery: pending``.
"""

from __future__ import annotations

import uuid
from typing import TypeVar

from aiohttp import web

from dap.config.actions import Action
from dap.config.enums import CallMode
from dap.server import state
from dap.server.catalog import Resource
from dap.server.events import plans
from dap.server.workflows import operations

R = TypeVar("R", bound=web.StreamResponse)
WAIT = operations.SETTLE_WAIT
HEADER = "Event-Delivery"


def check(resource: Resource, event: str, action: Action | None = None) -> CallMode:
    """The event's type; 422 ``SVC.EVENT.TYPE_MISSING``/``TYPE_MISMATCH`` (see ``plans.event_type``)."""
    return plans.event_type(resource.spec, event, action)


async def settle(
    request: web.Request, resource: Resource, event: str, public_id: uuid.UUID | None
) -> str | None:
    """Wait for a sync event's delivery; the ``Event-Delivery`` header value (``None``: async)."""
    return await operations.settle(request.app[state.EVENTS].feed, resource, event, public_id)


def stamp(response: R, value: str | None) -> R:
    if value is not None:
        response.headers[HEADER] = value
    return response
