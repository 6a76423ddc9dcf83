"""``GET /v1/placements?cluster=ID``: what a cluster control pulls from its region.

The answer lists the management Workspaces placed on the cluster (id, namespace, name, spec). Its
ETag is the SHA-256 of the body, so a cluster control polling with ``If-None-Match`` gets a
304 while nothing changed. Every pull counts as the cluster's heartbeat (``clusters.last_pull``);
a cluster that no Cluster resource declares gets a 404 problem naming what to fix.
The region never calls a cluster (spec "General rules" 4): this endpoint is how placements move.
"""

from __future__ import annotations

import hashlib
import json

from aiohttp import web

from dap.control import errors
from dap.control.kube import bindings
from dap.control.serving import http


async def get_placements(request: web.Request) -> web.Response:
    cluster = request.query.get("cluster", "")
    if not cluster:
        raise errors.RequestError("name the pulling cluster: GET /v1/placements?cluster=ID")
    found = await bindings.placements(request.app[http.POOL], cluster)
    if found is None:
        raise errors.NotFoundError(
            f"no Cluster resource named {cluster!r} on this region's management cluster: apply one "
            "(kustomize/samples/dap_v1alpha1_cluster.yaml), or fix the cluster control's "
            "DAP_CLUSTER_ID"
        )
    body = json.dumps(
        {"cluster": cluster, "placements": [p.as_json() for p in found]}, sort_keys=True
    ).encode()
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers={"ETag": etag})
    return web.Response(body=body, content_type="application/json", headers={"ETag": etag})
