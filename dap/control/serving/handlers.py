"""Handlers of artifacts, keys, snapshots, poll and health.

Registration accepts two bodies (``POST /v1/artifacts``):

- ``application/json``: ``{"app": "...", "files": [{"path", "content" (base64)}], "workspaces": [...]}``
- ``multipart/form-data``: form fields ``app`` and ``workspace`` (repeatable) and one part per
  file whose ``filename`` is the file's relative path (percent-decoded: some clients encode
  ``/`` as ``%2F``).

``approvals`` (JSON key; form field ``approval``, repeatable, one JSON object each) carries the
authors' ``{key_id, signature}`` approvals of the content that the app's signing policy asks for.

Instead of ``app`` a client may send ``default_app`` (JSON key or form field): a name to use only
when no workspace of the registration is bound to an app yet (``dap register`` without ``--app``
sends the directory's name so); ``registration.choose_app`` decides.

Both are read with the per-file and total limits of ``registration.Limits`` enforced while
reading (multipart streams, so a too-large upload is refused before it is all in memory).
"""

from __future__ import annotations

import base64
import binascii
import urllib.parse
from typing import Any

import aiohttp
from aiohttp import web

from dap.control import errors
from dap.control.artifacts import registration
from dap.control.evidence import storing
from dap.control.ids import AppName
from dap.control.serving import http, traced
from dap.control.storage import store
from dap.control.trust import envelopes, signing, snapshots

CHUNK = 256 * 1024


def _too_large(what: str, limit: int) -> errors.PayloadTooLargeError:
    return errors.PayloadTooLargeError(f"{what} exceeds the limit of {limit} bytes")


class _Collector:
    def __init__(self, limits: registration.Limits) -> None:
        self.limits = limits
        self.files: dict[str, bytes] = {}
        self.total = 0

    def add(self, raw_path: str, content: bytes) -> None:
        path = envelopes.normalise_path(raw_path)
        if path in self.files:
            raise errors.RequestError(
                f"file {path} appears twice", [errors.ErrorItem(path, "duplicate path")]
            )
        if len(content) > self.limits.max_file_bytes:
            raise _too_large(f"file {path}", self.limits.max_file_bytes)
        self.total += len(content)
        if self.total > self.limits.max_total_bytes:
            raise _too_large("the artifact", self.limits.max_total_bytes)
        if len(self.files) >= self.limits.max_files:
            raise _too_large(f"the file count ({self.limits.max_files} files max);", self.limits.max_files)
        self.files[path] = content


async def _read_json(request: web.Request, limits: registration.Limits) -> registration.Upload:
    body = await http.json_body(request)
    if not isinstance(body, dict) or not isinstance(body.get("files"), list):
        raise errors.RequestError(
            "expected {app, files: [{path, content}], workspaces?}",
            [errors.ErrorItem("files", "a list of {path, content (base64)} is required")],
        )
    collector = _Collector(limits)
    for index, entry in enumerate(body["files"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise errors.RequestError(
                "malformed file entry", [errors.ErrorItem(f"files[{index}]", "no path")]
            )
        try:
            content = base64.b64decode(entry.get("content", ""), validate=True)
        except (binascii.Error, TypeError, ValueError) as exc:
            raise errors.RequestError(
                "file content is not base64", [errors.ErrorItem(f"files[{index}].content", "not base64")]
            ) from exc
        collector.add(entry["path"], content)
    workspaces = body.get("workspaces") or []
    if not isinstance(workspaces, list) or not all(isinstance(w, str) for w in workspaces):
        raise errors.RequestError("workspaces must be a list of ids")
    return _upload(
        body.get("app"), body.get("default_app"), collector.files, workspaces, body.get("approvals") or []
    )


async def _read_multipart(request: web.Request, limits: registration.Limits) -> registration.Upload:
    reader = await request.multipart()
    collector = _Collector(limits)
    app: str | None = None
    default_app: str | None = None
    workspaces: list[str] = []
    approvals: list[Any] = []
    while (part := await reader.next()) is not None:
        if not isinstance(part, aiohttp.BodyPartReader):
            raise errors.RequestError("nested multipart bodies are not accepted")
        if part.filename is None:
            value = (await part.read(decode=True)).decode("utf-8", "replace")
            if part.name == "app":
                app = value
            elif part.name == "default_app":
                default_app = value
            elif part.name == "workspace":
                workspaces.append(value)
            elif part.name == "approval":
                approvals.append(http.parse_json(value, "approval"))
            else:
                raise errors.RequestError(f"unknown form field {part.name!r}")
            continue
        chunks: list[bytes] = []
        size = 0
        while chunk := await part.read_chunk(CHUNK):
            size += len(chunk)
            if size > limits.max_file_bytes:
                raise _too_large(f"file {part.filename}", limits.max_file_bytes)
            if collector.total + size > limits.max_total_bytes:
                raise _too_large("the artifact", limits.max_total_bytes)
            chunks.append(chunk)
        # aiohttp's client percent-encodes "/" in filenames; curl sends them raw. Accept both.
        collector.add(urllib.parse.unquote(part.filename), b"".join(chunks))
    return _upload(app, default_app, collector.files, workspaces, approvals)


def _upload(
    app: Any, default_app: Any, files: dict[str, bytes], workspaces: list[str], approvals: Any
) -> registration.Upload:
    explicit = app is not None
    if not explicit:
        app = default_app
    if not isinstance(app, str):
        raise errors.RequestError(
            "the app name is required: send app (or default_app)", [errors.ErrorItem("app", "required")]
        )
    if not files:
        raise errors.RequestError("the artifact has no file", [errors.ErrorItem("files", "required")])
    if not isinstance(approvals, list) or not all(
        isinstance(a, dict) and isinstance(a.get("key_id"), str) and isinstance(a.get("signature"), str)
        for a in approvals
    ):
        raise errors.RequestError(
            "approvals must be a list of {key_id, signature}",
            [errors.ErrorItem("approvals", "a list of {key_id, signature}")],
        )
    return registration.Upload(
        approvals=tuple({"key_id": a["key_id"], "signature": a["signature"]} for a in approvals),
        app=AppName(envelopes.check_app_name(app)),
        files=files,
        workspaces=tuple(registration.check_workspace_id(w) for w in dict.fromkeys(workspaces)),
        app_explicit=explicit,
    )


async def post_artifact(request: web.Request) -> web.Response:
    settings = request.app[http.SETTINGS]
    try:
        if request.content_type.startswith("multipart/"):
            upload = await _read_multipart(request, settings.limits)
        else:
            upload = await _read_json(request, settings.limits)
    except web.HTTPRequestEntityTooLarge as exc:
        raise _too_large("the request body", settings.max_body_bytes) from exc
    result = await registration.register(
        request.app[http.POOL],
        upload,
        signer=request.app[http.SIGNER],
        standalone=settings.mode == "standalone",
    )
    await http.reload_state(request.app)
    answer = result.as_json()
    traced.note(
        request,
        **{
            "dap.app": answer.get("app"),
            "dap.artifact_id": answer.get("artifact_id"),
            "dap.version": answer.get("version"),
        },
    )
    return http.json_response(answer)


async def get_artifact(request: web.Request) -> web.Response:
    artifact_id = request.match_info["artifact_id"]
    found = await store.envelope_bytes(request.app[http.POOL], artifact_id)
    if found is None:
        raise errors.NotFoundError(f"artifact {artifact_id} does not exist here")
    body, status = found
    if status == "revoked":
        raise errors.RevokedError(f"artifact {artifact_id} was revoked")
    return web.Response(body=body, content_type="application/json", headers={"Cache-Control": "immutable"})


async def get_keys(request: web.Request) -> web.Response:
    if request.app[http.SETTINGS].mode == "cluster":
        keys = [signing.public_key_entry(k) for k in request.app[http.TRUSTED].values()]
    else:
        keys = [request.app[http.SIGNER].public_key_entry()]
    return http.json_response({"keys": keys})


def _wait_seconds(request: web.Request) -> float:
    raw = request.query.get("wait")
    if raw is None:
        return 0.0
    try:
        wait = float(raw)
    except ValueError as exc:
        raise errors.RequestError("wait must be a number of seconds") from exc
    return max(0.0, min(wait, request.app[http.SETTINGS].long_poll_max_seconds))


async def get_snapshot(request: web.Request) -> web.Response:
    """Answer from memory; a matching If-None-Match gives 304 (after ``?wait=`` seconds at most)."""
    live = request.app[http.LIVE]
    if request.app[http.SETTINGS].mode == "cluster":
        return await _cluster_snapshot(request)
    state = live.current()
    workspace, cluster = request.query.get("workspace"), request.query.get("cluster")
    traced.note(request, **{"dap.workspace": workspace, "dap.cluster": cluster})
    if snapshots.etag_matches(request.headers.get("If-None-Match"), state.etag):
        wait = _wait_seconds(request)
        if not (wait and await live.wait(wait)):
            return web.Response(status=304, headers={"ETag": live.current().etag})
        state = live.current()
    traced.note(request, **{"dap.snapshot_version": state.version})
    body = live.signed_body(state, workspace, cluster)
    return web.Response(
        body=body, content_type="application/json", headers={"ETag": state.etag, "Cache-Control": "no-cache"}
    )


async def _cluster_snapshot(request: web.Request) -> web.Response:
    """The region-signed snapshot of this cluster, whatever the query (a pod picks its own)."""
    live = request.app[http.LIVE]
    region = live.region
    if region is None:
        raise errors.UpstreamError("no snapshot has been synced from the region yet; retry shortly")
    if snapshots.etag_matches(request.headers.get("If-None-Match"), region.etag):
        wait = _wait_seconds(request)
        if not (wait and await live.wait(wait)) or live.region is None:
            return web.Response(status=304, headers={"ETag": region.etag})
        region = live.region
    traced.note(
        request, **{"dap.workspace": request.query.get("workspace"), "dap.snapshot_version": region.version}
    )
    return web.Response(
        body=region.body,
        content_type="application/json",
        headers={"ETag": region.etag, "Cache-Control": "no-cache"},
    )


async def post_poll(request: web.Request) -> web.Response:
    """Dev only: wake every parked snapshot request so local pods pull at once."""
    woken = request.app[http.LIVE].wake()
    return http.json_response({"woken": woken}, status=202)


async def get_health(request: web.Request) -> web.Response:
    settings = request.app[http.SETTINGS]
    live = request.app[http.LIVE]
    body: dict[str, Any] = {"status": "ok", "mode": settings.mode, "dev": settings.dev}
    try:
        async with request.app[http.POOL].acquire(timeout=5) as conn:
            await conn.fetchval("SELECT 1")
    except Exception as exc:  # any failure of the store makes the process unhealthy
        body.update(status="unhealthy", detail=f"store: {type(exc).__name__}")
        return http.json_response(body, status=503)
    if settings.mode == "cluster":
        body["snapshot_version"] = live.region.version if live.region else None
        agent = request.app.get(http.AGENT)
        if agent is not None:
            body["region"] = agent.status()
        body["outbox"] = await storing.outbox_size(request.app[http.POOL])
    else:
        body["snapshot_version"] = live.state.version
    return http.json_response(body)
