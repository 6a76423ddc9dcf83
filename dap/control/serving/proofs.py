"""``GET /v1/log/...``: the transparency log's signed heads, entries and proofs.

Region and standalone answer from their own log (``supply.transparency``); a cluster control holds no
signing key and relays these requests to its region unchanged (``relay``): the pod verifies the
head's signature itself, so the relay needs no trust.

- ``GET /v1/log/head``: the latest signed tree head (signing one first if the last append was
  made by a process without the key);
- ``GET /v1/log/entries?start=&end=&app=&limit=``: ``{tree_size, entries: [{index, entry,
  leaf_hash}]}``, only entries the latest head covers, at most 1000 per page;
- ``GET /v1/log/proof?artifact_id=ID`` (or ``index=``) ``[&from_size=M]``: ``{tree_head,
  leaf_index, entry, inclusion, consistency}`` — the inclusion proof of the artifact's
  registration in the latest head and, with ``from_size``, the consistency proof from the
  pod's last accepted head to it;
- ``GET /v1/log/consistency?first=M[&second=N]``: ``{first, second, tree_head, proof}``.

Hashes are lowercase hex. Bad parameters are 400 ``SVC.REQUEST.MALFORMED``; an artifact with no
registration in the log, or a size with no signed head, is 404 ``SVC.CONTROL.NOT_FOUND``.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from aiohttp import web

from dap.control import errors
from dap.control.serving import http
from dap.control.supply import transparency

MAX_SIZE = 2**62
ROUTES = ("head", "entries", "proof", "consistency")


def _int(request: web.Request, name: str, default: int | None = None) -> int:
    raw = request.query.get(name)
    if raw is None:
        if default is None:
            raise errors.RequestError(
                f"the query parameter {name} is required", [errors.ErrorItem(name, "required")]
            )
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_SIZE:
        raise errors.RequestError(
            f"{name} must be a non-negative integer, got {raw[:40]!r}",
            [errors.ErrorItem(name, "a non-negative integer")],
        )
    return value


async def _head(request: web.Request) -> transparency.Head:
    return await transparency.ensure_head(request.app[http.POOL], request.app[http.SIGNER])


async def get_head(request: web.Request) -> web.Response:
    head = await _head(request)
    return web.Response(
        body=head.body, content_type="application/json", headers={"Cache-Control": "no-cache"}
    )


async def get_entries(request: web.Request) -> web.Response:
    head = await _head(request)
    start = _int(request, "start", 0)
    end = min(_int(request, "end", head.tree_size), head.tree_size)
    limit = min(_int(request, "limit", transparency.MAX_ENTRIES_PAGE), transparency.MAX_ENTRIES_PAGE)
    app = request.query.get("app")
    found = await transparency.leaves(request.app[http.POOL], start=start, end=end, app=app, limit=limit)
    return http.json_response({"tree_size": head.tree_size, "entries": [leaf.as_json() for leaf in found]})


async def get_proof(request: web.Request) -> web.Response:
    pool = request.app[http.POOL]
    head = await _head(request)
    artifact_id = request.query.get("artifact_id")
    if artifact_id is not None:
        found = await transparency.registration_leaf(pool, artifact_id)
        if found is None:
            raise errors.NotFoundError(f"artifact {artifact_id} has no registration in the transparency log")
    else:
        index = _int(request, "index")
        found = await transparency.leaf(pool, index)
        if found is None:
            raise errors.NotFoundError(f"the transparency log has no entry {index}")
    if found.index >= head.tree_size:  # appended after the head was read: retry gets a newer head
        raise errors.NotFoundError(f"entry {found.index} is not covered by the latest signed tree head yet")
    body: dict[str, Any] = {
        "tree_head": head.as_json(),
        "leaf_index": found.index,
        "entry": json.loads(found.data),
        "inclusion": [h.hex() for h in await transparency.inclusion(pool, found.index, head.tree_size)],
    }
    if "from_size" in request.query:
        old = _int(request, "from_size")
        if old > head.tree_size:
            raise errors.RequestError(
                f"from_size {old} is beyond the log's size {head.tree_size}",
                [errors.ErrorItem("from_size", "at most the current tree size")],
            )
        body["consistency"] = [h.hex() for h in await transparency.consistency(pool, old, head.tree_size)]
    return http.json_response(body)


async def get_consistency(request: web.Request) -> web.Response:
    pool = request.app[http.POOL]
    latest = await _head(request)
    first = _int(request, "first")
    second = _int(request, "second", latest.tree_size)
    if first > second:
        raise errors.RequestError(
            f"first ({first}) must not exceed second ({second})",
            [errors.ErrorItem("first", "at most second")],
        )
    head = latest if second == latest.tree_size else await transparency.head_at(pool, second)
    if head is None:
        raise errors.NotFoundError(f"no signed tree head of size {second}")
    proof = await transparency.consistency(pool, first, second)
    return http.json_response(
        {"first": first, "second": second, "tree_head": head.as_json(), "proof": [h.hex() for h in proof]}
    )


SESSION: web.AppKey[aiohttp.ClientSession] = web.AppKey("log_relay_session")


async def relay(request: web.Request) -> web.Response:
    """Cluster mode: the region's answer, byte for byte."""
    region = (request.app[http.SETTINGS].region_url or "").rstrip("/")
    session = request.app[SESSION]
    timeout = aiohttp.ClientTimeout(total=request.app[http.SETTINGS].upstream_timeout)
    try:
        async with session.get(region + request.path_qs, timeout=timeout) as upstream:
            body = await upstream.read()
            return web.Response(
                status=upstream.status,
                body=body,
                content_type=upstream.content_type,
                headers={"Cache-Control": "no-cache"},
            )
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise errors.UpstreamError(f"cannot reach the region for its transparency log: {exc}") from exc
