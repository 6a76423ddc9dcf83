"""The gRPC schema of a catalog, built at boot from the manifests: no code generation, no ``.proto``.

Pure functions: a :class:`Catalog` in, one ``FileDescriptorProto`` per module out (the module's
``ApiGRPCConfig.package``, else ``dap.<module>.v1``), holding for each entity exposed over gRPC
(``expose`` has ``grpc``) its record message, the request messages of its verbs and a service
``<Entity>Service`` with the verbs that entry opens::

    rpc List(ListProductRequest) returns (stream ListProductPage);    // pages, until a short one
    rpc Get(GetProductRequest) returns (Product);
    rpc Create(CreateProductRequest) returns (Product);
    rpc Update(UpdateProductRequest) returns (Product);                // update_mask; version: If-Match
    rpc Delete(DeleteProductRequest) returns (google.protobuf.Empty);
    rpc Watch(WatchProductRequest) returns (stream ProductEvent);     // resumable with after
    rpc Submit(SubmitProductRequest) returns (ProductActionResult);    // one per exposed action
    rpc Recount(RecountProductRequest) returns (dap.jobs.v1.Job);      // a ``call: async`` action
    rpc GetJob(dap.jobs.v1.GetJobRequest) returns (dap.jobs.v1.Job);   // when one runs as a job

and for each ``Service`` manifest exposed over gRPC a service ``<Service>Service`` with one method
per action open to gRPC (``<Action><Service>Request{params}`` → ``<Service>ActionResult{result,
event}``, or ``dap.jobs.v1.Job`` for ``call: async``) and ``GetJob``. The job messages live in a
file of their own (``dap/jobs/v1.proto``) so no entity or service name can clash with them.

A record message carries the system fields (numbers 1-7) and then the REST-visible fields in
manifest order from 16 on. Exact numbers (``decimal``, ``money``, ``percent``) and dates are
strings, as in the JSON; ``integer`` is ``int64``, ``number`` ``double``, ``boolean`` ``bool``;
what is not a scalar (``json``, ``multiple``, children, files, extension namespaces) is a
``google.protobuf.Value`` holding the JSON REST answers. Scalars are ``optional`` so that an unset
field is told from a zero. :func:`proto_text` renders the files as ``.proto`` text (``dap schema
--proto``) for clients that want generated code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from google.protobuf import descriptor_pb2

from dap.config.enums import CallMode, FieldType, ProtocolType
from dap.config.fields import Field
from dap.server.catalog import Catalog, Resource
from dap.server.catalog.machines import ActionPlan, ServicePlan
from dap.server.documents import lifecycle
from dap.server.rpc import sagas_schema
from dap.server.rpc.jobs_schema import GET_JOB, JOB, JOBS_FILE, jobs_file
from dap.server.rpc.shapes import EMPTY, FD, FIELD_MASK, STRUCT, VALUE, add, camel
from dap.server.rpc.shapes import proto_text as proto_text  # ``dap schema --proto``

# system fields of every record (present() answers them), numbered first
SYSTEM: tuple[tuple[str, int, bool], ...] = (  # name, type, optional
    ("id", FD.TYPE_STRING, False),
    ("version", FD.TYPE_INT64, False),
    ("docstatus", FD.TYPE_STRING, True),
    ("created_at", FD.TYPE_STRING, False),
    ("updated_at", FD.TYPE_STRING, False),
    ("owner", FD.TYPE_STRING, False),
)
FIRST_FIELD = 16
# an event of Watch: the websocket's event frame (seq, then the event message), then the record
EVENT_FIELDS = ("seq", "id", "type", "event", "action", "record_id", "version", "actor", "at")

_SCALARS = {
    FieldType.INTEGER: FD.TYPE_INT64,
    FieldType.NUMBER: FD.TYPE_DOUBLE,
    FieldType.BOOLEAN: FD.TYPE_BOOL,
}
_STRINGS = frozenset(
    {
        FieldType.STRING,
        FieldType.TEXT,
        FieldType.RICHTEXT,
        FieldType.DECIMAL,
        FieldType.MONEY,
        FieldType.PERCENT,
        FieldType.ENUM,
        FieldType.DATE,
        FieldType.DATETIME,
        FieldType.TIME,
        FieldType.UUID,
        FieldType.RELATION,
    }
)


@dataclass(frozen=True)
class Entity:
    """One exposed entity's names in its package."""

    resource: Resource
    package: str
    message: str  # the record message, e.g. ``Product``

    @property
    def service(self) -> str:
        return f"{self.package}.{self.message}Service"

    def full(self, name: str) -> str:
        return f"{self.package}.{name}"


def package_of(catalog: Catalog, module: str) -> str:
    """The module's ``ApiGRPCConfig.package``, else ``dap.<module>.v1``."""
    grpc = catalog.module_grpc.get(module)
    return grpc.package if grpc is not None and grpc.package else f"dap.{module}.v1"


def entities(catalog: Catalog) -> list[Entity]:
    """The entities exposed over gRPC with at least one verb, in key order (none of a module
    whose ``api.grpc.enabled`` is false)."""
    off = {name for name, grpc in catalog.module_grpc.items() if not grpc.enabled}
    return [
        Entity(r, package_of(catalog, r.module), camel(r.name))
        for _key, r in sorted(catalog.grpc.items())
        if r.actions and r.module not in off
    ]


VERBS = frozenset({"List", "Get", "Create", "Update", "Delete", "Watch", "GetJob"})


@dataclass(frozen=True)
class ServiceEntry:
    """One ``Service`` manifest exposed over gRPC: its names in its package."""

    plan: ServicePlan
    package: str
    message: str  # e.g. ``Tools`` for service ``tools``: service ``ToolsService``

    @property
    def service(self) -> str:
        return f"{self.package}.{self.message}Service"

    def full(self, name: str) -> str:
        return f"{self.package}.{name}"


def services(catalog: Catalog) -> list[ServiceEntry]:
    """The services exposed over gRPC with at least one action open to it, in key order (none of
    a module whose ``api.grpc.enabled`` is false)."""
    off = {name for name, grpc in catalog.module_grpc.items() if not grpc.enabled}
    return [
        ServiceEntry(p, package_of(catalog, p.module), camel(p.name))
        for _key, p in sorted(catalog.grpc_services.items())
        if p.module not in off and service_actions(p)
    ]


def service_actions(plan: ServicePlan) -> list[str]:
    """A service's actions served over gRPC, one method each: those enabled whose own ``expose``
    is empty or names ``grpc``, none whose method name would be a verb's."""
    return [
        name
        for name, a in sorted(plan.actions.items())
        if a.declared is not None
        and not a.declared.disabled
        and (not a.declared.expose or ProtocolType.GRPC in a.declared.expose)
        and camel(name) not in VERBS
    ]


def is_async(plan: ActionPlan | None) -> bool:
    return plan is not None and plan.declared is not None and plan.declared.call is CallMode.ASYNC


def exposed_actions(resource: Resource) -> list[str]:
    """The record actions served over gRPC, one method each: ``submit``/``cancel`` of a lifecycle
    entity whose grpc entry opens ``update``, and the custom actions and transitions whose own
    ``expose`` is empty or names ``grpc`` (a ``call: async`` one answers its job); none whose
    method name would be a verb's."""
    out: list[str] = []
    for name in sorted(set(resource.workflow) | set(lifecycle.MOVES)):
        declared = resource.spec.action(name)
        if (declared is not None and declared.disabled) or camel(name) in VERBS:
            continue
        if name in lifecycle.MOVES and resource.lifecycle:
            if lifecycle.move_open(resource, name):
                out.append(name)
            continue
        plan = resource.workflow.get(name)
        if plan is None or name in ("list", "find", "create", "update", "delete"):
            continue
        if declared is not None and declared.expose and ProtocolType.GRPC not in declared.expose:
            continue
        out.append(name)
    return out


def async_actions(resource: Resource) -> list[str]:
    """The exposed record actions that run as jobs (their methods answer ``dap.jobs.v1.Job``)."""
    return [
        a
        for a in exposed_actions(resource)
        if not (a in lifecycle.MOVES and resource.lifecycle) and is_async(resource.workflow.get(a))
    ]


def field_kind(f: Field) -> tuple[int, str | None]:
    """The proto type of a field (and the message type name of a ``Value``)."""
    if f.multiple or (f.type not in _SCALARS and f.type not in _STRINGS):
        return FD.TYPE_MESSAGE, VALUE
    return _SCALARS.get(f.type, FD.TYPE_STRING), None


def record_fields(resource: Resource) -> list[tuple[str, int, int, str | None]]:
    """``(name, number, type, type_name)`` of a record message's fields after the system ones."""
    system = {name for name, _t, _o in SYSTEM}
    out: list[tuple[str, int, int, str | None]] = []
    number = FIRST_FIELD
    for name, f in resource.fields.items():
        if name in system:
            continue
        kind, type_name = field_kind(f)
        out.append((name, number, kind, type_name))
        number += 1
    for namespace in resource.extensions:
        if namespace not in system and namespace not in resource.fields:
            out.append((namespace, number, FD.TYPE_MESSAGE, VALUE))
            number += 1
    return out


def _entity_messages(e: Entity) -> Iterable[descriptor_pb2.DescriptorProto]:
    record = descriptor_pb2.DescriptorProto(name=e.message)
    for number, (name, kind, optional) in enumerate(SYSTEM, start=1):
        add(record, name, number, kind, optional=optional)
    for name, number, kind, type_name in record_fields(e.resource):
        add(record, name, number, kind, type_name, optional=True)
    yield record
    ref = f".{e.full(e.message)}"
    verbs = e.resource.actions
    if "find" in verbs:
        get = descriptor_pb2.DescriptorProto(name=f"Get{e.message}Request")
        add(get, "id", 1, FD.TYPE_STRING)
        yield get
        watch = descriptor_pb2.DescriptorProto(name=f"Watch{e.message}Request")
        add(watch, "record", 1, FD.TYPE_STRING)  # one record's events ("" for all)
        add(watch, "mine", 2, FD.TYPE_BOOL)  # the caller's own records only
        add(watch, "after", 3, FD.TYPE_INT64, optional=True)  # resume past this seq
        yield watch
        event = descriptor_pb2.DescriptorProto(name=f"{e.message}Event")
        for number, name in enumerate(EVENT_FIELDS, start=1):
            add(event, name, number, FD.TYPE_INT64 if name in ("seq", "version") else FD.TYPE_STRING)
        add(event, "record", len(EVENT_FIELDS) + 1, FD.TYPE_MESSAGE, ref)
        add(event, "payload", len(EVENT_FIELDS) + 2, FD.TYPE_MESSAGE, VALUE)
        yield event
    if "list" in verbs:
        query = descriptor_pb2.DescriptorProto(name=f"List{e.message}Request")
        add(query, "query", 1, FD.TYPE_STRING)  # the REST query string: filters, limit, order, fields
        yield query
        page = descriptor_pb2.DescriptorProto(name=f"List{e.message}Page")
        add(page, "data", 1, FD.TYPE_MESSAGE, ref, repeated=True)
        add(page, "limit", 2, FD.TYPE_INT64)
        add(page, "offset", 3, FD.TYPE_INT64)
        add(page, "total", 4, FD.TYPE_INT64, optional=True)
        yield page
    if "create" in verbs:
        create = descriptor_pb2.DescriptorProto(name=f"Create{e.message}Request")
        add(create, "record", 1, FD.TYPE_MESSAGE, ref)
        add(create, "submit", 2, FD.TYPE_BOOL)
        yield create
    if "update" in verbs:
        update = descriptor_pb2.DescriptorProto(name=f"Update{e.message}Request")
        add(update, "id", 1, FD.TYPE_STRING)
        add(update, "record", 2, FD.TYPE_MESSAGE, ref)
        add(update, "update_mask", 3, FD.TYPE_MESSAGE, ".google.protobuf.FieldMask")
        add(update, "version", 4, FD.TYPE_INT64, optional=True)  # If-Match: the version read
        yield update
    if "delete" in verbs:
        delete = descriptor_pb2.DescriptorProto(name=f"Delete{e.message}Request")
        add(delete, "id", 1, FD.TYPE_STRING)
        yield delete
    acts = [a for a in exposed_actions(e.resource) if a not in async_actions(e.resource)]
    if acts:
        result = descriptor_pb2.DescriptorProto(name=f"{e.message}ActionResult")
        add(result, "data", 1, FD.TYPE_MESSAGE, ref)
        add(result, "result", 2, FD.TYPE_MESSAGE, VALUE)
        add(result, "transition_from", 3, FD.TYPE_STRING, optional=True)
        add(result, "transition_to", 4, FD.TYPE_STRING, optional=True)
        add(result, "event", 5, FD.TYPE_STRING, optional=True)
        add(result, "approval", 6, FD.TYPE_MESSAGE, VALUE)
        yield result
    for action in exposed_actions(e.resource):
        request = descriptor_pb2.DescriptorProto(name=f"{camel(action)}{e.message}Request")
        add(request, "id", 1, FD.TYPE_STRING)
        add(request, "version", 2, FD.TYPE_INT64, optional=True)  # If-Match
        add(request, "params", 3, FD.TYPE_MESSAGE, ".google.protobuf.Struct")
        yield request


# verb -> (method, request message pattern, response message pattern, server streaming)
METHODS: tuple[tuple[str, str, str, str, bool], ...] = (
    ("list", "List", "List{}Request", "List{}Page", True),
    ("find", "Get", "Get{}Request", "{}", False),
    ("find", "Watch", "Watch{}Request", "{}Event", True),
    ("create", "Create", "Create{}Request", "{}", False),
    ("update", "Update", "Update{}Request", "{}", False),
    ("delete", "Delete", "Delete{}Request", ".google.protobuf.Empty", False),
)


def _service(e: Entity) -> descriptor_pb2.ServiceDescriptorProto:
    service = descriptor_pb2.ServiceDescriptorProto(name=f"{e.message}Service")
    for verb, method, request, response, streaming in METHODS:
        if verb not in e.resource.actions:
            continue
        out = response if response.startswith(".") else f".{e.full(response.format(e.message))}"
        service.method.add(
            name=method,
            input_type=f".{e.full(request.format(e.message))}",
            output_type=out,
            server_streaming=streaming,
        )
    jobs = async_actions(e.resource)
    for action in exposed_actions(e.resource):
        service.method.add(
            name=camel(action),
            input_type=f".{e.full(f'{camel(action)}{e.message}Request')}",
            output_type=JOB if action in jobs else f".{e.full(f'{e.message}ActionResult')}",
        )
    if jobs:
        service.method.add(name="GetJob", input_type=GET_JOB, output_type=JOB)
    return service


def _service_messages(s: ServiceEntry) -> Iterable[descriptor_pb2.DescriptorProto]:
    names = service_actions(s.plan)
    if any(not is_async(s.plan.actions[a]) for a in names):
        result = descriptor_pb2.DescriptorProto(name=f"{s.message}ActionResult")
        add(result, "result", 1, FD.TYPE_MESSAGE, VALUE)
        add(result, "event", 2, FD.TYPE_STRING, optional=True)
        yield result
    for action in names:
        request = descriptor_pb2.DescriptorProto(name=f"{camel(action)}{s.message}Request")
        add(request, "params", 1, FD.TYPE_MESSAGE, ".google.protobuf.Struct")
        yield request


def _service_of(s: ServiceEntry) -> descriptor_pb2.ServiceDescriptorProto:
    """``<Service>Service``: one method per action (a job for ``call: async``), and ``GetJob``."""
    service = descriptor_pb2.ServiceDescriptorProto(name=f"{s.message}Service")
    names = service_actions(s.plan)
    for action in names:
        service.method.add(
            name=camel(action),
            input_type=f".{s.full(f'{camel(action)}{s.message}Request')}",
            output_type=JOB if is_async(s.plan.actions[action]) else f".{s.full(f'{s.message}ActionResult')}",
        )
    if any(is_async(s.plan.actions[a]) for a in names):
        service.method.add(name="GetJob", input_type=GET_JOB, output_type=JOB)
    return service


def files(catalog: Catalog) -> list[descriptor_pb2.FileDescriptorProto]:
    """One file per package holding exposed entities and services, in package order; first the
    jobs file when an exposed action runs as a job, and before it the saga service's when the
    catalog declares a saga action."""
    by_package: dict[str, list[Entity | ServiceEntry]] = {}
    for e in entities(catalog):
        by_package.setdefault(e.package, []).append(e)
    for s in services(catalog):
        by_package.setdefault(s.package, []).append(s)
    out = []
    for package, members in sorted(by_package.items()):
        f = descriptor_pb2.FileDescriptorProto(
            name=package.replace(".", "/") + ".proto",
            package=package,
            syntax="proto3",
            dependency=[STRUCT, EMPTY, FIELD_MASK],
        )
        for m in members:
            if isinstance(m, Entity):
                f.message_type.extend(_entity_messages(m))
                f.service.append(_service(m))
            else:
                f.message_type.extend(_service_messages(m))
                f.service.append(_service_of(m))
        if any(meth.output_type == JOB for svc in f.service for meth in svc.method):
            f.dependency.append(JOBS_FILE)
        out.append(f)
    if any(JOBS_FILE in f.dependency for f in out):
        out.insert(0, jobs_file())
    if sagas_schema.declares_sagas(catalog):
        out.insert(0, sagas_schema.sagas_file())
    return out
