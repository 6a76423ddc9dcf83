"""Problems found in a manifest set.

    SpecError (ValueError)      raised by the loader; carries every Problem found, not just the first
      └── .problems: list[Problem(file, document, path, message)]

A ``Problem`` names where (file, document index within the file, JSON path inside the document)
and what to do. The loader collects problems across all files before raising, so an author fixes
a whole spec in one round.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    document: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.document is None else f"{self.file}#{self.document}"
        return f"{where} {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class SpecError(ValueError):
    """The manifests are invalid; ``problems`` lists every problem found."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        count = len(self.problems)
        head = "\n".join(str(p) for p in self.problems[:20])
        more = f"\n... and {count - 20} more" if count > 20 else ""
        super().__init__(f"{count} problem(s) in the manifests:\n{head}{more}")


def json_path(parts: Iterable[str | int]) -> str:
    """Render a location such as ("spec", "fields", 2, "name") as ``spec.fields[2].name``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
