"""The 405 of a record's ``_``-named routes: ``Allow`` lists what the OpenAPI document says.

aiohttp's router answers a method no route takes with a 405 whose ``Allow`` is every method of
every route whose pattern matches the path. ``…/{id}/_approvals`` and ``…/_jobs/{job}`` also match
``POST …/{id}/{action}`` (``web.moves``), so their ``Allow`` named a POST they do not take, and
``…/_files/{field}`` named PUT and GET where the entity exposes only one of them. These catch-all
routes, registered after each path's own routes and before ``web.moves``, answer from the catalog
instead: the methods ``web.openapi`` documents for the path (:func:`allowed`, pure), or 404 where
the path names nothing that is served.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from dap.config.enums import FieldType
from dap.server import errors, state
from dap.server.catalog import Catalog

FILES = "/{ws}/api/{module}/{entity}/{id}/_files/{field}"
APPROVALS = "/{ws}/api/{module}/{entity}/{id}/_approvals"
JOBS = "/{ws}/api/{module}/{entity}/_jobs/{job}"


def allowed(catalog: Catalog, route: str, module: str, name: str, field: str = "") -> list[str]:
    """The methods of ``route`` (one of the paths above) for entity or service ``module/name``;
    empty when it serves none there."""
    key = f"{module}/{name}"
    resource = catalog.resources.get(key)
    if route == JOBS:
        return ["GET"] if resource is not None or key in catalog.services else []
    if resource is None:
        return []
    if route == APPROVALS:
        return ["GET"] if "find" in resource.actions else []
    f = resource.fields.get(field)
    if f is None or f.type is not FieldType.FILE:
        return []
    return [method for action, method in (("find", "GET"), ("update", "PUT")) if action in resource.actions]


def _answer(route: str) -> Handler:
    async def other_method(request: web.Request) -> web.Response:
        info = request.match_info
        methods = allowed(
            request.app[state.SPEC].current, route, info["module"], info["entity"], info.get("field", "")
        )
        if not methods:
            raise errors.NotFound("no such path is served here", code="SVC.ROUTE.NOT_FOUND")
        raise errors.MethodNotAllowed(f"{request.method} is not a method of this path", allow=methods)

    return other_method


def add_routes(app: web.Application) -> None:
    """After the paths' own routes (``web.files``, ``web.approvals``, ``web.jobs``), before ``web.moves``."""
    for route in (FILES, APPROVALS, JOBS):
        app.router.add_route("*", route, _answer(route))
