"""JSON-lines logging on stderr, shared by every dap process, and the window the logs query reads.

Each record is one JSON object: ``ts``, ``level``, ``logger``, ``msg``, ``trace_id`` and ``span_id``
while a trace span is active (``dap.tracing``), and any context passed through
``extra={"ctx": {...}}`` (workspace, request_id, ...). Machines read these lines; people read them
through ``jq`` or the admin listener's ``GET /logs`` (``dap.logquery``).

The window is a bounded deque of the process's last lines (``DAP_LOGS_WINDOW``, default 20,000),
kept as small :class:`Entry` objects rather than text: a query filters on their fields without
parsing JSON back, and a line costs one object and no extra formatting when nobody asks. With
``DAP_LOGS_FILE`` (``--logs-file``) the lines are also kept on disk, in bounded rotating files
(``dap.logfiles``), and a query that the memory does not satisfy reads on into them: back past the
memory's oldest line and across restarts.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from dap import logfiles

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
DEFAULT_WINDOW = 20_000

# Set by ``dap.tracing`` when tracing is on: the active span's (trace id, span id) in hex, or None.
# None here (tracing off) costs a line nothing.
trace_ids: Callable[[], tuple[str, str] | None] | None = None


class Entry:
    """One log line as the window keeps it."""

    __slots__ = ("created", "ctx", "exc", "levelno", "logger", "msg", "span_id", "trace_id")

    def __init__(self, record: logging.LogRecord, exc: str | None) -> None:
        self.created = record.created
        self.levelno = record.levelno
        self.logger = record.name
        self.msg = record.getMessage()
        ctx = getattr(record, "ctx", None)
        self.ctx: dict[str, Any] = ctx if isinstance(ctx, dict) else {}
        self.exc = exc
        ids = trace_ids() if trace_ids is not None else None
        self.trace_id: str | None = ids[0] if ids is not None else None
        self.span_id: str | None = ids[1] if ids is not None else None

    @classmethod
    def parsed(cls, line: dict[str, Any]) -> Entry:
        """The entry a JSON line (of :meth:`as_json`, read back from disk) holds."""
        entry = cls.__new__(cls)
        rest = dict(line)
        entry.created = datetime.fromisoformat(rest.pop("ts")).timestamp()
        level = logging.getLevelName(str(rest.pop("level")).upper())
        entry.levelno = level if isinstance(level, int) else logging.INFO
        entry.logger = str(rest.pop("logger"))
        entry.msg = str(rest.pop("msg"))
        entry.trace_id = rest.pop("trace_id", None)
        entry.span_id = rest.pop("span_id", None)
        entry.exc = rest.pop("exc", None)
        entry.ctx = rest
        return entry

    def get(self, key: str) -> object:
        """A field of the line by its JSON name (context keys included), ``None`` when absent."""
        if key == "trace_id":
            return self.trace_id
        if key == "span_id":
            return self.span_id
        if key == "level":
            return _level_name(self.levelno)
        return self.ctx.get(key)

    def as_json(self) -> dict[str, object]:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(self.created, UTC).isoformat(timespec="milliseconds"),
            "level": _level_name(self.levelno),
            "logger": self.logger,
            "msg": self.msg,
        }
        if self.trace_id is not None:
            line["trace_id"], line["span_id"] = self.trace_id, self.span_id
        line.update(self.ctx)
        if self.exc:
            line["exc"] = self.exc
        return line


def _level_name(levelno: int) -> str:
    return logging.getLevelName(levelno).lower()


class Window:
    """The process's last ``size`` log lines, oldest first; with ``disk``, older ones on disk too."""

    def __init__(self, size: int = DEFAULT_WINDOW, disk: logfiles.Files | None = None) -> None:
        self.lines: deque[Entry] = deque(maxlen=size)
        self.disk = disk
        self.written = 0  # lines of this process written to disk (the newest of them are in memory)
        self._live: Window = self  # what :meth:`frozen` copied: its lines written since are skipped

    @property
    def size(self) -> int:
        return self.lines.maxlen or 0

    def append(self, entry: Entry, line: str | None = None) -> None:
        """Keep ``entry``; with a disk part, write ``line`` (its JSON text) there as well."""
        self.lines.append(entry)
        if self.disk is not None and line is not None:
            try:
                self.disk.write(line)
            except OSError:  # a full or gone disk loses the disk's copy, never the line itself
                return
            self.written += 1

    def newest_first(self, since: float | None = None) -> Iterator[Entry]:
        """The lines from the newest back to ``since`` (epoch seconds) or the oldest kept: those
        in memory, then those on disk that are older (a previous run's included)."""
        for entry in reversed(self.lines):
            if since is not None and entry.created < since:
                return
            yield entry
        if self.disk is None:
            return
        # the memory's lines are the disk's newest, after those written since a copy was frozen
        skip = min(len(self.lines), self.written) + (self._live.written - self.written)
        for entry in self.disk.newest_first(Entry.parsed, skip):
            if since is not None and entry.created < since:
                return
            yield entry

    def frozen(self) -> Window:
        """A copy of the lines in memory now, reading the same disk: a query that reads the disk
        runs on it in another thread while this window keeps taking lines."""
        copy = Window(self.size, self.disk)
        copy.lines.extend(self.lines)
        copy.written, copy._live = self.written, self
        return copy

    def query(
        self, predicate: Callable[[Entry], bool] | None, *, since: float | None = None, limit: int = 100
    ) -> tuple[list[Entry], bool]:
        """The newest ``limit`` lines that match, oldest first, and whether more matched."""
        found: list[Entry] = []
        more = False
        for entry in self.newest_first(since):
            if predicate is None or predicate(entry):
                if len(found) == limit:
                    more = True
                    break
                found.append(entry)
        found.reverse()
        return found, more


def _window_size() -> int:
    raw = os.environ.get("DAP_LOGS_WINDOW", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_WINDOW


WINDOW = Window(_window_size())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else None
        return json.dumps(Entry(record, exc).as_json(), default=str)


class JsonLines(logging.Handler):
    """Writes each record to ``stream`` as a JSON line and keeps it in ``window``."""

    def __init__(self, stream: Any, window: Window) -> None:
        super().__init__()
        self.stream = stream
        self.window = window
        self._exc = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            exc = self._exc.formatException(record.exc_info) if record.exc_info else None
            entry = Entry(record, exc)
            line = json.dumps(entry.as_json(), default=str)
            self.window.append(entry, line)
            self.stream.write(line + "\n")
            self.stream.flush()
        except Exception:
            self.handleError(record)


def keep_on_disk(path: str | None, size: str | int | None = None) -> None:
    """Keep :data:`WINDOW`'s lines in rotating files at ``path`` too, within ``size`` bytes (``64MiB``
    …; default ``DAP_LOGS_FILE_SIZE``, else 64 MiB); ``None`` or empty: memory only. ``ValueError``
    for a bad size, ``OSError`` for a path that cannot be written."""
    if WINDOW.disk is not None:
        WINDOW.disk.close()
        WINDOW.disk, WINDOW.written = None, 0
    if not path:
        return
    if size is None or size == "":
        size = os.environ.get("DAP_LOGS_FILE_SIZE", "") or logfiles.DEFAULT_BYTES
    bound = size if isinstance(size, int) else logfiles.parse_size(size)
    WINDOW.disk = logfiles.Files(path, bound)


def configure(level: str = "info") -> None:
    """Send every log record to stderr as JSON lines at ``level`` (debug, info, warn, error), and keep
    the last of them in :data:`WINDOW` for the logs query (on disk as well with ``DAP_LOGS_FILE``,
    unless a command's ``--logs-file`` already said where)."""
    if WINDOW.disk is None and os.environ.get("DAP_LOGS_FILE"):
        try:
            keep_on_disk(os.environ["DAP_LOGS_FILE"])
        except (OSError, ValueError) as exc:  # a command without --logs-file: say so, keep memory only
            sys.stderr.write(f"dap: DAP_LOGS_FILE / DAP_LOGS_FILE_SIZE ignored: {exc}\n")
    root = logging.getLogger()
    root.handlers[:] = [JsonLines(sys.stderr, WINDOW)]
    root.setLevel(LEVELS.get(level, logging.INFO))
