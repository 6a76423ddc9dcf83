"""The handlers of ``dap.sagas.v1.SagaService``: a person's view of sagas, and decisions on them.

Thin adapters over ``workflows.saga_decisions``, the operation REST (``/{ws}/api/_sagas``) and the
websocket (``_saga_*``) run: the same inbox, the same 404 to whoever may not read a saga, the same
permission (403 PERMISSION_DENIED), 409 ``SVC.SAGA.NOT_PARKED`` (ABORTED) for a saga that is not
parked, 422 ``SVC.SAGA.REASON_REQUIRED`` / ``SVC.SAGA.RESOLUTION_INVALID`` (INVALID_ARGUMENT), and
the same audit row. The caller is named as for every service (``services.caller``: the metadata
``dap-workspace`` and ``authorization``); a decision wakes the process's saga engine.
"""

from __future__ import annotations

import uuid
from typing import Any

import grpc
import orjson
from aiohttp import web
from google.protobuf import message, message_factory
from google.protobuf.descriptor_pool import DescriptorPool

from dap.server import state
from dap.server.rpc import codec, sagas_schema, services
from dap.server.workflows import operations, saga_decisions

DEFAULT_LIMIT = 100


class SagaService:
    """The handlers of the saga service over the application's shared state."""

    def __init__(self, app: web.Application, pool: DescriptorPool) -> None:
        self.app = app
        self.saga_class = self._class(pool, "Saga")
        self.page_class = self._class(pool, "ListSagasResponse")

    @staticmethod
    def _class(pool: DescriptorPool, name: str) -> type[message.Message]:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{sagas_schema.PACKAGE}.{name}"))

    def _saga(self, view: dict[str, Any], out: message.Message | None = None) -> message.Message:
        """The message of a saga's view (its JSON as REST answers it)."""
        return codec.encode(orjson.loads(operations.encode(view)), out or self.saga_class())

    async def list(self, request: Any, context: Any) -> message.Message:
        workspace, principal = await services.caller(self.app, context, optional=True)
        limit = request.limit if request.HasField("limit") else DEFAULT_LIMIT
        wanted = request.state if request.HasField("state") else None
        catalog = self.app[state.SPEC].current
        data = await saga_decisions.inbox(
            self.app[state.POOL], catalog, workspace.tenant_id, principal, wanted, limit, request.offset
        )
        page: Any = self.page_class(limit=limit, offset=request.offset)
        for view in data:
            self._saga(view, page.data.add())
        return page  # type: ignore[no-any-return]

    async def get(self, request: Any, context: Any) -> message.Message:
        workspace, principal = await services.caller(self.app, context, optional=True)
        catalog = self.app[state.SPEC].current
        view = await saga_decisions.find(
            self.app[state.POOL], catalog, workspace.tenant_id, principal, request.id
        )
        return self._saga(view)

    def decision(self, op: str) -> services.Handler:
        """The handler of ``op`` (retry, skip, resolve) on a parked saga."""

        async def run(request: Any, context: Any) -> message.Message:
            workspace, principal = await services.caller(self.app, context, optional=True)
            body = {k: v for k, v in codec.decode(request).items() if k != "id"}
            md = services.metadata_of(context)
            view = await saga_decisions.settle(
                self.app[state.POOL],
                self.app[state.SPEC].current,
                workspace.tenant_id,
                principal,
                request.id,
                op,
                body,
                md.get("x-request-id") or uuid.uuid4().hex,
            )
            self.app[state.WORKER].saga_wake()  # the engine takes the saga on now, not at its next poll
            return self._saga(view)

        return run


def methods(app: web.Application, pool: DescriptorPool) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """The method handlers of ``SagaService`` by path (the catalog declares a saga action)."""
    saga = SagaService(app, pool)
    handlers: dict[str, services.Handler] = {"List": saga.list, "Get": saga.get}
    handlers |= {name: saga.decision(name.lower()) for name in sagas_schema.DECISIONS}
    out: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for m in pool.FindServiceByName(sagas_schema.SERVICE).methods:
        request_class = message_factory.GetMessageClass(m.input_type)
        response_class = message_factory.GetMessageClass(m.output_type)
        # bytes in, decoded by the handler (``services.decoded``), errors as statuses
        out[f"/{sagas_schema.SERVICE}/{m.name}"] = grpc.unary_unary_rpc_method_handler(
            services.unary(handlers[m.name], request_class),
            response_serializer=response_class.SerializeToString,
        )
    return out
