"""The building blocks of the gRPC schema: well-known type names, one field, and ``.proto`` text.

Shared by the files the schema is made of (``descriptors``: the entities and services of a
catalog; ``jobs_schema``: the job of an async action), so that each builds its messages the same
way: the JSON names of the REST API, proto3 ``optional`` scalars. Pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf import descriptor_pb2

FD = descriptor_pb2.FieldDescriptorProto
STRUCT = "google/protobuf/struct.proto"
EMPTY = "google/protobuf/empty.proto"
FIELD_MASK = "google/protobuf/field_mask.proto"
VALUE = ".google.protobuf.Value"


def camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def add(
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
