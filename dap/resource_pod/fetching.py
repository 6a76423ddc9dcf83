"""The pod's HTTP client of the control plane: snapshots, artifacts, keys, evidence.

The pod speaks to the control plane over HTTP only (the import-linter forbids importing it), so
this is the one place that knows the paths and statuses of ``docs/control.md``:

- ``GET /v1/snapshot?workspace=ID`` with ``If-None-Match`` (304 = unchanged) and, in long-poll
  mode, ``wait=SECONDS`` (the control parks the request until a change or a ``POST /v1/poll``);
- ``GET /v1/artifacts/{id}``: the signed envelope bytes;
- ``GET /v1/keys``: the control's public keys (trusted by a ``--dev`` pod only);
- ``GET /v1/log/proof?artifact_id=ID&from_size=M``: the artifact's inclusion proof and the
  consistency proof from the pod's last accepted tree head (``logproof``);
- ``POST /v1/evidence``: ``{records: [...]}``, 202.

aiohttp's errors are translated here: connection failures, timeouts and 5xx become
``ControlUnreachable`` (transient), any other unexpected answer ``ProtocolError``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from dap import tracing
from dap.resource_pod import documents, errors, verifying
from dap.resource_pod.documents import KeyId

MAX_ERROR_TEXT = 300


@dataclass(frozen=True)
class SnapshotAnswer:
    """``body`` is ``None`` for a 304 (the snapshot named by ``etag`` is still current)."""

    body: bytes | None
    etag: str | None


class Client:
    """Calls to one control plane over a shared ``aiohttp.ClientSession``."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, *, timeout: float = 10.0) -> None:
        self._session = session
        self.base_url = base_url.rstrip("/")
        self._timeout = timeout

    async def _request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        ok: Sequence[int] = (200,),
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        body: Any = None,
        extra_time: float = 0.0,
    ) -> tuple[int, bytes, str | None]:
        url = self.base_url + path
        headers = dict(headers or {})
        tracing.inject(headers)  # the control's span of this call joins the pull's trace
        try:
            async with self._session.request(
                method,
                url,
                params=params,
                headers=headers,
                json=body,
                timeout=aiohttp.ClientTimeout(total=self._timeout + extra_time),
            ) as response:
                data = await response.read()
                status = response.status
                etag = response.headers.get("ETag")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise errors.ControlUnreachable(
                f"cannot reach the control plane at {self.base_url} ({what}): "
                f"{type(exc).__name__} {exc}".rstrip()
            ) from exc
        if status in ok:
            return status, data, etag
        detail = _detail(data)
        if status >= 500:
            raise errors.ControlUnreachable(f"{what}: the control plane answered {status}: {detail}")
        raise errors.ProtocolError(f"{what}: the control plane answered {status}: {detail}")

    async def snapshot(self, workspace: str, *, etag: str | None, wait: float = 0.0) -> SnapshotAnswer:
        params = {"workspace": workspace}
        if wait > 0:
            params["wait"] = f"{wait:g}"
        status, data, new_etag = await self._request(
            "GET",
            "/v1/snapshot",
            what="snapshot",
            ok=(200, 304),
            params=params,
            headers={"If-None-Match": etag} if etag else None,
            extra_time=wait,
        )
        if status == 304:
            return SnapshotAnswer(None, new_etag or etag)
        return SnapshotAnswer(data, new_etag)

    async def artifact(self, artifact_id: str) -> bytes:
        _, data, _ = await self._request(
            "GET", f"/v1/artifacts/{artifact_id}", what=f"artifact {artifact_id}"
        )
        return data

    async def log_proof(self, artifact_id: str, *, from_size: int | None) -> bytes:
        params = {"artifact_id": artifact_id}
        if from_size is not None:
            params["from_size"] = str(from_size)
        _, data, _ = await self._request(
            "GET", "/v1/log/proof", what=f"log proof of {artifact_id}", params=params
        )
        return data

    async def keys(self) -> dict[KeyId, bytes]:
        _, data, _ = await self._request("GET", "/v1/keys", what="keys")
        document = documents.json_object(data, "key list")
        entries = document.get("keys")
        if not isinstance(entries, list):
            raise errors.ProtocolError("the key list has no 'keys'")
        try:
            return verifying.trusted_keys(
                str(e["public_key"])
                for e in entries
                if isinstance(e, dict) and e.get("algorithm") == "ed25519"
            )
        except errors.ConfigError as exc:
            raise errors.ProtocolError(f"the control plane published an invalid key: {exc}") from exc

    async def send_evidence(self, records: Sequence[Any]) -> None:
        await self._request(
            "POST", "/v1/evidence", what="evidence", ok=(200, 202), body={"records": list(records)}
        )


def _detail(data: bytes) -> str:
    """The ``detail`` of a problem document, else the start of the body."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return data[:MAX_ERROR_TEXT].decode("utf-8", "replace") or "(empty body)"
    if isinstance(document, dict) and isinstance(document.get("detail"), str):
        return str(document["detail"])[:MAX_ERROR_TEXT]
    return str(document)[:MAX_ERROR_TEXT]
