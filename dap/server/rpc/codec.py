"""Records between protobuf messages and the JSON values the operations take and answer.

A record message (``descriptors``) mirrors the REST JSON: scalars as scalars, exact numbers and
dates as strings, the rest as ``google.protobuf.Value``. Decoding keeps only the fields the caller
set (proto3 presence), so a create sends what REST would send; encoding goes through the JSON of
the REST answer (``operations.encode``), so both protocols show the same values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf import descriptor, json_format, message

from dap.server import errors, fieldvalues

VALUE = "google.protobuf.Value"
_FD = descriptor.FieldDescriptor


def decode(record: message.Message, only: Iterable[str] | None = None) -> dict[str, Any]:
    """The JSON object of a record message: the fields set (or those ``only`` names, null when
    unset). Numbers with a fraction in ``Value`` fields become ``Decimal``, as REST parses them."""
    fields = record.DESCRIPTOR.fields_by_name
    if only is None:
        return {fd.name: _value(fd, value) for fd, value in record.ListFields()}
    only = list(only)
    unknown = [path for path in only if path not in fields]
    if unknown:  # REST's answer to a body naming them: 422 SVC.VALIDATE.INVALID, one problem each
        raise errors.ValidationFailed(
            f"update_mask names {len(unknown)} path(s) that are not fields of {record.DESCRIPTOR.name} "
            f"({', '.join(unknown)}): name only the record's fields",
            errors=[errors.FieldProblem(path, "unknown field") for path in unknown],
        )
    out: dict[str, Any] = {}
    for path in only:
        fd = fields[path]
        set_ = record.HasField(path) if fd.has_presence else True
        out[path] = _value(fd, getattr(record, path)) if set_ else None
    return out


def _value(fd: Any, value: Any) -> Any:
    if fd.type == _FD.TYPE_MESSAGE and fd.message_type is not None and fd.message_type.full_name == VALUE:
        return fieldvalues.exact_floats(json_format.MessageToDict(value))
    return value


def encode(data: Mapping[str, Any], record: message.Message) -> message.Message:
    """Fill ``record`` from the JSON object of a REST answer (``null`` leaves a field unset)."""
    fields = record.DESCRIPTOR.fields_by_name
    for name, value in data.items():
        fd = fields.get(name)
        if fd is None or value is None:
            continue
        if fd.type == _FD.TYPE_MESSAGE:
            json_format.ParseDict(value, getattr(record, name))
        elif fd.type == _FD.TYPE_STRING:
            setattr(record, name, value if isinstance(value, str) else str(value))
        elif fd.type == _FD.TYPE_DOUBLE:
            setattr(record, name, float(value))
        else:
            setattr(record, name, value)
    return record


def decode_struct(value: message.Message) -> dict[str, Any]:
    """A ``google.protobuf.Struct`` as a JSON object (exact numbers as REST parses them)."""
    decoded = fieldvalues.exact_floats(json_format.MessageToDict(value))
    return decoded if isinstance(decoded, dict) else {}
