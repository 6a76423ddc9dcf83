"""The write rounds of ``bench/peers.py`` taken to their settled end, and the ``dap serve`` whose
events travel as WAL messages (``DAP_EVENTS_SOURCE=wal``), run only through its targets' rounds.

Why a round is wrapped: ``loadgen.load`` measures the seconds the writes run, but an event is
not done when its write answers. Each write round here is followed by its drain (every event it
wrote delivered: the outbox with no undelivered row; a WAL target's marker, a create sent after
the round, found delivered in the feed, which the stream fills in commit order), and Postgres's
CPU is also counted from before the warm-up to the drain's end, per write answered: the
*settled* figure, which charges each design its whole delivery, however late. The round's
emit → delivered p50/p99 come from the feed (``delivered_at - created_at`` of the round's own
events, told apart by the code or title their bodies wrote).

Why the WAL server runs only through its rounds: a slot's walsender decodes every WAL record of
the database, the other targets' rows included, so a reader left running would charge every
other round. Before a WAL round the slot is moved to the WAL's end (everything before it was
delivered: the last WAL round's marker came through, and nothing else writes messages), the
server started and its walsender seen holding the slot; after the round's drain it is stopped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import aiohttp
import asyncpg
import loadgen
import rest

DRAIN_LIMIT = 120.0  # seconds a round's events may take to be delivered before it counts as stalled


@dataclasses.dataclass
class Settled:
    """One target's settled figures, a value per round."""

    db_us: list[float] = dataclasses.field(default_factory=list)  # Postgres CPU per write, to the drain's end
    p50_ms: list[float] = dataclasses.field(default_factory=list)  # emit -> delivered
    p99_ms: list[float] = dataclasses.field(default_factory=list)
    drain_s: list[float] = dataclasses.field(default_factory=list)  # from the round's end
    stalls: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        def mid(values: list[float]) -> float:
            return statistics.median(values) if values else float("nan")

        text = f"settled: postgres {mid(self.db_us):.0f} µs/write (rounds {_span(self.db_us)})"
        if self.p50_ms:
            text += (
                f", emit->delivered p50 {mid(self.p50_ms):.1f} ms p99 {mid(self.p99_ms):.1f} ms "
                f"(p99 rounds {_span(self.p99_ms, 1)}), drain after the round {mid(self.drain_s):.1f} s "
                f"(max {max(self.drain_s):.1f})"
            )
        return text + ("; STALLED: " + "; ".join(self.stalls) if self.stalls else "")


def _span(values: list[float], digits: int = 0) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}" if values else "-"


def event_share(event: Settled, bare: Settled) -> str:
    """The event's own Postgres CPU per write (the target with events minus the one without, both
    settled) as a share of the row's (the one without)."""
    cost, row = statistics.median(event.db_us), statistics.median(bare.db_us)
    return f"{cost - row:.0f} µs = {(cost - row) / row * 100:.0f}% of the row's {row:.0f} µs"


def report(by: dict[str, loadgen.Figure], settled: dict[str, Settled]) -> str:
    """A write scenario's lines per event design: its two targets against PostGraphile and each
    other, and what its event costs Postgres against the row (settled, above)."""
    lines = [f"  {t:<18} {s.summary()}" for t, s in settled.items()]
    pg = by["postgraphile"]
    for dap, floor in (("dap", "floor events"), ("dap wal", "floor events wal")):
        if dap not in by or floor not in by:
            continue
        lines.append(
            f"  {dap}: x postgraphile {loadgen.ratio(by[dap], pg)}, "
            f"x {floor} {loadgen.ratio(by[dap], by[floor])}, "
            f"{floor} x postgraphile {loadgen.ratio(by[floor], pg)}, "
            f"server CPU/request {dap} x postgraphile {loadgen.cpu_ratio(by[dap], pg)}; "
            f"event ({floor} - floor): {event_share(settled[floor], settled['floor'])}"
        )
    if "dap" in settled and "dap wal" in settled:
        lines.append(
            f"  dap wal x dap {loadgen.ratio(by['dap wal'], by['dap'])}, settled postgres per write "
            f"dap wal - dap: {event_share(settled['dap wal'], settled['dap']).split(' = ')[0]}"
        )
    return "\n".join(lines)


class WalServe:
    """The ``dap serve`` with ``DAP_EVENTS_SOURCE=wal`` on one port, started and stopped per round."""

    def __init__(self, spec: Path, dsn: str, port: int, env: dict[str, str]) -> None:
        self.spec, self.dsn, self.port, self.env = spec, dsn, port, env
        self.proc: subprocess.Popen[bytes] | None = None
        self.behind = False  # a round's events not all delivered: the slot must not be moved

    def pid(self) -> int:
        assert self.proc is not None, "the WAL server runs only through its rounds"
        return self.proc.pid

    async def start(self) -> None:
        if not self.behind:
            await _skip_ahead(self.dsn)
        env = {**self.env, "DAP_EVENTS_SOURCE": "wal"}
        self.proc = rest.spawn_serve(self.spec, self.dsn, self.port, extra_env=env)
        await rest.wait_http(f"http://127.0.0.1:{self.port}/default/_ui/_meta/apps")
        conn = await asyncpg.connect(self.dsn)
        try:
            end = time.monotonic() + 30
            while time.monotonic() < end and not await conn.fetchval(  # noqa: ASYNC110 (Postgres)
                "SELECT bool_or(active) FROM pg_replication_slots WHERE database = current_database()"
            ):
                await asyncio.sleep(0.05)
        finally:
            await conn.close()

    def stop(self) -> None:
        if self.proc is not None:
            rest.stop(self.proc)
            self.proc = None


async def _skip_ahead(dsn: str) -> None:
    """The slot moved to the WAL's end: the other targets' writes since the last WAL round are
    decoded now, unmeasured, not by the next round's walsender."""
    conn = await asyncpg.connect(dsn)
    try:
        slot = await conn.fetchval(
            "SELECT slot_name FROM pg_replication_slots WHERE database = current_database()"
        )
        for _ in range(100):  # the walsender of the server stopped just now may still hold it
            if slot is None:
                return
            try:
                await conn.execute("SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", slot)
                return
            except asyncpg.ObjectInUseError:
                await asyncio.sleep(0.1)
    finally:
        await conn.close()


class Rounds:
    """Wraps the write targets' rounds (see the module's docstring); ``figures[scenario][target]``."""

    def __init__(self, dsn: str, db_pid: int | None, headers: dict[str, str]) -> None:
        self.dsn, self.db_pid, self.headers = dsn, db_pid, headers
        self.figures: dict[str, dict[str, Settled]] = {}

    def target(
        self,
        scenario: str,
        name: str,
        run: Callable[[], loadgen.Load],
        *,
        prefix: str | None = None,
        marker_url: str | None = None,
        wal: WalServe | None = None,
    ) -> Callable[[], loadgen.Load]:
        """``run`` as a settled round. ``prefix``: the code/title its events' records carry (a
        target with events); ``marker_url``: where a WAL target's marker create goes; ``wal``:
        the WAL server to run through the round."""
        settled = self.figures.setdefault(scenario, {}).setdefault(name, Settled())
        field = "code" if scenario == "create" else "title"

        def round_() -> loadgen.Load:
            if wal is not None:
                loadgen.run_apart(wal.start())
            try:
                began = loadgen.run_apart(self._now())
                before = loadgen.children_cpu(self.db_pid) if self.db_pid else {}
                got = run()
                ended = time.monotonic()
                if prefix is not None:
                    done = loadgen.run_apart(self._drain(marker_url))
                    settled.drain_s.append(time.monotonic() - ended)
                    if not done:
                        said = f"round {len(settled.db_us) + 1}: not delivered in {DRAIN_LIMIT:.0f} s"
                        settled.stalls.append(said)
                        print(f"    ({name}: {said}: stalled)", flush=True)
                    if wal is not None:
                        wal.behind = not done
                if self.db_pid:
                    after = loadgen.children_cpu(self.db_pid)
                    used = sum(v - before.get(pid, 0.0) for pid, v in after.items())
                    settled.db_us.append(used / max(got.answered, 1) * 1e6)
                if prefix is not None:
                    p50, p99 = loadgen.run_apart(self._latency(began, scenario, field, prefix))
                    settled.p50_ms.append(p50)
                    settled.p99_ms.append(p99)
                return got
            finally:
                if wal is not None:
                    wal.stop()

        return round_

    async def _now(self) -> object:
        conn = await asyncpg.connect(self.dsn)
        try:
            return await conn.fetchval("SELECT clock_timestamp()")
        finally:
            await conn.close()

    async def _drain(self, marker_url: str | None) -> bool:
        """Every event of the round delivered: no undelivered outbox row, and for a WAL target its
        marker (a create sent now, committed after every write of the round) in the feed."""
        marker = None
        if marker_url is not None:
            marker = f"Z{uuid.uuid4().hex}"
            body = {"code": marker, "title": "marker", "price": "1.00", "qty": 1, "category": "red"}
            async with (
                aiohttp.ClientSession(headers=self.headers) as http,
                http.post(marker_url, json=body) as resp,
            ):
                if resp.status >= 300:
                    raise RuntimeError(f"the marker create answered {resp.status}: {await resp.text()}")
        conn = await asyncpg.connect(self.dsn)
        try:
            end = time.monotonic() + DRAIN_LIMIT
            while time.monotonic() < end:
                pending = await conn.fetchval("SELECT count(*) FROM dap.outbox WHERE delivered_at IS NULL")
                found = marker is None or await conn.fetchval(
                    "SELECT count(*) FROM dap.outbox WHERE entity = 'bench/item' AND action = 'create' "
                    "AND delivered_at IS NOT NULL AND payload->'record'->>'code' = $1",
                    marker,
                )
                if not pending and found:
                    return True
                await asyncio.sleep(0.05)
            return False
        finally:
            await conn.close()

    async def _latency(self, began: object, action: str, field: str, prefix: str) -> tuple[float, float]:
        conn = await asyncpg.connect(self.dsn)
        try:
            row = await conn.fetchrow(
                "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d) AS p50, "
                "percentile_cont(0.99) WITHIN GROUP (ORDER BY d) AS p99 FROM "
                "(SELECT extract(epoch FROM delivered_at - created_at) * 1000 AS d FROM dap.outbox "
                "WHERE created_at >= $1 AND entity = 'bench/item' AND action = $2 "
                "AND delivered_at IS NOT NULL AND payload->'record'->>$3 LIKE $4) t",
                began,
                action,
                field,
                f"{prefix}%",
            )
            return float(row["p50"] or "nan"), float(row["p99"] or "nan")
        finally:
            await conn.close()


if __name__ == "__main__":  # ``make bench`` runs every script here: this one is a helper
    print("bench/peerevents.py: the settled write rounds of bench/peers.py; nothing to run alone")
