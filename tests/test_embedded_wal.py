"""The embedded Postgres runs with ``wal_level=logical`` (events as WAL messages, issue 46): a new
data directory from its first start, and one made before (``replica``) from its next start."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dap import embedded


def _show(server: object, name: str) -> str:
    return embedded._shown(server)[name]


def test_changes_names_only_what_differs() -> None:
    assert embedded.changes(dict(embedded.SETTINGS)) == {}
    assert embedded.changes({**embedded.SETTINGS, "wal_level": "replica"}) == {"wal_level": "logical"}
    assert set(embedded.changes({})) == set(embedded.SETTINGS)


def test_a_data_directory_made_without_logical_gets_it_on_its_next_start(tmp_path: Path) -> None:
    data = tmp_path / "pg"
    _dsn, server = embedded.start(data)
    try:
        assert _show(server, "wal_level") == "logical"
        assert _show(server, "max_slot_wal_keep_size") == "1GB"
        # as a data directory of before issue 46 was: replica, no bound on a slot's WAL
        server.psql("ALTER SYSTEM SET wal_level = 'replica';\nALTER SYSTEM RESET max_slot_wal_keep_size;\n")
    finally:
        embedded.stop(server, data)
    auto = (data / "postgresql.auto.conf").read_text()
    assert "wal_level = 'replica'" in auto
    _dsn, server = embedded.start(data)
    try:
        assert _show(server, "wal_level") == "logical"
        assert _show(server, "max_slot_wal_keep_size") == "1GB"
        out = server.psql("SELECT pg_create_logical_replication_slot('probe', 'pgoutput');\n")
        assert "probe" in out
        server.psql("SELECT pg_drop_replication_slot('probe');\n")
    finally:
        embedded.stop(server, data)
    assert not (data / "postmaster.pid").exists()


def test_serving_events_as_wal_messages_refuses_a_postgres_without_logical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``DAP_EVENTS_SOURCE=wal`` against ``wal_level=replica``: the boot is refused, saying what
    to set; the outbox (the default) boots on the same server."""
    import pgserver
    from pgserver import postgres_server

    from dap import config
    from dap.server import booting, errors
    from dap.server.catalog import Catalog
    from dap.server.storage import db

    data = tmp_path / "pg"
    data.mkdir()
    server = pgserver.get_server(data, cleanup_mode="stop")  # not embedded.start: it would fix it
    try:
        server.psql("ALTER SYSTEM SET wal_level = 'replica';\n")
        postgres_server.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=data, user=server.system_user)
        assert _show(server, "wal_level") == "replica"
        catalog = Catalog.from_spec(config.load_files(FILES))

        async def boot() -> None:
            pool = await db.open_pool(server.get_uri(), 2)
            try:
                await booting.prepare_database(pool, catalog)
            finally:
                await pool.close()

        monkeypatch.setenv("DAP_EVENTS_SOURCE", "wal")
        with pytest.raises(errors.BootRefused, match="wal_level=logical") as refused:
            asyncio.run(boot())
        assert "wal_level=replica" in str(refused.value)
        # the same through the command users run: one line saying what to set, no traceback
        spec = tmp_path / "spec"
        spec.mkdir()
        for name, text in FILES.items():
            (spec / name.replace("/", "-")).write_text(text)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DAP_")}
        env.update(
            {
                "DAP_DSN": server.get_uri(),
                "DAP_JWT_SECRET": "s" * 32,
                "DAP_CORS_ORIGIN": "http://localhost",
                "DAP_EVENTS_SOURCE": "wal",
            }
        )
        dap = str(Path(sys.executable).parent / "dap")
        done = subprocess.run(
            [dap, "serve", "--spec", str(spec), "--addr", "127.0.0.1:0", "--metrics-addr", ""],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr and "wal_level=logical" in done.stderr
        monkeypatch.setenv("DAP_EVENTS_SOURCE", "outbox")
        asyncio.run(boot())
    finally:
        embedded.stop(server, data)


FILES = {
    "kx/module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: kx}\nspec: {title: K}\n",
    "kx/item.yaml": (
        "apiVersion: dap.io/v1\nkind: Entity\nmetadata: {name: item, module: kx}\n"
        "spec:\n  fields:\n    - {name: title, type: string}\n"
    ),
}
