"""``dap/sagas/v1.proto``: the operators' saga service, REST's ``/{ws}/api/_sagas`` over gRPC.

Served when the catalog declares a saga action (``impl: {type: saga}``), whatever protocols that
action is exposed on: a parked saga is a workspace's, as REST's inbox is::

    rpc List(ListSagasRequest) returns (ListSagasResponse);  // the inbox: parked, or ``state``
    rpc Get(GetSagaRequest) returns (Saga);                   // one saga with its timeline
    rpc Retry(DecideSagaRequest) returns (Saga);              // a person's decisions on a parked one
    rpc Skip(DecideSagaRequest) returns (Saga);
    rpc Resolve(DecideSagaRequest) returns (Saga);

A ``Saga`` carries the fields of ``workflows.saga_decisions.view`` (REST's ``data``): the scalars
typed, what is JSON (params, results, failure, steps, timeline) as ``google.protobuf.Value``.
In a package of its own, so that no entity or service name clashes with it. Pure.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from dap.server.catalog import Catalog
from dap.server.rpc.shapes import FD, STRUCT, VALUE, add

PACKAGE = "dap.sagas.v1"
FILE = "dap/sagas/v1.proto"
SERVICE = f"{PACKAGE}.SagaService"
SAGA = f".{PACKAGE}.Saga"
DECISIONS = ("Retry", "Skip", "Resolve")  # saga_decisions.OPERATIONS, one method each

# the fields of a saga (``saga_decisions.view``), in order
SAGA_FIELDS: tuple[tuple[str, int | str], ...] = (
    ("id", FD.TYPE_STRING),
    ("service", FD.TYPE_STRING),
    ("action", FD.TYPE_STRING),
    ("state", FD.TYPE_STRING),  # running, compensating, outcome_unknown, compensation_failed, …
    ("step", FD.TYPE_INT64),
    ("attempts", FD.TYPE_INT64),
    ("in_flight", FD.TYPE_BOOL),
    ("requested_by", FD.TYPE_STRING),
    ("code", FD.TYPE_STRING),  # a parked saga's SVC.SAGA.OUTCOME_UNKNOWN / COMPENSATION_FAILED
    ("params", VALUE),
    ("results", VALUE),
    ("failure", VALUE),
    ("steps", VALUE),
    ("timeline", VALUE),  # Get only
    ("created_at", FD.TYPE_STRING),
    ("updated_at", FD.TYPE_STRING),
    ("finished_at", FD.TYPE_STRING),
)
SAGA_OPTIONAL = frozenset({"requested_by", "code", "finished_at"})


def declares_sagas(catalog: Catalog) -> bool:
    """Whether any service of ``catalog`` (on any protocol) declares a saga action."""
    plans = [*catalog.services.values(), *catalog.grpc_services.values(), *catalog.ws_services.values()]
    return any(
        a.declared is not None and a.declared.impl is not None and a.declared.impl.type == "saga"
        for p in plans
        for a in p.actions.values()
    )


def sagas_file() -> descriptor_pb2.FileDescriptorProto:
    """The messages and the ``SagaService`` of ``dap/sagas/v1.proto``."""
    f = descriptor_pb2.FileDescriptorProto(name=FILE, package=PACKAGE, syntax="proto3", dependency=[STRUCT])
    saga = f.message_type.add(name="Saga")
    for number, (name, kind) in enumerate(SAGA_FIELDS, start=1):
        if isinstance(kind, str):
            add(saga, name, number, FD.TYPE_MESSAGE, kind)
        else:
            add(saga, name, number, kind, optional=name in SAGA_OPTIONAL)
    listing = f.message_type.add(name="ListSagasRequest")
    add(listing, "state", 1, FD.TYPE_STRING, optional=True)  # default: the parked ones
    add(listing, "limit", 2, FD.TYPE_INT64, optional=True)  # default 100, at most 500
    add(listing, "offset", 3, FD.TYPE_INT64)
    page = f.message_type.add(name="ListSagasResponse")
    add(page, "data", 1, FD.TYPE_MESSAGE, SAGA, repeated=True)
    add(page, "limit", 2, FD.TYPE_INT64)
    add(page, "offset", 3, FD.TYPE_INT64)
    get = f.message_type.add(name="GetSagaRequest")
    add(get, "id", 1, FD.TYPE_STRING)
    decide = f.message_type.add(name="DecideSagaRequest")
    add(decide, "id", 1, FD.TYPE_STRING)
    add(decide, "reason", 2, FD.TYPE_STRING, optional=True)  # skip, resolve: what was checked or done
    add(decide, "applied", 3, FD.TYPE_BOOL, optional=True)  # resolve: did the stuck call take effect
    add(decide, "result", 4, FD.TYPE_MESSAGE, VALUE)  # resolve, applied: the step's result
    service = f.service.add(name="SagaService")
    service.method.add(
        name="List", input_type=f".{PACKAGE}.ListSagasRequest", output_type=f".{PACKAGE}.ListSagasResponse"
    )
    service.method.add(name="Get", input_type=f".{PACKAGE}.GetSagaRequest", output_type=SAGA)
    for name in DECISIONS:
        service.method.add(name=name, input_type=f".{PACKAGE}.DecideSagaRequest", output_type=SAGA)
    return f
