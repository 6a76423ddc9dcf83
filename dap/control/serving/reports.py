"""Handlers of reports: evidence in and out, operator reports, cluster announcements.

- ``POST /v1/evidence`` validates a whole batch (``models.validate_batch``) and stores it in one
  transaction; in cluster mode the new records are also queued in the outbox for the relay.
- ``GET /v1/evidence?workspace=&type=&since=&limit=`` for operators of the platform.
- ``POST /v1/node-health`` and ``POST /v1/workspace-status`` take the operator's reports
  (ARCHITECTURE.md); node CPU becomes the cluster's routing load.
- ``PUT /v1/clusters/{id}`` is how a cluster-mode control announces itself to its region (labels,
  maximum, status, load) on every sync; ``GET /v1/clusters`` lists the registry. After an
  announcement the region retries the bindings that had no cluster.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

import pydantic
from aiohttp import web

from dap.config import names
from dap.control import errors
from dap.control.clusters import registry, routing
from dap.control.evidence import models, storing
from dap.control.ids import ClusterId
from dap.control.serving import http
from dap.control.storage import store

MAX_QUERY = 1000

M = TypeVar("M", bound=pydantic.BaseModel)
Name = Annotated[str, pydantic.StringConstraints(min_length=1, max_length=253)]


class NodeHealth(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    cluster: Name
    node: Name
    status: Name
    workspaces: Annotated[int, pydantic.Field(ge=0)]
    cpu: Annotated[float, pydantic.Field(ge=0)]
    memory: Annotated[float, pydantic.Field(ge=0)]
    at: pydantic.AwareDatetime


class WorkspaceStatus(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    cluster: Name
    workspace: Name
    phase: Literal[names.WORKSPACE_PHASES]  # type: ignore[valid-type]
    conditions: list[dict[str, Any]] = []
    at: pydantic.AwareDatetime


class ClusterAnnouncement(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    labels: dict[str, str] = {}
    max_workspaces: Annotated[int, pydantic.Field(ge=0)] = 100
    status: Literal["active", "draining", "inactive"] = "active"
    load: Annotated[float, pydantic.Field(ge=0)] | None = None


def _parse(model: type[M], payload: Any) -> M:
    try:
        return model.model_validate(payload)
    except pydantic.ValidationError as exc:
        items = [errors.ErrorItem(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()]
        raise errors.RequestError(f"invalid {model.__name__} report", items) from exc


async def post_evidence(request: web.Request) -> web.Response:
    settings = request.app[http.SETTINGS]
    records = models.validate_batch(await http.json_body(request))
    if settings.mode == "cluster":
        records = [
            r if r.cluster_id else r.model_copy(update={"cluster_id": settings.cluster_id}) for r in records
        ]
    async with request.app[http.POOL].acquire() as conn, conn.transaction():
        new = await storing.insert(conn, records, outbox=settings.mode == "cluster")
    return http.json_response({"accepted": len(records), "new": new}, status=202)


def _since(raw: str | None) -> datetime | None:
    if raw is None:
        return None
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise errors.RequestError(
            "since must be an RFC 3339 timestamp", [errors.ErrorItem("since", raw)]
        ) from exc
    if moment.tzinfo is None:
        raise errors.RequestError("since needs a UTC offset", [errors.ErrorItem("since", raw)])
    return moment


async def get_evidence(request: web.Request) -> web.Response:
    query = request.query
    kind = query.get("type")
    if kind is not None and kind not in models.TYPES:
        raise errors.RequestError(f"unknown evidence type {kind!r}", [errors.ErrorItem("type", kind)])
    try:
        limit = min(int(query.get("limit", "100")), MAX_QUERY)
    except ValueError as exc:
        raise errors.RequestError("limit must be an integer") from exc
    records = await storing.query(
        request.app[http.POOL],
        workspace=query.get("workspace"),
        kind=kind,
        since=_since(query.get("since")),
        limit=max(limit, 1),
    )
    return http.json_response({"records": records})


async def post_node_health(request: web.Request) -> web.Response:
    report = _parse(NodeHealth, await http.json_body(request))
    async with request.app[http.POOL].acquire() as conn:
        load = await registry.record_node_health(conn, report.model_dump(), report.at)
    return http.json_response({"cluster": report.cluster, "load": load}, status=202)


async def post_workspace_status(request: web.Request) -> web.Response:
    report = _parse(WorkspaceStatus, await http.json_body(request))
    await registry.record_workspace_status(request.app[http.POOL], report.model_dump(mode="json"), report.at)
    return http.json_response({"workspace": report.workspace, "phase": report.phase}, status=202)


async def get_workspace_status(request: web.Request) -> web.Response:
    rows = await registry.workspace_status(request.app[http.POOL], request.query.get("workspace"))
    return http.json_response({"statuses": rows})


async def put_cluster(request: web.Request) -> web.Response:
    cluster_id = ClusterId(request.match_info["cluster_id"])
    announcement = _parse(ClusterAnnouncement, await http.json_body(request))
    async with request.app[http.POOL].acquire() as conn, conn.transaction():
        await registry.upsert_cluster(
            conn,
            cluster_id,
            labels=announcement.labels,
            status=announcement.status,
            max_workspaces=announcement.max_workspaces,
            load=announcement.load,
        )
        changed = await registry.place(conn, await registry.unplaced(conn), standalone=False)
        if changed:
            await store.bump_snapshot(conn)
    if changed:
        await http.reload_state(request.app)
    return http.json_response({"cluster_id": cluster_id, "rerouted": changed})


async def get_clusters(request: web.Request) -> web.Response:
    infos = await registry.clusters(request.app[http.POOL])
    return http.json_response({"clusters": [_cluster_json(c) for c in infos]})


def _cluster_json(info: routing.ClusterInfo) -> dict[str, Any]:
    return {
        "cluster_id": info.cluster_id,
        "labels": dict(info.labels),
        "status": info.status,
        "workspace_count": info.workspace_count,
        "max_workspaces": info.max_workspaces,
        "load": info.load,
    }
