"""HTTP load the way peers measure it: an external load generator (``wrk``), interleaved rounds.

    .venv/bin/python bench/loadgen.py --quick     # self-check: drives a tiny local server

Other benchmarks import this module (``bench/rest.py``, ``bench/peers.py``); it is not called
``http.py``, which would shadow the standard library's ``http`` for every script run from
``bench/``. A Python client in the same process budget as the servers compresses every ratio (it
spends a core of its own on HTTP parsing), so figures come from ``wrk`` (Debian's package;
``make bench`` installs it when missing). Where ``wrk`` cannot be had, an in-process aiohttp
client takes its place and every figure says so.

:func:`load` runs one measurement: ``wrk`` picks a path at random from a list for every request
(a Lua script), sends the given headers, and prints its summary (requests, errors, non-2xx,
bytes, p50 and p99 from its latency histogram) as one JSON line that is parsed here.
:func:`interleave` runs several targets round by round, rotating who goes first, so a drift of
the shared machine (autovacuum, other processes) weighs on every target alike; :func:`Figure`
gives the median and the spread (min-max) of the rounds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

THREADS = 1  # wrk threads: one core for the generator, the rest for servers and Postgres
CONNECTIONS = 32

_SCRIPT = r"""
local paths = {}
for line in io.lines("%(paths)s") do paths[#paths + 1] = line end
local bodies = {}
for line in io.lines("%(bodies)s") do bodies[#bodies + 1] = line end
%(headers)s
math.randomseed(%(seed)d)
local method = "%(method)s"
local sent = 0
request = function()
  local path = paths[math.random(#paths)]
  if #bodies > 0 then
    sent = sent + 1
    -- UNIQUE in a body becomes a text no other request of any run sends (a create's unique code)
    local body = (string.gsub(bodies[math.random(#bodies)], "%(unique)s", "%(seed)d-" .. sent))
    return wrk.format(method, path, nil, body)
  end
  return wrk.format(method, path)
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'DAPJSON {"requests":%%d,"duration_us":%%d,"errors":%%d,"non2xx":%%d,"bytes":%%d,' ..
    '"p50_us":%%d,"p99_us":%%d}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    summary.bytes, latency:percentile(50), latency:percentile(99)))
end
"""


UNIQUE = "@UNIQUE@"  # in a body: replaced by a text unique to each request (see :func:`load`)


@dataclass(frozen=True)
class Load:
    """One measured run against one target."""

    rps: float
    p50_ms: float
    p99_ms: float
    errors: int  # transport errors and answers other than 2xx
    bytes_per_response: float
    generator: str  # "wrk" or "python (fallback)"
    seconds: float  # measured
    cpu_us: float = float("nan")  # the server processes' CPU time per request (user + system)
    db_cpu_us: float = float("nan")  # Postgres's (the postmaster's children), the same way
    helpers_cpu_us: float = 0.0  # of ``cpu_us``, the helper processes' (``load``'s ``helpers``): none, 0
    answered: int = 0  # 2xx answers, the unmeasured warm-up's included (a write's row count)


@dataclass(frozen=True)
class Figure:
    """The rounds of one target: median throughput and latencies, and the throughput spread."""

    runs: tuple[Load, ...]

    @property
    def rps(self) -> float:
        return statistics.median(r.rps for r in self.runs)

    @property
    def spread(self) -> tuple[float, float]:
        return min(r.rps for r in self.runs), max(r.rps for r in self.runs)

    @property
    def p50_ms(self) -> float:
        return statistics.median(r.p50_ms for r in self.runs)

    @property
    def p99_ms(self) -> float:
        return statistics.median(r.p99_ms for r in self.runs)

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.runs)

    @property
    def bytes_per_response(self) -> float:
        return statistics.median(r.bytes_per_response for r in self.runs)

    @property
    def cpu_us(self) -> float:
        return statistics.median(r.cpu_us for r in self.runs)

    @property
    def db_cpu_us(self) -> float:
        return statistics.median(r.db_cpu_us for r in self.runs)

    def line(self, name: str) -> str:
        low, high = self.spread
        return (
            f"{name:<22} {self.rps:>8.0f} req/s ({low:.0f}-{high:.0f})  p50 {self.p50_ms:>6.2f} ms"
            f"  p99 {self.p99_ms:>6.2f} ms  {self.bytes_per_response:>6.0f} B/resp"
            f"  cpu {self.cpu_us:>5.0f} µs/req"
            + (f"  postgres {self.db_cpu_us:>5.0f} µs/req" if self.db_cpu_us == self.db_cpu_us else "")
            + f"  errors {self.errors}"
        )


def cpu_ratio(a: Figure, b: Figure) -> str:
    """Server CPU per request of ``a`` over ``b``: unlike throughput, it hardly moves when other
    processes take the cores, so it is the figure to steer by on a shared machine."""
    pairs = [x.cpu_us / y.cpu_us for x, y in zip(a.runs, b.runs, strict=True)]
    return f"{a.cpu_us / b.cpu_us:.2f}x (rounds {min(pairs):.2f}-{max(pairs):.2f})"


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds of ``pids`` so far (Linux ``/proc``; NaN elsewhere)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        total += (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14, 15)
    return total


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def children_cpu(parent: int) -> dict[int, float]:
    """CPU seconds so far of each child of ``parent``, by pid: a postmaster's backends and
    workers (Linux ``/proc``; empty elsewhere)."""
    found: dict[int, float] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited meanwhile
            if int(fields[1]) == parent:
                found[int(entry.name)] = (int(fields[11]) + int(fields[12])) / _TICKS
    return found


def postmaster_pid(data_dir: Path) -> int | None:
    """The pid of the Postgres running in ``data_dir`` (its ``postmaster.pid``), if one does."""
    try:
        return int((data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def paired(a: Figure, b: Figure) -> list[float]:
    """``a``'s throughput over ``b``'s, round by round (same round, same machine)."""
    return [x.rps / y.rps for x, y in zip(a.runs, b.runs, strict=True)]


def ratio(a: Figure, b: Figure) -> str:
    """``a``/``b`` as the median ratio and the range over paired rounds (same round, same machine)."""
    pairs = paired(a, b)
    return f"{a.rps / b.rps:.2f}x (rounds {min(pairs):.2f}-{max(pairs):.2f})"


def wrk_path() -> str | None:
    return shutil.which("wrk")


def generator() -> str:
    return "wrk" if wrk_path() else "python (fallback: wrk not installed, ratios are compressed)"


def load(
    base: str,
    paths: Sequence[str],
    *,
    seconds: float,
    headers: dict[str, str] | None = None,
    connections: int = CONNECTIONS,
    warm: float = 1.0,
    bodies: Sequence[str] = (),
    pids: Sequence[int] = (),
    method: str | None = None,
    db_pid: int | None = None,
    helpers: Sequence[int] = (),
) -> Load:
    """Drive ``base`` + a random one of ``paths`` for ``seconds`` (after ``warm`` seconds unmeasured).

    With ``bodies`` (one-line JSON documents), every request sends a random one of them with
    ``method`` (POST unless given: a GraphQL peer, a create; PATCH for an update), and
    :data:`UNIQUE` in a body is replaced by a text unique to that request, across runs too (a new
    record's unique code). With ``pids`` (the server's processes), the answer carries their CPU
    time per request over the measured seconds; with ``db_pid`` (the postmaster), Postgres's too
    (its backends and workers, but not one that began and ended within the seconds measured: an
    autovacuum worker's CPU can be missed); with ``helpers`` (some of ``pids``: a server's child
    that does work off its request path), their part of the server's CPU on its own.
    """
    verb = method or ("POST" if bodies else "GET")
    watched = _Watched(tuple(pids), db_pid, tuple(helpers))
    return _measure(base, paths, seconds, headers or {}, connections, warm, bodies, watched, verb)


@dataclasses.dataclass(frozen=True)
class _Watched:
    """The processes whose CPU a load measures: the server's (and of them, its helpers' alone), and
    Postgres's children."""

    pids: tuple[int, ...]
    db_pid: int | None
    helpers: tuple[int, ...] = ()

    def sample(self) -> tuple[float, dict[int, float], float]:
        db = children_cpu(self.db_pid) if self.db_pid else {}
        return cpu_seconds(self.pids), db, cpu_seconds(self.helpers)


def _measure(
    base: str,
    paths: Sequence[str],
    seconds: float,
    headers: dict[str, str],
    connections: int,
    warm: float,
    bodies: Sequence[str],
    watched: _Watched,
    method: str,
) -> Load:
    if wrk_path() is None:
        warmed = 0
        if warm > 0:
            warmed = run_apart(
                _python_load(base, paths, warm, headers, connections, 0, bodies, method)
            ).answered
        before = watched.sample()
        got = run_apart(_python_load(base, paths, seconds, headers, connections, 0, bodies, method))
        return _with_cpu(dataclasses.replace(got, answered=got.answered + warmed), before, watched)
    with tempfile.TemporaryDirectory(prefix="dap-wrk-") as tmp:
        paths_file = Path(tmp) / "paths.txt"
        paths_file.write_text("\n".join(paths) + "\n")
        bodies_file = Path(tmp) / "bodies.txt"
        bodies_file.write_text("".join(f"{b}\n" for b in bodies))
        header_lines = "\n".join(
            f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()
        )

        def script(name: str) -> Path:  # a seed of its own per run: its UNIQUE texts are its own
            written = Path(tmp) / name
            written.write_text(
                _SCRIPT
                % {
                    "paths": paths_file,
                    "bodies": bodies_file,
                    "headers": header_lines,
                    "seed": random.randrange(1 << 30),
                    "method": method,
                    "unique": UNIQUE,
                }
            )
            return written

        warmed = _wrk(base, script("warm.lua"), max(1, round(warm)), connections).answered if warm > 0 else 0
        before = watched.sample()
        got = _wrk(base, script("load.lua"), max(1, round(seconds)), connections)
        return _with_cpu(dataclasses.replace(got, answered=got.answered + warmed), before, watched)


_T = TypeVar("_T")


def run_apart(work: Coroutine[Any, Any, _T]) -> _T:
    """Run ``work`` (the Python client, a settling step) on an event loop and a thread of its own.

    Benchmarks call :func:`load` both from plain code and from inside their own coroutines (which
    run under ``asyncio.run``); ``asyncio.run`` refuses to nest, and blocking the caller's loop is
    harmless here because every measured server runs in a process of its own.
    """
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dap-loadgen") as pool:
        return pool.submit(asyncio.run, work).result()


def _with_cpu(got: Load, before: tuple[float, dict[int, float], float], watched: _Watched) -> Load:
    served = got.rps * got.seconds
    if not served:
        return got
    server_before, db_before, helpers_before = before
    server_after, db_after, helpers_after = watched.sample()
    if watched.pids:
        got = dataclasses.replace(got, cpu_us=(server_after - server_before) / served * 1e6)
    if watched.helpers:
        got = dataclasses.replace(got, helpers_cpu_us=(helpers_after - helpers_before) / served * 1e6)
    if watched.db_pid:
        db_used = sum(used - db_before.get(pid, 0.0) for pid, used in db_after.items())
        got = dataclasses.replace(got, db_cpu_us=db_used / served * 1e6)
    return got


def _wrk(base: str, script: Path, seconds: int, connections: int) -> Load:
    command = [
        str(wrk_path()),
        f"-t{THREADS}",
        f"-c{connections}",
        f"-d{seconds}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        base,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("DAPJSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary: {done.stdout[-500:]} {done.stderr[-500:]}")
    got = json.loads(line.removeprefix("DAPJSON "))
    requests = max(got["requests"], 1)
    return Load(
        rps=got["requests"] / (got["duration_us"] / 1e6),
        p50_ms=got["p50_us"] / 1000,
        p99_ms=got["p99_us"] / 1000,
        errors=got["errors"] + got["non2xx"],
        bytes_per_response=got["bytes"] / requests,
        generator="wrk",
        seconds=got["duration_us"] / 1e6,
        answered=got["requests"] - got["non2xx"],
    )


async def _python_load(
    base: str,
    paths: Sequence[str],
    seconds: float,
    headers: dict[str, str],
    connections: int,
    warm: float,
    bodies: Sequence[str] = (),
    method: str = "GET",
) -> Load:
    import aiohttp

    prefix, sent_count = random.randrange(1 << 30), 0

    latencies: list[float] = []
    errors = 0
    size = 0
    answered = 0
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections), headers=headers
    ) as http:

        async def worker(until: float, record: bool) -> None:
            nonlocal errors, size, sent_count, answered
            while time.perf_counter() < until:
                started = time.perf_counter()
                if bodies:
                    sent_count += 1
                    body = random.choice(bodies).replace(UNIQUE, f"{prefix}-{sent_count}")
                    sent = http.request(method, base + random.choice(paths), data=body)
                else:
                    sent = http.get(base + random.choice(paths))
                async with sent as resp:
                    body = await resp.read()
                answered += resp.status < 300
                if record:
                    latencies.append(time.perf_counter() - started)
                    size += len(body)
                    errors += resp.status >= 300

        await asyncio.gather(*(worker(time.perf_counter() + warm, False) for _ in range(connections)))
        began = time.perf_counter()
        await asyncio.gather(*(worker(began + seconds, True) for _ in range(connections)))
        elapsed = time.perf_counter() - began
    latencies.sort()
    n = max(len(latencies), 1)
    return Load(
        rps=len(latencies) / elapsed,
        p50_ms=latencies[len(latencies) // 2] * 1000 if latencies else float("nan"),
        p99_ms=latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan"),
        errors=errors,
        bytes_per_response=size / n,
        generator="python (fallback)",
        seconds=elapsed,
        answered=answered,
    )


def interleave(
    targets: dict[str, Callable[[], Load]],
    rounds: int,
    *,
    say: bool = True,
    before: Callable[[], None] | None = None,
) -> dict[str, Figure]:
    """Run every target once per round, rotating the order each round; a :class:`Figure` per target.
    ``before`` runs before each target's run (unmeasured): a state every target starts from."""
    names = list(targets)
    runs: dict[str, list[Load]] = {name: [] for name in names}
    for i in range(rounds):
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in order:
            if say:
                print(f"  round {i + 1}/{rounds}: {name} ...", flush=True)
            if before is not None:
                before()
            runs[name].append(targets[name]())
    return {name: Figure(tuple(r)) for name, r in runs.items()}


# --- self-check: a tiny aiohttp server driven by load() ------------------------------------------


def _tiny_server(port: int) -> None:
    from aiohttp import web

    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"id": request.match_info["id"]})

    seen: list[tuple[str, str]] = []  # (method, body) of every write

    async def write(request: web.Request) -> web.Response:
        seen.append((request.method, await request.text()))
        return web.json_response({"n": len(seen)}, status=201)

    async def writes(request: web.Request) -> web.Response:
        bodies = [b for _, b in seen]
        return web.json_response(
            {"bodies": len(bodies), "distinct": len(set(bodies)), "methods": sorted({m for m, _ in seen})}
        )

    app = web.Application()
    app.router.add_get("/x/{id}", hello)
    app.router.add_route("POST", "/w", write)
    app.router.add_route("PATCH", "/w", write)
    app.router.add_get("/seen", writes)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def main() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        quick = "--quick" in sys.argv
        seconds = 1.0 if quick else 5.0
        figures = interleave(
            {
                "tiny": lambda: load(
                    f"http://127.0.0.1:{port}", ["/x/1", "/x/2"], seconds=seconds, warm=0 if quick else 1
                )
            },
            1 if quick else 3,
        )
        print(f"load generator: {generator()}")
        print(figures["tiny"].line("tiny aiohttp server"))
        return 1 if figures["tiny"].errors else 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        _tiny_server(int(sys.argv[2]))
        sys.exit(0)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
