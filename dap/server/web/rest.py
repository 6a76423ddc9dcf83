"""REST handlers of the generated entity API (list, find, create, update, delete): thin adapters.

What each verb means lives in ``workflows.operations``, shared with the other protocols; a
handler here reads the path, headers and body, calls the verb and writes the HTTP answer.

Paths and bodies are those of ARCHITECTURE.md. A handler resolves the workspace (404 when it is
not registered), verifies the bearer token for that workspace (401), reads the catalog reference
once, checks that the entity opted into the action through ``expose`` (404 when the entity is not
exposed, 405 when the action is not), and then runs parameterised SQL that always carries the
workspace's ``tenant_id``. Uniqueness comes from the database's unique index (a
``UniqueViolationError`` names the constraint, which maps back to the field), never from a racy
pre-check.
"""

from __future__ import annotations

import logging

from aiohttp import web

from dap.server import errors, state
from dap.server.access import guards
from dap.server.catalog import Catalog, Resource
from dap.server.documents import idempotency, lifecycle
from dap.server.web import delivery, requests, services
from dap.server.workflows import operations

log = logging.getLogger(__name__)


_COLLECTION = (("list", "GET"), ("create", "POST"))
_ITEM = (("find", "GET"), ("update", "PATCH"), ("delete", "DELETE"))


# --- handlers: each decodes, calls the verb of ``workflows.operations`` and encodes ----------


async def list_records(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request, action="list")
    resource = requests.exposed(catalog, request, "list", siblings=_COLLECTION)
    page = await operations.list_records(
        requests.call(request, workspace, principal, catalog, resource), list(request.query.items())
    )
    return requests.reply(
        {"data": page.data, "limit": page.limit, "offset": page.offset, "total": page.total}
    )


async def find_record(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request, action="find")
    resource = _item(catalog, request, "find")
    call = requests.call(request, workspace, principal, catalog, resource)
    found = await operations.find(call, request.match_info["id"])
    return requests.json_response(found.body, found.etag)


async def create_record(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    resource = requests.exposed(catalog, request, "create", siblings=_COLLECTION)
    key = idempotency.key_of(request.headers)
    body = await requests.read_body(request)
    submit = lifecycle.create_submits(resource, request.query, body)  # ?submit=true
    call = requests.call(request, workspace, principal, catalog, resource)
    target = request.path_qs if key is not None else ""  # what an idempotency key's answer is kept for
    done = await operations.create(call, body, submit=submit, key=key, target=target)
    if done.replayed:
        return requests.respond(done.answer)
    settled = await delivery.settle(request, resource, "created", done.event)
    return delivery.stamp(requests.respond(done.answer), settled)


async def update_record(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    resource = _item(catalog, request, "update")
    guards.check(principal, resource, "update")  # 403 before the id, If-Match and body are read
    record_id = requests.parse_record_id(request)
    expected = requests.if_match(request)
    body = await requests.read_body(request)
    call = requests.call(request, workspace, principal, catalog, resource)
    done = await operations.update(call, record_id, body, expected=expected)
    settled = await delivery.settle(request, resource, "updated", done.event)
    return delivery.stamp(
        requests.reply({"data": done.data}, headers={"ETag": f'"{done.version}"'}),
        settled,
    )


async def delete_record(request: web.Request) -> web.Response:
    workspace, principal, catalog = await requests.resolve(request)
    resource = _item(catalog, request, "delete")
    guards.check(principal, resource, "delete")  # 403 before the id is read
    record_id = requests.parse_record_id(request)
    call = requests.call(request, workspace, principal, catalog, resource)
    event = await operations.delete(call, record_id, request.app.get(state.FILES))
    return delivery.stamp(
        web.Response(status=204), await delivery.settle(request, resource, "deleted", event)
    )


def _not_a_service_action(catalog: Catalog, request: web.Request) -> None:
    """``/{module}/{service}/{action}`` takes POST only (``web.services``): 405 for any other method
    of a served action, 404 for an action the service does not serve over REST."""
    module, name = request.match_info["module"], request.match_info["entity"]
    if services.target(catalog, module, name) != "service":
        return
    if not services.serves(catalog, module, name, request.match_info["id"]):
        raise errors.NotFound(f"{module}/{name} serves no such action", code="SVC.ACTION.NOT_FOUND")
    raise errors.MethodNotAllowed(f"{request.method} is not a method of a service action", allow=["POST"])


def _item(catalog: Catalog, request: web.Request, action: str) -> Resource:
    """The resource of a record's path opted into ``action``, after the service-action check
    (which a resource :func:`requests.exposed` found before passes: an entity exposed over REST
    is never a service's path, ``services.target``)."""
    match = request.match_info
    found = requests.routed(catalog).get((match["module"], match["entity"], action))
    if found is not None:
        return found
    _not_a_service_action(catalog, request)
    return requests.exposed(catalog, request, action, siblings=_ITEM)


async def _other_method(request: web.Request) -> web.Response:
    """Any other method on an entity's paths: 405 whose ``Allow`` lists what this entity exposes
    (the router's own 405 would list every route, exposed or not)."""
    catalog = request.app[state.SPEC].current
    module, name = request.match_info["module"], request.match_info["entity"]
    if "id" in request.match_info:
        _not_a_service_action(catalog, request)
    resource = catalog.resource(module, name)
    siblings = _ITEM if "id" in request.match_info else _COLLECTION
    exposed = [method for action, method in siblings if resource is not None and action in resource.actions]
    if resource is None or not exposed:
        raise errors.NotFound("no such entity is exposed over REST", code="SVC.ENTITY.NOT_FOUND")
    raise errors.MethodNotAllowed(f"{request.method} is not a method of this path", allow=exposed)


async def _post_item(request: web.Request) -> web.Response:
    """POST on a record's path: a service action where the catalog declares that service
    (``web.services``), else the 405 of any other method."""
    catalog = request.app[state.SPEC].current
    if services.target(catalog, request.match_info["module"], request.match_info["entity"]) == "service":
        return await services.service_action(request)
    return await _other_method(request)


# A module is an identifier (``[a-z][a-z0-9_]*``), so a segment starting with ``_`` is never one:
# ``/{ws}/api/_approvals/{id}`` and ``/{ws}/api/_notifications/read`` pass these routes by, and
# they can be registered first. The router tries every ``/{ws}/…`` route in registration order,
# one regular expression each, and these carry the load (find by id was the tenth).
COLLECTION_PATH = "/{ws}/api/{module:[^_/][^/]*}/{entity}"
ITEM_PATH = COLLECTION_PATH + "/{id}"


def add_routes(app: web.Application) -> None:
    """The entity routes; registered before every other ``/{ws}/…`` route (see ``COLLECTION_PATH``).
    A record's path first: no path matches both (an entity segment never holds a ``/``), and three
    of the five verbs -- find, update, delete -- then match the first expression tried."""
    app.router.add_get(ITEM_PATH, find_record, allow_head=False)
    app.router.add_patch(ITEM_PATH, update_record)
    app.router.add_delete(ITEM_PATH, delete_record)
    app.router.add_post(ITEM_PATH, _post_item)
    app.router.add_route("*", ITEM_PATH, _other_method)
    app.router.add_get(COLLECTION_PATH, list_records, allow_head=False)
    app.router.add_post(COLLECTION_PATH, create_record)
    app.router.add_route("*", COLLECTION_PATH, _other_method)
