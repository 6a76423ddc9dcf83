"""The statements a server sends Postgres for one request, read from Postgres's own log.

``bench/peers.py --statements`` calls :func:`per_request` after its timed runs: it turns on
``log_statement = 'all'`` (``ALTER SYSTEM`` and a reload, so the servers' open connections log
too), sends each request once, and prints the log lines written while it ran (a second later:
what a background loop, such as dap's events dispatcher, sent because of it is included), then
turns logging back off. Only for the embedded Postgres, whose log file is known (``pgdata/log``);
with ``DAP_BENCH_DSN`` it says that it is skipped.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

Send = Callable[[], Awaitable[None]]
_PREFIX = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] (?:LOG|DETAIL):\s+")


def _lines(text: str) -> list[str]:
    """The statement lines of a log excerpt, without timestamps (``[pid]`` kept: who sent it)."""
    out = []
    for line in text.splitlines():
        found = _PREFIX.match(line)
        if found is None or ("statement:" not in line and "execute " not in line):
            continue
        out.append(f"[{found.group(1)}] {line[found.end() :]}"[:300])
    return out


async def per_request(server: Any, dsn: str, requests: dict[str, Send], settle: float = 1.0) -> str:
    """The log lines of each request of ``requests`` (label -> send once), as one text."""
    log = Path(getattr(server, "log", "")) if server is not None else None
    if log is None or not log.is_file():
        return "statements per write: skipped (no embedded Postgres log: DAP_BENCH_DSN given)"
    admin = await asyncpg.connect(dsn)
    out = ["statements each server sends (Postgres log, log_statement = all; [pid] = the connection):"]
    try:
        await admin.execute("ALTER SYSTEM SET log_statement = 'all'")
        await admin.execute("SELECT pg_reload_conf()")
        await asyncio.sleep(settle)
        for label, send in requests.items():
            start = log.stat().st_size
            await send()
            await asyncio.sleep(settle)
            with log.open("rb") as f:
                f.seek(start)
                text = f.read().decode(errors="replace")
            lines = _lines(text)
            out.append(
                f"  {label}: {len(lines)} statement(s) logged, background loops of every server included"
            )
            out += [f"    {x}" for x in lines]
    finally:
        await admin.execute("ALTER SYSTEM RESET log_statement")
        await admin.execute("SELECT pg_reload_conf()")
        await admin.close()
    return "\n".join(out)


if __name__ == "__main__":  # ``make bench`` runs every script here: this one is a helper
    print("bench/statements.py: a helper of bench/peers.py (--statements); nothing to run alone")
