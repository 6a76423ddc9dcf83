"""Convergence phases, decisions, backoff and the evidence buffer: pure logic, no server."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from dap.resource_pod import backoff, converging, documents, errors, evidence, loading, settings
from dap.resource_pod.converging import Phase

POLICY = backoff.Backoff(base=1.0, factor=2.0, cap=10.0, jitter=0.0)


def dep(sha: str, artifact: str | None = None) -> documents.Deployment:
    return {
        "workspace_id": "w",
        "artifact_id": artifact or f"art-{sha}",
        "sha256": sha * 64,
        "cluster_id": None,
    }


def version(d: documents.Deployment, number: int = 1) -> converging.Version:
    return converging.Version(d["artifact_id"], d["sha256"], number, "app")


def converge(status: converging.Status, d: documents.Deployment, number: int = 1) -> converging.Status:
    status = converging.fetched(status, d)
    status = converging.verified(status, "key")
    return converging.loaded(status, version(d, number))


@pytest.mark.parametrize(
    ("current", "nxt", "ok"),
    [
        pytest.param(None, Phase.FETCHED, True, id="start-fetched"),
        pytest.param(None, Phase.VERIFIED, False, id="start-verified"),
        pytest.param(Phase.UP_TO_DATE, Phase.FETCHED, True, id="up-fetched"),
        pytest.param(Phase.FAILED, Phase.FETCHED, True, id="failed-retry"),
        pytest.param(Phase.FETCHED, Phase.VERIFIED, True, id="fetched-verified"),
        pytest.param(Phase.FETCHED, Phase.LOADED, False, id="skip-verify"),
        pytest.param(Phase.VERIFIED, Phase.LOADED, True, id="verified-loaded"),
        pytest.param(Phase.UP_TO_DATE, Phase.FAILED, False, id="up-failed"),
        pytest.param(Phase.LOADED, Phase.FAILED, True, id="loaded-failed"),
        pytest.param(Phase.LOADED, Phase.ROLLED_BACK, True, id="loaded-rolled-back"),
        pytest.param(Phase.VERIFIED, Phase.ROLLED_BACK, False, id="verified-rolled-back"),
        pytest.param(Phase.ROLLED_BACK, Phase.UP_TO_DATE, True, id="rolled-back-up"),
    ],
)
def test_moves_follow_the_spec_table(current: Phase | None, nxt: Phase, ok: bool) -> None:
    assert converging.allowed(current, nxt) is ok
    if not ok:
        with pytest.raises(AssertionError):
            converging.check_move(current, nxt)


def test_decide_up_to_date_converge_and_idle() -> None:
    v1, v2 = dep("a"), dep("b")
    status = converge(converging.Status(), v1)
    assert converging.decide(status, None, 0.0) == converging.Idle()
    assert converging.decide(status, v1, 0.0) == converging.UpToDate(v1)
    assert converging.decide(status, v2, 0.0) == converging.Converge(v2)
    assert converging.decide(converging.Status(), v1, 0.0) == converging.Converge(v1)


def test_a_failed_artifact_backs_off_and_is_retried_later() -> None:
    v1, v2 = dep("a"), dep("b")
    status = converge(converging.Status(), v1)
    status = converging.fetched(status, v2)
    status = converging.failed(status, "bad hash", now=100.0, policy=POLICY)
    assert status.phase is Phase.FAILED
    assert status.running == version(v1), "the old version keeps serving"
    assert status.failure is not None and status.failure.count == 1
    assert converging.decide(status, v2, 100.5) == converging.BackOff(v2, 101.0)
    assert converging.decide(status, v2, 101.0) == converging.Converge(v2)
    # a second failure of the same artifact doubles the delay
    status = converging.failed(converging.fetched(status, v2), "again", now=101.0, policy=POLICY)
    assert status.failure is not None and (status.failure.count, status.failure.retry_at) == (2, 103.0)
    # a different desired artifact is not held back by the failure of another
    assert converging.decide(status, dep("c"), 101.5) == converging.Converge(dep("c"))
    # success clears the failure
    status = converging.loaded(converging.verified(converging.fetched(status, v2), "k"), version(v2, 2))
    assert status.failure is None and status.previous == version(v1)


def test_rolled_back_restores_the_previous_version() -> None:
    v1, v2 = dep("a"), dep("b")
    status = converge(converge(converging.Status(), v1), v2, 2)
    assert status.running == version(v2, 2)
    status = converging.rolled_back(status, "probe failed", now=0.0, policy=POLICY)
    assert status.phase is Phase.ROLLED_BACK
    assert status.running == version(v1)
    assert converging.reported(status) == (v2["artifact_id"], v2["sha256"])
    assert isinstance(converging.decide(status, v2, 0.5), converging.BackOff)
    assert converging.decide(status, v1, 0.5) == converging.UpToDate(v1)


def test_snapshot_version_only_grows() -> None:
    status = converging.accept_snapshot(converging.Status(), 5)
    assert converging.accept_snapshot(status, 3).snapshot_version == 5
    assert converging.accept_snapshot(status, 6).snapshot_version == 6


def test_changed_reports_each_step_once() -> None:
    v1 = dep("a")
    s0 = converging.Status()
    s1 = converging.fetched(s0, v1)
    assert converging.changed(s0, s1)
    s2 = converging.up_to_date(converge(s0, v1), v1)
    assert not converging.changed(s2, converging.up_to_date(s2, v1))
    f1 = converging.failed(converging.fetched(s2, dep("b")), "x", now=0, policy=POLICY)
    f2 = converging.failed(converging.fetched(f1, dep("b")), "x", now=5, policy=POLICY)
    assert converging.changed(f1, f2), "a repeated failure is reported with its new count"
    assert converging.Status().as_json()["phase"] is None
    assert s2.as_json()["artifact_id"] == v1["artifact_id"]


@pytest.mark.parametrize(
    ("failures", "delay"),
    [
        pytest.param(0, 0.0, id="none"),
        pytest.param(1, 1.0, id="first"),
        pytest.param(3, 4.0, id="third"),
        pytest.param(50, 10.0, id="capped"),
    ],
)
def test_backoff_grows_and_caps(failures: int, delay: float) -> None:
    assert POLICY.delay(failures) == delay


def test_backoff_jitter_stays_within_its_fraction() -> None:
    policy = backoff.Backoff(base=10.0, jitter=0.2)
    assert policy.delay(1, 0.0) == pytest.approx(8.0)
    assert policy.delay(1, 1.0) == pytest.approx(12.0)


def test_backoff_within_a_limit_never_exceeds_it() -> None:
    policy = backoff.Backoff(base=5.0, cap=300.0, jitter=0.1).within(2.0)
    assert max(policy.delay(n, spread) for n in range(1, 30) for spread in (0.0, 0.5, 1.0)) <= 2.0
    assert policy.delay(1, 0.0) == pytest.approx(1.8), "jitter still spreads pods below the limit"


def test_artifact_retry_is_bounded_by_the_pull_interval(tmp_path: Path) -> None:
    """The pod's default backoff (5 s doubling to 5 min) must not outlast a 10 s dev interval."""
    config = settings.Settings(
        control_url="http://127.0.0.1:1",
        workspace="w",
        state_dir=tmp_path,
        pull_interval=10.0,
        fetch_keys=True,
        dev=True,
    )
    status = converging.Status()
    for n in range(12):
        status = converging.failed(
            converging.fetched(status, dep("b")), "bad", now=n, policy=config.artifact_retry, spread=1.0
        )
        assert status.failure is not None and status.failure.retry_at - n <= 10.0


def test_buffer_is_bounded_and_keeps_order() -> None:
    buffer = evidence.Buffer(capacity=3)
    now = datetime.now(UTC)
    records = [
        evidence.health("healthy", {"n": str(i)}, workspace="w", cluster=None, pod="p", at=now)
        for i in range(5)
    ]
    for r in records:
        buffer.add(r)
    assert len(buffer) == 3 and buffer.dropped == 2
    batch = buffer.take(2)
    assert batch == records[2:4]
    buffer.put_back(batch)
    assert buffer.peek() == records[2:]
    with pytest.raises(ValueError, match="capacity"):
        evidence.Buffer(0)


def test_a_deploy_status_needs_a_target() -> None:
    assert (
        evidence.deploy_status(converging.Status(), workspace="w", cluster=None, at=datetime.now(UTC)) is None
    )
    violation = evidence.violation(
        errors.SnapshotExpired(""), workspace="w", cluster=None, at=datetime.now(UTC)
    )
    assert violation["detail"] == "SnapshotExpired" and violation["kind"] == "freeze"


async def test_an_artifact_declaring_a_provider_the_server_could_not_use_fails_its_load() -> None:
    # the pod keeps serving what it served and says why, instead of answering 500 to every request
    files = {
        "ws.yaml": b"apiVersion: dap.io/v1\nkind: Workspace\nmetadata: {name: acme}\nspec:\n  auth:\n"
        b"    providers:\n"
        b"      corp: {issuer: 'https://id.example.com', client_id: dap, algorithms: [HS256]}\n"
    }
    with pytest.raises(errors.LoadError, match=r"spec\.auth\.providers\.corp\.algorithms: .*HS256"):
        await loading.catalog_for(files)
