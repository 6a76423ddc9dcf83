"""The logs window's on-disk part (``dap.logfiles``) and the window reading across memory and disk:
rotation within the size bound, newest first, torn lines skipped, no line twice where memory and
disk overlap, a previous run's lines found after the memory's, ``since`` and ``limit`` honoured."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from dap import logfiles, logquery, logs


def _record(msg: str, created: float, **ctx: object) -> logging.LogRecord:
    record = logging.LogRecord("dap.test", logging.WARNING, __file__, 1, msg, None, None)
    record.created = created
    record.ctx = ctx  # type: ignore[attr-defined]
    return record


def _keep(window: logs.Window, msg: str, created: float, **ctx: object) -> None:
    entry = logs.Entry(_record(msg, created, **ctx), None)
    window.append(entry, json.dumps(entry.as_json(), default=str))


def test_parse_size_takes_binary_units_and_refuses_nonsense() -> None:
    assert logfiles.parse_size("64MiB") == 64 << 20
    assert logfiles.parse_size("512k") == 512 << 10
    assert logfiles.parse_size("1g") == 1 << 30
    assert logfiles.parse_size("1048576") == 1 << 20
    with pytest.raises(ValueError, match="not a size"):
        logfiles.parse_size("lots")
    with pytest.raises(ValueError, match="too small"):
        logfiles.parse_size("100")


def test_files_rotate_within_the_bound_and_read_back_newest_first(tmp_path: Path) -> None:
    files = logfiles.Files(tmp_path / "dap.log", 4 * 4096)
    for n in range(2000):
        files.write(json.dumps({"n": n, "pad": "x" * 40}))
    kept = files.paths()
    assert [p.name for p in kept] == ["dap.log", "dap.log.1", "dap.log.2", "dap.log.3"]
    assert sum(p.stat().st_size for p in kept) <= 4 * 4096
    back = [line["n"] for line in files.newest_first(lambda line: line)]
    assert back[0] == 1999 and back == list(range(1999, 1999 - len(back), -1))  # no gap, newest first
    assert 200 < len(back) < 2000  # the oldest rotated away
    with kept[0].open("a") as handle:
        handle.write('{"n": 2000, "pa')  # a torn line: a crash mid-write
    assert next(iter(files.newest_first(lambda line: line)))["n"] == 1999
    files.close()


def test_the_window_reads_memory_then_disk_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "dap.jsonl"
    before = logs.Window(10, logfiles.Files(path))
    for n in range(30):
        _keep(before, f"first run {n}", 1000.0 + n, workspace="acme", n=n)
    assert before.disk is not None
    before.disk.close()

    after = logs.Window(10, logfiles.Files(path))  # a restarted process: memory empty, disk kept
    for n in range(15):
        _keep(after, f"second run {n}", 2000.0 + n, workspace="acme", n=n)
    everything = [e.msg for e in after.newest_first()]
    assert everything == [f"second run {n}" for n in range(14, -1, -1)] + [
        f"first run {n}" for n in range(29, -1, -1)
    ]  # each line once: the disk's newest 10 are the memory's

    predicate = logquery.parse("workspace=acme first")
    found, more = after.query(predicate, limit=5)
    assert [e.msg for e in found] == [f"first run {n}" for n in range(25, 30)] and more
    assert found[0].ctx == {"workspace": "acme", "n": 25} and found[0].levelno == logging.WARNING
    assert found[0].as_json()["ts"] == logs.Entry(_record("x", 1025.0), None).as_json()["ts"]
    found, more = after.query(logquery.parse("n=3"), since=1010.0)
    assert [e.msg for e in found] == ["second run 3"] and not more  # "first run 3" is before since
    found, _ = after.query(logquery.parse("msg~run"), limit=1000)
    assert len(found) == 45


def test_keep_on_disk_bounds_and_turns_off(tmp_path: Path) -> None:
    try:
        logs.keep_on_disk(str(tmp_path / "w.jsonl"), "64k")
        assert logs.WINDOW.disk is not None and logs.WINDOW.disk.max_bytes == 64 << 10
        with pytest.raises(ValueError, match="not a size"):
            logs.keep_on_disk(str(tmp_path / "w.jsonl"), "big")
    finally:
        logs.keep_on_disk(None)
    assert logs.WINDOW.disk is None


def test_a_frozen_window_skips_lines_written_after_it(tmp_path: Path) -> None:
    window = logs.Window(5, logfiles.Files(tmp_path / "f.jsonl"))
    for n in range(8):
        _keep(window, f"line {n}", 1000.0 + n)
    frozen = window.frozen()
    for n in range(8, 12):  # the live window goes on while a query reads the copy
        _keep(window, f"line {n}", 1000.0 + n)
    assert [e.msg for e in frozen.newest_first()] == [f"line {n}" for n in range(7, -1, -1)]
    assert [e.msg for e in window.newest_first()] == [f"line {n}" for n in range(11, -1, -1)]


def test_a_disk_that_fails_loses_only_the_disks_copy(tmp_path: Path) -> None:
    class Full(logfiles.Files):
        full = False

        def write(self, line: str) -> None:
            if self.full:
                raise OSError(28, "No space left on device")
            super().write(line)

    disk = Full(tmp_path / "f.jsonl")
    window = logs.Window(5, disk)
    _keep(window, "before", 1000.0)
    disk.full = True
    _keep(window, "kept in memory", 1001.0)
    assert [e.msg for e in window.lines] == ["before", "kept in memory"] and window.written == 1
