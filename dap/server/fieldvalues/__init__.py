"""The value model: a field's value from every source it comes from, to every form it goes to.

One home per field type for what a value may be and how it is read and written, so that a value
means the same whichever way it arrives:

- from JSON, what a client sends (``parsing``: :func:`coerce` one field, :func:`coerce_row` a
  body, :func:`exact_json` to read the text keeping decimals exact);
- from text: query-string filters, row scopes, CSV cells of imports and seed files, a seed's YAML
  numbers (``texts``: :func:`from_text`, :func:`from_cell`, :func:`yaml_number`);
- from computed values: formulas and auto-fill (``computed``: :func:`convert`), and child rows
  read back from jsonb (:func:`stored_value`);
- limits and precision (``limits``: text Postgres can store, lengths, choices, scale, precision,
  a rule's bounds);
- out as JSON (``rendering``: :func:`to_json`, :func:`present`, :func:`converter`); the CSV
  export writes that JSON's text, and the SQL parameter of a value is the column value the
  parsers return (asyncpg binds it as it is).

``InvalidValueError`` is the one refusal of a value; ``InvalidRowError`` collects a body's.
Nothing outside this package converts a field's value (``tests/test_layout.py`` holds to it).
"""

from dap.server.fieldvalues.bodies import InvalidRowError, coerce, coerce_row, default_of, server_fills
from dap.server.fieldvalues.computed import convert, stored_value
from dap.server.fieldvalues.limits import (
    INDEXED_STRING_MAX,
    STRING_MAX,
    InvalidValueError,
    allowed_values,
    check_text,
    compare,
    precision_of,
    scale_of,
    text_limit,
)
from dap.server.fieldvalues.parsing import (
    EXACT_JSON,
    coercer,
    date_of,
    exact_floats,
    exact_json,
    plain_json,
    uuid_of,
)
from dap.server.fieldvalues.rendering import MASK, converter, iso_text, present, to_json
from dap.server.fieldvalues.texts import from_cell, from_text, number_text, yaml_number

__all__ = [
    "EXACT_JSON",
    "INDEXED_STRING_MAX",
    "MASK",
    "STRING_MAX",
    "InvalidRowError",
    "InvalidValueError",
    "allowed_values",
    "check_text",
    "coerce",
    "coerce_row",
    "coercer",
    "compare",
    "convert",
    "converter",
    "date_of",
    "default_of",
    "exact_floats",
    "exact_json",
    "from_cell",
    "from_text",
    "iso_text",
    "number_text",
    "plain_json",
    "precision_of",
    "present",
    "scale_of",
    "server_fills",
    "stored_value",
    "text_limit",
    "to_json",
    "uuid_of",
    "yaml_number",
]
