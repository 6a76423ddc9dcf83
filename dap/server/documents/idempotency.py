"""``Idempotency-Key``: a create repeated with the same key has one effect and gets the first answer.

A client that lost the answer to a create (a timeout, a 503 saying the outcome is unknown) repeats
it with the same ``Idempotency-Key`` header. Per workspace and key, in the write's transaction:

1. the key is locked (a transaction-scoped advisory lock); a request whose twin still runs gets
   409 ``SVC.IDEMPOTENCY.IN_PROGRESS`` at once instead of waiting;
2. a stored answer of the key (younger than :data:`TTL`) is replayed as it was, status, body and
   headers, with ``Idempotent-Replayed: true``, when the request is the same (same caller, path and
   JSON body); a different request under a used key is 422 ``SVC.IDEMPOTENCY.KEY_REUSED``;
3. otherwise the write runs and its answer is stored in ``dap.idempotency_keys`` in the same
   transaction, so the answer exists exactly when the write does.

Workflows' ``idempotent`` actions are meant to reuse this module.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dap.server import errors
from dap.server.storage import db

HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
TTL = 24 * 3600  # seconds a key is remembered
_KEY = re.compile(r"[\x21-\x7e]{1,255}")  # visible ASCII, as header values travel
PRUNE_ONE_IN = 100

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.idempotency_keys (
    tenant_id uuid NOT NULL,
    key text NOT NULL,
    fingerprint bytea NOT NULL,
    status smallint NOT NULL,
    body text NOT NULL,
    headers jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);
"""


@dataclass(slots=True)  # made per write, never assigned to: see operations.Call
class Answer:
    status: int
    body: str
    headers: Mapping[str, str]


def key_of(headers: Mapping[str, str], header: str = HEADER) -> str | None:
    """The request's idempotency key (``header``, an action may name its own), ``None`` without one,
    400 when it is not a usable key."""
    key = headers.get(header)
    if key is None:
        return None
    if not _KEY.fullmatch(key):
        raise errors.BadRequest(
            f"{header} must be 1 to 255 visible ASCII characters (a UUID is a good key)",
            code="SVC.IDEMPOTENCY.KEY_INVALID",
        )
    return key


def fingerprint(caller: str, path: str, body: Mapping[str, Any]) -> bytes:
    """What makes two requests the same: caller, path with query, and the JSON body (key order aside)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=db.json_default)
    return hashlib.sha256("\n".join((caller, path, canonical)).encode()).digest()


async def claim(conn: db.Connection, tenant: uuid.UUID, key: str, digest: bytes) -> Answer | None:
    """In the write's transaction: hold ``key``, and give the answer stored under it, if any."""
    if not await conn.fetchval(
        "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))", f"{tenant}:{key}"
    ):
        raise errors.Conflict(
            f"a request with this {HEADER} is still running; repeat it once that one has answered",
            code="SVC.IDEMPOTENCY.IN_PROGRESS",
        )
    row = await conn.fetchrow(
        "SELECT fingerprint, status, body, headers FROM dap.idempotency_keys "
        "WHERE tenant_id = $1 AND key = $2 AND created_at > now() - make_interval(secs => $3)",
        tenant,
        key,
        float(TTL),
    )
    if row is None:
        return None
    if bytes(row["fingerprint"]) != digest:
        raise errors.ValidationFailed(
            f"this {HEADER} was used for another request; send a new key with a new request",
            code="SVC.IDEMPOTENCY.KEY_REUSED",
            errors=[errors.FieldProblem(HEADER, "already used for a different request")],
        )
    return Answer(row["status"], row["body"], {**row["headers"], REPLAYED: "true"})


async def store(conn: db.Connection, tenant: uuid.UUID, key: str, digest: bytes, answer: Answer) -> None:
    """In the write's transaction: remember ``answer`` under ``key`` (an expired use is replaced)."""
    await conn.execute(
        """INSERT INTO dap.idempotency_keys (tenant_id, key, fingerprint, status, body, headers)
           VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (tenant_id, key) DO UPDATE
               SET fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status, body = EXCLUDED.body,
                   headers = EXCLUDED.headers, created_at = now()""",
        tenant,
        key,
        digest,
        answer.status,
        answer.body,
        dict(answer.headers),
    )
    if random.randrange(PRUNE_ONE_IN) == 0:
        await conn.execute(
            "DELETE FROM dap.idempotency_keys WHERE created_at < now() - make_interval(secs => $1)",
            float(TTL),
        )


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)
