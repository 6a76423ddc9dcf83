"""``--leader-elect`` on a real API server: the operator makes kopf's peering object (which kopf
never creates, and which ``kubectl apply -k`` cannot ship beside its CRD), announces itself in
it, and, being the only replica, is not paused."""

from __future__ import annotations

from tests.kube.client import Api, wait_for
from tests.kube.conftest import Operators
from tests.kube.objects import workspace


async def test_leader_election_makes_its_peering_object_and_reconciles(
    api: Api, ns: str, start_operator: Operators
) -> None:
    assert await api.get("kopfpeerings", ns, "dap-operator") is None
    await start_operator(leader_elect=True)

    async def announced() -> dict[str, object] | None:
        peering = await api.get("kopfpeerings", ns, "dap-operator") or {}
        peers: dict[str, object] | None = peering.get("status")
        return peers

    peers = await wait_for(announced, within=90, what="the operator's keep-alive in its peering object")
    assert len(peers) == 1
    await api.create("workspaces", workspace(ns))
    await wait_for(
        lambda: api.get("deployments", ns, "dap-shop"), what="a Deployment from the elected replica"
    )
