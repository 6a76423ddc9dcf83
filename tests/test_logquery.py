"""The logs query's filter language (dap.logquery) and window (dap.logs.Window), without a server."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from dap import logquery, logs


def entry(
    msg: str, level: int = logging.INFO, name: str = "dap.server.web", at: float = 0.0, **ctx: object
) -> logs.Entry:
    record = logging.LogRecord(name, level, __file__, 1, msg, None, None)
    record.created = at or record.created
    record.ctx = ctx
    return logs.Entry(record, None)


LINES = [
    entry("request", logging.DEBUG, workspace="acme", request_id="r1", status=200),
    entry(
        "webhook delivery failed: timeout", logging.WARNING, "dap.server.events.channels", workspace="acme"
    ),
    entry("postgres unreachable", logging.ERROR, "dap.server.web.app", workspace="globex", request_id="r2"),
    entry("job done", logging.INFO, "dap.server.workflows.jobs", workspace="globex"),
]


def matching(text: str) -> list[str]:
    predicate = logquery.parse(text)
    assert predicate is not None
    return [line.msg for line in LINES if predicate(line)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("level>=warn", ["webhook delivery failed: timeout", "postgres unreachable"]),
        ("level=debug", ["request"]),
        ("workspace=acme", ["request", "webhook delivery failed: timeout"]),
        ("workspace!=acme", ["postgres unreachable", "job done"]),
        ("TIMEOUT", ["webhook delivery failed: timeout"]),
        ('"delivery failed"', ["webhook delivery failed: timeout"]),
        ("msg~UNREACH", ["postgres unreachable"]),
        ("logger=dap.server.events", ["webhook delivery failed: timeout"]),
        ("logger=dap.server.event", []),  # the tree, not a prefix of the name
        ("logger~workflows", ["job done"]),
        ("request=r2", ["postgres unreachable"]),
        ("status=200", ["request"]),
        ("workspace=globex and level>=error or level=debug", ["request", "postgres unreachable"]),
        ("workspace=globex (level>=error or job)", ["postgres unreachable", "job done"]),
        ("not workspace=acme not job", ["postgres unreachable"]),
    ],
)
def test_filters_select_the_lines_they_say(text: str, expected: list[str]) -> None:
    assert matching(text) == expected


def test_time_range() -> None:
    lines = [entry(f"m{i}", at=datetime(2026, 11, 28, 10, i, tzinfo=UTC).timestamp()) for i in range(6)]
    predicate = logquery.parse("ts>=2026-11-28T10:02:00Z ts<2026-11-28T10:05:00Z")
    assert predicate is not None
    assert [e.msg for e in lines if predicate(e)] == ["m2", "m3", "m4"]


@pytest.mark.parametrize(
    ("text", "position", "words"),
    [
        ("level>=", 7, "expected a value"),
        ("level>=loud", 7, "unknown level"),
        ("workspace=acme )", 15, "')' without its '('"),
        ("(level>=warn", 12, "expected ')'"),
        ('msg~"open', 4, "unterminated"),
        ("workspace>acme", 9, "compares with =, != or ~"),
        ("ts=2026-11-28", 2, "ts compares with"),
        ("ts>yesterday", 3, "not an ISO 8601 time"),
        ("level>=warn or", 14, "expected a term"),
        ("a = = b", 4, "expected a value"),
    ],
)
def test_errors_carry_the_position(text: str, position: int, words: str) -> None:
    with pytest.raises(logquery.FilterError) as caught:
        logquery.parse(text)
    assert caught.value.position == position, caught.value
    assert words in caught.value.message


def test_empty_filter_is_everything_and_since_reads_durations_and_times() -> None:
    assert logquery.parse("  ") is None
    assert logquery.since("5m", 1000.0) == 700.0
    assert logquery.since("2026-11-28T10:00:00Z", 0) == datetime(2026, 11, 28, 10, tzinfo=UTC).timestamp()
    with pytest.raises(logquery.FilterError):
        logquery.since("lately", 0)


def test_window_is_bounded_and_answers_the_newest_matches_oldest_first() -> None:
    window = logs.Window(3)
    for i in range(5):
        window.append(entry(f"m{i}", at=1000.0 + i))
    assert [e.msg for e in window.lines] == ["m2", "m3", "m4"]
    found, more = window.query(None, limit=2)
    assert ([e.msg for e in found], more) == (["m3", "m4"], True)
    found, more = window.query(None, since=1003.0, limit=10)
    assert ([e.msg for e in found], more) == (["m3", "m4"], False)


def test_lines_carry_trace_and_span_ids_while_a_span_is_active() -> None:
    assert "trace_id" not in entry("no tracing").as_json()
    saved = logs.trace_ids
    logs.trace_ids = lambda: ("a" * 32, "b" * 16)
    try:
        line = entry("traced").as_json()
    finally:
        logs.trace_ids = saved
    assert (line["trace_id"], line["span_id"]) == ("a" * 32, "b" * 16)
