"""A signing policy at the pod: it counts the approvals itself and refuses an envelope short of them.

The control here holds a weaker policy (1 of 3) than the pod was given (2 of 3), as a compromised
or misconfigured control would: the control accepts a one-approval registration, the pod refuses
it with a ``policy`` violation and keeps serving, then takes a properly approved version.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import aiohttp

from dap.config import approvals, canonical
from dap.control.trust import signing
from dap.resource_pod.converging import Phase
from tests.control.test_cli import run
from tests.resource_pod.conftest import (
    WORKSPACE,
    Control,
    Proxy,
    StartPod,
    pod_settings,
    spec_files,
    wait_for,
)
from tests.resource_pod.test_end_to_end import running, serves_price


async def register(control: Control, files: dict[str, bytes], *approvers: signing.Signer) -> dict[str, Any]:
    digest = canonical.aggregate_sha256({p: canonical.file_sha256(c) for p, c in files.items()})
    body = {
        "app": "shop",
        "workspaces": [WORKSPACE],
        "files": [{"path": p, "content": base64.b64encode(c).decode()} for p, c in files.items()],
        "approvals": [approvals.approve(bytes.fromhex(s.seed_hex()), "shop", digest) for s in approvers],
    }
    async with control.http.post(f"{control.url}/v1/artifacts", json=body) as response:
        answer: dict[str, Any] = await response.json()
        assert response.status == 200, answer
        return answer


async def test_a_two_of_three_policy_refuses_a_one_signature_envelope_at_the_pod(
    control: Control, proxy: Proxy, start_pod: StartPod, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    a, b, c = (signing.Signer.generate() for _ in range(3))
    keys = [arg for s in (a, b, c) for arg in ("--key", s.public_key.hex())]
    code, _, err = await run(
        "control", "policy", "set", "--app", "shop", *keys, "--threshold", "1", "--db", control.dsn
    )
    assert code == 0, err
    v1 = await register(control, spec_files(), a, b)
    policy = {s.key_id: s.public_key for s in (a, b, c)}
    pod = await start_pod(
        pod_settings(proxy.url, tmp_path, control.signer, policy_keys=policy, policy_threshold=2)
    )
    await wait_for(lambda: running(pod, v1), what="v1 (2 approvals) loaded")

    v2 = await register(control, spec_files("price:integer"), a)  # the control's 1 of 3 lets it in
    await wait_for(lambda: pod.pod.status.phase is Phase.FAILED, what="refused by the pod")
    assert running(pod, v1) and not await serves_price(http, pod)
    assert "1 valid approval(s); the signing policy needs 2 of 3" in pod.pod.status.message

    async def violation() -> bool:
        return any(
            r["kind"] == "policy" and r.get("artifact_id") == v2["artifact_id"]
            for r in await control.evidence("violation")
        )

    await wait_for(violation, what="policy violation at the control")
    v3 = await register(control, spec_files("price:integer", "note:string"), b, c)
    await wait_for(lambda: running(pod, v3), what="v3 (2 approvals) loaded")
    assert await serves_price(http, pod)
