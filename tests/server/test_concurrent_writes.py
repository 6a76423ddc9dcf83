"""A deadlock between two plain REST writes is a 409 to retry, never a 500.

Relations have no foreign keys, so a write that points a record at X locks X ``FOR KEY SHARE``
after locking its own row, while deleting X locks X first and then clears its referrers. When
the two meet in the wrong order Postgres aborts one of them; that client gets 409
``SVC.WRITE.CONCURRENT`` and nothing of its write remains. The order is forced here with a third
connection holding the referrer's row: both writers queue on it in a known order.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from .conftest import Running, running

API = "/default/api/shop"


async def _call(srv: Running, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    async with srv.http.request(method, f"{srv.api}{API}/{path}", json=body, headers=srv.auth()) as resp:
        return resp.status, (await resp.json() if resp.status != 204 else None)


async def test_a_deadlocked_write_answers_409_and_the_other_succeeds(pg_dsn: str) -> None:
    async with running(pg_dsn) as srv:
        product = {"sku": "X-1", "title": "X", "price": "1.00"}
        status, created = await _call(srv, "POST", "product", product)
        assert status == 201, created
        target = created["data"]["id"]
        status, created = await _call(srv, "POST", "review", {"related": target})
        assert status == 201, created
        review = created["data"]["id"]

        holder = await asyncpg.connect(pg_dsn)
        try:
            tx = holder.transaction()
            await tx.start()
            await holder.execute("SELECT 1 FROM shop__review WHERE id = $1 FOR UPDATE", review)
            # first in the queue on the review's row: the update, which then wants the product
            update = asyncio.create_task(_call(srv, "PATCH", f"review/{review}", {"related": target}))
            await asyncio.sleep(0.3)
            # second: the delete, which holds the product and then wants the review (set_null)
            delete = asyncio.create_task(_call(srv, "DELETE", f"product/{target}"))
            await asyncio.sleep(0.3)
            await tx.commit()
            answers = await asyncio.gather(update, delete)
        finally:
            await holder.close()
        statuses = sorted(status for status, _ in answers)
        assert 500 not in statuses, answers
        refused = [body for status, body in answers if status == 409]
        assert len(refused) == 1, answers
        assert refused[0]["code"] == "SVC.WRITE.CONCURRENT"
        assert set(statuses) - {409} <= {200, 204}
