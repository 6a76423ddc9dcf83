"""The shipped bundle: within its size budget, and found by ``dap serve`` without ``--web-dir``."""

from __future__ import annotations

import gzip

import pytest

from dap.server.web import app

from .conftest import BUNDLE

GZIP_BUDGET = 60 * 1024  # the whole desk, gzipped (issue 29: under 60 KB; bench/ui.py prints it)


def test_bundle_within_budget() -> None:
    if not (BUNDLE / "index.html").is_file():
        pytest.skip("no UI bundle: run `make ui` (needs npm)")
    files = [p for p in BUNDLE.rglob("*") if p.is_file() and not p.name.startswith(".")]
    packed = sum(len(gzip.compress(p.read_bytes(), compresslevel=9)) for p in files)
    assert packed <= GZIP_BUDGET, f"{packed} bytes gzipped"
    assert app.find_web_dir(None) == BUNDLE
    index = (BUNDLE / "index.html").read_text()
    assert "/assets/" in index  # the server serves assets at /assets, beside /{ws}/
