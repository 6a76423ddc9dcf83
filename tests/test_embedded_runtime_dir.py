"""pgserver's runtime directory where platformdirs refuses every default (a pod's emptyDir)."""

from __future__ import annotations

import stat
from pathlib import Path

import platformdirs
import pytest

from dap import embedded


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
