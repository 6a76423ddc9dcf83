"""The gRPC listener of ``dap serve --grpc-addr``: built at boot from the catalog, beside the HTTP one.

:func:`attach` (a ``dap.server.cli.ATTACH`` hook, also called by tests) adds the listener to the
application's start and shutdown, in the same event loop as the HTTP server and sharing its pool,
caches, verifier and event feed. The descriptors come from ``descriptors`` into a pool of this
server's own (never the process-wide default, so that two servers in a process never clash), and
gRPC server reflection serves them, so ``grpcurl`` lists, describes and calls the services with no
``.proto`` file. TLS follows REST's: ``--tls-cert``/``--tls-key`` serve both.
"""

from __future__ import annotations

import logging

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
from grpc_reflection.v1alpha import reflection

from dap.server import options, state
from dap.server.rpc import descriptors, services

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


class RpcServer:
    """The gRPC server of one application; ``port`` once started."""

    def __init__(self, app: web.Application, opts: options.ServeOptions) -> None:
        assert opts.grpc_addr is not None
        self.app, self.opts = app, opts
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.services: list[str] = []
        self.pool: descriptor_pool.DescriptorPool | None = None

    async def start(self, _app: web.Application | None = None) -> None:
        catalog = self.app[state.SPEC].current
        protos = descriptors.files(catalog)
        pool = self.pool = pool_of(protos)
        entities = descriptors.entities(catalog)
        actions = descriptors.services(catalog)
        # a request as large as REST's --max-body-bytes at most (RESOURCE_EXHAUSTED past it)
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", self.opts.max_body_bytes)])
        server.add_generic_rpc_handlers(services.handlers(self.app, pool, entities, actions))
        self.services = [e.service for e in entities] + [s.service for s in actions]
        reflection.enable_server_reflection([*self.services, reflection.SERVICE_NAME], server, pool=pool)
        addr = self.opts.grpc_addr
        assert addr is not None
        target = f"[{addr.host}]:{addr.port}" if ":" in addr.host else f"{addr.host}:{addr.port}"
        if self.opts.tls_cert is not None and self.opts.tls_key is not None:
            credentials = grpc.ssl_server_credentials(
                [(self.opts.tls_key.read_bytes(), self.opts.tls_cert.read_bytes())]
            )
            self.port = server.add_secure_port(target, credentials)
        else:
            self.port = server.add_insecure_port(target)
        await server.start()
        self.server = server
        log.info(
            "gRPC listening", extra={"ctx": {"addr": f"{addr.host}:{self.port}", "services": self.services}}
        )

    async def stop(self, _app: web.Application | None = None) -> None:
        if self.server is not None:
            await self.server.stop(GRACE)
            self.server = None


RPC: web.AppKey[RpcServer] = web.AppKey("rpc", RpcServer)


def attach(app: web.Application, opts: options.ServeOptions) -> object:
    """Serve gRPC with ``app`` when ``--grpc-addr`` is given (stopped before the pool closes)."""
    if opts.grpc_addr is None:
        return None
    rpc = RpcServer(app, opts)
    app[RPC] = rpc
    app.on_startup.append(rpc.start)
    app.on_shutdown.append(rpc.stop)
    return rpc
