"""Where ``dap dev`` keeps the data of each spec directory, and how ``--reset`` forgets it.

One embedded Postgres cluster serves every spec (``<data-dir>/pg``: one initdb, one server), but
each spec *directory* gets a database of its own (``dev_<name>_<hash>``) and a pod state
directory of its own (``<data-dir>/specs/<name>-<hash>/pod``); the hash is of the resolved path.
So ``make dev SPEC=another`` meets an empty schema instead of the tables of the previous spec —
whose columns it would otherwise have to drop, which the pod never does on its own — and the
pod never restores the previous spec's artifact at boot. Going back to a spec finds its data.

A copy of a spec in another directory is another spec here: its own data, no clash with the
original's. The signing key stays shared (``<data-dir>/control-signing.key``): it identifies the
local control plane, not a spec.

With ``--dsn`` the given database is used as it is, for everything: it is the caller's, so
``dap dev`` neither creates databases beside it nor drops anything in it.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from dap import embedded
from dap.resource_pod import errors

_UNSAFE = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class Place:
    """The data of one spec directory."""

    spec_dir: Path  # resolved
    key: str  # "<name>-<hash>": the folder under <data-dir>/specs
    database: str  # "dev_<name>_<hash>": a Postgres identifier, never quoted wrong
    pod_state: Path


def place_for(spec_dir: Path, data_dir: Path) -> Place:
    resolved = spec_dir.resolve()
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:8]
    name = _UNSAFE.sub("_", resolved.name.lower()).strip("_")[:24] or "spec"
    key = f"{name}-{digest}"
    return Place(
        spec_dir=resolved,
        key=key,
        database=f"dev_{name}_{digest}",
        pod_state=data_dir / "specs" / key / "pod",
    )


async def _admin(server_dsn: str) -> asyncpg.Connection:
    try:
        return await asyncpg.connect(server_dsn)
    except (OSError, asyncpg.PostgresError) as exc:
        raise errors.ConfigError(f"cannot reach the embedded Postgres: {type(exc).__name__}: {exc}") from exc


async def ensure_database(server_dsn: str, place: Place) -> str:
    """Create the spec's database unless it exists; return its DSN."""
    conn = await _admin(server_dsn)
    try:
        found = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", place.database)
        if not found:
            await conn.execute(f'CREATE DATABASE "{place.database}"')
            # A new database is written to the WAL; checkpoint now, once, rather than in the
            # shutdown checkpoint of the first Ctrl-C (seconds on a busy laptop).
            await conn.execute("CHECKPOINT")
    finally:
        await conn.close()
    return embedded.dsn_for_database(server_dsn, place.database)


async def reset(server_dsn: str, place: Place) -> bool:
    """Forget the spec's data: drop its database, remove its pod state. ``True`` if any existed."""
    conn = await _admin(server_dsn)
    try:
        existed = bool(await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", place.database))
        # FORCE: a dap dev killed with -9 may have left connections behind
        await conn.execute(f'DROP DATABASE IF EXISTS "{place.database}" WITH (FORCE)')
    finally:
        await conn.close()
    state = place.pod_state.parent
    if state.exists():
        shutil.rmtree(state)
        existed = True
    return existed
