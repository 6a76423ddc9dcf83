"""``GET /logs`` on the admin listener: the process's recent log lines, filtered.

Reads :data:`dap.logs.WINDOW` (the last lines of this process, bounded, and with ``--logs-file``
the rotating files on disk, read in a thread) through the filter language of :mod:`dap.logquery`.
Log lines name workspaces, request ids and error texts, so the route is
mounted with the other admin-secret routes only. Query parameters:

- ``filter``: e.g. ``level>=warn workspace=acme``; one that does not parse is 400
  ``LOGS_FILTER_INVALID`` whose ``position`` (and ``errors[0].message``) points at the culprit;
- ``since``: ``5m``, ``90s``, ``2h`` back from now, or an ISO 8601 time;
- ``limit``: 1 to 1000 (default 100): the newest matches, answered oldest first, with ``more``
  true when older ones matched too.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web

from dap import logquery, logs
from dap.server import errors

MAX_LIMIT = 1000
CODE = "LOGS_FILTER_INVALID"


class FilterInvalid(errors.BadRequest):
    """400 ``LOGS_FILTER_INVALID`` with the offending character's position as an extension member."""

    def __init__(self, parameter: str, problem: logquery.FilterError) -> None:
        super().__init__(
            f"{parameter} does not parse: {problem.message} at position {problem.position}; "
            "see docs/observability.md for the filter language",
            code=CODE,
            errors=[errors.FieldProblem(parameter, f"{problem.message} (position {problem.position})")],
        )
        self.position = problem.position
        self.parameter = parameter

    def problem(self) -> dict[str, Any]:
        return {**super().problem(), "position": self.position, "parameter": self.parameter}


def _limit(raw: str | None) -> int:
    if raw is None:
        return 100
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise errors.BadRequest(f"limit must be a whole number from 1 to {MAX_LIMIT}", code=CODE)
    return int(raw)


def answer(window: logs.Window, query: dict[str, str], now: float) -> dict[str, Any]:
    """The ``/logs`` body for ``query`` over ``window`` (the handler's pure part)."""
    try:
        predicate = logquery.parse(query.get("filter", ""))
    except logquery.FilterError as exc:
        raise FilterInvalid("filter", exc) from None
    since = None
    if query.get("since"):
        try:
            since = logquery.since(query["since"], now)
        except logquery.FilterError as exc:
            raise FilterInvalid("since", exc) from None
    found, more = window.query(predicate, since=since, limit=_limit(query.get("limit")))
    return {"data": [e.as_json() for e in found], "more": more, "window": window.size}


async def handler(request: web.Request) -> web.Response:
    query, now = dict(request.query), time.time()
    if logs.WINDOW.disk is None:  # memory only: milliseconds, answered on the loop
        body = answer(logs.WINDOW, query, now)
    else:  # the disk's lines are parsed as they are read (seconds for a whole 64 MiB): off the loop
        body = await asyncio.to_thread(answer, logs.WINDOW.frozen(), query, now)
    return web.json_response(body, dumps=_dumps)


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str)
