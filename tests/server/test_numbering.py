"""Natural keys without a server: pattern rendering and checking, periods, entries, the unique index."""

from __future__ import annotations

import datetime as dt

import pydantic
import pytest

from dap.config.fields import NaturalKeyRuleDecl
from dap.server.storage import numbering

from .conftest import load
from .test_natural_keys import MODULE, SPEC


@pytest.mark.parametrize(
    ("pattern", "number", "expected"),
    [
        pytest.param("PO-{YYYY}-{#####}", 42, "PO-2024-00042", id="procurement"),
        pytest.param("{YY}{MM}{DD}/{#}", 7, "240305/7", id="date-parts"),
        pytest.param("N{##}", 123, "N123", id="wider-number-grows"),
        pytest.param("{#}", 1, "1", id="bare"),
    ],
)
def test_render(pattern: str, number: int, expected: str) -> None:
    assert numbering.render(pattern, number, dt.date(2024, 3, 5)) == expected


def test_period() -> None:
    day = dt.date(2024, 3, 5)
    assert [numbering.period(r, day) for r in ("never", "yearly", "monthly")] == ["", "2024", "2024-03"]


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        pytest.param("PO-{YYYY}", "exactly one counter", id="no-counter"),
        pytest.param("{#}-{##}", "exactly one counter", id="two-counters"),
        pytest.param("{WEEK}-{#}", "unknown token(s) {WEEK}", id="unknown-token"),
    ],
)
def test_patterns_are_checked_when_the_manifest_loads(pattern: str, message: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        NaturalKeyRuleDecl(pattern=pattern)


def test_entries_and_what_the_client_may_send() -> None:
    catalog = load(SPEC)
    ref = catalog.resources["nk/ticket"].fields["ref"]
    code = catalog.resources["nk/invoice"].fields["code"]
    key = catalog.resources["nk/memo"].fields["key"]
    assert [numbering.generates(f) for f in (ref, code, key)] == [True, False, True]
    assert numbering.refuses_input(ref, partial=False)
    assert not numbering.refuses_input(code, partial=False)
    assert not numbering.refuses_input(key, partial=False)
    assert all(numbering.refuses_input(f, partial=True) for f in (ref, code, key))
    # a rule alone means engine; neither rule nor entry means a person types it
    implicit = load(
        {
            "nk/module.yaml": MODULE,
            "nk/e.yaml": SPEC["nk/entities.yaml"]
            .split("---")[0]
            .replace("      natural_key_entry: engine\n", ""),
        }
    )
    assert numbering.generates(implicit.resources["nk/ticket"].fields["ref"])
    f = code.model_copy(update={"natural_key_entry": None})
    assert not numbering.generates(f)


def test_natural_keys_get_a_unique_index_led_by_tenant() -> None:
    table = load(SPEC).resources["nk/invoice"].table
    index = next(i for i in table.indexes if i.columns[-1] == "code")
    assert index.unique
    assert index.columns == ("tenant_id", "code")
