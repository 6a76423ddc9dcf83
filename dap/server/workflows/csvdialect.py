"""The one CSV dialect of dap: what the UI's export writes (``ui/src/csv.ts``) and what a CSV
import or a CSV seed file is read as. Pure.

- UTF-8 (a leading byte-order mark is dropped); RFC 4180: cells separated
  by commas, a cell holding a comma, a quote, CR or LF (or white space at either end) is quoted
  with ``"`` and its quotes doubled; records end with CRLF (LF is read too). Reading is strict:
  a quote never closed, or text after a closing quote, is a :class:`CsvError` naming the line
  and column where the cell began, never the rest of the file read as one cell.
- The first record names the columns, each at most once; every other record has one cell per
  column (blank records are skipped).
- The formula guard (OWASP, "CSV Injection"): a cell that begins with ``=``, ``+``, ``-``, ``@``,
  tab or CR is written with a single quote before it, so that a spreadsheet shows it as text
  instead of running it; a cell that is only a number (``-5``, ``+1.5e3``) is left alone (it
  runs nothing, and stays a number in the sheet). Text that itself begins with a single quote
  gets one more. Reading drops one leading quote where it is followed by one of those characters
  or by another quote, so every value reads back exactly as it was written.

How a cell's text becomes a field's value is the field type's business (``fieldvalues.from_cell``).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

TRIGGERS = frozenset("=+-@\t\r")
GUARD = "'"
MAX_CELL = 8 * 1024 * 1024  # above any body an import takes (5 MiB): a long cell is the field's to refuse
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")

# The csv module's cell limit (128 KiB by default) is process-wide and raised, never lowered, here:
# a longer cell must reach the field's own length rule (422 naming the field), not a csv.Error.
csv.field_size_limit(max(csv.field_size_limit(), MAX_CELL))


class CsvError(ValueError):
    """The text is not CSV of this dialect: at ``line`` (1-based), in column ``column`` (1-based),
    named ``name`` where the header names it."""

    def __init__(self, line: int, column: int, message: str, name: str | None = None) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.line, self.column, self.message, self.name = line, column, message, name

    @property
    def column_name(self) -> str:
        """The column as a problem names it: its header name, else its place (``column 3``)."""
        return self.name or f"column {self.column}"


@dataclass(frozen=True)
class Table:
    """A CSV file read: its header, and each record with the line it begins on."""

    header: list[str]
    records: list[tuple[int, list[str]]]


def guarded(text: str) -> str:
    """A cell's text as it is written: the formula guard applied (quoting is the writer's)."""
    if text and (text[0] == GUARD or (text[0] in TRIGGERS and not _NUMBER.fullmatch(text))):
        return GUARD + text
    return text


def unguarded(cell: str) -> str:
    """A cell's value as it was before :func:`guarded`."""
    if len(cell) > 1 and cell[0] == GUARD and (cell[1] in TRIGGERS or cell[1] == GUARD):
        return cell[1:]
    return cell


def read(text: str) -> Table:
    """The header and records of ``text``; :class:`CsvError` at the first place it is not CSV.
    Cells come back as written (the guard still on: :func:`unguarded` is per value)."""
    text = text.removeprefix("\ufeff")  # a byte-order mark, as spreadsheets save "CSV UTF-8"
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    records: list[tuple[int, list[str]]] = []
    start = 1
    try:
        for cells in reader:
            records.append((start, cells))
            start = reader.line_num + 1
    except csv.Error as exc:
        column = _column(text, start)
        header = records[0][1] if records else []
        name = header[column - 1] if start > 1 and 0 < column <= len(header) else None
        raise CsvError(start, column, _why(str(exc)), name) from exc
    if not records:
        return Table([], [])
    (_, header), body = records[0], records[1:]
    seen: set[str] = set()
    for index, name in enumerate(header, 1):
        if name in seen:
            raise CsvError(1, index, f"the column {name!r} appears more than once", name)
        seen.add(name)
    return Table(header, body)


def _why(message: str) -> str:
    if "end of data" in message:
        return "a quoted cell is never closed (a missing closing quote takes the rest of the file)"
    if "expected after" in message:
        return 'text after a closing quote; double a quote inside a quoted cell ("")'
    return message


def _column(text: str, line: int) -> int:
    """The column (1-based) of the cell the reader stopped in, scanning the record that begins on
    ``line`` as RFC 4180 reads it."""
    lines = io.StringIO(text, newline="").readlines()
    rest = "".join(lines[line - 1 :])
    column, quoted, opened, i = 1, False, 1, 0
    while i < len(rest):
        ch = rest[i]
        if quoted:
            if ch == '"' and rest[i + 1 : i + 2] == '"':
                i += 1
            elif ch == '"':
                quoted = False
                following = rest[i + 1 : i + 2]
                if following not in ("", ",", "\r", "\n"):
                    return column
        elif ch == '"' and (i == 0 or rest[i - 1] in ",\r\n"):
            quoted, opened = True, column
        elif ch == ",":
            column += 1
        elif ch in "\r\n":
            return column
        i += 1
    return opened if quoted else column
