"""The transparency log in Postgres: append, sign tree heads, answer proofs (``dap.config.tlog``).

Appends are serialised by one advisory lock held until the end of the caller's transaction, so
a registration and its log entry commit together or not at all, and leaf indices never have
gaps. Each append stores the leaf's exact bytes, the leaf hash and every perfect subtree the
leaf completes (``tlog.completed_by``: one row per level whose right edge it is, so at most
``log2 n``), then signs a tree head when a signer is at hand. A proof reads only the
``O(log n)`` stored subtrees it folds (``tlog.range_nodes``), never the leaves, so it costs
the same at a thousand entries as at a million.

Processes without the signing key (``dap control revoke --db``, freezes, policies) append
without signing; the serving control signs the head of the new size when it reloads on the
change notification, and ``ensure_head`` signs one on demand, so every size that is ever served
has its signed head in ``log_heads``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dap.config import tlog
from dap.control import errors
from dap.control.storage import schema, store
from dap.control.trust import signing, snapshots

LOCK = "dap_control.log"
MAX_ENTRIES_PAGE = 1000


@dataclass(frozen=True)
class Head:
    tree_size: int
    root: bytes
    body: bytes  # the signed head document, canonical JSON

    def as_json(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.body)
        return document


async def lock(conn: store.Conn) -> None:
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", LOCK)


def _now() -> str:
    return snapshots.timestamp(datetime.now(UTC))


async def size(conn: store.Executor) -> int:
    value: int = await conn.fetchval("SELECT coalesce(max(idx) + 1, 0) FROM dap_control.log_leaves")
    return value


async def nodes(conn: store.Executor, wanted: Iterable[tlog.Node]) -> dict[tlog.Node, bytes]:
    keys = sorted(set(wanted))
    if not keys:
        return {}
    # One primary-key probe per wanted node (LATERAL ... LIMIT 1 keeps the planner from a hash
    # join over the whole table, whose size is the log's).
    rows = await conn.fetch(
        "SELECT w.level, w.idx, n.hash FROM unnest($1::smallint[], $2::bigint[]) AS w(level, idx)"
        " CROSS JOIN LATERAL (SELECT hash FROM dap_control.log_nodes"
        " WHERE level = w.level AND idx = w.idx LIMIT 1) n",
        [level for level, _ in keys],
        [index for _, index in keys],
    )
    return {(r["level"], r["idx"]): bytes(r["hash"]) for r in rows}


async def _hashes(conn: store.Executor, ranges: Sequence[tlog.Range]) -> list[bytes]:
    found = await nodes(conn, tlog.nodes_for(ranges))
    try:
        return tlog.hashes_for(ranges, found)
    except KeyError as exc:
        raise errors.ControlError(f"the log is missing subtree {exc.args[0]}: the store is damaged") from exc


async def root(conn: store.Executor, tree_size: int) -> bytes:
    return (await _hashes(conn, [(0, tree_size)]))[0] if tree_size else tlog.EMPTY_ROOT


async def append(
    conn: store.Conn, entries: Sequence[Mapping[str, Any]], *, signer: signing.Signer | None
) -> list[int]:
    """Append entries (in the caller's transaction); return their indices.

    Every entry has ``type``; ``app`` and ``artifact_id`` are indexed when present.
    """
    await lock(conn)
    start = await size(conn)
    new: dict[tlog.Node, bytes] = {}
    lefts = await nodes(
        conn, {left for i in range(start, start + len(entries)) for _, left, _ in tlog.completed_by(i)}
    )
    rows: list[tuple[int, str, str | None, str | None, bytes]] = []
    for offset, entry in enumerate(entries):
        index = start + offset
        data = tlog.entry_data(entry)
        new[(0, index)] = tlog.leaf_hash(data)
        for node, left, right in tlog.completed_by(index):
            new[node] = tlog.node_hash(new.get(left) or lefts[left], new[right])
        app, artifact = entry.get("app"), entry.get("artifact_id")
        rows.append(
            (
                index,
                str(entry["type"]),
                app if isinstance(app, str) else None,
                artifact if isinstance(artifact, str) else None,
                data,
            )
        )
    await conn.copy_records_to_table(
        "log_leaves",
        schema_name="dap_control",
        columns=["idx", "kind", "app", "artifact_id", "data"],
        records=rows,
    )
    await conn.copy_records_to_table(
        "log_nodes",
        schema_name="dap_control",
        columns=["level", "idx", "hash"],
        records=[(level, index, digest) for (level, index), digest in sorted(new.items())],
    )
    if signer is not None:
        await sign_head(conn, signer, start + len(entries))
    await conn.execute("SELECT pg_notify($1, 'log')", schema.NOTIFY_CHANNEL)
    return [start + i for i in range(len(entries))]


async def sign_head(conn: store.Conn, signer: signing.Signer, tree_size: int) -> Head:
    """Sign and store the head of ``tree_size`` unless one is stored; return the stored one."""
    existing = await head_at(conn, tree_size)
    if existing is not None:
        return existing
    digest = await root(conn, tree_size)
    body = signing.canonical_json(signer.sign(tlog.head_document(tree_size, digest, _now())))
    await conn.execute(
        "INSERT INTO dap_control.log_heads (tree_size, root_hash, head) VALUES ($1, $2, $3)"
        " ON CONFLICT (tree_size) DO NOTHING",
        tree_size,
        digest,
        body,
    )
    stored = await head_at(conn, tree_size)
    assert stored is not None
    return stored


def _head(row: Any) -> Head:
    return Head(int(row["tree_size"]), bytes(row["root_hash"]), bytes(row["head"]))


async def head_at(conn: store.Executor, tree_size: int) -> Head | None:
    row = await conn.fetchrow(
        "SELECT tree_size, root_hash, head FROM dap_control.log_heads WHERE tree_size = $1", tree_size
    )
    return _head(row) if row else None


async def latest_head(conn: store.Executor) -> Head | None:
    row = await conn.fetchrow(
        "SELECT tree_size, root_hash, head FROM dap_control.log_heads ORDER BY tree_size DESC LIMIT 1"
    )
    return _head(row) if row else None


async def ensure_head(pool: store.Pool, signer: signing.Signer) -> Head:
    """The signed head of the log as it is now (signing it if the last append was unsigned)."""
    async with pool.acquire() as conn:
        current = await size(conn)
        head = await latest_head(conn)
        if head is not None and head.tree_size >= current:
            return head
        async with conn.transaction():
            await lock(conn)
            return await sign_head(conn, signer, await size(conn))


@dataclass(frozen=True)
class Leaf:
    index: int
    kind: str
    data: bytes

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "entry": json.loads(self.data),
            "leaf_hash": tlog.leaf_hash(self.data).hex(),
        }


def _leaf(row: Any) -> Leaf:
    return Leaf(int(row["idx"]), str(row["kind"]), bytes(row["data"]))


async def leaf(conn: store.Executor, index: int) -> Leaf | None:
    row = await conn.fetchrow("SELECT idx, kind, data FROM dap_control.log_leaves WHERE idx = $1", index)
    return _leaf(row) if row else None


async def registration_leaf(conn: store.Executor, artifact_id: str) -> Leaf | None:
    row = await conn.fetchrow(
        "SELECT idx, kind, data FROM dap_control.log_leaves WHERE artifact_id = $1 AND kind = 'register'"
        " ORDER BY idx LIMIT 1",
        artifact_id,
    )
    return _leaf(row) if row else None


async def leaves(
    conn: store.Executor, *, start: int, end: int, app: str | None = None, limit: int = MAX_ENTRIES_PAGE
) -> list[Leaf]:
    rows = await conn.fetch(
        "SELECT idx, kind, data FROM dap_control.log_leaves WHERE idx >= $1 AND idx < $2"
        " AND ($3::text IS NULL OR app = $3) ORDER BY idx LIMIT $4",
        start,
        end,
        app,
        limit,
    )
    return [_leaf(r) for r in rows]


async def inclusion(conn: store.Executor, index: int, tree_size: int) -> list[bytes]:
    try:
        ranges = tlog.inclusion_ranges(index, tree_size)
    except tlog.ProofError as exc:
        raise errors.RequestError(str(exc)) from exc
    return await _hashes(conn, ranges)


async def consistency(conn: store.Executor, old_size: int, tree_size: int) -> list[bytes]:
    try:
        ranges = tlog.consistency_ranges(old_size, tree_size)
    except tlog.ProofError as exc:
        raise errors.RequestError(str(exc)) from exc
    return await _hashes(conn, ranges)


# --- the entries ---------------------------------------------------------------------------------


def registration_entry(
    *, app: str, version: int, artifact_id: str, sha256: str, envelope: bytes, key_id: str, at: datetime
) -> dict[str, Any]:
    """The leaf of a registration: what a pod checks against the envelope bytes it fetched."""
    return {
        "type": "register",
        "app": app,
        "version": version,
        "artifact_id": artifact_id,
        "sha256": sha256,
        "envelope_sha256": hashlib.sha256(envelope).hexdigest(),
        "signing_key_id": key_id,
        "at": snapshots.timestamp(at),
    }


def revocation_entry(*, app: str, version: int, artifact_id: str, at: datetime) -> dict[str, Any]:
    return {
        "type": "revoke",
        "app": app,
        "version": version,
        "artifact_id": artifact_id,
        "at": snapshots.timestamp(at),
    }


def key_entry(public_key: bytes, at: datetime) -> dict[str, Any]:
    return {
        "type": "key",
        "key_id": signing.key_id(public_key),
        "public_key": public_key.hex(),
        "algorithm": signing.ALGORITHM,
        "at": snapshots.timestamp(at),
    }


async def record_key(pool: store.Pool, signer: signing.Signer) -> None:
    """Log this control's signing key the first time it serves (a key change is a log entry)."""
    async with pool.acquire() as conn, conn.transaction():
        await lock(conn)
        known = await conn.fetch("SELECT data FROM dap_control.log_leaves WHERE kind = 'key'")
        if any(json.loads(r["data"]).get("key_id") == signer.key_id for r in known):
            await sign_head(conn, signer, await size(conn))
            return
        await append(conn, [key_entry(signer.public_key, datetime.now(UTC))], signer=signer)


async def backfill(pool: store.Pool, signer: signing.Signer) -> int:
    """Log the artifacts registered before the log existed (oldest first); return how many."""
    async with pool.acquire() as conn, conn.transaction():
        await lock(conn)
        rows = await conn.fetch(
            "SELECT a.artifact_id, a.app, a.version, a.sha256, a.signing_key_id, a.envelope, a.created_at"
            " FROM dap_control.artifacts a WHERE NOT EXISTS (SELECT 1 FROM dap_control.log_leaves l"
            " WHERE l.artifact_id = a.artifact_id AND l.kind = 'register')"
            " ORDER BY a.created_at, a.app, a.version"
        )
        if rows:
            await append(
                conn,
                [
                    registration_entry(
                        app=r["app"],
                        version=r["version"],
                        artifact_id=r["artifact_id"],
                        sha256=r["sha256"],
                        envelope=bytes(r["envelope"]),
                        key_id=r["signing_key_id"],
                        at=r["created_at"],
                    )
                    for r in rows
                ],
                signer=signer,
            )
        return len(rows)
