"""Cluster-mode cache in Postgres: trusted region keys, the region snapshot, cached artifacts.

A cluster keeps serving pods while its region is down, across its own restarts too, so the last
verified snapshot and every artifact it names are persisted here. Artifacts share the
``artifacts`` table with region mode: a cached envelope is stored only after its signature and
hashes verified, and is served byte for byte as the region signed it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from dap.control.ids import KeyId
from dap.control.storage import store


async def trusted_keys(conn: store.Executor) -> dict[KeyId, bytes]:
    rows = await conn.fetch("SELECT key_id, public_key FROM dap_control.trusted_keys")
    return {KeyId(r["key_id"]): bytes(r["public_key"]) for r in rows}


async def add_trusted_keys(conn: store.Executor, keys: dict[KeyId, bytes]) -> None:
    await conn.executemany(
        "INSERT INTO dap_control.trusted_keys (key_id, public_key) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        list(keys.items()),
    )


async def region_snapshot(conn: store.Executor) -> tuple[str, bytes] | None:
    row = await conn.fetchrow("SELECT etag, body FROM dap_control.region_snapshot")
    return (row["etag"], bytes(row["body"])) if row else None


async def save_region_snapshot(conn: store.Executor, etag: str, body: bytes) -> None:
    await conn.execute(
        "INSERT INTO dap_control.region_snapshot (etag, body) VALUES ($1, $2)"
        " ON CONFLICT (singleton) DO UPDATE"
        " SET etag = EXCLUDED.etag, body = EXCLUDED.body, fetched_at = now()",
        etag,
        body,
    )


async def cached_artifact_ids(conn: store.Executor) -> set[str]:
    rows = await conn.fetch("SELECT artifact_id FROM dap_control.artifacts")
    return {r["artifact_id"] for r in rows}


async def cache_artifact(
    conn: store.Conn, envelope: dict[str, Any], body: bytes, sizes: dict[str, int]
) -> None:
    """Store a verified envelope fetched from the region (no-op when already cached)."""
    async with conn.transaction():
        exists = await conn.fetchval(
            "SELECT 1 FROM dap_control.artifacts WHERE artifact_id = $1", envelope["artifact_id"]
        )
        if exists:
            return
        await store.insert_artifact(
            conn,
            artifact_id=envelope["artifact_id"],
            app=envelope["app"],
            version=envelope["version"],
            sha256=envelope["sha256"],
            signing_key_id=envelope["signing_key_id"],
            envelope=body,
            files=[(f["path"], f["sha256"], sizes[f["path"]]) for f in envelope["files"]],
            created_at=_parse_time(envelope["created_at"]),
        )


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def snapshot_version(body: bytes) -> int:
    version: int = json.loads(body)["version"]
    return version
