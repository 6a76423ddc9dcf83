"""The benchmarks' load generator: its Python fallback (a machine without ``wrk``) must work from
plain code and from inside a benchmark's coroutine, where ``asyncio.run`` cannot nest."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

LOADGEN = Path(__file__).resolve().parents[2] / "bench" / "loadgen.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dap_bench_loadgen", LOADGEN)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def loadgen(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = _module()
    monkeypatch.setattr(module, "wrk_path", lambda: None)  # as on a machine without wrk
    return module


@pytest.fixture
def tiny_server() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen([sys.executable, str(LOADGEN), "--serve", str(port)])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_python_fallback_from_plain_code(loadgen: ModuleType, tiny_server: str) -> None:
    got = loadgen.load(tiny_server, ["/x/1", "/x/2"], seconds=0.5, warm=0.2, connections=4)
    assert got.generator == "python (fallback)"
    assert got.rps > 0 and got.errors == 0


async def test_python_fallback_inside_a_running_event_loop(loadgen: ModuleType, tiny_server: str) -> None:
    got = loadgen.load(tiny_server, ["/x/1"], seconds=0.5, warm=0.2, connections=4)
    assert got.generator == "python (fallback)"
    assert got.rps > 0 and got.errors == 0


@pytest.mark.parametrize("generator", ["wrk", "python"])
def test_writes_carry_a_text_unique_to_each_request(tiny_server: str, generator: str) -> None:
    """A create's body gets :data:`UNIQUE` replaced per request, the warm-up's included, with the
    method asked for; ``answered`` counts the 2xx answers of both runs."""
    module = _module()
    if generator == "python":
        module.wrk_path = lambda: None  # type: ignore[attr-defined]
    elif module.wrk_path() is None:
        pytest.skip("wrk is not installed (make wrk)")
    body = '{"code": "C' + module.UNIQUE + '"}'
    got = module.load(tiny_server, ["/w"], seconds=1, warm=1, connections=4, bodies=[body], method="PATCH")
    assert got.errors == 0 and got.answered > 0
    with urllib.request.urlopen(f"{tiny_server}/seen", timeout=10) as resp:
        seen = json.load(resp)
    assert seen["methods"] == ["PATCH"]
    assert seen["distinct"] == seen["bodies"]  # no text sent twice, across the two runs
    assert got.answered <= seen["bodies"] <= got.answered + 2 * 4  # in flight when a run stopped


def test_no_bench_script_shadows_the_standard_library() -> None:
    """A bench script runs with ``bench/`` first on ``sys.path``: a file named like a standard
    module (``operator.py`` was one) breaks every import of it, asyncio's first."""
    shadowing = sorted(p.stem for p in LOADGEN.parent.glob("*.py") if p.stem in sys.stdlib_module_names)
    assert shadowing == []
