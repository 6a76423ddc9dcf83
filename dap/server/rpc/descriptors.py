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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from google.protobuf import descriptor_pb2

from dap.config.enums import CallMode, FieldType, ProtocolType
from dap.config.fields import Field
from dap.server.catalog import Catalog, Resource
from dap.server.catalog.machines import ActionPlan, ServicePlan
from dap.server.documents import lifecycle

FD = descriptor_pb2.FieldDescriptorProto
STRUCT = "google/protobuf/struct.proto"
EMPTY = "google/protobuf/empty.proto"
FIELD_MASK = "google/protobuf/field_mask.proto"
VALUE = ".google.protobuf.Value"

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


def camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


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
# the job of a ``call: async`` action (REST's 202 body), in a package of its own so that no
# entity or service name can clash with it; ``GetJob`` is REST's ``GET …/_jobs/{id}``
JOBS_PACKAGE = "dap.jobs.v1"
JOBS_FILE = "dap/jobs/v1.proto"
JOB = f".{JOBS_PACKAGE}.Job"
GET_JOB = f".{JOBS_PACKAGE}.GetJobRequest"


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


def jobs_file() -> descriptor_pb2.FileDescriptorProto:
    """``dap/jobs/v1.proto``: the job of an async action, and the request of ``GetJob``."""
    f = descriptor_pb2.FileDescriptorProto(
        name=JOBS_FILE, package=JOBS_PACKAGE, syntax="proto3", dependency=[STRUCT]
    )
    job = f.message_type.add(name="Job")
    for number, (name, kind) in enumerate(JOB_FIELDS, start=1):
        if isinstance(kind, str):
            _add(job, name, number, FD.TYPE_MESSAGE, kind)
        else:
            _add(job, name, number, kind, optional=name in JOB_OPTIONAL)
    request = f.message_type.add(name="GetJobRequest")
    _add(request, "id", 1, FD.TYPE_STRING)
    return f


# the fields of a job (``workflows.jobs.Job.view``, REST's ``{"data": job}``)
JOB_FIELDS: tuple[tuple[str, int | str], ...] = (
    ("id", FD.TYPE_STRING),
    ("state", FD.TYPE_STRING),  # queued, running, succeeded, failed
    ("progress", FD.TYPE_DOUBLE),
    ("action", FD.TYPE_STRING),
    ("target", FD.TYPE_STRING),
    ("record_id", FD.TYPE_STRING),
    ("created_at", FD.TYPE_STRING),
    ("started_at", FD.TYPE_STRING),
    ("finished_at", FD.TYPE_STRING),
    ("runs", FD.TYPE_INT64),
    ("result", VALUE),  # succeeded: what the synchronous call would have answered
    ("error", VALUE),  # failed: the problem document
    ("callback", VALUE),  # {state, attempts, error} when a callback was asked for
)
JOB_OPTIONAL = frozenset({"record_id", "started_at", "finished_at"})


def field_kind(f: Field) -> tuple[int, str | None]:
    """The proto type of a field (and the message type name of a ``Value``)."""
    if f.multiple or (f.type not in _SCALARS and f.type not in _STRINGS):
        return FD.TYPE_MESSAGE, VALUE
    return _SCALARS.get(f.type, FD.TYPE_STRING), None


def _add(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    kind: int,
    type_name: str | None = None,
    *,
    optional: bool = False,
    repeated: bool = False,
) -> None:
    field = message.field.add(name=name, number=number, type=kind)
    field.label = FD.LABEL_REPEATED if repeated else FD.LABEL_OPTIONAL
    field.json_name = name  # the JSON names of the REST API, not camelCase
    if type_name is not None:
        field.type_name = type_name
    if optional and kind != FD.TYPE_MESSAGE:  # proto3 ``optional``: a synthetic oneof per field
        field.proto3_optional = True
        field.oneof_index = len(message.oneof_decl)
        message.oneof_decl.add(name=f"_{name}")


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
        _add(record, name, number, kind, optional=optional)
    for name, number, kind, type_name in record_fields(e.resource):
        _add(record, name, number, kind, type_name, optional=True)
    yield record
    ref = f".{e.full(e.message)}"
    verbs = e.resource.actions
    if "find" in verbs:
        get = descriptor_pb2.DescriptorProto(name=f"Get{e.message}Request")
        _add(get, "id", 1, FD.TYPE_STRING)
        yield get
        watch = descriptor_pb2.DescriptorProto(name=f"Watch{e.message}Request")
        _add(watch, "record", 1, FD.TYPE_STRING)  # one record's events ("" for all)
        _add(watch, "mine", 2, FD.TYPE_BOOL)  # the caller's own records only
        _add(watch, "after", 3, FD.TYPE_INT64, optional=True)  # resume past this seq
        yield watch
        event = descriptor_pb2.DescriptorProto(name=f"{e.message}Event")
        for number, name in enumerate(EVENT_FIELDS, start=1):
            _add(event, name, number, FD.TYPE_INT64 if name in ("seq", "version") else FD.TYPE_STRING)
        _add(event, "record", len(EVENT_FIELDS) + 1, FD.TYPE_MESSAGE, ref)
        _add(event, "payload", len(EVENT_FIELDS) + 2, FD.TYPE_MESSAGE, VALUE)
        yield event
    if "list" in verbs:
        query = descriptor_pb2.DescriptorProto(name=f"List{e.message}Request")
        _add(query, "query", 1, FD.TYPE_STRING)  # the REST query string: filters, limit, order, fields
        yield query
        page = descriptor_pb2.DescriptorProto(name=f"List{e.message}Page")
        _add(page, "data", 1, FD.TYPE_MESSAGE, ref, repeated=True)
        _add(page, "limit", 2, FD.TYPE_INT64)
        _add(page, "offset", 3, FD.TYPE_INT64)
        _add(page, "total", 4, FD.TYPE_INT64, optional=True)
        yield page
    if "create" in verbs:
        create = descriptor_pb2.DescriptorProto(name=f"Create{e.message}Request")
        _add(create, "record", 1, FD.TYPE_MESSAGE, ref)
        _add(create, "submit", 2, FD.TYPE_BOOL)
        yield create
    if "update" in verbs:
        update = descriptor_pb2.DescriptorProto(name=f"Update{e.message}Request")
        _add(update, "id", 1, FD.TYPE_STRING)
        _add(update, "record", 2, FD.TYPE_MESSAGE, ref)
        _add(update, "update_mask", 3, FD.TYPE_MESSAGE, ".google.protobuf.FieldMask")
        _add(update, "version", 4, FD.TYPE_INT64, optional=True)  # If-Match: the version read
        yield update
    if "delete" in verbs:
        delete = descriptor_pb2.DescriptorProto(name=f"Delete{e.message}Request")
        _add(delete, "id", 1, FD.TYPE_STRING)
        yield delete
    acts = [a for a in exposed_actions(e.resource) if a not in async_actions(e.resource)]
    if acts:
        result = descriptor_pb2.DescriptorProto(name=f"{e.message}ActionResult")
        _add(result, "data", 1, FD.TYPE_MESSAGE, ref)
        _add(result, "result", 2, FD.TYPE_MESSAGE, VALUE)
        _add(result, "transition_from", 3, FD.TYPE_STRING, optional=True)
        _add(result, "transition_to", 4, FD.TYPE_STRING, optional=True)
        _add(result, "event", 5, FD.TYPE_STRING, optional=True)
        _add(result, "approval", 6, FD.TYPE_MESSAGE, VALUE)
        yield result
    for action in exposed_actions(e.resource):
        request = descriptor_pb2.DescriptorProto(name=f"{camel(action)}{e.message}Request")
        _add(request, "id", 1, FD.TYPE_STRING)
        _add(request, "version", 2, FD.TYPE_INT64, optional=True)  # If-Match
        _add(request, "params", 3, FD.TYPE_MESSAGE, ".google.protobuf.Struct")
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
        _add(result, "result", 1, FD.TYPE_MESSAGE, VALUE)
        _add(result, "event", 2, FD.TYPE_STRING, optional=True)
        yield result
    for action in names:
        request = descriptor_pb2.DescriptorProto(name=f"{camel(action)}{s.message}Request")
        _add(request, "params", 1, FD.TYPE_MESSAGE, ".google.protobuf.Struct")
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
    jobs file when an exposed action runs as a job."""
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
    return out


_TYPES = {
    FD.TYPE_STRING: "string",
    FD.TYPE_INT64: "int64",
    FD.TYPE_DOUBLE: "double",
    FD.TYPE_BOOL: "bool",
}


def _type_text(f: descriptor_pb2.FieldDescriptorProto) -> str:
    return f.type_name.lstrip(".") if f.type == FD.TYPE_MESSAGE else _TYPES[f.type]


def proto_text(protos: Sequence[descriptor_pb2.FileDescriptorProto]) -> str:
    """The ``.proto`` text of ``protos`` (one section per file, each headed by its file name)."""
    lines: list[str] = []
    for f in protos:
        lines += [f"// file: {f.name}", 'syntax = "proto3";', "", f"package {f.package};", ""]
        lines += [f'import "{d}";' for d in f.dependency] + [""]
        for m in f.message_type:
            lines.append(f"message {m.name} {{")
            for fd in m.field:
                label = (
                    "repeated "
                    if fd.label == FD.LABEL_REPEATED
                    else "optional "
                    if fd.proto3_optional
                    else ""
                )
                lines.append(f"  {label}{_type_text(fd)} {fd.name} = {fd.number};")
            lines += ["}", ""]
        for s in f.service:
            lines.append(f"service {s.name} {{")
            for method in s.method:
                stream = "stream " if method.server_streaming else ""
                lines.append(
                    f"  rpc {method.name}({method.input_type.lstrip('.')}) returns "
                    f"({stream}{method.output_type.lstrip('.')});"
                )
            lines += ["}", ""]
    return "\n".join(lines)
