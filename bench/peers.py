"""The read and write paths against their peer: the same table served by ``dap serve``, the floor
and PostGraphile 5.

    .venv/bin/python bench/peers.py [--rows 100000] [--seconds 5] [--rounds 3]
                                    [--only find page create update] [--statements]
                                    [--before DIR]

Run by ``make bench``, never by ``make test``: it installs npm packages (``--quick`` only says
that it is skipped). Everything it installs lives under ``.dap/bench-peers``: PostGraphile 5,
its connection-filter plugin (for ``price > 50``) and, because PostGraphile 5 needs Node >= 22,
npm's ``node`` package, whose binary is put first on the peer's ``PATH``; nothing global.

The peer (``bench/postgraphile.py``) runs its fast configuration: the ``amber`` preset in
production mode (``GRAPHILE_ENV=production``, ``NODE_ENV=production``: no GraphiQL, no explain,
no dev checks), no watch mode, a pg pool of the same size as dap's (10), and no auth (it
has none configured, where dap verifies a token on every request; every target is sent the same
token). Before timing, answers are checked equal: the fields of several records found by id, and
the prices of the filtered page. Beside the floor runs ``floor fifo``, the floor with dap's
arrival-order gate in front of its pool, and a second ``dap serve`` whose spec declares the find
cache (``cached find``). Prints req/s (median of interleaved rounds and spread), p50/p99, server
CPU per request, Postgres's CPU per request (the postmaster's children), bytes per response and
RSS.

The writes (issue 27): ``create`` is dap's ``POST`` (its ``created`` event written to
``dap.outbox`` in the same transaction), PostGraphile's ``createBenchItem`` mutation and the
floor's single autocommitted ``INSERT … RETURNING``; ``update`` is dap's ``PATCH`` (with its
``updated`` event), PostGraphile's ``updateBenchItemByTenantIdAndRowId`` and the floor's single
``UPDATE … RETURNING``, on random rows among the sampled ids; ``floor events`` is the floor that
also writes each write's event as dap does, in the same statement, delivered by dap's dispatcher
(``bench/floor.py --events``): the least a server can do for the same work. Every create carries
a code no other request sends (``loadgen.UNIQUE``). After each write scenario the rows each
target wrote are counted against its 2xx answers, and the outbox against the writes of dap and
the floor with events (exactly one event per created row). The cached server is stopped before
the writes (its dispatcher would wake at every write too).

Each event design has its two targets (issue 46): ``dap`` and ``floor events`` write outbox rows,
delivered by ``dap``'s dispatcher; ``dap wal`` (the same spec served with
``DAP_EVENTS_SOURCE=wal``) and ``floor events wal`` (``bench/floor.py --events --wal``) write the
event as a logical WAL message in the same statement, delivered by ``dap wal``'s dispatcher
streaming the slot. ``dap wal`` runs only through those two targets' rounds, so that its
walsender decodes no other round's WAL, and every write round is taken to its settled end
(``bench/peerevents.py``): the settled Postgres CPU per write, emit → delivered p50/p99 from the
feed, and the event's own Postgres CPU as a share of the row's, per design (``floor events``
minus ``floor``, ``floor events wal`` minus ``floor``). ``--statements`` then logs, through
Postgres's own log, the statements each server sends for one create and one update
(``bench/statements.py``).

``--before DIR`` adds a fifth target to the writes, ``dap before``: the ``dap serve`` of the source
tree ``DIR`` (its ``dap`` package first on ``PYTHONPATH``; for instance ``git archive main | tar -x
-C DIR``) on the same database, so that a change is compared with what it changes in one run. Its
creates are checked as dap's (one ``created`` event per row, in one snapshot).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import jwt
import loadgen
import peerevents
import postgraphile
import rest
import statements

Target = Callable[[], loadgen.Load]  # one round against one server
# the bodies of the REST writes (dap and the floor); @WHO@ tells the targets' rows apart
WRITES: dict[str, dict[str, Any]] = {
    "POST": {"code": f"@WHO@{loadgen.UNIQUE}", "title": "new", "price": "12.50", "qty": 3, "category": "red"},
    "PATCH": {"title": f"@WHO@{loadgen.UNIQUE}", "qty": 7},
}
WHO = {
    "dap": "D",
    "dap wal": "W",
    "dap before": "B",
    "floor": "F",
    "floor events": "E",
    "floor events wal": "V",
    "postgraphile": "P",
}
# the targets whose writes emit events (the wal ones' delivered events are in dap.outbox too)
WITH_EVENTS = ("dap", "dap wal", "dap before", "floor events", "floor events wal")


async def check_writes(dsn: str, name: str, figures: dict[str, loadgen.Figure]) -> str:
    """The rows each target wrote, against the 2xx answers it got (warm-ups included): wrk stops
    counting with requests in flight, so a run may write up to one row per connection more than it
    counted. For dap (and ``dap before``), one ``created``/``updated`` event per write in
    ``dap.outbox`` (delivered or not: the dispatcher marks rows, it prunes none within a run),
    told apart by the code or title its body wrote: exactly one per row for creates (counted in
    one snapshot: a row and its event commit together, while requests still in flight may commit
    between two queries). Raises on a mismatch."""
    conn = await asyncpg.connect(dsn)
    try:
        notes = []
        for target, figure in figures.items():
            answered = sum(r.answered for r in figure.runs)
            slack = 2 * loadgen.CONNECTIONS * len(figure.runs)  # in flight at a warm-up's or a run's end
            prefix = f"{WHO[target]}%"
            if name == "create":
                rows = await conn.fetchval("SELECT count(*) FROM bench__item WHERE code LIKE $1", prefix)
                if not answered <= rows <= answered + slack:
                    raise RuntimeError(f"create {target}: {rows} rows for {answered} answers")
                notes.append(f"{target} {rows} rows for {answered} answers")
            if target not in WITH_EVENTS:
                continue
            if name == "create":
                # one aggregate joined by hash: a subquery per row scanned the outbox once per row
                # (its record index is partial, undelivered rows only), minutes on a quiet run
                odd = await conn.fetchval(
                    "SELECT count(*) FROM bench__item i LEFT JOIN (SELECT record_id, count(*) AS n "
                    "FROM dap.outbox WHERE action = 'create' GROUP BY record_id) o ON o.record_id = i.id "
                    "WHERE i.code LIKE $1 AND coalesce(o.n, 0) <> 1",
                    prefix,
                )
                if odd:
                    raise RuntimeError(f"create {target}: {odd} rows without exactly one created event")
            events = await conn.fetchval(
                "SELECT count(*) FROM dap.outbox WHERE entity = 'bench/item' AND action = $1 "
                "AND payload->'record'->>$2 LIKE $3",
                name,
                "code" if name == "create" else "title",
                prefix,
            )
            if not answered <= events <= answered + slack:
                raise RuntimeError(f"{name} {target}: {events} events in the outbox for {answered} answers")
            notes.append(f"{target} {events} events")
        return f"{name} checked: " + ", ".join(notes)
    finally:
        await conn.close()


def settle_writes(dsn: str) -> None:
    """Before each write round: the events the previous round left undelivered delivered first
    (said when there are any: a dispatcher that did not keep up), then that round's dead rows
    vacuumed, so that no round pays for another's deliveries or autovacuum by the order's luck
    (the updates' rounds spread 1-to-3 without the vacuum; 0.86-1.14 with it). No checkpoint: one
    before each round made every page a round touched first cost a full-page image in the WAL,
    and the spread wider."""

    async def settle() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            began, left = time.monotonic(), None
            while time.monotonic() - began < 120:
                pending = await conn.fetchval("SELECT count(*) FROM dap.outbox WHERE delivered_at IS NULL")
                left = pending if left is None else left
                if not pending:
                    break
                await asyncio.sleep(0.2)
            if left:
                waited = time.monotonic() - began
                print(f"    (the round before left {left} events undelivered: delivered in {waited:.1f} s)")
            await conn.execute("VACUUM (ANALYZE) bench__item")
            await conn.execute("VACUUM dap.outbox")
        finally:
            await conn.close()

    loadgen.run_apart(settle())  # the caller's loop is running


async def check_equal(
    api: str, gql: str, find: str, page: str, tenant: str, ids: list[str], auth: dict[str, str]
) -> None:
    """Answers of dap and the peer agree before anything is timed (records by id, the page's prices)."""
    async with aiohttp.ClientSession(headers=auth) as http:
        for rid in ids[:20]:
            async with http.get(f"{api}/default/api/bench/item/{rid}") as resp:
                mine = (await resp.json())["data"]
            theirs = next(iter((await postgraphile.graphql(gql, find, {"t": tenant, "id": rid})).values()))
            if not postgraphile.same(mine, theirs):
                raise RuntimeError(f"answers differ for {rid}: dap {mine} / PostGraphile {theirs}")
        async with http.get(f"{api}/default/api/bench/item?{rest.LIST_QUERY}") as resp:
            mine_page = (await resp.json())["data"]
    theirs_page = next(iter((await postgraphile.graphql(gql, page)).values()))["nodes"]
    if [r["price"] for r in mine_page] != [r["price"] for r in theirs_page]:
        raise RuntimeError("the filtered pages differ (prices in order)")


async def warm_cache(base: str, ids: list[str], auth: dict[str, str]) -> None:
    """Find every id twice on the caching server, so that the timed finds are hits."""
    async with aiohttp.ClientSession(headers=auth) as http:
        for rid in ids:
            for _ in range(2):  # its invalidation listener is up by the second pass
                async with http.get(f"{base}/default/api/bench/item/{rid}") as resp:
                    if resp.status != 200:
                        raise RuntimeError(f"the caching server answered {resp.status} for {rid}")
                    await resp.read()


async def main(args: argparse.Namespace) -> int:
    bin_dir = postgraphile.install()
    tmp = Path(tempfile.mkdtemp(prefix="dap-peers-"))
    # two dap serves (each ~16 connections of saga workers beside its pool of 10), three floors'
    # and PostGraphile's pools, the bench's own: more than Postgres's default 100 at the writes
    from dap import embedded

    embedded.SETTINGS["max_connections"] = "200"
    embedded.RESTART = embedded.RESTART | {"max_connections"}
    server_dsn, server = rest.start_postgres(tmp)
    db_pid = loadgen.postmaster_pid(tmp / "pg")  # None with DAP_BENCH_DSN: no Postgres CPU figures
    procs: list[subprocess.Popen[bytes]] = []
    try:
        dsn = await rest.new_database(server_dsn)
        spec = tmp / "spec"
        spec.mkdir()
        (spec / "bench.yaml").write_text(rest.SPEC)
        api_port, floor_port, peer_port = rest.port(), rest.port(), rest.port()
        loop_env = {"DAP_EVENT_LOOP": args.event_loop} if args.event_loop else {}
        os.environ.update(loop_env)  # the floor inherits it; dap serve is given it
        serve = rest.spawn_serve(spec, dsn, api_port, extra_env=loop_env)
        procs.append(serve)
        await rest.wait_http(f"http://127.0.0.1:{api_port}/default/_ui/_meta/apps")
        before_port, old_serve = rest.port(), None
        if args.before:  # the same spec served by another source tree (a change's baseline)
            tree = {"PYTHONPATH": args.before}  # made absolute by the argument parser
            old_serve = rest.spawn_serve(spec, dsn, before_port, extra_env={**loop_env, **tree})
            procs.append(old_serve)
            await rest.wait_http(f"http://127.0.0.1:{before_port}/default/_ui/_meta/apps")
        print(f"loading {args.rows} rows ...", flush=True)
        tenant, ids = await rest.load_rows(dsn, args.rows)
        fifo_port = rest.port()
        floor = rest.spawn_baseline(floor_port, dsn, tenant)
        fifo = rest.spawn_baseline(fifo_port, dsn, tenant, fifo=True)
        events_port, wal_events_port = rest.port(), rest.port()
        floor_events = rest.spawn_baseline(events_port, dsn, tenant, events=True)
        floor_wal = rest.spawn_baseline(wal_events_port, dsn, tenant, events=True, wal=True)
        procs += [floor, fifo, floor_events, floor_wal]
        for port in (floor_port, fifo_port, events_port, wal_events_port):
            await rest.wait_http(f"http://127.0.0.1:{port}/default/api/bench/item/{ids[0]}", limit=60)
        # the same table served by a second dap serve whose spec declares the find cache
        cached_spec = tmp / "spec-cached"
        cached_spec.mkdir()
        (cached_spec / "bench.yaml").write_text(rest.SPEC.replace("  expose:", rest.CACHE_LINE + "  expose:"))
        cached_port = rest.port()
        cached = rest.spawn_serve(cached_spec, dsn, cached_port, extra_env=loop_env)
        procs.append(cached)
        await rest.wait_http(f"http://127.0.0.1:{cached_port}/default/_ui/_meta/apps")
        log = tmp / "postgraphile.log"
        peer = postgraphile.spawn_peer(bin_dir, dsn, peer_port, log)
        procs.append(peer)
        gql_url = f"http://127.0.0.1:{peer_port}/graphql"
        await postgraphile.wait_graphql(gql_url, peer, log)
        find, page = await postgraphile.queries(gql_url)
        now = int(time.time())
        token = jwt.encode(
            {"sub": "u", "username": "alice", "iss": "svc", "iat": now, "exp": now + 7200},
            rest.SECRET,
            algorithm="HS256",
        )
        auth = {"Authorization": f"Bearer {token}"}
        api = f"http://127.0.0.1:{api_port}"
        await check_equal(api, gql_url, find, page, tenant, ids, auth)
        print("answers checked equal (20 records by id, the filtered page's prices)", flush=True)
        await warm_cache(f"http://127.0.0.1:{cached_port}", ids, auth)

        item = "/default/api/bench/item"
        json_headers = {"Content-Type": "application/json", **auth}  # the peer has no JWT configured
        find_bodies = [json.dumps({"query": find, "variables": {"t": tenant, "id": i}}) for i in ids]
        page_body = [json.dumps({"query": page})]
        finds, pages = [f"{item}/{i}" for i in ids], [f"{item}?{rest.LIST_QUERY}"]

        def rest_target(port: int, paths: list[str], proc: subprocess.Popen[bytes]) -> Target:
            # every REST target gets the same request, dap's token included (the floors ignore it)
            url = f"http://127.0.0.1:{port}"
            return lambda: loadgen.load(
                url, paths, seconds=args.seconds, headers=auth, pids=[proc.pid], db_pid=db_pid
            )

        def peer_target(bodies: list[str]) -> Target:
            url = f"http://127.0.0.1:{peer_port}"
            return lambda: loadgen.load(
                url,
                ["/graphql"],
                seconds=args.seconds,
                headers=json_headers,
                bodies=bodies,
                pids=[peer.pid],
                db_pid=db_pid,
            )

        scenarios: dict[str, dict[str, Target]] = {
            "find": {
                "dap": rest_target(api_port, finds, serve),
                "floor": rest_target(floor_port, finds, floor),
                "floor fifo": rest_target(fifo_port, finds, fifo),
                "postgraphile": peer_target(find_bodies),
            },
            "cached find": {
                "dap": rest_target(cached_port, finds, cached),
                "floor": rest_target(floor_port, finds, floor),
                "postgraphile": peer_target(find_bodies),
            },
            "page": {
                "dap": rest_target(api_port, pages, serve),
                "floor": rest_target(floor_port, pages, floor),
                "floor fifo": rest_target(fifo_port, pages, fifo),
                "postgraphile": peer_target(page_body),
            },
        }
        create_body, update_body = await postgraphile.mutations(gql_url, tenant)

        wal_serve = peerevents.WalServe(spec, dsn, rest.port(), loop_env)
        rounds = peerevents.Rounds(dsn, db_pid, json_headers)

        def write_target(
            port: int,
            paths: list[str],
            proc: subprocess.Popen[bytes] | Callable[[], int],
            method: str,
            who: str,
        ) -> Target:
            url = f"http://127.0.0.1:{port}"
            bodies = [json.dumps(WRITES[method]).replace("@WHO@", who)]
            pid = proc if callable(proc) else (lambda: proc.pid)  # dap wal's changes round to round
            name = next(n for n, w in WHO.items() if w == who)
            run = lambda: loadgen.load(  # noqa: E731
                url,
                paths,
                seconds=args.seconds,
                headers=json_headers,
                bodies=bodies,
                method=method,
                pids=[pid()],
                db_pid=db_pid,
            )
            wal = name.endswith("wal")
            return rounds.target(
                "create" if method == "POST" else "update",
                name,
                run,
                prefix=who if name in WITH_EVENTS else None,
                marker_url=url + item if wal else None,
                wal=wal_serve if wal else None,
            )

        writes: dict[str, dict[str, Target]] = {
            "create": {
                "dap": write_target(api_port, [item], serve, "POST", "D"),
                "dap wal": write_target(wal_serve.port, [item], wal_serve.pid, "POST", "W"),
                "floor": write_target(floor_port, [item], floor, "POST", "F"),
                "floor events": write_target(events_port, [item], floor_events, "POST", "E"),
                "floor events wal": write_target(wal_events_port, [item], floor_wal, "POST", "V"),
                "postgraphile": rounds.target("create", "postgraphile", peer_target([create_body])),
            },
            "update": {
                "dap": write_target(api_port, finds, serve, "PATCH", "D"),
                "dap wal": write_target(wal_serve.port, finds, wal_serve.pid, "PATCH", "W"),
                "floor": write_target(floor_port, finds, floor, "PATCH", "F"),
                "floor events": write_target(events_port, finds, floor_events, "PATCH", "E"),
                "floor events wal": write_target(wal_events_port, finds, floor_wal, "PATCH", "V"),
                "postgraphile": rounds.target(
                    "update", "postgraphile", peer_target([update_body.replace("@ID@", i) for i in ids])
                ),
            },
        }
        if old_serve is not None:
            writes["create"]["dap before"] = write_target(before_port, [item], old_serve, "POST", "B")
            writes["update"]["dap before"] = write_target(before_port, finds, old_serve, "PATCH", "B")
        if args.only:
            scenarios = {k: v for k, v in {**scenarios, **writes}.items() if k in args.only}
        else:
            scenarios.update(writes)
        results = {}
        cached_rss = None
        for name, targets in scenarios.items():
            if name in writes and cached.poll() is None:
                # the second dap serve is there for the cached find; on the same database its
                # events dispatcher and feed would wake at every write of the others as well
                cached_rss = rest.rss_mib(cached.pid)
                rest.stop(cached)
                # the fifo floor serves the reads only; its pool's connections would leave too few
                # of Postgres's 100 for dap wal's server (about 30 through its rounds)
                rest.stop(fifo)
            print(f"running {name}: {args.rounds} rounds of {args.seconds}s per target ...", flush=True)
            settle = (lambda: settle_writes(dsn)) if name in writes else None
            results[name] = loadgen.interleave(targets, args.rounds, before=settle)
            if name in writes:
                print("  " + await check_writes(dsn, name, results[name]), flush=True)
        if args.statements:

            def send(url: str, method: str, body: str) -> Callable[[], Awaitable[None]]:
                async def once() -> None:
                    async with (
                        aiohttp.ClientSession(headers=json_headers) as http,
                        http.request(method, url, data=body.replace(loadgen.UNIQUE, "S1")) as resp,
                    ):
                        if resp.status >= 300:
                            raise RuntimeError(f"{method} {url} answered {resp.status}: {await resp.text()}")

                return once

            def rest_body(method: str, who: str) -> str:
                return json.dumps(WRITES[method]).replace("@WHO@", who)

            floor_url, target = f"http://127.0.0.1:{floor_port}", ids[-1]
            print(
                await statements.per_request(
                    server,
                    dsn,
                    {
                        "dap create": send(api + item, "POST", rest_body("POST", "SD")),
                        "dap update": send(f"{api}{item}/{target}", "PATCH", rest_body("PATCH", "SD")),
                        "floor create": send(floor_url + item, "POST", rest_body("POST", "SF")),
                        "floor update": send(
                            f"{floor_url}{item}/{target}", "PATCH", rest_body("PATCH", "SF")
                        ),
                        "postgraphile create": send(gql_url, "POST", create_body.replace('"P', '"SP')),
                        "postgraphile update": send(gql_url, "POST", update_body.replace("@ID@", target)),
                    },
                )
            )
        rss = {
            n: rest.rss_mib(p.pid) if p.poll() is None else cached_rss or float("nan")
            for n, p in (("dap", serve), ("dap cached", cached), ("floor", floor), ("postgraphile", peer))
        }
        print()
        print(
            f"peers: {args.rows} rows, {loadgen.generator()} with {loadgen.CONNECTIONS} connections, "
            f"{args.rounds} interleaved rounds of {args.seconds}s (median, spread), "
            "auth on for dap only (all get its token), "
            f"event loop of dap and the floor: {args.event_loop or 'default (uvloop where installed)'}"
        )
        for name, by_target in results.items():
            for target, figure in by_target.items():
                print(figure.line(f"{name} {target}"))
            fifo_part = (
                f"dap/floor fifo {loadgen.ratio(by_target['dap'], by_target['floor fifo'])}, "
                if "floor fifo" in by_target
                else ""
            )
            if name in rounds.figures:
                print(peerevents.report(by_target, rounds.figures[name]))
            if "dap before" in by_target:
                print(
                    f"  {name}: dap/dap before {loadgen.ratio(by_target['dap'], by_target['dap before'])}, "
                    f"dap before/floor {loadgen.ratio(by_target['dap before'], by_target['floor'])}, "
                    "server CPU per request dap/dap before "
                    f"{loadgen.cpu_ratio(by_target['dap'], by_target['dap before'])}"
                )
            print(
                f"  {name}: dap/postgraphile {loadgen.ratio(by_target['dap'], by_target['postgraphile'])}, "
                f"dap/floor {loadgen.ratio(by_target['dap'], by_target['floor'])}, {fifo_part}"
                f"p99 dap/postgraphile {by_target['dap'].p99_ms / by_target['postgraphile'].p99_ms:.2f}x, "
                f"server CPU per request dap/postgraphile "
                f"{loadgen.cpu_ratio(by_target['dap'], by_target['postgraphile'])}"
            )
        print("RSS after the runs: " + ", ".join(f"{n} {v:.0f} MiB" for n, v in rss.items()))
        failed = any(f.errors for by in results.values() for f in by.values())
        return 1 if failed else 0
    finally:
        rest.clean_up(procs, server, tmp)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--event-loop", choices=["asyncio"], help="run dap serve and the floor on asyncio's loop, not uvloop"
    )
    parser.add_argument(
        "--only", nargs="*", help="run only these scenarios (find, cached find, page, create, update)"
    )
    parser.add_argument(
        "--statements", action="store_true", help="also log the statements each server sends per write"
    )
    parser.add_argument(
        "--before", metavar="DIR", help="also time the writes of dap serve from this source tree (dap before)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="skipped: installs npm packages (make bench only)"
    )
    parsed = parser.parse_args()
    if parsed.before:
        parsed.before = str(Path(parsed.before).resolve())
    if parsed.quick:
        print("bench/peers.py: skipped with --quick (it installs npm packages; make bench runs it)")
        sys.exit(0)
    sys.exit(asyncio.run(main(parsed)))
