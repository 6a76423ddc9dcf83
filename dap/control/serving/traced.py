"""A server span per control request (``POST /v1/artifacts``, ``GET /v1/snapshot`` …), with tracing on.

The control plane's share of issue 45's traces: a registration and a snapshot pull are spans of
the caller's trace, because the span continues the ``traceparent`` header ``dap register``, a
resource pod and a cluster control send. The span is named by the route template (never by a
path's ids), holds the status and, through :func:`note`, what the handler knows: the app, the
artifact and version registered; the workspace, cluster and snapshot version served.

Off, :func:`middlewares` adds nothing: ``build_app`` asks once, and the control's requests run
exactly as before (``dap.tracing``'s "no cost when off").
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dap import tracing

SPAN: web.RequestKey[Any] = web.RequestKey("span", object)


def middlewares() -> list[Any]:
    """The tracing middleware when tracing is on (outermost: it sees the problem documents' status)."""
    return [_traced] if tracing.enabled() else []


@web.middleware
async def _traced(request: web.Request, handler: Any) -> web.StreamResponse:
    parent = request.headers.get(tracing.TRACEPARENT)
    with tracing.span(request.method, kind="server", parent=parent) as span:
        if not tracing.recording(span):  # a trace the sampler dropped: nothing more to do
            return await handler(request)  # type: ignore[no-any-return]
        request[SPAN] = span
        response: web.StreamResponse = await handler(request)
        route = request.match_info.route.resource
        template = route.canonical if route is not None else "unmatched"
        tracing.rename(span, f"{request.method} {template}")
        tracing.annotate(
            span,
            **{
                "http.request.method": request.method,
                "http.route": template,
                "http.response.status_code": response.status,
            },
        )
        tracing.failed(span, response.status)
        return response


def note(request: web.Request, **attributes: Any) -> None:
    """Attributes on the request's span (``dap.app``, ``dap.snapshot_version`` …); nothing when off."""
    span = request.get(SPAN)
    if span is not None:
        tracing.annotate(span, **attributes)
