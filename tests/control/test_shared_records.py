"""What the control plane serves parses into dap.config's control-plane records.

dap.config declares the spec's ArtifactEnvelope, Snapshot and Deployment once for every part;
this test keeps that declaration honest against the documents a real control plane produces.
"""

from __future__ import annotations

import aiohttp

from dap.config import artifacts
from tests.control.conftest import Start, json_upload, manifests, workspace_manifest


async def test_envelope_and_snapshot_parse_into_the_shared_records(
    start_control: Start, http: aiohttp.ClientSession
) -> None:
    control = await start_control()
    files = manifests(**{"workspace.yaml": workspace_manifest("acme")})
    async with http.post(f"{control.url}/v1/artifacts", json=json_upload("buying", files)) as response:
        assert response.status == 200, await response.text()
        registered = await response.json()
    async with http.get(f"{control.url}/v1/artifacts/{registered['artifact_id']}") as response:
        envelope = artifacts.ArtifactEnvelope.model_validate(await response.json())
    async with http.get(f"{control.url}/v1/snapshot", params={"workspace": "acme"}) as response:
        assert response.status == 200, await response.text()
        snapshot = artifacts.Snapshot.model_validate(await response.json())

    assert envelope.artifact_id == registered["artifact_id"]
    assert envelope.sha256 == registered["sha256"]
    assert {f.path for f in envelope.files} == set(files)
    assert snapshot.signing_key_id == envelope.signing_key_id
    (deployment,) = snapshot.deployments
    assert deployment.workspace_id == "acme"
    assert deployment.artifact_id == envelope.artifact_id
    assert deployment.sha256 == envelope.sha256
