"""Benchmark of sagas (``make bench``; ``--quick`` for a few seconds).

1. A three-step saga (three HTTP steps to a target honouring ``Idempotency-Key``) against the same
   three calls made by hand, one after the other, by a client: p50 and p99 of each, sequential.
   The saga's latency is its job's ``finished_at - created_at`` (both Postgres clocks: transaction
   starts) and, since an app-process step's transaction starts before its call (so the job clock
   leaves out the last call and commit), also ``dap.sagas.finished_at - created_at`` (the engine's
   clock after the last call: "queued->ended"), and the client's request -> final commit.
   Goal: <= 1.5x the hand-made calls. For scale, one committed INSERT of the same database.
2. What a user would do in dap without sagas: the three calls as three actions of a ``Service``
   (``impl: {type: sidecar}``), called one after the other through dap's REST API, each invoking
   the app process (the bridge's example app, ``examples/bridge/python/svc_app.py``, on a unix
   socket); against a three-step saga whose steps are those app-process actions (client wall time
   for the calls, the job's Postgres clock for the saga, as in 1).
3. Sagas per second with 1,000 in flight: 1,000 requested at once over REST (202 each), the time
   until every one completed.

End to end is timed two ways. Back to back, the client learns of a saga's end by a ``NOTIFY``
from a bench-only trigger on ``dap.jobs``. Interleaved (``rounds``: the three dap calls, a pause,
one app-process saga, a pause), nothing watches the server while a saga runs: its end is its
final transaction's commit timestamp (``track_commit_timestamp``, read after the run) against the
client's wall clock at send, the same clock on one machine. The interleaved sagas also give
where the time goes: send -> the request's statement, -> the 202 read, -> the end stamped by the
engine after the last call, -> its commit. Both runs print the load average and one commit.

The HTTP target and the app process are child processes. Embedded Postgres in a temporary
directory unless ``DAP_BENCH_DSN`` is set.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import asyncpg
import jwt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dap import config, embedded  # noqa: E402
from dap.bridge import hosting  # noqa: E402
from dap.server import catalog as catalogs  # noqa: E402
from dap.server import options  # noqa: E402
from dap.server.web import app as web_app  # noqa: E402

SECRET = "x" * 48
TARGET = """
import sys
from aiohttp import web
seen = {}
async def step(request):
    key = request.headers["Idempotency-Key"]
    await request.read()
    seen.setdefault(key, {"ok": True})
    return web.json_response(seen[key])
app = web.Application()
app.router.add_post("/{step}", step)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


# the client learns of a saga's end when its job's final transaction commits (NOTIFY is sent at
# commit): a bench-only trigger in the benchmark's database, dropped at the end
NOTIFY_DDL = """
CREATE OR REPLACE FUNCTION public.bench_saga_done() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_notify('bench_saga_done', NEW.id::text); RETURN NEW; END $$;
DROP TRIGGER IF EXISTS bench_saga_done ON dap.jobs;
CREATE TRIGGER bench_saga_done AFTER UPDATE OF state ON dap.jobs FOR EACH ROW
    WHEN (NEW.state IN ('succeeded', 'failed') AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION public.bench_saga_done();
"""
NOTIFY_DROP = (
    "DROP TRIGGER IF EXISTS bench_saga_done ON dap.jobs; DROP FUNCTION IF EXISTS public.bench_saga_done()"
)
STEPS = ("reserve", "charge", "notify")
# the app process: each step and its compensation an empty handler of service bench/flow
APP = f"""
import sys
sys.path.insert(0, {str(ROOT / "examples" / "bridge" / "python")!r})
import svc_app
async def ok(ctx, request):
    return {{"ok": True}}
svc_app.serve({{f"bench/flow/{{a}}": ok for a in {[*STEPS, *(f"{s}_undo" for s in STEPS)]!r}}}, sys.argv[1])
"""


GAP = 0.01  # seconds between the interleaved rounds' parts
WAIT = 0.05  # seconds a saga is left alone before the bench looks whether it ended
PHASES = (
    "send -> request's statement began",
    "statement -> ended (after last call)",
    "ended -> committed",
    "the 202 read (after send)",
    "end to end (send -> commit)",
)


def spec_files(port: int) -> dict[str, str]:
    steps = "".join(
        f"\n          - {{name: {name}, http: {{url: 'http://127.0.0.1:{port}/{name}'}}, "
        f"compensation: {{http: {{url: 'http://127.0.0.1:{port}/{name}_undo'}}}}, timeout: 10s}}"
        for name in STEPS
    )
    app_steps = "".join(
        f"\n          - {{name: {name}, sidecar: bench/flow/{name}, "
        f"compensation: {{sidecar: bench/flow/{name}_undo}}, timeout: 10s}}"
        for name in STEPS
    )
    actions = "".join(
        f"\n    - {{name: {name}, impl: {{type: sidecar}}}}"
        for name in (*STEPS, *(f"{s}_undo" for s in STEPS))
    )
    return {
        "bench.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: bench}\n"
        "spec: {title: Bench}\n---\n"
        "apiVersion: dap.io/v1\nkind: Service\nmetadata: {name: flow, module: bench}\nspec:\n"
        "  expose: [{type: rest}]\n  actions:\n    - name: run\n      call: async\n      track: true\n"
        f"      impl:\n        type: saga\n        steps:{steps}\n"
        "    - name: run_app\n      call: async\n      track: true\n"
        f"      impl:\n        type: saga\n        steps:{app_steps}{actions}\n"
    }


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def measure(dsn: str, n: int, flight: int) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dap-bench-sagas-") as tmp:
        script = Path(tmp) / "target.py"
        script.write_text(TARGET)
        proc = subprocess.Popen([sys.executable, str(script), str(port)])  # noqa: ASYNC220
        sock = Path(tmp) / "app.sock"
        (Path(tmp) / "app.py").write_text(APP)
        app_proc = subprocess.Popen([sys.executable, str(Path(tmp) / "app.py"), f"unix://{sock}"])  # noqa: ASYNC220
        try:
            for _ in range(200):
                if sock.exists():
                    break
                await asyncio.sleep(0.05)
            async with aiohttp.ClientSession() as http:
                for _ in range(200):
                    try:
                        async with http.post(
                            f"http://127.0.0.1:{port}/warm", headers={"Idempotency-Key": "w"}
                        ):
                            break
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.05)
            opts = options.check(
                dsn=dsn,
                addr="127.0.0.1:0",
                metrics_addr="",
                jwt_secret=SECRET,
                cors_origins=["http://localhost"],
                pool_size=16,
                sidecar_endpoint=f"unix://{sock}",
            )
            catalog = catalogs.Catalog.from_spec(config.load_files(spec_files(port)))
            server = await web_app.create_server(opts, catalog)
            assert hosting.attach(server.app, opts, state_dir=Path(tmp) / "ds") is not None
            await server.start()
            try:
                await run(server, port, n, flight, dsn, app_proc.pid)
            finally:
                await server.stop()
        finally:
            for child in (proc, app_proc):
                child.terminate()
                child.wait(10)


def on_cpu(pid: int) -> float:
    """Seconds ``pid`` ran on a CPU (the scheduler's own count, in ns: not sampled by ticks)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except OSError:  # gone, or no /proc
        return 0.0


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def children(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == parent:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


class Cpu:
    """CPU seconds of this process (client, server and engine), the app process and Postgres
    (the postmaster's children: backends, WAL writer, ...), per part of a run."""

    def __init__(self, app_pid: int, postmaster: int) -> None:
        self.groups = {"dap+client": [os.getpid()], "app": [app_pid], "postgres": children(postmaster)}
        self.spent = {part: dict.fromkeys(self.groups, 0.0) for part in ("hand", "saga")}
        self.last = self.read()

    def read(self) -> dict[str, float]:
        return {g: sum(on_cpu(p) for p in pids) for g, pids in self.groups.items()}

    def charge(self, part: str) -> None:
        now = self.read()
        for g in now:
            self.spent[part][g] += now[g] - self.last[g]
        self.last = now


async def run(server: web_app.Server, port: int, n: int, flight: int, pool_dsn: str, app_pid: int) -> None:
    now = int(time.time())
    token = jwt.encode(
        {
            "sub": "bench",
            "username": "bench",
            "roles": ["admin"],
            "iss": server.opts.jwt_issuer,
            "iat": now,
            "exp": now + 3600,
        },
        SECRET,
        algorithm="HS256",
    )
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    pool = server.app[web_app.state.POOL]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200)) as http:
        # 1. the same three calls by hand
        hand: list[float] = []
        for i in range(n + 20):
            t = time.perf_counter()
            for name in ("reserve", "charge", "notify"):
                key = f"hand-{i}-{name}-{uuid.uuid4()}"
                async with http.post(
                    f"http://127.0.0.1:{port}/{name}", json={"params": {}}, headers={"Idempotency-Key": key}
                ) as r:
                    await r.read()
            if i >= 20:
                hand.append(time.perf_counter() - t)

        # 2. the same three calls as app-process actions through dap's REST API, by hand
        via_dap: list[float] = []
        base = f"{server.urls['api']}/default/api/bench/flow"
        for i in range(n + 20):
            t = time.perf_counter()
            for name in STEPS:
                async with http.post(f"{base}/{name}", data="{}", headers=headers) as r:
                    assert r.status == 200, await r.text()
                    await r.read()
            if i >= 20:
                via_dap.append(time.perf_counter() - t)

        async def start(action: str = "run") -> uuid.UUID:
            async with http.post(f"{base}/{action}", data="{}", headers=headers) as r:
                assert r.status == 202, await r.text()
                return uuid.UUID((await r.json())["data"]["id"])

        last: dict[str, uuid.UUID] = {}
        last_ids: dict[str, list[uuid.UUID]] = {}
        walls: dict[str, list[float]] = {}
        arrived: dict[uuid.UUID, float] = {}
        arrived_wall: dict[uuid.UUID, float] = {}  # the same, on the wall clock Postgres shares
        signal = asyncio.Event()

        def on_done(_c: object, _pid: int, _channel: str, payload: str) -> None:
            arrived[uuid.UUID(payload)] = time.perf_counter()
            arrived_wall[uuid.UUID(payload)] = time.time()
            signal.set()

        async def committed(one: uuid.UUID) -> float:
            """The client's clock when the job's final commit was announced (NOTIFY at commit)."""
            await finished([one])
            return arrived[one]

        async def finished(ids: list[uuid.UUID]) -> None:
            """Every job of ``ids`` ended (announced at its commit: no polling loads the server)."""
            while not arrived.keys() >= set(ids):
                signal.clear()
                await signal.wait()

        async def sequential(action: str) -> tuple[list[float], list[float]]:
            """The queued -> finished and queued -> ended times of ``n`` sagas run one after the
            other (20 warm-ups); also each one's client wall time, the request sent -> its final
            commit announced. ``finished_at`` is the last transaction's start: for an app-process
            step, BEGIN comes before its call, so ``finished_at - created_at`` leaves out the last
            call and commit; the saga's ``finished_at`` is the engine's clock after that call."""
            ids, wall = [], []
            for i in range(n + 20):
                t = time.perf_counter()
                one = await start(action)
                done_at = await committed(one)
                ids.append(one)
                if i >= 20:
                    wall.append(done_at - t)
            walls[action] = wall
            last[action] = ids[-1]
            last_ids[action] = ids[20:]
            async with pool.acquire() as conn:
                rows = await conn.fetch(
                    "SELECT extract(epoch FROM j.finished_at - j.created_at) AS s, "
                    "extract(epoch FROM s.finished_at - j.created_at) AS e "
                    "FROM dap.jobs j JOIN dap.sagas s USING (id) WHERE j.id = ANY($1)",
                    ids[20:],
                )
            return [float(r["s"]) for r in rows], [float(r["e"]) for r in rows]

        async def ended(ids: list[uuid.UUID]) -> bool:
            async with pool.acquire() as conn:
                done = await conn.fetchval(
                    "SELECT count(*) FROM dap.jobs WHERE id = ANY($1) AND finished_at IS NOT NULL", ids
                )
            return bool(done == len(ids))

        async def committed_at(ids: list[uuid.UUID]) -> dict[uuid.UUID, asyncpg.Record]:
            """Per saga (epoch seconds): its request's statement began, the engine stamped its end,
            its final transaction committed (``None`` without ``track_commit_timestamp``)."""
            async with pool.acquire() as conn:
                on = await conn.fetchval("SHOW track_commit_timestamp") == "on"
                commit = "extract(epoch FROM pg_xact_commit_timestamp(j.xmin))" if on else "NULL::numeric"
                rows = await conn.fetch(
                    f"SELECT j.id, extract(epoch FROM s.created_at)::float8 AS accepted, "
                    f"extract(epoch FROM s.finished_at)::float8 AS ended, {commit}::float8 AS committed "
                    "FROM dap.jobs j JOIN dap.sagas s USING (id) WHERE j.id = ANY($1)",
                    ids,
                )
            return {r["id"]: r for r in rows}

        async def rounds(action: str) -> tuple[list[float], dict[str, list[float]]]:
            """``n`` rounds (20 warm-ups) of the three dap calls by hand, a pause, one saga, a pause
            (left alone for WAIT, then a look whether it ended); the calls' times and the saga's phases."""
            hand, sent = [], {}
            for i in range(n + 20):
                if i == 20:  # warmed up: every connection is open
                    async with pool.acquire() as conn:
                        backend = await conn.fetchval("SELECT pg_backend_pid()")
                    cpus.append(Cpu(app_pid, parent_of(backend)))
                if cpus:
                    cpus[0].charge("saga")  # the pause after the last saga's end: its own
                t = time.perf_counter()
                for name in STEPS:
                    async with http.post(f"{base}/{name}", data="{}", headers=headers) as r:
                        assert r.status == 200, await r.text()
                        await r.read()
                if i >= 20:
                    hand.append(time.perf_counter() - t)
                    cpus[0].charge("hand")
                await asyncio.sleep(GAP)
                if cpus:
                    cpus[0].charge("hand")  # its pause
                at = time.time()
                one = await start(action)
                if i >= 20:
                    sent[one] = (at, time.time())
                for _ in range(600):  # a pause longer than most sagas, then look whether it ended
                    await asyncio.sleep(WAIT)
                    if await ended([one]):
                        break
            if cpus:
                cpus[0].charge("saga")
            found = await committed_at(list(sent))
            phases: dict[str, list[float]] = {k: [] for k in PHASES}
            for one, (at, got) in sent.items():
                r = found[one]
                if r["committed"] is None:
                    return hand, {}
                marks = (at, r["accepted"], got, r["ended"], r["committed"])
                for name, (a, b) in zip(PHASES[:3], ((0, 1), (1, 3), (3, 4)), strict=True):
                    phases[name].append(marks[b] - marks[a])
                phases["the 202 read (after send)"].append(got - at)
                phases["end to end (send -> commit)"].append(r["committed"] - at)
            return hand, phases

        cpus: list[Cpu] = []

        async def timeline(action: str) -> str:
            """Where the time of the last saga of ``action`` went: ms after its job was queued."""
            async with pool.acquire() as conn:
                rows = await conn.fetch(
                    "SELECT 'claimed' AS what, j.started_at AS at, 0 AS seq FROM dap.jobs j WHERE j.id = $1 "
                    "UNION ALL SELECT 'saga row', s.created_at, 0 FROM dap.sagas s WHERE s.id = $1 "
                    "UNION ALL SELECT concat_ws(' ', l.name, l.phase, l.outcome), l.at, l.seq "
                    "FROM dap.saga_log l WHERE l.saga_id = $1 "
                    "UNION ALL SELECT 'finished', j.finished_at, 1e9 FROM dap.jobs j WHERE j.id = $1 "
                    "UNION ALL SELECT 'ended', s.finished_at, 2e9 FROM dap.sagas s WHERE s.id = $1 "
                    "ORDER BY at, seq",
                    last[action],
                )
                queued = await conn.fetchval("SELECT created_at FROM dap.jobs WHERE id = $1", last[action])
            return ", ".join(f"{r['what']} {(r['at'] - queued).total_seconds() * 1000:.1f}" for r in rows)

        # for scale: one committed statement (WAL flushed) of the same database, sequentially
        commits: list[float] = []
        async with pool.acquire() as conn:
            await conn.execute("CREATE TABLE IF NOT EXISTS public.bench_commits (id bigserial PRIMARY KEY)")
            for i in range(n + 20):
                t = time.perf_counter()
                await conn.execute("INSERT INTO public.bench_commits DEFAULT VALUES")
                if i >= 20:
                    commits.append(time.perf_counter() - t)

        # interleaved, nothing watching the server: the dap calls by hand and the app-process saga
        round_hand, round_phases = await rounds("run_app")

        listener = await asyncpg.connect(pool_dsn)
        await listener.execute(NOTIFY_DDL)
        await listener.add_listener("bench_saga_done", on_done)
        try:
            saga, saga_end = await sequential("run")
            app_saga, app_end = await sequential("run_app")
            notified = await committed_at(last_ids["run_app"])
            shown = {action: await timeline(action) for action in ("run", "run_app")}

            # 3. throughput with ``flight`` in flight
            t = time.perf_counter()
            many = await asyncio.gather(*(start() for _ in range(flight)))
            intake = time.perf_counter() - t
            await finished(list(many))
            elapsed = time.perf_counter() - t
        finally:
            await listener.execute(NOTIFY_DROP)
            await listener.close()
        async with pool.acquire() as conn:
            ok = await conn.fetchval(
                "SELECT count(*) FROM dap.jobs WHERE id = ANY($1) AND state = 'succeeded'", many
            )
        assert ok == flight, f"{flight - ok} of the {flight} sagas did not succeed"

    def line(label: str, xs: list[float]) -> str:
        return f"  {label:<34} p50 {pct(xs, 0.5):7.2f} ms  p99 {pct(xs, 0.99):7.2f} ms"

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"a three-step saga vs the same three calls by hand ({n} sequential runs; load average {load})")
    print(line("HTTP: 3 raw calls by hand", hand))
    print(line("HTTP: saga (queued->finished)", saga))
    print(line("HTTP: saga (queued->ended)", saga_end))
    print(line("HTTP: saga (request->committed)", walls["run"]))
    print(
        f"  ratio p50 {pct(saga, 0.5) / pct(hand, 0.5):.2f}x, "
        f"to its end {pct(saga_end, 0.5) / pct(hand, 0.5):.2f}x, "
        f"end to end {pct(walls['run'], 0.5) / pct(hand, 0.5):.2f}x"
    )
    print(line("app: 3 dap action calls by hand", via_dap))
    print(line("app: saga (queued->finished)", app_saga))
    print(line("app: saga (queued->ended)", app_end))
    print(line("app: saga (request->committed)", walls["run_app"]))
    print(
        f"  ratio p50 {pct(app_saga, 0.5) / pct(via_dap, 0.5):.2f}x, "
        f"to its end {pct(app_end, 0.5) / pct(via_dap, 0.5):.2f}x, "
        f"end to end {pct(walls['run_app'], 0.5) / pct(via_dap, 0.5):.2f}x (goal <= 1.5x)"
    )
    print(line("for scale: one commit", commits))
    if round_phases:
        print(f"interleaved rounds, nothing watching the server ({n}): app-process saga, p50 of each phase")
        print(line("app: 3 dap action calls by hand", round_hand))
        for name, xs in round_phases.items():
            print(line(f"app saga: {name}", xs))
        e2e = pct(round_phases["end to end (send -> commit)"], 0.5)
        print(f"  ratio end to end (commit timestamp) {e2e / pct(round_hand, 0.5):.2f}x (goal <= 1.5x)")
        spent = cpus[0].spent if cpus else {}
        for part, label in (("hand", "3 dap calls by hand"), ("saga", "the saga")):
            cost = ", ".join(f"{g} {s / n * 1000:.2f}" for g, s in spent.get(part, {}).items())
            print(f"  CPU ms per round, {label} (pause included): {cost}")
        lag = [arrived_wall[i] - float(r["committed"]) for i, r in notified.items() if i in arrived_wall]
        print(line("back to back: commit -> NOTIFY read", lag))
        print(
            line(
                "back to back: ended -> committed",
                [float(r["committed"] - r["ended"]) for r in notified.values()],
            )
        )
    else:
        print("  (no commit timestamps: track_commit_timestamp is off; the interleaved clock is skipped)")
    for action, text in shown.items():
        print(f"  one {action} saga, ms after queued: {text}")
    print(
        f"{flight} sagas in flight: all accepted (202) in {intake:.2f} s, all completed in {elapsed:.2f} s, "
        f"{flight / elapsed:.0f} sagas/s"
    )


def commit_timestamps(pg: object, data: Path) -> None:
    """The interleaved clock reads each saga's final commit time: ``track_commit_timestamp`` on
    (a restart of the benchmark's own embedded server)."""
    from pgserver import postgres_server

    pg.psql("ALTER SYSTEM SET track_commit_timestamp = 'on';")  # type: ignore[attr-defined]
    user = pg.system_user  # type: ignore[attr-defined]
    postgres_server.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=data.resolve(), user=user)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds: prove it still runs")
    parser.add_argument(
        "--flight", type=int, help="sagas in flight at once (default 1,000; 100 with --quick)"
    )
    args = parser.parse_args()
    n, flight = (30, 100) if args.quick else (300, 1000)
    flight = args.flight or flight
    given = os.environ.get("DAP_BENCH_DSN")
    if given:
        asyncio.run(measure(given, n, flight))
        return
    with tempfile.TemporaryDirectory(prefix="dap-bench-pg-") as tmp:
        dsn, pg = embedded.start(Path(tmp) / "data")
        try:
            commit_timestamps(pg, Path(tmp) / "data")
            asyncio.run(measure(dsn, n, flight))
        finally:
            embedded.stop(pg, Path(tmp) / "data")


if __name__ == "__main__":
    main()
