"""JSON Schemas of fields, records and list parameters, as the server parses and answers them. Pure.

``openapi`` assembles the document; this module says what one value may be, and it follows the
server's own rules so that a client (or schemathesis) that obeys the schema is never refused and
every answer matches it:

- a field that is not required may be ``null`` in a body and is ``null`` in answers when unset;
  a masked field answers ``"****"`` whatever its type;
- strings carry the limits ``records`` applies (500 characters where indexed, 10 000 for other
  ``string`` fields, a declared ``max_length``/``min_length``/``pattern``), and a required one must
  not be blank; decimals are strings with at most the field's scale and precision;
- ``min``/``max`` rules become ``minimum``/``maximum`` of numbers;
- list parameters are typed per field and operator (lists comma-separated, ``null``/``notnull``
  take ``true``), and ``sort``/``fields`` name only what can be sorted or selected.
"""

from __future__ import annotations

import re
from typing import Any

from dap.config.enums import FieldType, FilterOp
from dap.config.fields import Field
from dap.server import fieldvalues
from dap.server.catalog import Catalog, Resource
from dap.server.storage import numbering, queries, tables
from dap.server.workflows import filters

INT64 = {"type": "integer", "format": "int64", "minimum": -(2**63), "maximum": 2**63 - 1}
_TEXTUAL = (FieldType.STRING, FieldType.TEXT, FieldType.RICHTEXT, FieldType.FILE, FieldType.ENUM)
_EXACT = (FieldType.DECIMAL, FieldType.MONEY, FieldType.PERCENT)
_JSONISH = (FieldType.JSON, FieldType.ATTACHMENT, FieldType.CHILD)
_UUID = r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
_SCALAR: dict[FieldType, dict[str, Any]] = {
    FieldType.STRING: {"type": "string"},
    FieldType.TEXT: {"type": "string"},
    FieldType.RICHTEXT: {"type": "string", "contentMediaType": "text/html"},
    FieldType.FILE: {"type": "string"},
    FieldType.ENUM: {"type": "string"},
    FieldType.INTEGER: INT64,
    FieldType.NUMBER: {"type": "number"},
    FieldType.BOOLEAN: {"type": "boolean"},
    FieldType.DATE: {"type": "string", "format": "date"},
    FieldType.DATETIME: {"type": "string", "format": "date-time"},
    # not RFC 3339's "time", which needs a zone: a time of day is stored and answered without one
    FieldType.TIME: {"type": "string", "pattern": r"^([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d{1,6})?)?$"},
    FieldType.UUID: {"type": "string", "format": "uuid"},
    FieldType.RELATION: {"type": "string", "format": "uuid"},
    FieldType.JSON: {},
    FieldType.ATTACHMENT: {},
}


def decimal_pattern(f: Field) -> str:
    """The digits a decimal field takes: at most its scale after the point, its precision in all."""
    scale, precision = fieldvalues.scale_of(f), fieldvalues.precision_of(f)
    whole = r"\d+" if precision is None else r"\d{1,%s}" % str(max(1, precision - (scale or 0)))  # noqa: UP031
    fraction = r"(\.\d+)?" if scale is None else ("" if scale == 0 else r"(\.\d{1,%s})?" % str(scale))  # noqa: UP031
    return f"^-?{whole}{fraction}$"


def _rules(f: Field, schema: dict[str, Any]) -> None:
    for rule in f.rules:
        if (
            rule.rule in ("min", "max")
            and isinstance(rule.value, int | float)
            and schema.get("type")
            in (
                "integer",
                "number",
            )
        ):
            schema["minimum" if rule.rule == "min" else "maximum"] = rule.value
        elif rule.rule in ("min_length", "max_length") and isinstance(rule.value, int):
            schema["minLength" if rule.rule == "min_length" else "maxLength"] = rule.value
        elif rule.rule == "pattern" and isinstance(rule.value, str):
            schema["pattern"] = rule.value


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if not schema:
        return schema  # free JSON: null included
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    kind = schema.get("type")
    return {**schema, "type": [kind, "null"]} if isinstance(kind, str) else schema


def field_schema(f: Field, module: str, catalog: Catalog, *, for_input: bool = False) -> dict[str, Any]:
    """One field's value: in a body (``for_input``) or in an answer."""
    if f.type is FieldType.CHILD:
        rows = tables.child_fields(f, module, catalog.entities)
        array = {"type": "array", "items": object_schema(rows, module, catalog, for_input=for_input)}
        return array if f.required else _nullable(array)
    if f.masked and not for_input:
        return {"type": ["string", "null"], "description": "Masked in responses."}
    schema = dict(_SCALAR.get(f.type, {}))
    if f.type in _EXACT:
        schema = {"type": "string", "format": "decimal", "pattern": decimal_pattern(f)}
    if for_input:
        _rules(f, schema)
        limit = fieldvalues.text_limit(f)
        if f.type in _TEXTUAL and limit is not None:
            schema["maxLength"] = min(limit, schema.get("maxLength", limit))
        if f.type in _TEXTUAL and f.required and "pattern" not in schema:
            schema |= {"minLength": max(1, schema.get("minLength", 1)), "pattern": r"\S"}
    choices = fieldvalues.allowed_values(f)
    if choices:
        schema = {"enum": list(choices)}
    for key in ("title", "description"):
        if getattr(f, key):
            schema[key] = getattr(f, key)
    if f.multiple and f.type not in (FieldType.JSON, FieldType.ATTACHMENT):
        schema = {"type": "array", "items": schema}
    return schema if f.required else _nullable(schema)


def object_schema(
    fields: tuple[Field, ...], module: str, catalog: Catalog, *, for_input: bool, partial: bool = False
) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in fields:
        if f.removed or "rest" in f.exclude or f.name in tables.SYSTEM_FIELDS:
            continue
        if for_input and (f.read_only or f.computed is not None or (partial and f.immutable)):
            continue
        if for_input and numbering.refuses_input(f, partial=partial):
            continue
        props[f.name] = field_schema(f, module, catalog, for_input=for_input)
        if for_input and not partial and f.required and f.default is None and not fieldvalues.server_fills(f):
            required.append(f.name)
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if for_input:
        schema["additionalProperties"] = False
    if required:
        schema["required"] = required
    return schema


def _ops(f: Field) -> list[FilterOp]:
    if f.type in _JSONISH or f.multiple:
        return [FilterOp.NULL, FilterOp.NOTNULL]
    ops = [FilterOp.EQ, FilterOp.NEQ, FilterOp.IN, FilterOp.NIN, FilterOp.NULL, FilterOp.NOTNULL]
    if f.type not in (FieldType.BOOLEAN, FieldType.UUID, FieldType.RELATION):
        ops += [FilterOp.GT, FilterOp.GTE, FilterOp.LT, FilterOp.LTE, FilterOp.BETWEEN]
    if f.type in _TEXTUAL and f is not queries.SYSTEM["docstatus"]:
        ops += [FilterOp.LIKE, FilterOp.ILIKE]
    return ops


def _value_regex(f: Field) -> str | None:
    """The text one filter value of ``f`` must be (``None``: any text without a comma)."""
    if f.type is FieldType.INTEGER:
        return r"-?\d{1,18}"
    if f.type in _EXACT:
        return decimal_pattern(f).strip("^$")
    if f.type is FieldType.NUMBER:
        return r"-?\d{1,15}(\.\d{1,6})?"
    if f.type is FieldType.BOOLEAN:
        return "(true|false)"
    if f.type in (FieldType.UUID, FieldType.RELATION):
        return _UUID
    if f.type is FieldType.DATE:
        return r"[1-9]\d{3}-(0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8])"
    if f.type is FieldType.DATETIME:
        return r"[1-9]\d{3}-(0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8])T([01]\d|2[0-3]):[0-5]\d:[0-5]\dZ"
    if f.type is FieldType.TIME:
        return r"([01]\d|2[0-3]):[0-5]\d(:[0-5]\d)?"
    choices = fieldvalues.allowed_values(f)
    if choices:
        return "(" + "|".join(re.escape(str(c)) for c in choices) + ")"
    return None


def _filter_schema(f: Field, op: FilterOp) -> dict[str, Any]:
    if op in (FilterOp.NULL, FilterOp.NOTNULL):
        return {"type": "string", "enum": ["true"], "description": f"{op}: takes no value"}
    if op in (FilterOp.LIKE, FilterOp.ILIKE):
        return {"type": "string", "pattern": "^[^\\x00]*$", "description": "% and _ are wildcards"}
    one = _value_regex(f) or "[^,\\x00]+"
    if op is FilterOp.BETWEEN:
        return {"type": "string", "pattern": f"^{one},{one}$", "description": "low,high"}
    if op in (FilterOp.IN, FilterOp.NIN):
        return {"type": "string", "pattern": f"^{one}(,{one})*$", "description": "comma-separated values"}
    return (
        {"type": "string", "pattern": f"^{one}$"} if _value_regex(f) else {"type": "string", "minLength": 1}
    )


def list_parameters(resource: Resource) -> list[dict[str, Any]]:
    """``limit``, ``offset``, ``sort``, ``count``, ``fields`` and a ``field[op]`` per filter."""
    system = [f for n, f in queries.SYSTEM.items() if n != "docstatus" or resource.lifecycle]
    own = [f for f in resource.fields.values() if resource.column(f.name) and not f.masked]
    sortable = [f.name for f in (*system, *own) if f.type not in _JSONISH and not f.multiple]
    names = "|".join(re.escape(n) for n in sortable)
    selectable = "|".join(re.escape(n) for n in (*resource.fields, *resource.extensions, "id"))
    params: list[dict[str, Any]] = [
        {
            "name": "limit",
            "in": "query",
            "schema": {"type": "integer", "minimum": 1, "maximum": filters.MAX_LIMIT, "default": 50},
        },
        {
            "name": "offset",
            "in": "query",
            "schema": {"type": "integer", "minimum": 0, "maximum": filters.MAX_OFFSET, "default": 0},
        },
        {
            "name": "sort",
            "in": "query",
            "schema": {"type": "string", "pattern": f"^-?({names})(,-?({names}))*$"},
            "description": "a,-b: ascending a, then descending b",
        },
        {"name": "count", "in": "query", "schema": {"type": "boolean"}, "description": "true fills total"},
        {
            "name": "fields",
            "in": "query",
            "schema": {"type": "string", "pattern": f"^({selectable})(,({selectable}))*$"},
            "description": "comma-separated projection",
        },
    ]
    for f in (*system, *own):
        for op in _ops(f):
            name = f.name if op is FilterOp.EQ else f"{f.name}[{op}]"
            params.append({"name": name, "in": "query", "required": False, "schema": _filter_schema(f, op)})
    return params
