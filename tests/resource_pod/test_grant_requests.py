"""A deployment asks for its apps' grants (issue 47): a pod serving an artifact whose app consumes
another app's offered service leaves a pending grant request in its workspace, saying which
deployment asked (a repeated ask adds nothing: tests/server/test_app_grants.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dap.server import state as server_state
from tests.resource_pod.conftest import (
    WORKSPACE,
    Control,
    Proxy,
    StartPod,
    pod_settings,
    spec_files,
    wait_for,
)

APPS = b"""
apiVersion: dap.io/v1
kind: Service
metadata: {name: desk, module: shop}
spec:
  actions:
    - {name: quote}
---
apiVersion: dap.io/v1
kind: App
metadata: {name: back, module: shop}
spec:
  interfaces: [{service: desk}]
---
apiVersion: dap.io/v1
kind: App
metadata: {name: portal, module: shop}
spec:
  consumes: [{app: back, service: desk}]
"""


async def test_a_deployment_leaves_a_pending_grant_request(
    control: Control, proxy: Proxy, start_pod: StartPod, tmp_path: Path
) -> None:
    v1 = await control.register({**spec_files(), "shop/apps.yaml": APPS})
    pod = await start_pod(pod_settings(proxy.url, tmp_path, control.signer))
    pool = pod.server.app[server_state.POOL]

    async def requests() -> list[Any]:
        return list(
            await pool.fetch(
                "SELECT g.consumer, g.owner, g.service, g.actions, g.status, g.requested_by"
                " FROM dap.app_grants g JOIN dap.workspaces w ON w.id = g.tenant_id WHERE w.slug = $1",
                WORKSPACE,
            )
        )

    async def asked() -> bool:
        return bool(await requests())

    await wait_for(asked, what="the grant request")
    [row] = await requests()
    assert (row["consumer"], row["owner"], row["service"]) == ("shop/portal", "shop/back", "shop/desk")
    assert list(row["actions"]) == ["quote"] and row["status"] == "pending"
    assert row["requested_by"] == f"deployment of {v1['app']} version 1 ({v1['artifact_id']})"
