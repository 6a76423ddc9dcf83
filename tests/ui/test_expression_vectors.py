"""The shared expression vectors (ui/test/expression-vectors.json) hold for the server's evaluator.

The UI's TypeScript port runs the same file under vitest (ui/test/expression.test.ts), so a form
shows ``visible_when``/``readonly_when``/``required_when`` exactly as the server decides them.
"""

from __future__ import annotations

import decimal
import json
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from dap.config import expressions

VECTORS = json.loads((Path(__file__).parents[2] / "ui" / "test" / "expression-vectors.json").read_text())


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "$dec" in value:
            return Decimal(value["$dec"])
        if "$date" in value:
            return date.fromisoformat(value["$date"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def encode(value: Any) -> Any:
    if isinstance(value, Decimal):
        text = format(value.normalize(decimal.Context(prec=100)), "f") if value != 0 else "0"
        return {"$dec": text}
    if isinstance(value, date):
        return {"$date": value.isoformat()}
    if isinstance(value, list):
        return [encode(v) for v in value]
    return value


@pytest.mark.parametrize(
    "vector", VECTORS["vectors"], ids=[v["expr"] or "<empty>" for v in VECTORS["vectors"]]
)
def test_vector(vector: dict[str, Any]) -> None:
    context = decode(VECTORS["context"])
    try:
        result = encode(expressions.evaluate(vector["expr"], context))
    except expressions.ExpressionError:
        result = {"error": True}
    assert result == vector["result"]
