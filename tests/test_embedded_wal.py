"""The embedded Postgres runs with ``wal_level=logical`` (events as WAL messages, issue 46): a new
data directory from its first start, and one made before (``replica``) from its next start."""

from __future__ import annotations

from pathlib import Path

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
