"""Shared fixtures: a real Postgres for every test that needs one.

``DAP_TEST_DSN`` wins when set (a server the caller runs). Otherwise one embedded ``pgserver``
starts per test session in a temporary directory. Each test module gets a fresh database, so
modules never see each other's tables.

Tests that need a binary ``make test`` builds in the background while the others run (the test
control plane, Dex, grpcurl, Jaeger, Prometheus: tools/background.sh) are marked ``late``: make test
runs them in a second pytest pass once those builds are done, since a wait inside a test would count
against its timeout. Run alone, they build (or wait for) what they need themselves.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from dap import embedded

ROOT = Path(__file__).resolve().parents[1]
# the test modules (or directories) that run a binary built by tools/k8s, tools/dex, tools/grpcurl,
# tools/jaeger or tools/prometheus
LATE = (
    "tests/kube/",
    "tests/operator/test_crds_and_kustomize.py",
    "tests/server/test_grpcurl.py",
    "tests/server/test_oidc_dex.py",
    "tests/server/test_prometheus.py",
    "tests/server/test_traces_jaeger.py",
    "tests/ui/test_sign_in.py",
)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.relative_to(ROOT).as_posix().startswith(LATE):
            item.add_marker(pytest.mark.late)


@pytest.fixture(scope="session")
def pg_server_dsn() -> Iterator[str]:
    """DSN of the Postgres server used by this test session (its maintenance database)."""
    given = os.environ.get("DAP_TEST_DSN")
    if given:
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="dap-pg-") as tmp:
        data_dir = Path(tmp) / "data"
        dsn, server = embedded.start(data_dir)
        try:
            yield dsn
        finally:
            embedded.stop(server, data_dir)


async def create_database(server_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(server_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def drop_database(server_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(server_dsn)
    try:  # its events' replication slots first (DAP_EVENTS_SOURCE=wal): they keep a database
        # a slot a walsender streams (``walstream``) cannot be dropped: end those first
        await conn.execute(
            "SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots "
            "WHERE database = $1 AND active_pid IS NOT NULL",
            name,
        )
        await conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1", name
        )
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def new_database(server_dsn: str) -> tuple[str, str]:
    """Create a new empty database on the server; return ``(name, dsn)``."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    await create_database(server_dsn, name)
    return name, embedded.dsn_for_database(server_dsn, name)


def fresh_database(server_dsn: str) -> tuple[str, str]:
    """``new_database`` for synchronous callers (module-scoped fixtures)."""
    import asyncio

    return asyncio.run(new_database(server_dsn))


@pytest.fixture(scope="module")
def pg_dsn(pg_server_dsn: str) -> Iterator[str]:
    """DSN of a fresh, empty database for this test module."""
    import asyncio

    name, dsn = fresh_database(pg_server_dsn)
    yield dsn
    asyncio.run(drop_database(pg_server_dsn, name))
