"""The optional on-disk part of the logs window: a bounded set of rotating JSON-lines files.

The in-memory window (``dap.logs.Window``) forgets everything at a restart and holds only its last
lines. With ``--logs-file PATH`` (``DAP_LOGS_FILE``) every line is also appended to ``PATH``; when
that file would pass its share of the size bound (``--logs-file-size``, ``DAP_LOGS_FILE_SIZE``,
default 64 MiB, split over :data:`FILES` files) it becomes ``PATH.1``, ``PATH.1`` becomes ``PATH.2``
…, and the oldest is deleted. So the disk holds at most the bound (plus one line), the newest lines
last, in the very format the process writes on stderr, and a restarted process finds them there.

:meth:`Files.newest_first` reads them back, from the newest line of ``PATH`` to the oldest of the
last rotated file, as ``dap.logs.Entry`` objects (the parser is handed in: this module knows
nothing of entries). A line that does not parse (a torn write at a crash) is skipped. One set of
files per process: two processes given the same path would rotate each other's lines away.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

FILES = 4  # the current file and three rotated ones: each holds a quarter of the bound
DEFAULT_BYTES = 64 * 1024 * 1024
MIN_BYTES = FILES * 4096
_SIZE = re.compile(r"\s*(\d+)\s*(|k|kb|kib|m|mb|mib|g|gb|gib)\s*", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}

T = TypeVar("T")


def parse_size(text: str) -> int:
    """``64MiB``, ``512k``, ``1g``, ``1048576`` → bytes (binary units); ``ValueError`` otherwise."""
    found = _SIZE.fullmatch(text)
    if found is None:
        raise ValueError(f"{text!r} is not a size: use bytes or a number with k, M or G (e.g. 64MiB)")
    size = int(found.group(1)) * _UNITS[found.group(2)[:1].lower()]
    if size < MIN_BYTES:
        raise ValueError(f"{text!r} is too small for the log files: give at least {MIN_BYTES} bytes")
    return size


class Files:
    """Appends lines to ``path`` and rotates it; reads every kept line back, newest first."""

    def __init__(self, path: str | os.PathLike[str], max_bytes: int = DEFAULT_BYTES) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.per_file = max(1, max_bytes // FILES)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._out = self.path.open("a", encoding="utf-8")
        self._size = self._out.tell()

    def _rotated(self, n: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{n}")

    def write(self, line: str) -> None:
        """Append one line (no newline in it); rotate first when the current file is full."""
        data = line + "\n"
        size = len(data.encode("utf-8"))
        if self._size and self._size + size > self.per_file:
            self._rotate()
        self._out.write(data)
        self._out.flush()
        self._size += size

    def _rotate(self) -> None:
        self._out.close()
        self._rotated(FILES - 1).unlink(missing_ok=True)
        for n in range(FILES - 2, 0, -1):
            if self._rotated(n).exists():
                self._rotated(n).rename(self._rotated(n + 1))
        self.path.rename(self._rotated(1))
        self._out = self.path.open("a", encoding="utf-8")
        self._size = 0

    def paths(self) -> list[Path]:
        """The kept files, newest first."""
        return [p for p in [self.path, *(self._rotated(n) for n in range(1, FILES))] if p.exists()]

    def newest_first(self, parse: Callable[[dict[str, Any]], T], skip: int = 0) -> Iterator[T]:
        """Every kept line, newest first, through ``parse``; the newest ``skip`` lines left out (those
        the memory window holds too). A file rotated away while this reads is read as it was."""
        for path in self.paths():
            try:
                with path.open("rb") as handle:
                    lines = handle.read().splitlines()
            except FileNotFoundError:  # rotated away meanwhile: its lines are in the next name
                continue
            for raw in reversed(lines):
                if skip:
                    skip -= 1
                    continue
                try:
                    value = json.loads(raw)
                    yield parse(value) if isinstance(value, dict) else _skip()
                except (ValueError, KeyError, TypeError):
                    continue  # a torn line (a crash mid-write), or one not written by dap

    def close(self) -> None:
        self._out.close()


def _skip() -> Any:
    raise ValueError("not a JSON object")
