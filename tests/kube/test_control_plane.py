"""The test control plane itself: up on loopback, its controllers at work, RBAC enforced."""

from __future__ import annotations

from urllib.parse import urlsplit

from tests.kube.client import Api, wait_for
from tests.kube.conftest import Cluster


def test_api_server_is_ready_on_loopback(cluster: Cluster) -> None:
    assert urlsplit(cluster.plane.url).hostname == "127.0.0.1"
    status, body = cluster.plane.get("/readyz")
    assert (status, body) == (200, b"ok")
    version = cluster.kubectl("version", "-o", "yaml").stdout
    assert "gitVersion: v1.34." in version


async def test_garbage_collector_deletes_dependents_of_a_deleted_owner(api: Api, ns: str) -> None:
    owner = await api.create(
        "configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": ns}},
    )
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    dependent = {"name": "dependent", "namespace": ns, "ownerReferences": [reference]}
    await api.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": dependent})
    await api.delete("configmaps", ns, "owner")

    async def collected() -> bool:
        return await api.get("configmaps", ns, "dependent") is None

    await wait_for(collected, what="the garbage collector to delete the dependent")


def test_the_operator_token_is_its_service_account_not_an_administrator(cluster: Cluster) -> None:
    def can(verb: str, resource: str) -> str:
        result = cluster.kubectl("auth", "can-i", verb, resource, "-A", check=False, as_operator=True)
        return result.stdout.strip()

    assert can("patch", "workspaces.dap.io/status") == "yes"
    assert can("create", "deployments.apps") == "yes"
    assert can("patch", "clusterclasses.dap.io") == "no"
    assert can("create", "clusterroles.rbac.authorization.k8s.io") == "no"
    assert can("create", "pods") == "no"
