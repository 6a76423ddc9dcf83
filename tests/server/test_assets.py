"""The UI bundle's headers (``web.assets``): which names are immutable, when gzip is sent."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from dap.server.web import assets


@pytest.mark.parametrize(
    ("header", "gzip_ok"),
    [
        ("gzip, deflate, br", True),
        ("br;q=1.0, gzip;q=0.5", True),
        ("gzip;q=0", False),
        ("identity", False),
        ("", False),
        ("*", True),
    ],
)
def test_accepts_gzip(header: str, gzip_ok: bool) -> None:
    assert assets.accepts_gzip(header) is gzip_ok


@pytest.mark.parametrize(
    ("name", "hashed"),
    [("index-DcV7dFcK.js", True), ("index-1923Sz3T.css", True), ("app.js", False), ("logo-v2.svg", False)],
)
def test_hashed_names(name: str, hashed: bool) -> None:
    assert bool(assets.HASHED.match(name)) is hashed


def test_text_is_packed_and_binary_is_not(tmp_path: Path) -> None:
    (tmp_path / "a.js").write_text("console.log('dap');\n" * 200)
    (tmp_path / "b.png").write_bytes(b"\x89PNG" + bytes(range(256)))
    js, png = assets.load(tmp_path / "a.js"), assets.load(tmp_path / "b.png")
    assert js.packed is not None and gzip.decompress(js.packed) == js.raw and len(js.packed) < len(js.raw)
    assert png.packed is None and png.etag.startswith('"')
