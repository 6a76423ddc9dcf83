"""The embedded Postgres's directories: pgserver's runtime directory where platformdirs refuses
every default (a pod's emptyDir), and a data directory its user cannot reach."""

from __future__ import annotations

import os
import pwd
import stat
import struct
import subprocess
from pathlib import Path

import platformdirs
import pytest

from dap import embedded
from tests.devsessions import REPO, DevSession


def test_a_refused_runtime_directory_is_replaced_by_a_private_one_beside_the_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_args: object, **_kwargs: object) -> Path:
        raise PermissionError("runtime directory /tmp/runtime-10001 is below /tmp, writable by another user")

    monkeypatch.setattr(platformdirs, "user_runtime_path", refuse)
    embedded._runtime_dir_beside(tmp_path / "pg")
    path = platformdirs.user_runtime_path("python_PostgresServer")
    assert path == (tmp_path / "pg.run" / "python_PostgresServer").resolve()
    assert not (tmp_path / "pg").exists()  # initdb wants the data directory empty
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_an_accepted_runtime_directory_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def accept(appname: str | None = None, *_args: object, **_kwargs: object) -> Path:
        return tmp_path / "xdg" / (appname or "")

    monkeypatch.setattr(platformdirs, "user_runtime_path", accept)
    embedded._runtime_dir_beside(tmp_path / "pg")
    assert platformdirs.user_runtime_path("x") == tmp_path / "xdg" / "x"
    assert not (tmp_path / "pg.run").exists()


# --- a data directory the embedded Postgres's user cannot reach (issue 40 row 22) ----------------

PGSERVER_USER = "pgserver"  # the user pgserver runs Postgres as when started by root


def _deny(directory: Path, uid: int) -> None:
    """A POSIX ACL on ``directory`` refusing the user ``uid`` everything (others keep r-x): no
    chmod that pgserver makes lets that user in, as on a share that squashes or maps users."""
    entries = [(0x01, 7, -1), (0x02, 0, uid), (0x04, 5, -1), (0x10, 5, -1), (0x20, 5, -1)]
    body = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i & 0xFFFFFFFF) for t, p, i in entries)
    os.setxattr(directory, "system.posix_acl_access", body)


def _postgres_of(data_dir: Path) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "postgres" in line and str(data_dir) in line]


def test_dev_with_a_data_directory_postgres_cannot_reach_says_which_and_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root starts the embedded Postgres as another user (pgserver)")
    try:
        uid = pwd.getpwnam(PGSERVER_USER).pw_uid
    except KeyError:
        pytest.skip(f"no user {PGSERVER_USER} yet (pgserver makes it on its first start as root)")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o755)
    try:
        _deny(locked, uid)
    except OSError as exc:
        pytest.skip(f"this file system takes no POSIX ACL ({exc.strerror}): the case cannot be made")
    data_dir = locked / ".dap"
    session = DevSession("--spec", str(REPO / "examples" / "procurement"), "--no-seed", data_dir=data_dir)
    with session:
        code = session.process.wait(timeout=120)
        session._reader.join(timeout=5)
    said = session.output
    assert code == 1, said
    assert f"cannot enter {locked}" in said, said
    assert PGSERVER_USER in said and "--data-dir" in said, said  # whose access, and what to do
    assert "cannot listen" not in said, said
    assert _postgres_of(data_dir) == [], "an embedded Postgres was left running"
