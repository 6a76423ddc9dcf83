"""The state directory (atomic writes, malformed files) and the pod's settings rules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dap.resource_pod import documents, errors, persisting, settings, verifying

DEPLOYMENT: documents.Deployment = {
    "workspace_id": "w",
    "artifact_id": "art-1",
    "sha256": "a" * 64,
    "cluster_id": None,
}
KEY = bytes(range(32))


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    state = persisting.StateDir(tmp_path, "w")
    assert state.load() is None
    state.save({"artifact_id": "art-1", "files": []}, DEPLOYMENT, 4)
    saved = state.load()
    assert saved is not None
    assert (saved.envelope["artifact_id"], saved.deployment, saved.snapshot_version) == (
        "art-1",
        DEPLOYMENT,
        4,
    )
    assert [p.name for p in (tmp_path / "w").iterdir()] == ["current.json"], "no temporary file left behind"


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = persisting.StateDir(tmp_path, "w")
    state.save({"artifact_id": "art-1"}, DEPLOYMENT, 1)

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(errors.StateDirError, match="No space left"):
        state.save({"artifact_id": "art-2"}, DEPLOYMENT, 2)
    monkeypatch.undo()
    saved = state.load()
    assert saved is not None and saved.envelope["artifact_id"] == "art-1"
    assert [p.name for p in (tmp_path / "w").iterdir()] == ["current.json"]


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"{not json", id="not-json"),
        pytest.param(b'{"format": 99}', id="format"),
        pytest.param(b'{"format": 1, "envelope": [], "deployment": {}, "snapshot_version": 1}', id="shape"),
        pytest.param(b'{"format": 1, "envelope": {}, "deployment": {}, "snapshot_version": 1}', id="binding"),
    ],
)
def test_a_malformed_state_file_is_a_state_dir_error(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "current.json").write_bytes(content)
    with pytest.raises(errors.StateDirError):
        persisting.StateDir(tmp_path, "w").load()


def test_keys_round_trip(tmp_path: Path) -> None:
    state = persisting.StateDir(tmp_path, "w")
    assert state.load_keys() == {}
    keys = verifying.trusted_keys([KEY.hex()])
    state.save_keys(keys)
    assert state.load_keys() == keys


def _settings(**overrides: object) -> settings.Settings:
    values: dict[str, object] = {
        "control_url": "http://control:8443",
        "workspace": "acme",
        "state_dir": Path("/tmp/x"),
        "trusted_keys": verifying.trusted_keys([KEY.hex()]),
    }
    values.update(overrides)
    return settings.Settings(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param({"control_url": "control:8443"}, "must be an http", id="url"),
        pytest.param({"workspace": "Acme_1"}, "workspace slug", id="slug"),
        pytest.param({"pull_interval": 0.0}, "positive", id="interval"),
        pytest.param({"trusted_keys": {}}, "no trusted key", id="no-keys"),
        pytest.param({"fetch_keys": True}, "--dev only", id="fetch-without-dev"),
    ],
)
def test_settings_refuse_bad_values(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        _settings(**overrides)


def test_long_poll_waits_at_most_the_control_planes_maximum() -> None:
    assert _settings().long_poll_wait == 0.0
    assert _settings(long_poll=True, pull_interval=10.0).long_poll_wait == 10.0
    assert _settings(long_poll=True, pull_interval=300.0).long_poll_wait == settings.MAX_LONG_POLL
    assert _settings(dev=True, fetch_keys=True, trusted_keys={}).fetch_keys
