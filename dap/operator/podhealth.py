"""What the workspace pods say of their artifact, read from their ``/health``: failures the
Deployment cannot show.

A pod that refuses an artifact (a signature or signing policy that does not verify, a load that
fails, a self-check that rolls back) stays alive and, when it had a version, keeps serving it:
its Deployment looks healthy. It says so only in its own ``GET /health`` (``convergence.phase``
``failed`` or ``rolled_back`` and the ``message``, ``dap.resource_pod.hosting``). So every
``pod_health_interval`` the operator lists the Running pods it manages (one API call) and reads
each one's ``/health`` on its pod IP, port 8080, with a short timeout and bounded concurrency
(``Watcher.sweep``); the workspaces whose judgement changed are nudged, and the reconcile folds
the problem into the status (``conditions.with_artifact``: ``Degraded``, reason
``ArtifactVerificationFailed``, ``ArtifactFailed`` or ``ArtifactRolledBack``, the pod's message).

The judgement is pure (``judge``, ``fold``): a pod in a transitional phase (fetched, verified) or
that does not answer leaves the workspace's last judgement as it was (a refused artifact is
retried, and passes through ``fetched`` each time); a pod serving its target (``loaded``,
``up_to_date``) clears it; a workspace with no Running pod (idle, deleted) has none. An operator
outside the cluster (tests, ``dap dev``) cannot reach pod IPs: every read fails and nothing is
judged. Decision record: docs/decisions.md, "Artifact failures on the Workspace".
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp

from dap import kube
from dap.operator import builders, errors
from dap.operator.caches import ObjectKey

logger = logging.getLogger(__name__)

POD_PORT = 8080
HEALTH_PATH = "/health"
READ_TIMEOUT = 2.0
CONCURRENCY = 10

VERIFICATION_FAILED = "ArtifactVerificationFailed"
ARTIFACT_FAILED = "ArtifactFailed"
ROLLED_BACK = "ArtifactRolledBack"


@dataclasses.dataclass(frozen=True)
class Problem:
    reason: str
    message: str


class Unknown:
    """A pod that says nothing conclusive (transitional phase, no answer, not JSON)."""


UNKNOWN = Unknown()
Judgement = Problem | Unknown | None  # None: the pod serves what it should


def judge(body: Any) -> Judgement:
    """One pod's ``/health`` body → a problem, nothing wrong (``None``), or ``UNKNOWN``."""
    if not isinstance(body, Mapping):
        return UNKNOWN
    convergence = body.get("convergence")
    if not isinstance(convergence, Mapping):
        return UNKNOWN
    phase = convergence.get("phase")
    message = str(convergence.get("message") or "")
    if phase == "failed":
        reason = VERIFICATION_FAILED if message.startswith("verification failed") else ARTIFACT_FAILED
        return Problem(reason, message or "the artifact failed")
    if phase == "rolled_back":
        return Problem(ROLLED_BACK, message or "the artifact was rolled back")
    if phase in ("loaded", "up_to_date"):
        return None
    return UNKNOWN  # none yet, fetched, verified


def fold(
    previous: Mapping[ObjectKey, Problem],
    observed: Mapping[ObjectKey, Iterable[tuple[str, Judgement]]],
) -> dict[ObjectKey, Problem]:
    """The workspaces' problems after one sweep: ``observed`` maps each workspace with Running pods
    to its pods' judgements; workspaces absent from it have none."""
    result: dict[ObjectKey, Problem] = {}
    for key, judgements in observed.items():
        pods = sorted(judgements, key=lambda pair: pair[0])
        problems = [(pod, j) for pod, j in pods if isinstance(j, Problem)]
        if problems:
            pod, first = problems[0]
            count = f"{len(problems)} of {len(pods)} pod(s)"
            result[key] = Problem(first.reason, f"{count}, e.g. {pod}: {first.message}")
        elif all(isinstance(j, Unknown) for _, j in pods) and key in previous:
            result[key] = previous[key]
    return result


def changed(before: Mapping[ObjectKey, Problem], after: Mapping[ObjectKey, Problem]) -> set[ObjectKey]:
    return {key for key in set(before) | set(after) if before.get(key) != after.get(key)}


def running_pods(items: Iterable[Mapping[str, Any]]) -> list[tuple[ObjectKey, str, str]]:
    """``(workspace key, pod name, pod IP)`` of the Running, not terminating, workspace pods."""
    found: list[tuple[ObjectKey, str, str]] = []
    for pod in items:
        meta = pod.get("metadata", {})
        status = pod.get("status", {})
        workspace = meta.get("labels", {}).get(builders.LABEL_WORKSPACE)
        ip = status.get("podIP")
        if workspace and ip and status.get("phase") == "Running" and not meta.get("deletionTimestamp"):
            found.append(((meta.get("namespace", ""), workspace), meta.get("name", ""), ip))
    return found


class Watcher:
    """The problems pods reported at the last sweep, by workspace; read by the reconciler."""

    def __init__(self, namespace: str = "", port: int = POD_PORT) -> None:
        self.namespace = namespace
        self.port = port
        self.problems: dict[ObjectKey, Problem] = {}
        self._failing = ""

    def problem(self, key: ObjectKey) -> Problem | None:
        return self.problems.get(key)

    async def sweep(self, client: kube.Client, session: aiohttp.ClientSession) -> set[ObjectKey]:
        """List the pods, read their health, return the workspaces whose judgement changed."""
        selector = f"{builders.LABEL_MANAGED_BY}={builders.MANAGED_BY},{builders.LABEL_WORKSPACE}"
        try:
            items = await client.list(kube.PODS, self.namespace or None, selector=selector)
        except errors.FAILURES as exc:
            if self._failing != str(exc):  # once per distinct failure (RBAC, API down)
                logger.warning("cannot list the workspace pods to read their health: %s", exc)
            self._failing = str(exc)
            return set()
        self._failing = ""
        pods = running_pods(items)
        slots = asyncio.Semaphore(CONCURRENCY)

        async def read(ip: str) -> Judgement:
            async with slots:
                try:
                    async with session.get(
                        f"http://{ip}:{self.port}{HEALTH_PATH}",
                        timeout=aiohttp.ClientTimeout(total=READ_TIMEOUT),
                    ) as answer:
                        return judge(await answer.json(content_type=None))
                except (aiohttp.ClientError, TimeoutError, ValueError):
                    return UNKNOWN

        judgements = await asyncio.gather(*(read(ip) for _, _, ip in pods))
        observed: dict[ObjectKey, list[tuple[str, Judgement]]] = {}
        for (key, name, _), judgement in zip(pods, judgements, strict=True):
            observed.setdefault(key, []).append((name, judgement))
        after = fold(self.problems, observed)
        moved = changed(self.problems, after)
        self.problems = after
        for key in moved:
            logger.info(
                "workspace %s/%s: pods report %s",
                *key,
                f"{after[key].reason}: {after[key].message}" if key in after else "no artifact problem",
            )
        return moved
