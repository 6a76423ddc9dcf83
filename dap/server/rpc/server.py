"""The gRPC listener of ``dap serve --grpc-addr``: built from the catalog served, beside the HTTP one.

:func:`attach` (a ``dap.server.cli.ATTACH`` hook, also called by tests) adds the listener to the
application's start and shutdown, in the same event loop as the HTTP server and sharing its pool,
caches, verifier and event feed. The descriptors come from ``descriptors`` into a pool of this
server's own (never the process-wide default, so that two servers in a process never clash), and
gRPC server reflection serves them, so ``grpcurl`` lists, describes and calls the services with no
``.proto`` file. The schema follows a catalog swap (:class:`RpcServer`: rebuilt by the first call
after it), so a newly exposed entity or service needs no restart. TLS follows REST's:
``--tls-cert``/``--tls-key`` serve both.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from aiohttp import web
from google.protobuf import (
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    struct_pb2,
)
from google.rpc import error_details_pb2, status_pb2
from grpc_reflection.v1alpha import reflection, reflection_pb2

from dap import tracing
from dap.server import errors, options, state
from dap.server.catalog import Catalog
from dap.server.rpc import descriptors, sagas, sagas_schema, services, status, traced

log = logging.getLogger(__name__)

GRACE = 5.0  # seconds in-flight calls get at shutdown


def pool_of(protos: list[descriptor_pb2.FileDescriptorProto]) -> descriptor_pool.DescriptorPool:
    """A descriptor pool holding the well-known files the schema imports, the error details a
    status carries (so that reflection lets a client decode them), then ``protos``."""
    pool = descriptor_pool.DescriptorPool()
    known = (struct_pb2, empty_pb2, field_mask_pb2, any_pb2, duration_pb2, error_details_pb2, status_pb2)
    for module in known:
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    for proto in protos:
        pool.Add(proto)
    return pool


@dataclass(frozen=True)
class Schema:
    """The gRPC face of one catalog: its descriptors, method handlers by path and service names."""

    catalog: Catalog
    pool: descriptor_pool.DescriptorPool
    methods: Mapping[str, grpc.RpcMethodHandler[Any, Any]]
    services: tuple[str, ...]
    reflection: reflection.aio.ReflectionServicer

    @classmethod
    def of(cls, app: web.Application, catalog: Catalog) -> Schema:
        pool = pool_of(descriptors.files(catalog))
        entities, actions = descriptors.entities(catalog), descriptors.services(catalog)
        names = tuple([e.service for e in entities] + [s.service for s in actions])
        methods = services.methods(app, pool, entities, actions)
        if sagas_schema.declares_sagas(catalog):  # the operators' saga service (``rpc.sagas``)
            names += (sagas_schema.SERVICE,)
            methods |= sagas.methods(app, pool)
        return cls(
            catalog,
            pool,
            methods,
            names,
            reflection.aio.ReflectionServicer([*names, reflection.SERVICE_NAME], pool=pool),
        )


class RpcServer(grpc.GenericRpcHandler):
    """The gRPC server of one application; ``port`` once started.

    The services follow the catalog served: the schema is built at start and again by the first
    call after a swap (``state.SpecHolder.swap``, the resource pod loading a new artifact), so an
    entity or service exposed by the new catalog is served, and reflected, without a restart; a
    call already running finishes on the schema it started with.
    """

    def __init__(self, app: web.Application, opts: options.ServeOptions) -> None:
        assert opts.grpc_addr is not None
        self.app, self.opts = app, opts
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self._schema: Schema | None = None
        self._reflection = _reflection(self)

    def schema(self) -> Schema:
        """The schema of the catalog served now (rebuilt once after a swap)."""
        current = self.app[state.SPEC].current
        schema = self._schema
        if schema is None or schema.catalog is not current:
            schema = self._schema = Schema.of(self.app, current)
            log.info("gRPC services", extra={"ctx": {"services": list(schema.services)}})
        return schema

    @property
    def services(self) -> list[str]:
        return list(self.schema().services)

    @property
    def pool(self) -> descriptor_pool.DescriptorPool:
        return self.schema().pool

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        """The handler of a call's method in the current schema (``None``: UNIMPLEMENTED)."""
        if handler_call_details.method == REFLECTION:
            return self._reflection
        return self.schema().methods.get(handler_call_details.method)

    async def bind(self, _app: web.Application | None = None) -> None:
        """Take ``--grpc-addr`` (no call is served yet); ``BootRefused`` naming it when taken."""
        if self.server is not None:
            return
        server = grpc.aio.server(
            interceptors=[traced.Tracing()] if tracing.enabled() else None,  # a span per call
            options=[
                # a request as large as REST's --max-body-bytes at most (RESOURCE_EXHAUSTED past it)
                ("grpc.max_receive_message_length", self.opts.max_body_bytes),
                # grpcio's default SO_REUSEPORT lets a second server bind a taken port and share it
                ("grpc.so_reuseport", 0),
            ],
        )
        server.add_generic_rpc_handlers([self])  # reflection too (``service``)
        addr = self.opts.grpc_addr
        assert addr is not None
        target = f"[{addr.host}]:{addr.port}" if ":" in addr.host else f"{addr.host}:{addr.port}"
        try:
            if self.opts.tls_cert is not None and self.opts.tls_key is not None:
                credentials = grpc.ssl_server_credentials(
                    [(self.opts.tls_key.read_bytes(), self.opts.tls_cert.read_bytes())]
                )
                self.port = server.add_secure_port(target, credentials)
            else:
                self.port = server.add_insecure_port(target)
        except RuntimeError as exc:  # grpcio's only word for a failed bind
            raise errors.BootRefused(
                f"cannot listen on --grpc-addr {addr.host}:{addr.port}: the address is in use or not "
                "available here; free it or choose another"
            ) from exc
        self.server = server

    async def start(self, _app: web.Application | None = None) -> None:
        """Serve calls (bound first if :meth:`bind` was not called)."""
        await self.bind()
        assert self.server is not None
        self.schema()
        await self.server.start()
        addr = self.opts.grpc_addr
        assert addr is not None
        log.info(
            "gRPC listening", extra={"ctx": {"addr": f"{addr.host}:{self.port}", "services": self.services}}
        )

    async def stop(self, _app: web.Application | None = None) -> None:
        if self.server is not None:
            await self.server.stop(GRACE)
            self.server = None


REFLECTION = f"/{reflection.SERVICE_NAME}/ServerReflectionInfo"


def _reflection(rpc: RpcServer) -> grpc.RpcMethodHandler[Any, Any]:
    """Server reflection over the current schema: each stream answers from the schema of the
    catalog served when it opened. The requests arrive as bytes and are decoded here, as the
    services' are (``services.decoded``): bytes that are no request are INVALID_ARGUMENT."""

    async def info(raw_requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
        async def requests() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
            async for raw in raw_requests:
                yield services.decoded(reflection_pb2.ServerReflectionRequest, raw)

        try:
            async for answer in rpc.schema().reflection.ServerReflectionInfo(requests(), context):
                yield answer
        except errors.ApiError as exc:
            await context.abort_with_status(status.of(exc))

    return grpc.stream_stream_rpc_method_handler(
        info, response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString
    )


RPC: web.AppKey[RpcServer] = web.AppKey("rpc", RpcServer)


def attach(app: web.Application, opts: options.ServeOptions) -> object:
    """Serve gRPC with ``app`` when ``--grpc-addr`` is given (stopped before the pool closes)."""
    if opts.grpc_addr is None:
        return None
    rpc = RpcServer(app, opts)
    app[RPC] = rpc
    # the address is taken before the application's other parts start, so that a refusal leaves
    # nothing of theirs open; calls are served once they have all started
    app.on_startup.insert(0, rpc.bind)
    app.on_startup.append(rpc.start)
    app.on_shutdown.append(rpc.stop)
    return rpc
