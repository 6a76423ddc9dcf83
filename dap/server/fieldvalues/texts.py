"""Text of a field's value → the column value: query-string filters, row scopes, CSV cells of an
import or a seed file, a seed file's YAML numbers. Pure.

Text is read the way a client's JSON would carry the same value, then validated by ``parsing``,
so ``"17"`` means the same in a query string, a CSV cell and a body -- and so does ``"17.0"``,
which JSON takes for an integer field (an integral number) and the CSV path once refused
(``expected an integer``). ``json`` and ``attachment`` fields, ``multiple`` ones and child rows are
JSON text in a CSV cell, as the UI's export writes them; they cannot be filtered by value.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from dap.config.enums import FieldType
from dap.config.fields import Field
from dap.server.fieldvalues import limits, parsing, rendering
from dap.server.fieldvalues.limits import InvalidValueError

_JSON_TEXT = (*limits.JSON_HELD, FieldType.CHILD)
_PARSED = (FieldType.INTEGER, FieldType.NUMBER, FieldType.BOOLEAN)


def number_text(text: str) -> Decimal:
    """A number written as text (``17``, ``-0.5``, ``1e3``) as the exact ``Decimal`` a JSON body
    would carry; ``InvalidValueError`` when it is no number."""
    try:
        return Decimal(text)
    except InvalidOperation as exc:
        raise InvalidValueError(f"{text!r} is not a number") from exc


def _integer(text: str) -> int:
    try:
        number: int | Decimal = int(text)
    except ValueError:
        try:  # "17.0", "1.7e1": an integral number, as a JSON body may write it
            number = number_text(text)
        except InvalidValueError as exc:
            raise InvalidValueError("expected an integer") from exc
    return parsing.integer(number)


def _number(f: Field, text: str) -> Any:
    try:
        number = float(text)
    except ValueError as exc:
        raise InvalidValueError("expected a number") from exc
    return parsing.one_value(f, number)  # finite, as from JSON


def from_text(f: Field, text: str) -> Any:
    """The column value for ``text`` of field ``f`` (a filter, a scope, a CSV cell's scalar)."""
    t = f.type
    if t is FieldType.INTEGER:
        return _integer(text)
    if t is FieldType.NUMBER:
        return _number(f, text)
    if t is FieldType.BOOLEAN:
        if text.lower() in ("true", "1"):
            return True
        if text.lower() in ("false", "0"):
            return False
        raise InvalidValueError("expected true or false")
    if t in _JSON_TEXT or f.multiple:
        raise InvalidValueError("fields holding JSON can only be filtered with null or notnull")
    return parsing.one_value(f, text)


def from_cell(f: Field, text: str) -> Any:
    """The JSON value of CSV cell ``text`` of field ``f`` (an import's, a CSV seed file's), to be
    validated as a body is; ``InvalidValueError`` says why not.

    Integers, numbers and booleans are read by :func:`from_text`; JSON-holding fields as JSON text
    (decimals kept exact); everything else (text, exact numbers, dates, ids, a relation's key) is
    its JSON text already."""
    if f.type in _JSON_TEXT or f.multiple:
        try:
            return parsing.exact_json_of_cell(text)
        except ValueError as exc:
            raise InvalidValueError("expected JSON (as the export writes this field)") from exc
    if f.type in _PARSED:
        return rendering.to_json(f, from_text(f, text.strip()))
    return text


def yaml_number(text: str) -> Decimal | str:
    """A seed file's YAML float (``12.30``, ``1_000.5``) as an exact ``Decimal``; text YAML took for
    a float but that is no number (``.nan`` spelled otherwise) stays text for the field to judge."""
    try:
        return number_text(text.replace("_", ""))
    except InvalidValueError:
        return text
