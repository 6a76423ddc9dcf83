"""Document semantics against their plain counterparts on ``bench/doc`` and ``bench/item``: the
update of a draft and a submit against a plain update, a list under row scope against the same
rows filtered plainly; driven by a bounded aiohttp client (:func:`drive`), part of ``bench/rest.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
import uuid
from typing import Any

import aiohttp
import asyncpg

BUYERS = 100  # bench/doc rows are spread over this many buyers, each seeing 1/BUYERS of them


def summary(runs: list[tuple[list[float], float, int]]) -> dict[str, float]:
    """Requests/s, p50, p99 and errors over several runs of ``drive``."""
    latencies = sorted(x for lat, _, _ in runs for x in lat)
    elapsed = sum(e for _, e, _ in runs)
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "errors": sum(n for _, _, n in runs),
    }


Request = str | tuple[str, str, Any]  # a GET url, or (method, url, JSON body)


async def drive(
    url_of: Any, *, seconds: float, workers: int, headers: dict[str, str], warm: float
) -> tuple[list[float], float, int]:
    """Run ``workers`` clients for ``seconds`` after ``warm`` seconds of one; ``url_of()`` gives each
    next :data:`Request`."""
    latencies: list[float] = []
    errors = 0
    stop_at = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=workers)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as http:

        async def send() -> int:
            request: Request = url_of()
            method, url, body = ("GET", request, None) if isinstance(request, str) else request
            async with http.request(method, url, json=body) as resp:
                await resp.read()
                return resp.status

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                if await send() not in (200, 201):
                    errors += 1
                latencies.append(time.perf_counter() - started)

        warm_until = time.perf_counter() + warm
        while time.perf_counter() < warm_until:  # warm-up: pools, prepared statements
            await send()
        stop_at = time.perf_counter() + seconds
        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(workers)))
        elapsed = time.perf_counter() - began
    return latencies, elapsed, errors


async def load_docs(dsn: str, rows: int) -> list[str]:
    """``rows`` draft documents spread over ``BUYERS`` buyers; returns every id, shuffled."""
    conn = await asyncpg.connect(dsn)
    try:
        tenant = await conn.fetchval("SELECT id FROM dap.workspaces WHERE slug = 'default'")
        records = [
            (tenant, uuid.uuid4(), f"D{i:07d}", i % 500, f"u{i % BUYERS:03d}", "bench", "bench")
            for i in range(rows)
        ]
        await conn.copy_records_to_table(
            "bench__doc",
            records=records,
            columns=["tenant_id", "id", "code", "qty", "buyer", "created_by", "owner"],
        )
        await conn.execute("ANALYZE bench__doc")
    finally:
        await conn.close()
    ids = [str(r[1]) for r in records]
    random.Random(11).shuffle(ids)
    return ids


async def documents_scenario(
    dsn: str,
    api_port: int,
    item_ids: list[str],
    args: argparse.Namespace,
    tokens: tuple[dict[str, str], dict[str, str]],
    warm: float,
) -> tuple[list[str], int]:
    """Update of a draft, submit, and a list under row scope, each against its plain counterpart.

    Plain update is a PATCH of ``bench/item`` (no lifecycle); the draft update PATCHes a
    ``bench/doc`` draft (lifecycle check on the locked row); submit moves a draft (each id once).
    The plain list is admin (row scope lifted by ``all_rows``) asking for one buyer's documents
    with a filter (``buyer=u042``); the scoped list is that buyer asking without the filter, so
    the row scope (``buyer = username``) puts the same condition into the statement: the ratio
    is the cost of resolving and applying the scope, on the same rows and plan.
    Pairs run A B B A, each half of ``--seconds``; ``tokens``: the admin's and buyer ``u042``'s
    headers.
    """
    print(f"loading {args.rows} draft documents ...", flush=True)
    doc_ids = await load_docs(dsn, args.rows)
    admin, buyer = tokens
    base = f"http://127.0.0.1:{api_port}/default/api/bench"
    counter = iter(range(10**9))
    drafts = iter(doc_ids[: len(doc_ids) // 2])  # submitted ones, never updated afterwards
    editable = doc_ids[len(doc_ids) // 2 :]
    list_query = "sort=-created_at&limit=50"

    def plain_update() -> Request:
        return ("PATCH", f"{base}/item/{random.choice(item_ids)}", {"qty": next(counter) % 500})

    def draft_update() -> Request:
        return ("PATCH", f"{base}/doc/{random.choice(editable)}", {"qty": next(counter) % 500})

    def submit() -> Request:
        return ("POST", f"{base}/doc/{next(drafts)}/submit", None)

    def filtered_list() -> Request:  # the scope's condition sent as a plain filter, by admin
        return f"{base}/doc?buyer=u042&{list_query}"

    def scoped_list() -> Request:  # the same rows, selected by the buyer's row scope
        return f"{base}/doc?{list_query}"

    pairs = {
        "update of a draft / plain update": ((plain_update, admin), (draft_update, admin)),
        "submit / plain update": ((plain_update, admin), (submit, admin)),
        "list under row scope / plain list": ((filtered_list, admin), (scoped_list, buyer)),
    }
    failures = 0
    lines = [
        "",
        f"document semantics ({args.rows} rows each in bench/item and bench/doc, {args.workers} clients):",
    ]
    for title, (plain, measured) in pairs.items():
        runs: dict[str, list[tuple[list[float], float, int]]] = {"plain": [], "measured": []}
        for side, (request_of, headers) in (
            ("plain", plain),
            ("measured", measured),
            ("measured", measured),
            ("plain", plain),
        ):
            print(f"running {title}: {side} ...", flush=True)
            runs[side].append(
                await drive(
                    request_of, seconds=args.seconds / 2, workers=args.workers, headers=headers, warm=warm
                )
            )
        got = {side: summary(r) for side, r in runs.items()}
        ratio = got["measured"]["rps"] / got["plain"]["rps"]
        failures += int(got["measured"]["errors"] + got["plain"]["errors"])
        measured, plain_ = got["measured"], got["plain"]
        lines.append(
            f"  {title:<34} {measured['rps']:>7.0f} vs {plain_['rps']:>7.0f} req/s = {ratio:.2f}x "
            f"(target >= 0.70x); p99 {measured['p99_ms']:.1f} vs {plain_['p99_ms']:.1f} ms; "
            f"errors {measured['errors'] + plain_['errors']:.0f}"
        )
    return lines, failures


if __name__ == "__main__":  # ``make bench`` runs every script here: this one is a helper
    print("bench/semantics.py: the document semantics of bench/rest.py; nothing to run alone")
