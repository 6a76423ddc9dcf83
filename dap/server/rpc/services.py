"""The gRPC handlers of the exposed entities: thin adapters over ``workflows.operations``.

A call names its workspace in the metadata ``dap-workspace`` (else the server's ``--workspace``)
and its caller in ``authorization: Bearer <token>``, verified as REST verifies it (the same
verifier, bound to the workspace). The verb then runs through the same operation REST runs --
permissions, field permissions, row scope, the document lifecycle, ``idempotency-key`` (metadata)
-- and its errors become statuses (``status``). Output-only fields of a record message (``id``,
``version``, ``docstatus``, dates, ``owner``) are ignored on input, as AIP-203 has it.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import grpc
import orjson
from aiohttp import web
from google.protobuf import message, message_factory
from google.protobuf.descriptor_pool import DescriptorPool

from dap.config.actions import Action
from dap.config.enums import ProtocolType
from dap.server import errors, identity, state
from dap.server.access import auth, guards
from dap.server.catalog import Resource, machines
from dap.server.documents import idempotency, lifecycle
from dap.server.events import builtin
from dap.server.rpc import codec, descriptors, jobs_schema, shapes, status
from dap.server.storage.workspaces import Workspace
from dap.server.workflows import acting, operations, sidecars, watching

log = logging.getLogger(__name__)

WORKSPACE = "dap-workspace"
IDEMPOTENCY = "idempotency-key"
DELIVERY = "event-delivery"  # trailing metadata: REST's Event-Delivery header
OUTPUT_ONLY = frozenset(name for name, _t, _o in descriptors.SYSTEM)
MAX_PAGES = 10_000  # a List stream ends past this many pages, whatever the table holds

Metadata = Mapping[str, str]
Handler = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]


def metadata_of(context: grpc.aio.ServicerContext[Any, Any]) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


@dataclass(frozen=True)
class EntityService:
    """The handlers of one entity's service, over the application's shared state."""

    app: web.Application
    entity: descriptors.Entity
    classes: Mapping[str, type[message.Message]]  # message name -> class

    @property
    def key(self) -> str:
        return self.entity.resource.key

    async def _call(
        self, context: grpc.aio.ServicerContext[Any, Any], verb: str, *, action: bool = False
    ) -> operations.Call:
        app, md = self.app, metadata_of(context)
        slug = md.get(WORKSPACE) or app[state.OPTIONS].workspace
        if not slug:
            raise errors.NotFound(
                f"name the workspace in the metadata {WORKSPACE}", code="SVC.WORKSPACE.NOT_FOUND"
            )
        workspace = await app[state.REGISTRY].resolve(slug)
        catalog = app[state.SPEC].current
        resource: Resource | None = catalog.grpc.get(self.key)
        served = resource is not None and (
            verb in descriptors.exposed_actions(resource) if action else verb in resource.actions
        )
        if resource is None or not served:  # a catalog swapped since the boot
            raise errors.NotFound(
                f"{self.key} does not expose {verb} over gRPC", code="SVC.ACTION.NOT_EXPOSED"
            )
        header = md.get("authorization")
        module, name = self.key.split("/", 1)
        if header is None and guards.open_to_anonymous(catalog, {"module": module, "entity": name}, verb):
            principal = guards.anonymous(workspace.slug)
        else:
            principal = await identity.authenticate(
                app, auth.bearer_token(header), workspace=workspace.slug, bind=True
            )
        request_id = md.get("x-request-id") or uuid.uuid4().hex
        return operations.Call(
            app[state.POOL],
            app[state.CACHE],
            workspace,
            principal,
            catalog,
            resource,
            request_id,
            app[state.EVENTS].local_wake(),
        )

    def _record(self, data: Mapping[str, Any]) -> message.Message:
        return codec.encode(data, self.classes[self.entity.message]())

    def _json(self, data: Any) -> Any:
        """The JSON REST answers for ``data`` (exact numbers as strings, dates as ISO text)."""
        return orjson.loads(operations.encode(data))

    async def _settle(
        self, context: Any, event: str, public_id: uuid.UUID | None, resource: Resource
    ) -> None:
        settled = await operations.settle(self.app[state.EVENTS].feed, resource, event, public_id)
        if settled is not None:
            context.set_trailing_metadata(((DELIVERY, settled),))

    async def get(self, request: Any, context: Any) -> message.Message:
        call = await self._call(context, "find")
        found = await operations.find(call, request.id)
        return self._record(orjson.loads(found.body)["data"])

    async def list(self, request: Any, context: Any) -> AsyncIterator[message.Message]:
        call = await self._call(context, "list")
        pairs = parse_qsl(request.query, keep_blank_values=True)
        page_class = self.classes[f"List{self.entity.message}Page"]
        for _ in range(MAX_PAGES):
            page = await operations.list_records(call, pairs)
            out: Any = page_class(limit=page.limit, offset=page.offset)
            if page.total is not None:
                out.total = page.total
            for row in self._json(page.data):
                codec.encode(row, out.data.add())
            yield out
            if page.limit <= 0 or len(page.data) < page.limit:
                return
            pairs = [(k, v) for k, v in pairs if k not in ("offset", "count")]
            pairs.append(("offset", str(page.offset + page.limit)))

    async def watch(self, request: Any, context: Any) -> AsyncIterator[message.Message]:
        """The entity's delivered events the caller may see (the websocket's rules), resumable
        with ``after``; the stream ends when the caller cancels it or the server stops."""
        call = await self._call(context, "find")
        access = guards.check(call.principal, call.resource, "find")
        watch = watching.Watch(call.resource, access, watching.record_of(request.record), request.mine)
        after = request.after if request.HasField("after") else None
        event_class = self.classes[f"{self.entity.message}Event"]
        hub = self.app[state.EVENTS].feed
        async for seq, shown in watching.stream(hub, call.pool, call.tenant, watch, after):
            out: Any = event_class(seq=seq)
            for name in descriptors.EVENT_FIELDS[1:]:
                if shown.get(name) is not None:
                    setattr(out, name, shown[name])
            payload = self._json(shown.get("payload") or {})
            record = payload.get("record") if isinstance(payload, dict) else None
            if isinstance(record, dict):
                codec.encode(record, out.record)
            codec.encode({"payload": payload}, out)
            yield out

    async def create(self, request: Any, context: Any) -> message.Message:
        call = await self._call(context, "create")
        key = idempotency.key_of(metadata_of(context), IDEMPOTENCY)
        body = {k: v for k, v in codec.decode(request.record).items() if k not in OUTPUT_ONLY}
        query = {"submit": "true"} if request.submit else {}
        submit = lifecycle.create_submits(call.resource, query, body)
        target = call.location("").rstrip("/") + ("?submit=true" if submit else "")
        done = await operations.create(call, body, submit=submit, key=key, target=target)
        if not done.replayed:
            await self._settle(context, "created", done.event, call.resource)
        return self._record(orjson.loads(done.answer.body)["data"])

    async def update(self, request: Any, context: Any) -> message.Message:
        call = await self._call(context, "update")
        guards.check(call.principal, call.resource, "update")  # 403 before the mask's 422, as REST
        paths = list(request.update_mask.paths) if request.HasField("update_mask") else None
        body = codec.decode(request.record, only=paths or None)
        body = {k: v for k, v in body.items() if k not in OUTPUT_ONLY}
        expected = request.version if request.HasField("version") else None
        done = await operations.update(call, request.id, body, expected=expected)
        await self._settle(context, "updated", done.event, call.resource)
        return self._record(self._json(done.data))

    async def delete(self, request: Any, context: Any) -> message.Message:
        call = await self._call(context, "delete")
        event = await operations.delete(call, request.id, self.app.get(state.FILES))
        await self._settle(context, "deleted", event, call.resource)
        return self.classes["google.protobuf.Empty"]()

    def action(self, name: str) -> Handler:
        """The handler of the record action ``name`` (a lifecycle move or a custom action)."""

        async def run(request: Any, context: Any) -> message.Message:
            call = await self._call(context, name, action=True)
            resource = call.resource
            access = guards.check(call.principal, resource, name)  # required_permission, hidden fields
            expected = request.version if request.HasField("version") else None
            result = f"{self.entity.message}ActionResult"  # absent when every action is a job's
            out: Any = self.classes[result]() if result in self.classes else None
            if name in lifecycle.MOVES and resource.lifecycle:
                moved = await operations.move(call, access, name, request.id, expected=expected)
                await self._settle(context, builtin.NAMES[name], moved.event, resource)
                codec.encode(self._json(moved.data), out.data)
                return out  # type: ignore[no-any-return]
            plan = resource.workflow[name]
            declared = plan.declared
            invoker = self.app.get(sidecars.INVOKER)
            handler = acting.prepare(resource, plan, ProtocolType.GRPC, invoker)  # 404, 501, 422 first
            record_id = operations.parse_id(request.id)
            body = codec.decode_struct(request.params) if request.HasField("params") else {}
            md = metadata_of(context)
            done = await acting.record_action(
                call,
                access,
                plan,
                handler,
                record_id,
                body,
                raw=acting.json_text(body),
                expected=expected,
                key=md.get(acting.key_header(declared).lower()) if declared is not None else None,
                target=f"{call.location(record_id)}/{name}",
                ip=peer_ip(context),
                queue=_queue(self.app, declared, md),
            )
            answer = orjson.loads(done.answer.body)
            if acting.is_async(declared):
                return _job(self.classes, answer["data"])
            if declared is not None and declared.emits and done.event is not None:
                await self._settle(context, declared.emits, done.event, resource)
            codec.encode(answer["data"], out.data)
            if answer.get("transition"):
                out.transition_from = answer["transition"]["from"]
                out.transition_to = answer["transition"]["to"]
            codec.encode(
                {k: answer.get(k) for k in ("result", "event", "approval") if answer.get(k) is not None}, out
            )
            return out  # type: ignore[no-any-return]

        return run

    async def get_job(self, request: Any, context: Any) -> message.Message:
        """REST's ``GET …/_jobs/{id}``: a job of this entity's actions, to the caller who started it."""
        workspace, principal = await caller(self.app, context, optional=True)
        view = await acting.find_job(
            self.app[state.POOL], workspace.tenant_id, self.key, request.id, principal.sub
        )
        return _job(self.classes, view)


def peer_ip(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """The caller's address without its port (``ipv4:127.0.0.1:5000`` → ``127.0.0.1``), as REST's
    ``request.remote``: the key of an ``ip`` rate limit."""
    peer = context.peer() or ""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1 : rest.find("]")] if "]" in rest else rest
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    return peer


def _queue(app: web.Application, declared: Action | None, md: Metadata) -> acting.Queue:
    """The process's job queue, with the callback URL the metadata names (the action's
    ``callback.header``, lower-cased)."""
    header = acting.callback_header(declared) if declared is not None else None
    url = md.get(header.lower(), "").strip() if header is not None else ""
    return acting.Queue(app[state.WORKER], url or None)


def _job(classes: Mapping[str, type[message.Message]], view: Mapping[str, Any]) -> message.Message:
    return codec.encode(view, classes[jobs_schema.JOB.lstrip(".")]())


async def caller(
    app: web.Application, context: grpc.aio.ServicerContext[Any, Any], *, optional: bool
) -> tuple[Workspace, auth.Principal]:
    """The workspace the metadata names and its verified caller (anonymous without a token when
    ``optional``)."""
    md = metadata_of(context)
    slug = md.get(WORKSPACE) or app[state.OPTIONS].workspace
    if not slug:
        raise errors.NotFound(
            f"name the workspace in the metadata {WORKSPACE}", code="SVC.WORKSPACE.NOT_FOUND"
        )
    workspace = await app[state.REGISTRY].resolve(slug)
    header = md.get("authorization")
    if header is None and optional:
        return workspace, guards.anonymous(workspace.slug)
    principal = await identity.authenticate(
        app, auth.bearer_token(header), workspace=workspace.slug, bind=True
    )
    return workspace, principal


APP_METADATA = "dap-app"  # a service call made through an app names it here (issue 47)


@dataclass(frozen=True)
class ServiceActions:
    """The handlers of one ``Service`` manifest's gRPC service: its actions, and ``GetJob``."""

    app: web.Application
    entry: descriptors.ServiceEntry
    classes: Mapping[str, type[message.Message]]

    @property
    def key(self) -> str:
        return self.entry.plan.key

    def _service(self) -> machines.ServicePlan:
        service = self.app[state.SPEC].current.grpc_services.get(self.key)
        if service is None:  # a catalog swapped since the boot
            raise errors.NotFound(f"{self.key} is not exposed over gRPC", code="SVC.ACTION.NOT_FOUND")
        return service

    def action(self, name: str) -> Handler:
        async def run(request: Any, context: Any) -> message.Message:
            service = self._service()
            plan = acting.plan_of(service, name, ProtocolType.GRPC)
            declared = plan.declared
            assert declared is not None
            workspace, principal = await caller(self.app, context, optional=declared.public)
            catalog = self.app[state.SPEC].current
            md = metadata_of(context)
            # the app the call is made through, metadata ``dap-app`` (``acting.on_behalf``)
            pool = self.app[state.POOL]
            await acting.admit(pool, workspace, catalog, principal, service, plan, md.get(APP_METADATA))
            handler = acting.service_handler(
                catalog, principal, service, plan, self.app.get(sidecars.INVOKER)
            )
            body = codec.decode_struct(request.params) if request.HasField("params") else {}
            call = acting.ServiceCall(
                self.app[state.POOL],
                workspace,
                principal,
                service,
                plan,
                md.get("x-request-id") or uuid.uuid4().hex,
            )
            answer = await acting.service_action(
                call,
                handler,
                body,
                raw=acting.json_text(body),
                key=md.get(acting.key_header(declared).lower()),
                target=f"/{workspace.slug}/api/{service.key}/{name}",
                ip=peer_ip(context),
                queue=_queue(self.app, declared, md),
            )
            data = orjson.loads(answer.body)
            if acting.is_async(declared):
                return _job(self.classes, data["data"])
            return codec.encode(data, self.classes[f"{self.entry.message}ActionResult"]())

        return run

    async def get_job(self, request: Any, context: Any) -> message.Message:
        self._service()
        workspace, principal = await caller(self.app, context, optional=True)
        view = await acting.find_job(
            self.app[state.POOL], workspace.tenant_id, self.key, request.id, principal.sub
        )
        return _job(self.classes, view)


def decoded(request_class: type[message.Message], raw: bytes) -> message.Message:
    """The request message of ``raw``; 400 ``SVC.REQUEST.MALFORMED`` (INVALID_ARGUMENT) when the
    bytes are not one. Decoded here, in the handler, not by grpcio: an exception in grpcio's
    request deserializer answers UNKNOWN with the exception's class in the status message."""
    try:
        return request_class.FromString(raw)
    except message.DecodeError:
        name = request_class.DESCRIPTOR.full_name
        raise errors.BadRequest(
            f"the request is not a valid {name} message: send the protobuf encoding of {name} "
            "(the schema is served by server reflection and printed by `dap schema --proto`)"
        ) from None


def unary(fn: Handler, request_class: type[message.Message]) -> Handler:
    async def handler(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            return await fn(decoded(request_class, raw), context)
        except errors.ApiError as exc:
            await context.abort_with_status(status.of(exc))
        except Exception:
            log.exception("gRPC call failed")
            await context.abort_with_status(status.of(errors.InternalError("internal server error")))

    return handler


def _streaming(
    fn: Callable[[Any, Any], AsyncIterator[Any]], request_class: type[message.Message]
) -> Callable[[Any, Any], AsyncIterator[Any]]:
    async def handler(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        try:
            async for item in fn(decoded(request_class, raw), context):
                yield item
        except errors.ApiError as exc:
            await context.abort_with_status(status.of(exc))
        except Exception:
            log.exception("gRPC stream failed")
            await context.abort_with_status(status.of(errors.InternalError("internal server error")))

    return handler


def _classes(pool: DescriptorPool, name: str) -> dict[str, type[message.Message]]:
    """The messages of service ``name``'s package by short name (its file holds them all), with
    Empty and the job (by full name)."""
    service_desc = pool.FindServiceByName(name)
    classes: dict[str, type[message.Message]] = {
        n: message_factory.GetMessageClass(d) for n, d in service_desc.file.message_types_by_name.items()
    }
    for full in ("google.protobuf.Empty", jobs_schema.JOB.lstrip(".")):
        with contextlib.suppress(KeyError):  # no job anywhere: no jobs file
            classes[full] = message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
    return classes


def methods(
    app: web.Application,
    pool: DescriptorPool,
    entities: list[descriptors.Entity],
    services: list[descriptors.ServiceEntry],
) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """The method handlers of every entity service (:class:`EntityService`) and ``Service``
    manifest (:class:`ServiceActions`), by path (``/package.Service/Method``)."""
    out: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    targets: list[tuple[str, Any, dict[str, str]]] = []
    for e in entities:
        entity = EntityService(app, e, _classes(pool, e.service))
        targets.append(
            (e.service, entity, {shapes.camel(a): a for a in descriptors.exposed_actions(e.resource)})
        )
    for s in services:
        actions_of = ServiceActions(app, s, _classes(pool, s.service))
        targets.append(
            (s.service, actions_of, {shapes.camel(a): a for a in descriptors.service_actions(s.plan)})
        )
    for name, service, actions_by_method in targets:
        service_desc = pool.FindServiceByName(name)
        for m in service_desc.methods:
            request_class = message_factory.GetMessageClass(m.input_type)
            response_class = message_factory.GetMessageClass(m.output_type)
            fn: Any = (
                service.get_job
                if m.name == "GetJob"
                else getattr(service, m.name.lower())
                if m.name in descriptors.VERBS
                else service.action(actions_by_method[m.name])
            )
            path = f"/{name}/{m.name}"
            # no request deserializer: the handler takes the bytes and decodes them (``decoded``)
            if m.server_streaming:
                out[path] = grpc.unary_stream_rpc_method_handler(
                    _streaming(fn, request_class), response_serializer=response_class.SerializeToString
                )
            else:
                out[path] = grpc.unary_unary_rpc_method_handler(
                    unary(fn, request_class), response_serializer=response_class.SerializeToString
                )
    return out
