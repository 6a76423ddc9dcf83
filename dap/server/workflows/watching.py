"""Watching an entity's delivered events, protocol-neutral: what the websocket and gRPC Watch share.

A :class:`Watch` is one caller's view of one entity's events: the find permission's ``access``
(row scope judged on the event's record, hidden fields removed), optionally one record or the
caller's own records. :func:`stream` yields ``(seq, event message)`` in commit order: with
``after``, every matching event past that ``seq`` first (read from the outbox), then the live
ones from the process's feed, with no gap and no repeat (the subscriber is registered before the
backlog is read and skips what it already gave). A caller too slow for the feed's bounded queue
gets 429 ``SVC.WATCH.TOO_SLOW``: it reconnects and resumes with ``after``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg

from dap.server import errors
from dap.server.access import guards
from dap.server.catalog import Resource
from dap.server.events import channels, feed
from dap.server.storage import db

LIMIT = 256  # events queued for one watcher before it is too slow
BACKLOG = 100_000  # events a resume replays at most
MAX_SEQ = 2**63 - 1  # seq is a Postgres bigint


@dataclass(frozen=True)
class Watch:
    resource: Resource
    access: guards.Access
    record: str | None = None  # one record's events only
    mine: bool = False  # the caller's own records only

    def shows(self, event: channels.Event) -> dict[str, Any] | None:
        """The event as this watch may see it, or ``None`` (pure)."""
        if event.entity != self.resource.key:
            return None
        if self.record is not None and str(event.record_id) != self.record:
            return None
        record = event.payload.get("record")
        record = record if isinstance(record, dict) else {}
        if self.mine and record.get("owner") != self.access.principal.username:
            return None
        if not self.access.sees(record):
            return None
        message = event.message()
        message["payload"] = {**message["payload"], "record": self.access.view(record)}
        return message


def check_after(after: int | None) -> None:
    if after is not None and not 0 <= after <= MAX_SEQ:
        raise errors.ValidationFailed(
            f"after is the seq of the last event received (an integer from 0 to {MAX_SEQ})",
            code="SVC.WATCH.AFTER",
        )


def record_of(value: str) -> str | None:
    """A watched record's id in canonical form (``None`` for all); 422 when it is not a uuid."""
    if not value:
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError as exc:
        raise errors.ValidationFailed("record is a uuid", code="SVC.WATCH.RECORD") from exc


async def stream(
    hub: feed.Feed, pool: asyncpg.Pool, tenant: uuid.UUID, watch: Watch, after: int | None
) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """The events ``watch`` shows, past ``after`` (else from now on), until the caller stops."""
    check_after(after)
    key = watch.resource.key

    def wants(event: channels.Event) -> bool:
        return event.tenant == tenant and event.entity == key

    subscriber = hub.subscribe(feed.Subscriber(wants, limit=LIMIT))
    cursor = hub.position if after is None else after
    try:
        if after is not None:
            sent = 0
            async with db.connection(pool) as conn:
                while sent < BACKLOG:
                    page = await feed.since(conn, cursor)
                    for seq, event in page:
                        shown = watch.shows(event) if event.tenant == tenant else None
                        cursor = max(cursor, seq)
                        if shown is not None:
                            yield seq, shown
                    sent += len(page)
                    if len(page) < feed.PAGE:
                        break
        while True:
            if subscriber.dropped:
                raise errors.RateLimited(
                    "too slow for the event feed: watch again with after", code="SVC.WATCH.TOO_SLOW"
                )
            try:
                seq, event = await asyncio.wait_for(subscriber.queue.get(), 1.0)
            except TimeoutError:
                continue
            if seq <= cursor:
                continue
            cursor = seq
            shown = watch.shows(event)
            if shown is not None:
                yield seq, shown
    finally:
        hub.unsubscribe(subscriber)
