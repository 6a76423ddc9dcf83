"""A CSV cell as the JSON value of its field: what an import or a CSV seed file holds, read the
way a client's JSON would carry it, then validated as a body is (``records.coerce``). Pure.

Beside ``records`` (the value layer) and through its parsers, so that ``"17"`` means the same in
a query string, a CSV cell and a filter: integers, numbers and booleans are read by
``records.from_text``; ``json`` and ``attachment`` fields, ``multiple`` ones and child rows are
JSON text, as the UI's export writes them (decimals kept exact, as a body's); everything else
(text, exact numbers, dates, ids, a relation's key) is its JSON text already. The CSV dialect
itself (quoting, the formula guard) is ``workflows.csvdialect``'s.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.server.storage import records

_JSON = (FieldType.JSON, FieldType.ATTACHMENT, FieldType.CHILD)
_PARSED = (FieldType.INTEGER, FieldType.NUMBER, FieldType.BOOLEAN)


def from_cell(f: Field, text: str) -> Any:
    """The JSON value of CSV cell ``text`` of field ``f``; ``records.InvalidValueError`` says why not."""
    if f.type in _JSON or f.multiple:
        try:  # NaN and Infinity come back as Decimals, which the validation refuses as not finite
            return json.loads(text, parse_float=Decimal, parse_constant=Decimal)
        except ValueError as exc:
            raise records.InvalidValueError("expected JSON (as the export writes this field)") from exc
    if f.type in _PARSED:
        return records.to_json(f, records.from_text(f, text.strip()))
    return text
