"""Datastores as a tenant's owner and a cluster's operator use them, and workspaces that cannot work.

A Datastore (its endpoint Secret names a role of the cluster's Postgres made for it) and a
ResourceClaim signed with the owner's key (``dap claim keygen`` / ``dap claim sign``) give the
claiming workspace's pods environment credentials that really open that database. A Workspace
naming a missing ClusterClass, or a datastore whose owner did not allow it, gets a condition with
the reason (``kubectl describe`` shows it), and the other workspaces keep serving.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import NS, WS, Books, Kube, dap, psql
from traffic import http

pytestmark = pytest.mark.e2e

ROLE_PASSWORD = "orders-role-password"  # a role of the cluster's Postgres made for the datastore

ENDPOINT = f"""
apiVersion: v1
kind: Secret
metadata: {{name: orders-endpoint, namespace: {NS}}}
stringData:
  host: postgres.{NS}.svc
  port: "5432"
  database: orders
  user: orders_app
  password: {ROLE_PASSWORD}
"""

DATASTORE = """
apiVersion: dap.io/v1alpha1
kind: Datastore
metadata: {{name: orders, namespace: {ns}}}
spec:
  driver: postgres
  endpointSecretRef: {{name: orders-endpoint}}
  allowedTenants: [ledger]
  owner: owner@example.com
  ownerPublicKey: {public}
"""

WORKSPACE = """
apiVersion: dap.io/v1alpha1
kind: Workspace
metadata: {{name: {name}, namespace: {ns}}}
spec:
  owner: e2e@example.com
  region: local
  clusterClass: {cls}
  environment: dev
  datastores: {datastores}
  resources:
    requests: {{cpu: 20m, memory: 96Mi}}
    limits: {{memory: 384Mi}}
"""

PROBE = """
import asyncio, os, asyncpg
async def main():
    e = lambda k: os.environ["DAP_DATASTORE_ORDERS_" + k]
    conn = await asyncpg.connect(host=e("HOST"), port=int(e("PORT")), user=e("USER"),
                                 password=e("PASSWORD"), database=e("DATABASE"))
    await conn.execute("CREATE TABLE IF NOT EXISTS probe (n int)")
    await conn.execute("INSERT INTO probe VALUES (1)")
    print(await conn.fetchval("SELECT current_user"), await conn.fetchval("SELECT count(*) FROM probe"),
          os.environ["DAP_DATASTORE_ORDERS_PERMISSION"])
    await conn.close()
asyncio.run(main())
"""


def _condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    return next((c for c in (obj or {}).get("status", {}).get("conditions", []) if c["type"] == type_), {})


@pytest.fixture(scope="module")
def owner(books: Books, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The datastore's owner key, the Postgres role and database behind it, the Datastore."""
    kube = books.kube
    key = tmp_path_factory.mktemp("owner") / "owner.key"
    printed = dap("claim", "keygen", "--out", str(key))
    public = re.search(r"public-key: ([0-9a-f]{64})", printed)
    assert public, printed
    roles = psql(kube, "SELECT count(*) FROM pg_roles WHERE rolname = 'orders_app'")
    if " 0\n" in roles:
        psql(kube, f"CREATE ROLE orders_app LOGIN PASSWORD '{ROLE_PASSWORD}'")
        psql(kube, "CREATE DATABASE orders OWNER orders_app")
    kube.run("apply", "-f", "-", stdin=ENDPOINT)
    kube.run("apply", "-f", "-", stdin=DATASTORE.format(ns=NS, public=public.group(1)))
    kube.wait_for(
        lambda: _condition(kube.get("datastore", "orders", NS), "Validated").get("status") == "True"
    )
    return key


def _claim(owner: Path, workspace: str) -> str:
    return dap(
        "claim", "sign", "--datastore", "orders", "--workspace", workspace, "--permission", "read_write",
        "--granted-by", "owner@example.com", "--key-file", str(owner), "--manifest", f"{workspace}-orders",
        "--namespace", NS,
    )  # fmt: skip


def _pods(kube: Kube, ws: str) -> list[dict[str, Any]]:
    out = kube.run("get", "pods", "-n", NS, "-l", f"dap.io/workspace={ws}", "-o", "json")
    return list(json.loads(out)["items"])


def test_a_datastore_and_its_claim_give_the_pod_working_credentials(books: Books, owner: Path) -> None:
    kube = books.kube
    kube.run(
        "apply", "-f", "-", stdin=WORKSPACE.format(name="ledger", ns=NS, cls="kind", datastores="[orders]")
    )
    kube.run("apply", "-f", "-", stdin=_claim(owner, "ledger"))
    try:
        claim = kube.wait_for(
            lambda: (
                _condition(kube.get("resourceclaims.dap.io", "ledger-orders", NS), "Ready").get("status")
                == "True"
            ),
            what="the claim Ready",
        )
        assert claim
        secret = kube.wait_for(
            lambda: kube.get("secret", "dap-claim-ledger-orders", NS), what="the claim's Secret"
        )

        def injected() -> str | None:
            """A running pod whose template carries the claim's Secret: its name."""
            for pod in _pods(kube, "ledger"):
                sources = pod["spec"]["containers"][0].get("envFrom") or []
                running = any(
                    c.get("state", {}).get("running") for c in pod["status"].get("containerStatuses") or []
                )
                if (
                    running
                    and not pod["metadata"].get("deletionTimestamp")
                    and any(
                        (s.get("secretRef") or {}).get("name") == secret["metadata"]["name"] for s in sources
                    )
                ):
                    return str(pod["metadata"]["name"])
            return None

        pod = kube.wait_for(injected, within=180, what="a pod with the credentials")
        out = kube.run("exec", "-n", NS, pod, "--", "/opt/dap/bin/python", "-c", PROBE).split()
        assert out[0] == "orders_app", out  # the datastore's own role, not the platform's
        assert int(out[1]) >= 1, out
        assert out[2] == "read_write", out
        workspace = kube.get("workspace", "ledger", NS)
        assert _condition(workspace, "Degraded").get("reason") != "DatastoreNotUsable", workspace
    finally:
        kube.run("delete", "workspace", "ledger", "-n", NS, "--wait=false", check=False)


def test_broken_workspaces_say_why_and_the_others_keep_serving(books: Books, owner: Path) -> None:
    kube = books.kube
    orphan = WORKSPACE.format(name="orphan", ns=NS, cls="no-such-class", datastores="[]")
    intruder = WORKSPACE.format(name="intruder", ns=NS, cls="kind", datastores="[orders]")
    kube.run("apply", "-f", "-", stdin=orphan)
    kube.run("apply", "-f", "-", stdin=intruder)
    kube.run("apply", "-f", "-", stdin=_claim(owner, "intruder"))  # signed, but the owner allows ledger only
    try:
        ready = kube.wait_for(
            lambda: (
                _condition(kube.get("workspace", "orphan", NS), "Ready").get("reason")
                == "ClusterClassNotFound"
            ),
            what="orphan: ClusterClassNotFound",
        )
        assert ready
        described = kube.run("describe", "workspace", "orphan", "-n", NS)
        assert "ClusterClassNotFound" in described, described
        assert "no-such-class" in described, described
        assert kube.get("deployment", "dap-orphan", NS) is None

        claim = kube.wait_for(
            lambda: (
                _condition(kube.get("resourceclaims.dap.io", "intruder-orders", NS), "Denied").get("reason")
                == "TenantNotAllowed"
            ),
            what="the intruder's claim Denied",
        )
        assert claim
        degraded = kube.wait_for(
            lambda: (
                _condition(kube.get("workspace", "intruder", NS), "Degraded").get("reason")
                == "DatastoreNotUsable"
            ),
            what="intruder: DatastoreNotUsable",
        )
        assert degraded
        described = kube.run("describe", "workspace", "intruder", "-n", NS)
        assert "DatastoreNotUsable" in described, described
        assert "TenantNotAllowed" in described, described
        assert kube.get("secret", "dap-claim-intruder-orders", NS) is None  # no credentials handed out

        status, body = http("GET", f"{books.api}/stock/item?limit=1", books.token)
        assert status == 200, body  # the others keep serving
        assert _condition(kube.get("workspace", WS, NS), "Ready").get("status") == "True"
    finally:
        for name in ("orphan", "intruder"):
            kube.run("delete", "workspace", name, "-n", NS, "--wait=false", check=False)
        kube.run("delete", "resourceclaims.dap.io", "intruder-orders", "-n", NS, "--wait=false", check=False)
