"""Embedded Postgres for laptops, tests and benchmarks.

Postgres is the only database of dap. Where no DSN is given, an embedded server from the
``pgserver`` package starts in a data directory (by default under ``.dap/``). pgserver is an
optional dependency (``dap[embedded]``): production images always receive a DSN, so the import
happens only when the embedded server is actually asked for.

Postgres never runs as root: started by root, pgserver runs it as the system user ``pgserver``
(made on first use) and opens the data directory's parents to others (``o+rx``) so that user can
reach it. Where that is not enough (an ACL, a share that maps users), a failed start names the
directory that user cannot enter and what to do, and no Postgres is left running behind it.

Events may travel as logical WAL messages (``DAP_EVENTS_SOURCE=wal``, issue 46), which needs
``wal_level=logical``; the embedded server always runs with it (:data:`SETTINGS`). A data
directory made before (``wal_level=replica``) gets the settings by ``ALTER SYSTEM`` on its next
start and is restarted once to apply them.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import warnings
from pathlib import Path
from typing import Any

DEFAULT_DATA_DIR = Path(".dap") / "pg"
SYSTEM_USER = "pgserver"  # whom pgserver runs Postgres as when started by root
# what the embedded server runs with: logical decoding of the events' WAL messages, and a bound on
# the WAL a slot that fell behind may keep (beyond it the slot is invalidated, never the disk full)
SETTINGS = {
    "wal_level": "logical",
    "max_replication_slots": "64",
    "max_wal_senders": "10",
    "max_slot_wal_keep_size": "1GB",
}
RESTART = frozenset({"wal_level", "max_replication_slots", "max_wal_senders"})  # need a restart


class EmbeddedPostgresError(RuntimeError):
    """The embedded Postgres could not be started."""


def _runtime_dir_beside(data_dir: Path) -> None:
    """Give pgserver a runtime directory beside the data when platformdirs refuses every other.

    pgserver asks ``platformdirs.user_runtime_path`` for its lock file's directory when it is
    imported. Recent platformdirs refuse any directory below a path writable by others, and in a
    pod every writable mount is one (an emptyDir is mode 0777): the import raised
    "PermissionError: ... set XDG_RUNTIME_DIR instead" and the control plane of the kind overlay
    never started. Only then is the lookup pointed at ``<data>.run`` (mode 0700) from then on.
    """
    try:
        import platformdirs
    except ImportError:
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            platformdirs.user_runtime_path("python_PostgresServer")
        return
    except PermissionError:
        pass
    runtime = data_dir.resolve().parent / f"{data_dir.name}.run"  # not inside: initdb wants it empty
    runtime.mkdir(mode=0o700, parents=True, exist_ok=True)

    def beside(appname: str | None = None, *_args: Any, **_kwargs: Any) -> Path:
        path = runtime / appname if appname else runtime
        path.mkdir(mode=0o700, exist_ok=True)
        return path

    setattr(platformdirs, "user_runtime_path", beside)  # noqa: B010 (read by pgserver at import)


def start(data_dir: Path = DEFAULT_DATA_DIR, database: str = "postgres") -> tuple[str, Any]:
    """Start (or reuse) an embedded server in ``data_dir``; return ``(dsn, server handle)``.

    The handle stops the server when its ``cleanup()`` is called or the process exits, unless
    another process still uses the same data directory (pgserver counts its users).
    """
    _runtime_dir_beside(data_dir)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            import pgserver
    except ImportError as exc:
        raise EmbeddedPostgresError(
            "no --dsn was given and the embedded Postgres is not installed; "
            "install 'dap[embedded]' or pass a postgresql:// DSN"
        ) from exc
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        server = pgserver.get_server(data_dir.resolve(), cleanup_mode="stop")
    except Exception as exc:  # pgserver raises bare exceptions from initdb/pg_ctl
        _stop_leftover(data_dir)
        raise EmbeddedPostgresError(_failed(data_dir, exc)) from exc
    try:
        _configure(server, data_dir)
    except Exception as exc:
        raise EmbeddedPostgresError(
            f"embedded Postgres in {data_dir} could not be configured: {exc}"
        ) from exc
    return server.get_uri(database), server


def changes(current: dict[str, str]) -> dict[str, str]:
    """The settings of :data:`SETTINGS` that ``current`` (name: value, as ``SHOW`` gives them)
    lacks. Pure."""
    return {k: v for k, v in SETTINGS.items() if current.get(k) != v}


def _shown(server: Any) -> dict[str, str]:
    names = ", ".join(f"'{k}'" for k in SETTINGS)
    out = server.psql(
        f"\\pset format unaligned\n\\pset tuples_only on\n"
        f"SELECT name || '=' || setting || coalesce(unit, '') FROM pg_settings WHERE name IN ({names});\n"
    )
    found: dict[str, str] = {}
    for line in out.splitlines():
        name, sep, value = line.partition("=")
        if sep:
            found[name] = {"1024MB": "1GB", "-1MB": "-1"}.get(value, value)
    return found


def _configure(server: Any, data_dir: Path) -> None:
    """Give the running server :data:`SETTINGS` (``ALTER SYSTEM``), restarting it once when one
    that needs a restart changed (a data directory made before they were set)."""
    wanted = changes(_shown(server))
    if not wanted:
        return
    server.psql(
        "".join(f"ALTER SYSTEM SET {k} = '{v}';\n" for k, v in wanted.items()) + "SELECT pg_reload_conf();\n"
    )
    if RESTART & wanted.keys():
        from pgserver import postgres_server

        postgres_server.pg_ctl(
            ["-w", "-m", "fast", "restart"], pgdata=data_dir.resolve(), user=server.system_user
        )


def system_user() -> str | None:
    """The user Postgres runs as, when it is not this process's own (started by root)."""
    return SYSTEM_USER if hasattr(os, "geteuid") and os.geteuid() == 0 else None


def blocked(path: Path, user: str) -> Path | None:
    """The first directory on the way to ``path`` (``/`` first, ``path`` last) that ``user``
    cannot enter, tried as that user; ``None`` when every one lets it in."""
    resolved = path.resolve()
    for directory in [*reversed(resolved.parents), resolved]:
        if not directory.is_dir():
            return None
        entered = subprocess.run(
            ["/bin/sh", "-c", 'cd -- "$1"', "sh", str(directory)], user=user, capture_output=True, check=False
        )
        if entered.returncode != 0:
            return directory
    return None


def _failed(data_dir: Path, exc: Exception) -> str:
    """Why the start failed, in one true line: the directory Postgres's user cannot reach (and
    what to do) when that is why, else pgserver's own words."""
    user = system_user()
    where = None
    if user is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            where = blocked(data_dir, user)
    if where is not None:
        return (
            f"embedded Postgres cannot use {data_dir}: it runs as the system user {user!r} (dap runs "
            f"as root, and Postgres never does), which cannot enter {where}; let that user in "
            f"(chmod o+x, or an ACL entry for {user}) or give --data-dir a directory it can reach"
        )
    return f"embedded Postgres failed to start in {data_dir}: {exc}"


def _stop_leftover(data_dir: Path) -> None:
    """A Postgres a failed start left running in ``data_dir`` (pg_ctl timed out, say), stopped:
    whatever the start says, no server outlives it."""
    try:
        if not (data_dir / "postmaster.pid").exists():
            return
    except OSError:
        pass  # unreadable to us: try the stop all the same
    with contextlib.suppress(Exception):
        from pgserver import postgres_server

        postgres_server.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir.resolve(), user=system_user())


def stop(server: Any, data_dir: Path) -> None:
    """Stop a server started by ``start``, for certain.

    pgserver stops the server only when its own registry says this process was the last user;
    anything else (a child process that imported pgserver, a registry left by a killed run) leaves
    the postmaster running after the owner is gone. So after pgserver's cleanup, a postmaster
    still recorded in ``postmaster.pid`` is stopped with ``pg_ctl stop -m fast``.
    """
    server.cleanup()
    try:
        if not (data_dir / "postmaster.pid").exists():
            return
    except OSError:
        pass  # unreadable to us (a share that maps users): pg_ctl, run as Postgres's user, can tell
    from pgserver import postgres_server

    try:
        postgres_server.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir, user=server.system_user)
    except Exception as exc:  # already stopped between the check and the call
        if (data_dir / "postmaster.pid").exists():
            raise EmbeddedPostgresError(f"embedded Postgres in {data_dir} did not stop: {exc}") from exc


_SAFE_DATABASE = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def dsn_for_database(dsn: str, database: str) -> str:
    """Return ``dsn`` pointing at another database on the same server."""
    if not _SAFE_DATABASE.fullmatch(database):
        raise ValueError(f"invalid database name {database!r}")
    head, sep, query = dsn.partition("?")
    base, _, _old = head.rpartition("/")
    return f"{base}/{database}{sep}{query}"
