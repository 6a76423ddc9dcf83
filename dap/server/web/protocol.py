"""Problem documents for the requests aiohttp refuses before any application code runs.

A request line or header past aiohttp's limits, or bytes that are not HTTP, never reach the
middleware: aiohttp's protocol handler answers them itself, in plain text. Clients of a JSON API
should get the same RFC 9457 document for those as for every other 4xx, so the runners here make
their servers' protocol handlers answer client errors with ``errors.problem_response``.

aiohttp offers no hook for this, so :class:`AppRunner` swaps the class of the low-level server it
builds for a subclass whose protocol handler overrides ``handle_error`` (aiohttp's documented
low-level ``RequestHandler``). Server errors (5xx) keep aiohttp's own answer.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from dap.server import errors

log = logging.getLogger(__name__)


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
        log.debug("refused an unparsable request from %s: %s", request.remote, message)
        if isinstance(exc, LineTooLong):  # its message quotes the offending bytes back
            detail = "the request line or a header field is longer than this server accepts"
        else:
            detail = f"the request could not be read: {(message or 'malformed HTTP')[:200]}"
        response = errors.problem_response(errors.OtherHttpError(status, detail))
        response.force_close()
        return response


class _ProblemServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _ProblemRequestHandler(self, loop=self._loop, **self._kwargs)


class AppRunner(web.AppRunner):
    """``web.AppRunner`` whose connections answer aiohttp's own 4xx refusals as problem documents."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _ProblemServer  # same state, one overridden method
        return server
