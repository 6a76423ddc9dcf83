"""Signing policies in Postgres: per app, the approval keys and how many must approve (k of n).

A policy change is one transaction that also appends a ``policy`` entry (keys and threshold) to
the transparency log, so who may approve what is as public as what was registered. Registration
reads the app's policy under the app's lock (``registration``) and refuses an upload whose valid
approvals fall short; the pod counts them again against the policy it was given.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from dap.control import errors
from dap.control.ids import KeyId
from dap.control.storage import store
from dap.control.supply import promotions, transparency
from dap.control.trust import signing, snapshots

MAX_KEYS = 32


@dataclass(frozen=True)
class Policy:
    app: str
    keys: dict[KeyId, bytes]
    threshold: int

    def as_json(self) -> dict[str, object]:
        return {
            "app": self.app,
            "threshold": self.threshold,
            "keys": [signing.public_key_entry(k) for _, k in sorted(self.keys.items())],
        }


def check(app: str, keys: list[bytes], threshold: int) -> Policy:
    distinct = {signing.key_id(k): k for k in keys}
    if not distinct or len(distinct) > MAX_KEYS:
        raise errors.RequestError(
            f"a policy names 1 to {MAX_KEYS} distinct keys", [errors.ErrorItem("keys", "1 to 32 keys")]
        )
    if not 1 <= threshold <= len(distinct):
        raise errors.RequestError(
            f"the threshold must be between 1 and the number of keys ({len(distinct)}), got {threshold}",
            [errors.ErrorItem("threshold", f"1..{len(distinct)}")],
        )
    return Policy(app, distinct, threshold)


async def put(conn: store.Conn, policy: Policy, *, signer: signing.Signer | None = None) -> None:
    await store.lock_app(conn, policy.app)
    await conn.execute(
        "INSERT INTO dap_control.policies (app, keys, threshold) VALUES ($1, $2, $3)"
        " ON CONFLICT (app) DO UPDATE SET keys = EXCLUDED.keys, threshold = EXCLUDED.threshold,"
        " updated_at = now()",
        policy.app,
        [k.hex() for _, k in sorted(policy.keys.items())],
        policy.threshold,
    )
    entry = {"type": "policy", **policy.as_json(), "at": snapshots.timestamp(datetime.now(UTC))}
    await transparency.append(conn, [entry], signer=signer)


async def remove(conn: store.Conn, app: str, *, signer: signing.Signer | None = None) -> None:
    await store.lock_app(conn, app)
    if await conn.fetchval("DELETE FROM dap_control.policies WHERE app = $1 RETURNING app", app) is None:
        raise errors.NotFoundError(f"app {app} has no policy")
    entry = {
        "type": "policy",
        "app": app,
        "threshold": 0,
        "keys": [],
        "at": snapshots.timestamp(datetime.now(UTC)),
    }
    await transparency.append(conn, [entry], signer=signer)


async def get(conn: store.Executor, app: str) -> Policy | None:
    row = await conn.fetchrow("SELECT app, keys, threshold FROM dap_control.policies WHERE app = $1", app)
    if row is None:
        return None
    keys = [bytes.fromhex(k) for k in row["keys"]]
    return Policy(row["app"], {signing.key_id(k): k for k in keys}, row["threshold"])


async def listing(conn: store.Executor) -> list[Policy]:
    rows = await conn.fetch("SELECT app FROM dap_control.policies ORDER BY app")
    return [p for r in rows if (p := await get(conn, r["app"])) is not None]


async def put_promotion(
    conn: store.Conn, rule: promotions.Rule, *, signer: signing.Signer | None = None
) -> None:
    if not rule.sources or not rule.targets or set(rule.sources) & set(rule.targets):
        raise errors.RequestError(
            "a promotion names staging and production workspaces, at least one each, none in both",
            [errors.ErrorItem("workspaces", "distinct, non-empty from and to")],
        )
    await store.lock_app(conn, rule.app)
    await conn.execute(
        "INSERT INTO dap_control.promotions (app, sources, targets, after_seconds) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (app) DO UPDATE SET sources = EXCLUDED.sources, targets = EXCLUDED.targets,"
        " after_seconds = EXCLUDED.after_seconds, updated_at = now()",
        rule.app,
        list(rule.sources),
        list(rule.targets),
        int(rule.after.total_seconds()),
    )
    entry = {"type": "promotion", **rule.as_json(), "at": snapshots.timestamp(datetime.now(UTC))}
    await transparency.append(conn, [entry], signer=signer)
    await store.bump_snapshot(conn)


async def promotion_rules(conn: store.Executor) -> list[promotions.Rule]:
    rows = await conn.fetch(
        "SELECT app, sources, targets, after_seconds FROM dap_control.promotions ORDER BY app"
    )
    return [
        promotions.Rule(
            r["app"], tuple(r["sources"]), tuple(r["targets"]), timedelta(seconds=r["after_seconds"])
        )
        for r in rows
    ]
