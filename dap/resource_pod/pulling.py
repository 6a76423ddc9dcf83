"""The pull loop: snapshot → decision → fetch → verify → load → swap → self-check → persist.

One :class:`Pod` converges one workspace. Each cycle asks the control plane for the snapshot
(``If-None-Match``; in long-poll mode with ``wait=``), verifies it (signature, rollback, freeze)
and lets ``converging.decide`` say what it means. Converging to a new artifact runs the steps of
the spec in order, recording each outcome in the immutable ``converging.Status`` and sending a
``deploy_status`` record whenever the status changes:

- ``fetched``: the envelope was downloaded (only the artifact that changed);
- ``verified``: signature by a trusted key, the snapshot binding, every file hash, the aggregate,
  and the transparency log: the envelope is the one its registration entry records, included in
  a signed tree head that extends the last head this pod accepted (``logproof``), and the
  approvals its signing policy needs (``verifying.check_policy``);
- ``loaded``: safe schema steps applied, catalog swapped atomically (``loading``);
- then the self-check; its failure swaps the previous catalog back → ``rolled_back``;
- finally the envelope is persisted to the state directory for restarts without control.

A failing step → ``failed``; the old catalog keeps serving and the artifact is retried after a
backoff no longer than the pull interval (``Settings.artifact_retry``; the loop wakes when it
ends). A snapshot that fails verification is never acted upon and produces a ``violation``
(reported once per distinct snapshot, not on every cycle). A control plane that cannot be
reached changes nothing: the pod keeps serving and catches up on a later cycle.

The last verified snapshot is kept in memory, so a 304 still re-checks its expiry (a control
plane stuck answering 304 is a freeze too) and re-evaluates backoffs.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp import web

from dap import server, tracing
from dap.resource_pod import (
    converging,
    documents,
    errors,
    evidence,
    fetching,
    loading,
    logkeeping,
    logproof,
    persisting,
    pullmetrics,
    reporting,
    settings,
    timing,
    verifying,
)
from dap.resource_pod.documents import KeyId

log = logging.getLogger(__name__)

MIN_GAP = 0.05  # seconds between two long-poll cycles: no busy loop if the control ignores wait=
MAX_REMEMBERED = 1000  # distinct refused snapshots remembered so that each is reported once


class Pod:
    def __init__(
        self,
        *,
        config: settings.Settings,
        app: web.Application,
        session: aiohttp.ClientSession,
        trusted: dict[KeyId, bytes],
        api_url: Callable[[], str | None] = lambda: None,
        self_check: loading.SelfCheck | None = None,
    ) -> None:
        self.config = config
        self.app = app
        self.session = session
        self.client = fetching.Client(session, config.control_url, timeout=config.request_timeout)
        self.sender = reporting.Sender(
            self.client,
            capacity=config.evidence_capacity,
            interval=config.evidence_interval,
            retry=config.evidence_retry,
        )
        self.state_dir = persisting.StateDir(config.state_dir, config.workspace)
        self.trusted = dict(trusted)
        self.api_url = api_url
        self.self_check = self_check
        self.status = converging.Status()
        self.control_error: str | None = "not contacted yet"
        self.state_error: str | None = None
        self.cycles = 0
        self._etag: str | None = None
        self._snapshot: dict[str, Any] | None = None  # last verified raw snapshot
        self.transparency = logkeeping.LogKeeper(self.client, self.state_dir, self.trusted)
        self._reported: set[tuple[str, str]] = set()  # violations already sent
        self.stats = pullmetrics.PullStats()  # the pull results and refusals /metrics shows
        self._wake = asyncio.Event()
        self._last_requests = 0.0
        self._period_start = datetime.now(UTC)

    @property
    def log_head(self) -> logproof.Head | None:
        """The last tree head of the transparency log this pod accepted."""
        return self.transparency.head

    # --- status and evidence -----------------------------------------------------------------

    def _set(self, new: converging.Status) -> None:
        old, self.status = self.status, new
        if converging.changed(old, new):
            log.info(
                "convergence step",
                extra={"ctx": {"workspace": self.config.workspace, **new.as_json()}},
            )
            self.sender.add(
                evidence.deploy_status(
                    new, workspace=self.config.workspace, cluster=self.config.cluster_id, at=datetime.now(UTC)
                )
            )

    def _violation(
        self,
        error: errors.VerificationError,
        *,
        key: str | None,
        artifact_id: str | None = None,
        snapshot_version: int | None = None,
    ) -> None:
        """Log and send a violation; with a ``key``, only the first time that key is seen."""
        self.stats.violation(error.kind)
        if key is not None:
            if (error.kind, key) in self._reported:
                return
            if len(self._reported) >= MAX_REMEMBERED:
                self._reported.clear()
            self._reported.add((error.kind, key))
        log.error(
            "violation",
            extra={"ctx": {"workspace": self.config.workspace, "kind": error.kind, "detail": str(error)}},
        )
        self.sender.add(
            evidence.violation(
                error,
                workspace=self.config.workspace,
                cluster=self.config.cluster_id,
                at=datetime.now(UTC),
                artifact_id=artifact_id,
                snapshot_version=snapshot_version,
            )
        )

    def _control_failed(self, exc: errors.ControlError) -> None:
        if self.control_error != str(exc):
            log.warning(
                "control plane unavailable; serving the loaded version",
                extra={"ctx": {"workspace": self.config.workspace, "error": str(exc)}},
            )
        self.control_error = str(exc)

    # --- boot ----------------------------------------------------------------------------------

    async def restore(self) -> bool:
        """Load the artifact saved in the state directory (verified again); ``True`` if one was."""
        await self.transparency.restore()
        try:
            saved = await asyncio.to_thread(self.state_dir.load)
        except errors.StateDirError as exc:
            self.state_error = str(exc)
            log.error("state directory unreadable; starting empty", extra={"ctx": {"error": str(exc)}})
            return False
        if saved is None:
            return False
        try:
            artifact = verifying.verify_envelope(saved.envelope, self.trusted, saved.deployment)
            catalog = await loading.catalog_for(artifact.files)
            await loading.migrate(self.app, catalog)
        except errors.VerificationError as exc:
            self._violation(exc, key=f"saved:{saved.deployment['artifact_id']}")
            log.error(
                "the saved artifact fails verification; starting empty", extra={"ctx": {"error": str(exc)}}
            )
            return False
        except errors.LoadError as exc:
            log.error(
                "the saved artifact cannot be loaded; starting empty", extra={"ctx": {"error": str(exc)}}
            )
            return False
        loading.swap(self.app, catalog)
        version = converging.Version(artifact.artifact_id, artifact.sha256, artifact.version, artifact.app)
        self.status = converging.restored(self.status, version, saved.deployment, saved.snapshot_version)
        log.info(
            "restored the last verified artifact from the state directory",
            extra={"ctx": {"workspace": self.config.workspace, **self.status.as_json()}},
        )
        return True

    async def refresh_keys(self) -> bool:
        """``--dev`` only: trust the control plane's published keys (and remember them)."""
        if not self.config.fetch_keys:
            return False
        try:
            keys = await self.client.keys()
        except errors.ControlError as exc:
            self._control_failed(exc)
            return False
        new = {k: v for k, v in keys.items() if k not in self.trusted}
        if not new:
            return False
        self.trusted.update(new)
        log.info("trusting the control plane's keys (--dev)", extra={"ctx": {"key_ids": sorted(new)}})
        try:
            await asyncio.to_thread(self.state_dir.save_keys, self.trusted)
        except errors.StateDirError as exc:
            log.warning("cannot remember the keys", extra={"ctx": {"error": str(exc)}})
        return True

    # --- one cycle -----------------------------------------------------------------------------

    async def _pull(self) -> dict[str, Any] | None:
        """The snapshot to act on (new or cached), ``None`` when there is none."""
        try:
            answer = await self.client.snapshot(
                self.config.workspace,
                etag=self._etag,
                wait=min(self.config.long_poll_wait, self._until_retry()),
            )
        except errors.ControlError as exc:
            self.stats.pulled("invalid" if isinstance(exc, errors.ProtocolError) else "unreachable")
            self._control_failed(exc)
            return self._snapshot
        if self.control_error is not None:
            log.info("control plane reachable", extra={"ctx": {"url": self.config.control_url}})
        self.control_error = None
        if answer.body is None:
            self.stats.pulled("unchanged")
            return self._snapshot
        try:
            raw = documents.json_object(answer.body, "snapshot")
        except errors.ProtocolError as exc:
            self.stats.pulled("invalid")
            self._control_failed(exc)
            return self._snapshot
        self.stats.pulled("changed")
        self._etag = answer.etag
        return raw

    def _verify_snapshot(self, raw: dict[str, Any]) -> documents.Snapshot:
        return verifying.verify_snapshot(
            raw,
            self.trusted,
            running_version=self.status.snapshot_version,
            now=datetime.now(UTC),
            skew=self.config.clock_skew,
        )

    async def cycle(self) -> None:
        self.cycles += 1
        attributes = {"dap.workspace": self.config.workspace}
        with tracing.span("pod snapshot pull", kind="client", attributes=attributes):
            raw = await self._pull()
        if raw is None:
            return
        try:
            try:
                snapshot = self._verify_snapshot(raw)
            except errors.SignatureInvalid:
                if not await self.refresh_keys():
                    raise
                snapshot = self._verify_snapshot(raw)
        except errors.VerificationError as exc:
            self._etag = None  # never cache a refused snapshot
            if raw is self._snapshot:
                self._snapshot = None
            version = raw.get("version")
            self._violation(
                exc,
                key=f"snapshot:{version}:{raw.get('issued_at')}",
                snapshot_version=version
                if isinstance(version, int) and not isinstance(version, bool)
                else None,
            )
            return
        self._snapshot = raw
        self.status = converging.accept_snapshot(self.status, snapshot["version"])
        deployment = documents.deployment_for(snapshot, self.config.workspace)
        decision = converging.decide(self.status, deployment, time.monotonic())
        if isinstance(decision, converging.UpToDate):
            if self.status.phase is not converging.Phase.UP_TO_DATE:
                self._set(converging.up_to_date(self.status, decision.deployment))
        elif isinstance(decision, converging.Converge):
            with tracing.span(
                "pod converge",
                attributes={**attributes, "dap.artifact_id": decision.deployment["artifact_id"]},
            ):
                await self._converge(decision.deployment, snapshot["version"])

    async def _converge(self, deployment: documents.Deployment, snapshot_version: int) -> None:
        artifact_id = deployment["artifact_id"]
        try:
            body = await self.client.artifact(artifact_id)
            raw = documents.json_object(body, f"artifact {artifact_id}")
        except errors.ControlUnreachable as exc:
            self._control_failed(exc)  # nothing fetched: retried on the next cycle
            return
        except errors.ProtocolError as exc:  # e.g. 404/410: the control plane is up, the artifact is not
            log.warning(
                "artifact unavailable; retried on the next cycle",
                extra={
                    "ctx": {"workspace": self.config.workspace, "artifact_id": artifact_id, "error": str(exc)}
                },
            )
            return
        self._set(converging.fetched(self.status, deployment))
        try:
            try:
                artifact = verifying.verify_envelope(raw, self.trusted, deployment)
            except errors.SignatureInvalid:
                if not await self.refresh_keys():
                    raise
                artifact = verifying.verify_envelope(raw, self.trusted, deployment)
            verifying.check_policy(raw, artifact, self.config.policy_keys, self.config.policy_threshold)
            head = await self.transparency.check(artifact_id, body)
        except errors.ControlUnreachable as exc:
            self._control_failed(exc)
            self._fail(f"the transparency log is unavailable: {exc}")
            return
        except errors.VerificationError as exc:
            self._violation(exc, key=None, artifact_id=artifact_id, snapshot_version=snapshot_version)
            self._fail(f"verification failed: {exc}")
            return
        await self.transparency.accept(head)
        self._set(converging.verified(self.status, artifact.key_id))
        try:
            catalog = await loading.catalog_for(artifact.files)
            steps = await loading.migrate(self.app, catalog)
        except errors.LoadError as exc:
            self._fail(f"load failed: {exc}")
            return
        previous = loading.swap(self.app, catalog)
        version = converging.Version(artifact.artifact_id, artifact.sha256, artifact.version, artifact.app)
        self._set(
            converging.loaded(
                self.status,
                version,
                f"serving {artifact.artifact_id} (version {artifact.version}; "
                f"{steps} schema step(s) applied)",
            )
        )
        try:
            await self._self_check(catalog)
        except errors.SelfCheckFailed as exc:
            loading.swap(self.app, previous)
            self._set(
                converging.rolled_back(
                    self.status,
                    f"self-check failed, previous version restored: {exc}",
                    now=time.monotonic(),
                    policy=self.config.artifact_retry,
                    spread=random.random(),
                )
            )
            return
        await loading.request_grants(
            self.app,
            self.config.workspace,
            catalog,
            f"deployment of {artifact.app} version {artifact.version} ({artifact.artifact_id})",
        )
        await loading.ensure_calendar(self.app, self.config.workspace, catalog)
        try:
            await asyncio.to_thread(self.state_dir.save, raw, deployment, snapshot_version)
            self.state_error = None
        except errors.StateDirError as exc:
            self.state_error = str(exc)
            log.error(
                "cannot persist the artifact; a restart needs the control plane",
                extra={"ctx": {"error": str(exc)}},
            )

    def _fail(self, reason: str) -> None:
        self._set(
            converging.failed(
                self.status,
                reason,
                now=time.monotonic(),
                policy=self.config.artifact_retry,
                spread=random.random(),
            )
        )

    async def _self_check(self, catalog: server.Catalog) -> None:
        await loading.ensure_workspace(self.app, self.config.workspace)
        await loading.probe_tables(self.app, catalog)
        url = self.api_url()
        if url is not None:
            await loading.probe_http(self.session, loading.local_url(url), self.config.workspace, catalog)
        if self.self_check is not None:
            try:
                await self.self_check(catalog)
            except errors.SelfCheckFailed:
                raise
            except Exception as exc:
                raise errors.SelfCheckFailed(f"{type(exc).__name__}: {exc}") from exc

    # --- loops ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Pull forever; every cycle's unexpected error is logged and the loop goes on."""
        while True:
            started = time.monotonic()
            try:
                await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("pull cycle failed", extra={"ctx": {"workspace": self.config.workspace}})
            if self.config.long_poll and self.control_error is None:
                delay = max(0.0, MIN_GAP - (time.monotonic() - started))
            else:
                delay = min(self.config.pull_interval, self._until_retry())
            self._wake.clear()
            await timing.wait_event(self._wake, delay)

    def _until_retry(self) -> float:
        """Seconds until a failed artifact may be fetched again (``converging.until_retry``)."""
        return converging.until_retry(self.status, time.monotonic())

    async def health(self) -> tuple[evidence.HealthStatus, dict[str, str]]:
        """``(healthy|degraded|unhealthy, checks)``: Postgres, control, convergence, state dir."""
        checks: dict[str, str] = {}
        problem = await reporting.check_postgres(self.app[server.state.POOL])
        checks["postgres"] = problem or "ok"
        checks["control"] = f"unreachable: {self.control_error}" if self.control_error else "ok"
        checks["phase"] = str(self.status.phase) if self.status.phase is not None else "none"
        if self.state_error:
            checks["state_dir"] = self.state_error
        if problem:
            return "unhealthy", checks
        degraded = self.control_error is not None or self.state_error is not None
        degraded = degraded or self.status.phase in (converging.Phase.FAILED, converging.Phase.ROLLED_BACK)
        return ("degraded" if degraded else "healthy"), checks

    async def report_health(self) -> None:
        status, checks = await self.health()
        self.sender.add(
            evidence.health(
                status,
                checks,
                workspace=self.config.workspace,
                cluster=self.config.cluster_id,
                pod=self.config.pod_name,
                at=datetime.now(UTC),
            )
        )

    async def report_metering(self) -> None:
        end = datetime.now(UTC)
        total = reporting.requests_total(self.app[server.state.METRICS], self.config.workspace)
        measured: dict[str, float] = {"requests": max(0.0, total - self._last_requests)}
        try:
            workspace = await self.app[server.state.REGISTRY].resolve(self.config.workspace)
            measured.update(
                await reporting.usage(
                    self.app[server.state.POOL], loading.current(self.app), workspace.tenant_id
                )
            )
        except Exception as exc:  # metering must never stop the pod; the period is still reported
            log.warning(
                "metering could not measure storage", extra={"ctx": {"error": f"{type(exc).__name__}: {exc}"}}
            )
        self._last_requests = total
        start, self._period_start = self._period_start, end
        if end > start:
            self.sender.add(
                evidence.metering(
                    measured,
                    workspace=self.config.workspace,
                    cluster=self.config.cluster_id,
                    start=start,
                    end=end,
                )
            )

    async def every(self, seconds: float, job: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("periodic report failed", extra={"ctx": {"job": getattr(job, "__name__", "")}})
