"""OTLP's protobuf bytes (``ExportTraceServiceRequest``), written directly for dap's spans.

It runs in the sending process (``dap.tracing.sender``), on the records (``spans.Record``) the
traced process sends it.

The SDK's encoder builds a protobuf object per span, attribute and event, field by field, and
groups spans by hashing their resource: about 25 µs a span, in a thread that shares the GIL with
the event loop. dap's spans have one shape (``spans.Span``) and one resource and scope per
process, so the request is written here as bytes: the resource and scope once per batch, each
span's fields in the order of ``opentelemetry/proto/trace/v1/trace.proto``, strings and
key-values that repeat (names, attribute keys, tenants, routes) taken from a bounded cache.
``tests/test_tracing_otlp.py`` parses what this writes with the protobuf schema and compares it to
what the SDK's encoder makes of the same spans.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

from dap.tracing import spans

_DOUBLE = struct.Struct("<d")
_CACHED = 4096  # key-value pairs and names kept encoded; cleared when full (values vary little)


_SMALL = [bytes((n,)) for n in range(0x80)]  # the varints of one byte, made once


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: ``tag`` is (number << 3) | 2, below 128 for every field here."""
    return _SMALL[tag] + _varint(len(payload)) + payload


def _any(value: Any) -> bytes:
    """An ``AnyValue``; a value of another type goes as its text (spans.clean does so already)."""
    if type(value) is str:  # most values: ids, names, routes
        return _field(0x0A, value.encode())
    if isinstance(value, bool):  # before int: a bool is an int
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)  # int64, two's complement
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    return _field(0x0A, str(value).encode())


_pairs: dict[tuple[bytes, str, type, Any], bytes] = {}
_names: dict[str, bytes] = {}
# values that differ on every span: a cache entry for them is never read again, and filling the
# cache with them clears the entries that are (the keys of every span, tenants, routes)
_UNIQUE = frozenset({"dap.request_id"})


_keys: dict[str, bytes] = {}


def _pair(tag: bytes, key: str, value: Any) -> bytes:
    """A ``KeyValue`` as an element of the repeated field ``tag``: tag, length and message."""
    field = _keys.get(key)
    if field is None:
        if len(_keys) >= _CACHED:
            _keys.clear()
        field = _keys[key] = _field(0x0A, key.encode())
    return tag + _varint_len(field + _field(0x12, _any(value)))


def _varint_len(payload: bytes) -> bytes:
    return _varint(len(payload)) + payload


def _attributes(tag: bytes, attributes: Mapping[str, Any]) -> bytes:
    """The repeated ``KeyValue`` field ``tag``: a pair seen before (by key, type and value) comes
    from a cache, a float (a duration) or a :data:`_UNIQUE` key's value is encoded each time."""
    parts = []
    for key, value in attributes.items():
        kind = type(value)
        if kind is float or key in _UNIQUE:  # durations are rarely equal twice either
            parts.append(_pair(tag, key, value))
            continue
        cache = (tag, key, kind, value)
        found = _pairs.get(cache)
        if found is None:
            if len(_pairs) >= _CACHED:
                _pairs.clear()
            found = _pairs[cache] = _pair(tag, key, value)
        parts.append(found)
    return b"".join(parts)


def _name(name: str) -> bytes:
    found = _names.get(name)
    if found is None:
        if len(_names) >= _CACHED:
            _names.clear()
        found = _names[name] = _varint_len(name.encode())
    return found


def _status(error: str | None) -> bytes:
    if error is None:
        return b"\x7a\x00"  # Status{} : UNSET, as the SDK always sends one
    message = _field(0x12, error.encode()) if error else b""
    return _field(0x7A, message + b"\x18\x02")  # code ERROR


_KIND = {name: bytes((0x30, number)) for name, number in spans.KINDS.items()}
_LOCAL = b"\x85\x01" + (0x100).to_bytes(4, "little")  # flags: "is remote" known, and false
_REMOTE = b"\x85\x01" + (0x300).to_bytes(4, "little")


# the fixed-size head of a span: trace id (field 1), span id (2), [parent span id (4)], each
# tag and length then the id big-endian, as OTLP's bytes fields carry them
_IDS = struct.Struct(">HQQHQ")
_IDS_PARENT = struct.Struct(">HQQHQHQ")
_TIMES = struct.Struct("<BQBQ")  # start (field 7) and end (8): fixed64
_AT = struct.Struct("<BQB")  # an event's time (field 1), then its name's tag (2)
_LOW64 = (1 << 64) - 1


def span(record: spans.Record) -> bytes:
    """One ``Span`` message, its fields numbered as in trace.proto."""
    name, kind, trace, span_id, parent_id, remote, start, end, attributes, events, error = record
    if parent_id:
        head = _IDS_PARENT.pack(0x0A10, trace >> 64, trace & _LOW64, 0x1208, span_id, 0x2208, parent_id)
    else:
        head = _IDS.pack(0x0A10, trace >> 64, trace & _LOW64, 0x1208, span_id)
    parts = [head, b"\x2a", _name(name), _KIND[kind], _TIMES.pack(0x39, start, 0x41, end)]
    if attributes:
        parts.append(_attributes(b"\x4a", attributes))
    for at, event_name, event_attributes in events:
        event = _AT.pack(0x09, at, 0x12) + _name(event_name) + _attributes(b"\x1a", event_attributes)
        parts += (b"\x5a", _varint_len(event))
    parts.append(_status(error))
    parts.append(_REMOTE if remote else _LOCAL)
    return b"".join(parts)


def resource(attributes: Mapping[str, Any]) -> bytes:
    """A ``Resource`` message's body (its attributes), encoded once per process."""
    return _attributes(b"\x0a", attributes)


def request(resource_body: bytes, scope: str, batch: Iterable[spans.Record]) -> bytes:
    """An ``ExportTraceServiceRequest``: one resource, one instrumentation scope, ``batch``."""
    body = b"".join([b"\x12" + _varint_len(span(s)) for s in batch])
    scope_spans = _field(0x0A, _field(0x0A, scope.encode())) + body
    resource_spans = _field(0x0A, resource_body) + _field(0x12, scope_spans)
    return _field(0x0A, resource_spans)
