"""Rate limits counted in Postgres: one count per key for every server process of a deployment.

A limit allows ``hits`` requests per ``window`` seconds and key (a fixed window). The count lives
in ``dap.rate_counts`` and moves with one ``INSERT … ON CONFLICT`` per request, so two processes
behind one load balancer cannot each grant the full budget; the statement returns how long the
window still runs, which becomes the 429's ``Retry-After``. Keys name what is limited and who
(``login:addr:<ip>``, ``login:user:<tenant>:<username>``): an attacker spreading guesses over
many usernames meets the address limit, one hammering a username from many addresses meets the
username limit.

An action's ``rate_limit`` (:func:`action_limit`) is one more such limit, named after the action
(``action:<module/name>/<action>``) and keyed by what it declares: the principal (tenant and
``sub``; an anonymous caller of a public service action by its address instead), the tenant, or
the client address.

Rows of windows long past are deleted now and then by the requests themselves (no timer).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

from dap.config import durations
from dap.config.actions import RateLimitSpec
from dap.server import errors
from dap.server.storage import db

DDL = """
CREATE SCHEMA IF NOT EXISTS dap;
CREATE TABLE IF NOT EXISTS dap.rate_counts (
    key text PRIMARY KEY,
    window_start timestamptz NOT NULL,
    hits integer NOT NULL
);
"""
_HIT = """
INSERT INTO dap.rate_counts AS c (key, window_start, hits) VALUES ($1, now(), 1)
ON CONFLICT (key) DO UPDATE SET
    window_start = CASE WHEN c.window_start <= now() - make_interval(secs => $2) THEN now()
                        ELSE c.window_start END,
    hits = CASE WHEN c.window_start <= now() - make_interval(secs => $2) THEN 1 ELSE c.hits + 1 END
RETURNING hits, extract(epoch FROM c.window_start + make_interval(secs => $2) - now())::float8
"""
_PRUNE = "DELETE FROM dap.rate_counts WHERE window_start < now() - interval '1 day'"
PRUNE_ONE_IN = 200


@dataclass(frozen=True)
class Limit:
    """``hits`` requests per ``window`` seconds for one key of ``name``."""

    name: str
    hits: int
    window: float


LOGIN_PER_ADDRESS = Limit("login:addr", hits=30, window=60.0)
LOGIN_PER_USERNAME = Limit("login:user", hits=10, window=60.0)
SETUP_PER_ADDRESS = Limit("setup:addr", hits=10, window=60.0)
# a setup code is guessed per workspace, whatever username comes with it: one budget for them all
SETUP_PER_WORKSPACE = Limit("setup:ws", hits=20, window=60.0)


async def check(conn: db.Connection, limit: Limit, who: str) -> None:
    """Count one request of ``who`` under ``limit``; 429 with ``Retry-After`` past its budget."""
    row = await conn.fetchrow(_HIT, f"{limit.name}:{who}", limit.window)
    assert row is not None
    if random.randrange(PRUNE_ONE_IN) == 0:
        await conn.execute(_PRUNE)
    hits, left = row[0], max(1.0, row[1])
    if hits > limit.hits:
        raise errors.RateLimited(
            f"too many requests ({limit.hits} per {limit.window:g} s for {limit.name}); "
            f"try again in {left:.0f} s",
            headers={"Retry-After": str(round(left))},
        )


def action_limit(
    target: str, action: str, spec: RateLimitSpec, *, tenant: uuid.UUID, sub: str, ip: str
) -> tuple[Limit, str]:
    """The limit and key of one call of ``action`` on ``target`` (module/name) under ``spec``. Pure.

    A fixed window of ``per``; ``burst``, when larger than ``requests``, is the most one window may take.
    """
    window = durations.parse(spec.per).total_seconds()
    if spec.key == "tenant":
        who = str(tenant)
    elif spec.key == "ip" or not sub:  # an anonymous caller has no principal to count by
        who = f"{tenant}:ip:{ip}"
    else:
        who = f"{tenant}:{sub}"
    return Limit(f"action:{target}/{action}", max(spec.requests, spec.burst or 0), window), who


async def check_action(
    conn: db.Connection,
    target: str,
    action: str,
    spec: RateLimitSpec | None,
    *,
    tenant: uuid.UUID,
    sub: str,
    ip: str,
) -> None:
    """Count one call of an action declaring ``rate_limit`` (shared by every process); 429 past it."""
    if spec is not None:
        await check(conn, *action_limit(target, action, spec, tenant=tenant, sub=sub, ip=ip))


async def ensure_schema(conn: db.Connection) -> None:
    await db.ensure_platform(conn, __name__, DDL)
