"""A span per gRPC call (``dap.tracing``), continuing the ``traceparent`` metadata entry when the
client sends one. Installed as a server interceptor only while tracing is on (off, the server has
no interceptor at all). Unary calls and server streams (``Watch``, ``List``) are the shapes dap's
services have; the stream's span lasts until the stream ends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from dap import tracing


class Tracing(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(details)
        if handler is None or not tracing.enabled():
            return handler
        metadata = {k: v for k, v in (getattr(details, "invocation_metadata", None) or ())}
        parent = metadata.get(tracing.TRACEPARENT)
        method = str(details.method)
        attributes = {"rpc.system": "grpc", "rpc.method": method}
        name = method.lstrip("/")
        if handler.unary_unary is not None:
            unary = handler.unary_unary

            async def traced_unary(request: Any, context: Any) -> Any:
                with tracing.span(name, kind="server", parent=parent, attributes=attributes):
                    return await unary(request, context)

            return grpc.unary_unary_rpc_method_handler(
                traced_unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            stream: Any = handler.unary_stream  # an async generator function on grpc.aio

            async def traced_stream(request: Any, context: Any) -> AsyncIterator[Any]:
                with tracing.span(name, kind="server", parent=parent, attributes=attributes):
                    async for item in stream(request, context):
                        yield item

            return grpc.unary_stream_rpc_method_handler(
                traced_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler
