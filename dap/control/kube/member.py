"""The cluster control of one workload cluster: pull placements, keep them as Workspaces, report.

Every ``interval`` seconds, while this replica holds the Lease (``--leader-elect``):

1. pull ``GET /v1/placements?cluster=ID`` from the region (``If-None-Match`` with the last ETag;
   the region never calls a cluster, spec "General rules" 4);
2. converge: create the Workspace of every placement it does not have yet, replace the ones whose
   spec drifted, and delete those it owns that are no longer placed here (moved away) —
   only Workspaces carrying its labels (``placing.owned_by``) are ever touched;
3. report: ``POST /v1/workspace-status`` for every owned Workspace whose phase or conditions
   changed since the last accepted report.

Region down: the pull fails and nothing is deleted; the last placements it pulled stay in force
(the operator keeps serving them, a Workspace deleted by hand is re-created), reports are retried
the next round. It converges on the round after the region answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from datetime import UTC, datetime
from typing import Any

import aiohttp

from dap import kube, tracing
from dap.control.kube import leases, placing

log = logging.getLogger(__name__)
LEASE_NAME = "dap-cluster-control"


@dataclasses.dataclass(frozen=True)
class Options:
    region_url: str
    cluster: str
    namespace: str = ""  # where placements are kept; empty: the management Workspace's namespace
    interval: float = 10.0
    leader_elect: bool = False
    lease_namespace: str = "dap-system"
    lease_name: str = LEASE_NAME
    lease_seconds: float = 15.0  # a follower takes over this long after the leader's last renewal
    timeout: float = 5.0
    kubeconfig: str = ""  # this kubeconfig instead of the in-cluster account or $KUBECONFIG
    server: str = ""  # test hook: API server URL without credentials


class PullError(Exception):
    """The region did not give the placements (unreachable, or an error answer)."""


class Member:
    def __init__(self, options: Options, client: kube.Client, session: aiohttp.ClientSession) -> None:
        self.options = options
        self.client = client
        self.session = session
        self.region = options.region_url.rstrip("/")
        self.placements: list[placing.Placement] | None = None  # None until the first pull
        self.etag: str | None = None
        self.reported: dict[str, tuple[str, list[dict[str, Any]]]] = {}
        self.state: dict[str, Any] = {"pull_at": None, "pull_error": None, "rounds": 0}
        duration = max(options.lease_seconds, 3 * options.interval)
        self.elector = (
            leases.Elector(client, options.lease_namespace, options.lease_name, duration)
            if options.leader_elect
            else None
        )

    async def run(self) -> None:
        """Rounds until cancelled; a failed round is logged and the next one tries again."""
        try:
            while True:
                if self.elector is None or await self.elector.try_acquire():
                    try:
                        await self.step()
                    except (kube.ApiError, kube.ApiUnavailableError) as exc:
                        log.warning("cluster control round failed: %s", exc)
                await asyncio.sleep(self.options.interval)
        finally:
            if self.elector is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.elector.release())

    async def step(self) -> None:
        try:
            attributes = {"dap.cluster": self.options.cluster}
            with tracing.span("cluster placements pull", kind="client", attributes=attributes):
                await self.pull()
        except PullError as exc:
            self.state["pull_error"] = str(exc)
            log.warning("placements unavailable, keeping the last ones: %s", exc)
        else:
            self.state.update(pull_at=datetime.now(UTC).isoformat(), pull_error=None)
        owned = await self.owned()
        if self.placements is not None:
            await self.converge(self.placements, owned)
        await self.report(owned)
        self.state["rounds"] += 1

    async def _request(self, method: str, path: str, **kwargs: Any) -> tuple[int, bytes, str | None]:
        timeout = aiohttp.ClientTimeout(total=self.options.timeout)
        headers = dict(kwargs.pop("headers", None) or {})
        tracing.inject(headers)  # the region's span of this call joins the pull's trace
        try:
            async with self.session.request(
                method, self.region + path, timeout=timeout, headers=headers, **kwargs
            ) as answer:
                return answer.status, await answer.read(), answer.headers.get("ETag")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PullError(f"region {self.region} unreachable: {exc!r}") from exc

    async def pull(self) -> bool:
        """Fetch the placements; True when they changed."""
        headers = {"If-None-Match": self.etag} if self.etag and self.placements is not None else {}
        status, body, etag = await self._request(
            "GET", "/v1/placements", params={"cluster": self.options.cluster}, headers=headers
        )
        if status == 304:
            return False
        if status != 200:
            raise PullError(f"region answered {status} to the placements pull: {body[:200]!r}")
        data = json.loads(body)
        self.placements = [placing.Placement.from_json(p) for p in data["placements"]]
        self.etag = etag
        return True

    async def owned(self) -> list[dict[str, Any]]:
        selector = (
            f"{placing.LABEL_PLACED_BY}={placing.PLACED_BY},{placing.LABEL_CLUSTER}={self.options.cluster}"
        )
        return await self.client.list(kube.WORKSPACES, self.options.namespace or None, selector)

    async def converge(self, placements: list[placing.Placement], owned: list[dict[str, Any]]) -> None:
        todo = placing.plan(placements, owned, self.options.cluster, self.options.namespace or None)
        self.state["failed"] = {}
        live = {(b["metadata"]["namespace"], b["metadata"]["name"]): b for b in owned}
        for body in todo.create:
            meta = body["metadata"]
            try:
                await self.client.create(kube.WORKSPACES, meta["namespace"], body)
                log.info("placed workspace %s/%s", meta["namespace"], meta["name"])
            except kube.ConflictError:
                # A Workspace of that name that is not ours: never taken over.
                self._failed(meta, "exists and is not this cluster control's")
            except kube.ApiError as exc:  # e.g. its namespace does not exist here
                self._failed(meta, str(exc))
        for body in todo.update:
            meta = body["metadata"]
            current = live[(meta["namespace"], meta["name"])]
            replaced = {**current, "spec": body["spec"]}
            replaced["metadata"] = {
                **current["metadata"],
                "annotations": {**(current["metadata"].get("annotations") or {}), **meta["annotations"]},
            }
            try:
                await self.client.replace(kube.WORKSPACES, meta["namespace"], meta["name"], replaced)
            except kube.ApiError as exc:  # a conflict is retried next round with a fresh read
                self._failed(meta, str(exc))
        for namespace, name in todo.delete:
            with contextlib.suppress(kube.NotFoundError):
                await self.client.delete(kube.WORKSPACES, namespace, name)
            log.info("removed workspace %s/%s: placed elsewhere now", namespace, name)
            self.reported.pop(placing.placement_of(live[(namespace, name)]) or "", None)

    def _failed(self, meta: dict[str, Any], why: str) -> None:
        """One placement that could not be applied; the others go on, the next round retries."""
        self.state.setdefault("failed", {})[f"{meta['namespace']}/{meta['name']}"] = why
        log.warning("workspace %s/%s not applied: %s", meta["namespace"], meta["name"], why)

    async def report(self, owned: list[dict[str, Any]]) -> None:
        for body in owned:
            workspace = placing.placement_of(body)
            found = placing.report_of(body)
            if workspace is None or found is None or self.reported.get(workspace) == found:
                continue
            phase, conditions = found
            payload = {
                "cluster": self.options.cluster,
                "workspace": workspace,
                "phase": phase,
                "conditions": conditions,
                "at": datetime.now(UTC).isoformat(),
            }
            try:
                status, text, _ = await self._request("POST", "/v1/workspace-status", json=payload)
            except PullError as exc:
                log.warning("status of %s not reported: %s", workspace, exc)
                return
            if status == 202:
                self.reported[workspace] = found
            else:
                log.warning("region refused the status of %s (%s): %r", workspace, status, text[:200])


async def run(options: Options) -> None:
    """Log in and run one cluster control until cancelled."""
    client = kube.Client.connect(kube.login(options.server, options.kubeconfig))
    async with aiohttp.ClientSession() as session:
        try:
            await Member(options, client, session).run()
        finally:
            await client.close()
