"""SQL statements as events on the span that ran them: a connection wrapper for sampled traces.

A sampled span's connection (``storage.db.connection`` taken while a span records) is handed out
wrapped in :class:`Timed`: its statement methods (``execute``, ``executemany``, ``fetch``,
``fetchrow``, ``fetchval``) append one event to the span current when each statement ends, named
by :func:`statement_name` (verb and first table, never the text's values nor the parameters),
stamped when it started, with its duration (``db.duration_ms``) and, when it failed,
``error.type``. Everything else goes to the connection itself; a transaction's ``BEGIN`` and
``COMMIT`` are sent by asyncpg's ``Transaction``, not through here, and are not events.

It replaces asyncpg's query logger (``add_query_logger``), which made the same events for about 25
µs of the server's CPU per sampled find (one statement) under load, against a few µs: per taken
connection, adding and removing the logger (each wraps it in a ``_Callback``, asking ``inspect``
whether it is a coroutine function); per statement, a generator context manager, a
``LoggedQuery`` record and a ``call_soon`` (a handle and a copied ``Context``) to run the logger
on the next turn of the loop (docs/performance.md, "Tracing's cost on the cheapest request").
A dropped trace and tracing off never see this wrapper.
"""

from __future__ import annotations

import functools
import re
from time import time_ns
from typing import Any

from dap.tracing.spans import CURRENT, Span

_VERB = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|COPY|VACUUM|LISTEN|NOTIFY)\b", re.IGNORECASE)
_FIRST = re.compile(r"\s*(\w+)")
_TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE|TABLE|JOIN)\s+([\w.\"]+)", re.IGNORECASE)


@functools.lru_cache(maxsize=1024)
def statement_name(query: str) -> str:
    """A statement's event name: its verb and first table (``SELECT dap.outbox``), never its text's
    values (they are ``$n`` parameters anyway) nor its parameters. Cached: dap's statements are a
    few hundred constant texts (prepared), so each is read once."""
    verb = _VERB.search(query) or _FIRST.match(query)  # WITH … AS (INSERT …): the INSERT
    table = _TABLE.search(query)
    head = verb.group(1).upper() if verb else "SQL"
    return f"{head} {table.group(1)}" if table else head


def event(query: str, began_ns: int, ended_ns: int, exception: BaseException | None) -> None:
    """The statement's event on the current span, if that span records (times: ``time.time_ns``)."""
    current = CURRENT.get()
    if type(current) is not Span:  # off, outside a span, or a dropped trace
        return
    # in milliseconds to the µs: integer steps (``round(x, 3)`` formats and parses decimal text)
    attributes: dict[str, Any] = {"db.duration_ms": (ended_ns - began_ns) // 1000 / 1000}
    if exception is not None:
        attributes["error.type"] = type(exception).__name__
    current.events.append((began_ns, statement_name(query), attributes))


def _timed(method: str) -> Any:
    """The statement method ``method`` of the wrapped connection, with its event."""

    async def timed(self: Timed, query: str, *args: Any, **kwargs: Any) -> Any:
        began = time_ns()
        try:
            answer = await getattr(self._conn, method)(query, *args, **kwargs)
        except BaseException as exc:  # a cancelled statement too, as asyncpg's logger had it
            event(query, began, time_ns(), exc)
            raise
        event(query, began, time_ns(), None)
        return answer

    timed.__name__ = method
    return timed


class Timed:
    """``conn`` with an event per statement (see the module); any other attribute is ``conn``'s."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    execute = _timed("execute")
    executemany = _timed("executemany")  # its first argument is the statement too
    fetch = _timed("fetch")
    fetchrow = _timed("fetchrow")
    fetchval = _timed("fetchval")
