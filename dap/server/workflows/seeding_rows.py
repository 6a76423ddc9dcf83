"""What one seed or import row is checked for before it writes (``seeding`` runs them). Pure.

- :func:`typed`: a CSV row's cells as the values of their fields (``fieldvalues.from_cell``, one
  rule per field type, the one the seed files and imports share);
- :func:`named`: the record a row's ``id`` names (the export's column);
- :func:`exposes`, :func:`exposes_action`: an import's row stands for a REST verb (a create, an
  update, a submit), so ``expose`` must open it, or the row meets the 405 the verb would;
- :func:`as_written`: a row from an export (its ``version``, ``docstatus``) is refused when its
  record moved on since (412, the ``If-Match`` of a PATCH);
- :func:`same`: whether a row's validated values are what its record holds (nothing to write);
  :func:`unwritten`: a row without the read-only fields an export lists at their stored values.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from dap.config.enums import FieldType
from dap.server import errors, fieldvalues
from dap.server.catalog import Resource
from dap.server.documents import lifecycle
from dap.server.storage import tables
from dap.server.workflows import seeds


def typed(resource: Resource, row: seeds.Row) -> seeds.Row:
    """A CSV row's cells as the values of their fields (``fieldvalues.from_cell``, one rule per type)."""
    values: dict[str, Any] = {}
    problems: list[errors.FieldProblem] = []
    for name, text in row.values.items():
        f = resource.fields.get(name)
        if f is None:  # the validation names it, as for any unknown field
            values[name] = text
            continue
        try:
            values[name] = fieldvalues.from_cell(f, text)
        except fieldvalues.InvalidValueError as exc:  # as the body's validation answers it
            problems.append(errors.FieldProblem(name, str(exc)))
    if problems:
        raise errors.ValidationFailed("cells that do not fit their fields", errors=problems)
    return dataclasses.replace(row, values=values, cells=False)


def named(row: seeds.Row) -> uuid.UUID | None:
    """The record a row's ``id`` names (an export's row), if it has one."""
    if row.record_id is None:
        return None
    try:
        return uuid.UUID(row.record_id)
    except ValueError:
        why = "not a record id; leave it empty for a new record"
        raise errors.ValidationFailed(why, errors=[errors.FieldProblem("id", why)]) from None


def exposes(verbs: frozenset[str] | None, resource: Resource, verb: str) -> None:
    """An import's row stands for ``verb``: refused as REST refuses it where ``expose`` has no such
    verb (405)."""
    if verbs is not None and verb not in verbs:
        raise errors.MethodNotAllowed(
            f"{resource.key} does not expose {verb}, which this row stands for",
            code="SVC.ACTION.NOT_EXPOSED",
            allow=[],
        )


def exposes_action(verbs: frozenset[str] | None, resource: Resource, action: str) -> None:
    """An ``_actions`` entry: submit and cancel are opened by ``update`` (``lifecycle.move_open``)."""
    if verbs is None:
        return
    if action in lifecycle.MOVES and resource.lifecycle and not lifecycle.move_open(resource, action):
        exposes(verbs, resource, "update")


def as_written(resource: Resource, row: seeds.Row, current: Any) -> None:
    """412 when the record moved on since the row's ``version`` or ``docstatus`` (an export's)."""
    stale = row.version is not None and current["version"] != row.version
    if row.docstatus is not None and resource.lifecycle:
        stale = stale or tables.DOCSTATUS[current["docstatus"]] != row.docstatus
    if stale:
        state = f", {tables.DOCSTATUS[current['docstatus']]}" if resource.lifecycle else ""
        raise errors.PreconditionFailed(
            f"the record is at version {current['version']}{state} now, not as this row was written; "
            "export it again and redo the change"
        )


def same(resource: Resource, current: Any, values: dict[str, Any]) -> bool:
    """Whether the validated ``values`` are what the record holds already (nothing to write)."""
    for name, value in values.items():
        f, column = resource.fields.get(name), resource.column(name)
        if f is None or column is None or f.type is FieldType.CHILD:
            return False
        if fieldvalues.to_json(f, current[column]) != fieldvalues.to_json(f, value):
            return False
    return True


def unwritten(resource: Resource, current: Any, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without the read-only, computed and immutable fields whose value is the record's
    own: an export lists them (a state, a total), and importing it back is no attempt to write
    them. One that differs stays, for the validation to refuse as it refuses a PATCH."""
    return {name: value for name, value in body.items() if not _kept(resource, current, name, value)}


def _kept(resource: Resource, current: Any, name: str, value: Any) -> bool:
    f, column = resource.fields.get(name), resource.column(name)
    if f is None or column is None or not (f.read_only or f.computed is not None or f.immutable):
        return False
    try:
        return bool(
            fieldvalues.to_json(f, fieldvalues.coerce(f, value)) == fieldvalues.to_json(f, current[column])
        )
    except fieldvalues.InvalidValueError:
        return False
