"""Problem documents for the requests aiohttp refuses before any application code runs.

A request line or header past aiohttp's limits, or bytes that are not HTTP, never reach the
middleware: aiohttp's protocol handler answers them itself, in plain text. Clients of a JSON API
should get the same RFC 9457 document for those as for every other 4xx, so the runners here make
their servers' protocol handlers answer client errors with ``errors.problem_response``.

aiohttp offers no hook for this, so :class:`AppRunner` swaps the class of the low-level server it
builds for a subclass whose protocol handler overrides ``handle_error`` (aiohttp's documented
low-level ``RequestHandler``). Server errors (5xx) keep aiohttp's own answer.

aiohttp answers every such refusal 400. The ones with a status of their own get it: a header
field past :data:`MAX_HEADER_FIELD` bytes (a long bearer token, a cookie) or more than
:data:`MAX_HEADERS` fields is 431, a request line past :data:`MAX_REQUEST_LINE` bytes is 414.
aiohttp's ``LineTooLong`` does not say which of the two it measured, only the limit it passed, so
the two limits differ (8 KiB and 8190 bytes) and the limit tells them apart. Every other refusal stays 400,
titled ``Bad request``.

An application may name a :data:`FRONT`: the handler the server calls for every request, given
the application's own handler to call (``web.app`` puts its request id, CORS, problem documents
and metrics there instead of in an aiohttp middleware, which aiohttp wraps once more per request).
An application with a front is served only by these runners.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from dap.server import errors

log = logging.getLogger(__name__)
# the front gets the application's handler first, the request second (``functools.partial``)
Front = Callable[[Handler, web.Request], Awaitable[web.StreamResponse]]
FRONT: web.AppKey[Front] = web.AppKey("front")
MAX_REQUEST_LINE = 8190  # bytes of the request line (aiohttp's default)
MAX_HEADER_FIELD = 8192  # bytes of one header field, name and value (8 KiB; not the line limit: see above)
MAX_HEADERS = 128  # header fields (aiohttp's default)


def refusal(exc: BaseException | None, message: str | None) -> errors.ApiError:
    """The problem of a request aiohttp's parser refused (pure; never quotes the offending bytes)."""
    if isinstance(exc, LineTooLong) and str(exc.args[1]) == str(MAX_HEADER_FIELD):
        return errors.HeaderFieldsTooLarge(
            f"a header field is longer than this server accepts ({MAX_HEADER_FIELD} bytes, name and "
            "value): send a shorter one (a bearer token this long is no token this server issued)"
        )
    if isinstance(exc, LineTooLong):
        return errors.UriTooLong(
            f"the request line is longer than this server accepts ({MAX_REQUEST_LINE} bytes): "
            "shorten the path and query"
        )
    if isinstance(exc, BadHttpMessage) and "too many headers" in str(exc.message).lower():
        return errors.HeaderFieldsTooLarge(f"the request has more than {MAX_HEADERS} header fields")
    return errors.BadRequest(f"the request could not be read: {(message or 'malformed HTTP')[:200]}")


class _ProblemRequestHandler(RequestHandler):
    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not 400 <= status < 500 or request.writer.output_size > 0:
            return super().handle_error(request, status, exc, message)
        log.debug("refused an unparsable request from %s: %s", request.remote, type(exc).__name__)
        response = errors.problem_response(
            refusal(exc, message) if status == 400 else errors.OtherHttpError(status, message or "")
        )
        response.force_close()
        return response


class _ProblemServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _ProblemRequestHandler(self, loop=self._loop, **self._kwargs)


class AppRunner(web.AppRunner):
    """``web.AppRunner`` whose connections answer aiohttp's own 4xx refusals as problem documents."""

    def __init__(self, app: web.Application, **kwargs: Any) -> None:
        kwargs.setdefault("max_line_size", MAX_REQUEST_LINE)
        kwargs.setdefault("max_field_size", MAX_HEADER_FIELD)
        kwargs.setdefault("max_headers", MAX_HEADERS)
        super().__init__(app, **kwargs)

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _ProblemServer  # same state, one overridden method
        front = self.app.get(FRONT)
        if front is not None:  # in front of the application's handler (set before any connection)
            # the runner's request factory makes every request a ``web.Request``
            server.request_handler = cast(Any, functools.partial(front, server.request_handler))
        return server


def matched(request: BaseRequest) -> web.UrlMappingMatchInfo | None:
    """The router's answer for ``request`` once the application's handler has routed it, else
    ``None`` (aiohttp's ``Request.match_info`` asserts it is set, and keeps its first answer)."""
    found = getattr(request, "_match_info", None)
    return found if isinstance(found, web.UrlMappingMatchInfo) else None
