"""Request bodies read by orjson first (``web.requests.decode_json``) read exactly as the standard
decoder reads them: the same value (``Decimal`` for numbers with a fraction, big integers exact),
the same 400 with the same words, the same depth limit."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from typing import Any

import pytest

from dap.server import errors
from dap.server.web import requests

DEPTH = requests.MAX_JSON_DEPTH


def _standard(raw: bytes, exact: bool) -> tuple[str, Any]:
    """What the body reader answered before orjson: the standard decoder and the depth walk."""
    decoder = json.JSONDecoder(parse_float=Decimal) if exact else json.JSONDecoder()
    try:
        body = decoder.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except (ValueError, UnicodeDecodeError) as exc:
        return "malformed", f"the body is not valid JSON: {exc}"
    except RecursionError:
        return "deep", None
    if requests.too_deep(body, DEPTH):
        return "deep", None
    return "value", body


def _read(raw: bytes, exact: bool) -> tuple[str, Any]:
    try:
        return "value", requests.decode_json(raw, exact_numbers=exact)
    except errors.BadRequest as exc:
        kinds = {"SVC.REQUEST.TOO_DEEP": "deep", "SVC.REQUEST.MALFORMED_JSON": "malformed"}
        return kinds.get(
            exc.code or "", f"other {exc.code}"
        ), None if exc.code == "SVC.REQUEST.TOO_DEEP" else exc.detail


def _typed(value: Any) -> Any:
    """``value`` with every scalar's type beside it: 1 and 1.0 and True must not compare equal."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, repr(value))


CASES = [
    b'{"code": "A-1", "title": "new", "price": "12.50", "qty": 3, "category": "red"}',
    b'{"price": 12.50, "qty": 3}',  # a fraction: Decimal when exact, float when not
    b'{"a": 1e5, "b": -0.0, "c": 1E-3}',  # an exponent is a fraction's kind too
    b'{"big": 99999999999999999999999, "neg": -9223372036854775809}',  # orjson: a float
    b'{"max": 18446744073709551615, "min": -9223372036854775808, "zero": -0}',
    b'{"a": 1, "a": 2}',  # the last of a repeated key
    b'{"a": "\\ud800"}',  # a lone surrogate: orjson refuses, the standard decoder keeps it
    b'{"a": "\xed\xa0\x80"}',  # the same as bytes (read with surrogatepass)
    b'\xef\xbb\xbf{"a": 1}',  # a UTF-8 byte order mark
    '{"a": "é"}'.encode("utf-16"),
    '{"a": "é"}'.encode("utf-32-le"),
    b'{"a": NaN, "b": Infinity}',
    b'{"a": 1e400}',
    b'{"a": "\x01"}',  # a control character in a string
    b'{"a": 1,}',
    b'{"a": 1} x',
    b'{"a": 00}',
    b'{"a": tru}',
    b'{"a": [1, 2, {"b": null, "c": true, "d": [false, "\\u0000"]}]}',
    b'{"\\ud83d\\ude00": "\\u00e9"}',
    b"[1, 2]",
    b'"text"',
    b"1.5",
    b"null",
    b"   ",
    b"{" + b'"a":{' * (DEPTH - 1) + b"}" * DEPTH,  # at the limit
    b"{" + b'"a":{' * DEPTH + b"}" * (DEPTH + 1),  # one past it
    b"[" * (DEPTH + 1) + b"]" * (DEPTH + 1),
    b"[" * 3000 + b"]" * 3000,  # past orjson's own limit: the standard decoder's answer
    b'{"a": [' + b"[" * (DEPTH - 1) + b"1.5" + b"]" * (DEPTH - 1) + b"]}",
]


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "plain"])
@pytest.mark.parametrize("raw", CASES, ids=[str(i) for i in range(len(CASES))])
def test_a_body_reads_as_the_standard_decoder_reads_it(raw: bytes, exact: bool) -> None:
    expected, got = _standard(raw, exact), _read(raw, exact)
    assert got[0] == expected[0]
    assert _typed(got[1]) == _typed(expected[1])


def _random_value(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(9 if depth < 6 else 7)
    if kind == 0:
        return rng.randrange(-(2**70), 2**70) if rng.random() < 0.2 else rng.randrange(-1000, 1000)
    if kind == 1:
        return rng.uniform(-1e6, 1e6)
    if kind == 2:
        return "".join(
            chr(rng.choice([rng.randrange(32, 127), rng.randrange(160, 0x2FFF)])) for _ in range(5)
        )
    if kind in (3, 4, 5):
        return rng.choice([True, False, None])
    if kind == 6:
        return f"{rng.randrange(100)}.{rng.randrange(100):02d}"
    if kind == 7:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{rng.randrange(5)}": _random_value(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_random_bodies_read_alike() -> None:
    rng = random.Random(27)
    for _ in range(500):
        body = {f"f{i}": _random_value(rng, 1) for i in range(rng.randrange(1, 8))}
        raw = json.dumps(body, ensure_ascii=rng.random() < 0.5).encode()
        for exact in (True, False):
            assert _typed(_read(raw, exact)[1]) == _typed(_standard(raw, exact)[1]), raw


def test_a_money_body_keeps_its_decimal() -> None:
    body = requests.decode_json(b'{"price": 0.1, "qty": 2}', exact_numbers=True)
    assert body == {"price": Decimal("0.1"), "qty": 2} and type(body["price"]) is Decimal
