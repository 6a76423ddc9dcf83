"""Cluster mode: sync from the region, relay evidence to it.

``Agent`` runs two loops next to the HTTP server:

- sync (every ``sync_interval``, about 30 s): announce this cluster (``PUT /v1/clusters/{id}``
  with labels, maximum and the mean node CPU as load), then ``GET /v1/snapshot?cluster=ID`` with
  the ETag held; on 200 verify the snapshot's signature, fetch every artifact it names that is not
  cached yet, verify each (signature, file hashes, aggregate) and cache it, and only then switch
  to the new snapshot. A failure leaves the previous snapshot in service; pods never see a
  snapshot whose artifacts this cluster cannot serve.
- relay (every ``relay_interval``, about 60 s): send the outbox oldest first in batches; delete a
  batch only after the region answered 202. Records carry their idempotency ids, so a batch
  resent after a lost answer is stored once.

Each sync also takes the region's signed tree head (``GET /v1/log/head``), checks its signature
and, with the region's consistency proof, that it extends the last head this cluster anchored,
then records it as ``audit_anchor`` evidence (``log``, ``sequence`` = tree size, ``root_sha256``)
relayed like any other: the region's own evidence store then holds, from every cluster, the heads
it showed them, so a split view between clusters is visible by comparing anchors. A head that
does not extend the last one is not anchored and is reported as ``anchor_error``.

Trust: the region's public keys come from ``--trusted-key`` when given; otherwise they are
fetched from the region's ``GET /v1/keys`` on first contact and pinned in the database (trust on
first use; production deployments should pass the keys).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from datetime import UTC, datetime
from typing import Any

import aiohttp

from dap import tracing
from dap.config import tlog
from dap.control import errors
from dap.control.clusters import caches, live, registry
from dap.control.evidence import models, storing
from dap.control.ids import KeyId
from dap.control.serving import settings
from dap.control.storage import store
from dap.control.trust import envelopes, signing

log = logging.getLogger(__name__)


class Agent:
    def __init__(
        self,
        *,
        pool: store.Pool,
        config: settings.Settings,
        state: live.Live,
        trusted: dict[KeyId, bytes],
        session: aiohttp.ClientSession,
    ) -> None:
        if not config.region_url:
            raise errors.ControlError("cluster mode needs --region-url")
        self.pool = pool
        self.config = config
        self.live = state
        self.trusted = trusted
        self.session = session
        self.region = config.region_url.rstrip("/")
        self.last: dict[str, Any] = {
            "sync_at": None,
            "sync_error": None,
            "relay_at": None,
            "relay_error": None,
        }
        self._tasks: list[asyncio.Task[None]] = []
        self._anchored: tuple[int, bytes] | None = None  # (tree size, root) of the last anchor

    def status(self) -> dict[str, Any]:
        return dict(self.last)

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._loop("sync", self.sync_once, self.config.sync_interval)),
            asyncio.create_task(self._loop("relay", self.relay_once, self.config.relay_interval)),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _loop(self, name: str, step: Any, interval: float) -> None:
        while True:
            try:
                await step()
                self.last[f"{name}_at"] = datetime.now(UTC).isoformat()
                self.last[f"{name}_error"] = None
            except errors.ControlError as exc:
                self.last[f"{name}_error"] = exc.detail
                log.warning("%s with the region failed: %s", name, exc.detail)
            except Exception as exc:  # a loop must survive anything and retry next round
                self.last[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
                log.exception("%s with the region failed", name)
            await asyncio.sleep(interval)

    async def _request(self, method: str, path: str, **kwargs: Any) -> tuple[int, bytes, str | None]:
        timeout = aiohttp.ClientTimeout(total=self.config.upstream_timeout)
        headers = dict(kwargs.pop("headers", None) or {})
        tracing.inject(headers)  # the region's span of this call joins the sync's trace
        try:
            async with self.session.request(
                method, self.region + path, timeout=timeout, headers=headers, **kwargs
            ) as response:
                return response.status, await response.read(), response.headers.get("ETag")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise errors.UpstreamError(f"region {self.region} unreachable: {exc!r}") from exc

    async def _announce(self) -> None:
        load = await registry.cluster_load(self.pool, self.config.cluster_id)
        body = {
            "labels": dict(self.config.labels),
            "max_workspaces": self.config.max_workspaces,
            "status": "active",
            "load": load,
        }
        status, text, _ = await self._request("PUT", f"/v1/clusters/{self.config.cluster_id}", json=body)
        if status != 200:
            raise errors.UpstreamError(f"region refused the announcement ({status}): {text[:200]!r}")

    async def _ensure_keys(self) -> None:
        if self.trusted:
            return
        status, body, _ = await self._request("GET", "/v1/keys")
        if status != 200:
            raise errors.UpstreamError(f"region keys unavailable ({status})")
        published = [signing.parse_public_key(k["public_key"]) for k in json.loads(body)["keys"]]
        keys = {signing.key_id(k): k for k in published}
        await caches.add_trusted_keys(self.pool, keys)
        self.trusted.update(keys)
        log.info("pinned region keys", extra={"ctx": {"keys": sorted(keys)}})

    async def sync_once(self) -> bool:
        """One sync; return True when a new snapshot was taken into service."""
        attributes = {"dap.cluster": self.config.cluster_id}
        with tracing.span("cluster snapshot sync", kind="client", attributes=attributes):
            return await self._sync()

    async def _sync(self) -> bool:
        try:
            await self._announce()
        except errors.UpstreamError as exc:
            # A standalone region has no registry; pulling the snapshot matters more.
            self.last["announce_error"] = exc.detail
            log.warning("cluster announcement failed: %s", exc.detail)
        else:
            self.last["announce_error"] = None
        await self._ensure_keys()
        try:
            await self._anchor()
        except errors.ControlError as exc:  # the snapshot matters more; reported in the health
            self.last["anchor_error"] = exc.detail
            log.warning("tree head not anchored: %s", exc.detail)
        else:
            self.last["anchor_error"] = None
        headers = {"If-None-Match": self.live.region.etag} if self.live.region else {}
        status, body, etag = await self._request(
            "GET", "/v1/snapshot", params={"cluster": self.config.cluster_id}, headers=headers
        )
        if status == 304:
            return False
        if status != 200 or etag is None:
            raise errors.UpstreamError(f"region snapshot answered {status}: {body[:200]!r}")
        snapshot = json.loads(body)
        signing.verify(snapshot, self.trusted)
        cached = await caches.cached_artifact_ids(self.pool)
        for deployment in snapshot["deployments"]:
            if deployment["artifact_id"] not in cached:
                await self._fetch_artifact(deployment["artifact_id"])
                cached.add(deployment["artifact_id"])
        await caches.save_region_snapshot(self.pool, etag, body)
        self.live.set_region(live.RegionSnapshot(etag=etag, body=body, version=snapshot["version"]))
        log.info("snapshot synced", extra={"ctx": {"version": snapshot["version"], "etag": etag}})
        return True

    async def _anchor(self) -> None:
        status, body, _ = await self._request("GET", "/v1/log/head")
        if status != 200:
            raise errors.UpstreamError(f"region tree head unavailable ({status})")
        head = json.loads(body)
        signing.verify(head, self.trusted)
        try:
            size, root = tlog.parse_head(head)
            if self._anchored is not None:
                old_size, old_root = self._anchored
                if size == old_size and root == old_root:
                    return
                status, body, _ = await self._request(
                    "GET", "/v1/log/consistency", params={"first": old_size, "second": size}
                )
                proof = tlog.parse_proof(json.loads(body).get("proof")) if status == 200 else []
                tlog.verify_consistency(old_size, size, old_root, root, proof)
        except tlog.ProofError as exc:
            raise errors.LogInconsistentError(f"the region's log forked (split view): {exc}") from exc
        record = models.AuditAnchor(
            type="audit_anchor",
            id=f"anchor:{self.config.cluster_id}:{size}:{root.hex()[:16]}",
            at=datetime.now(UTC),
            cluster_id=self.config.cluster_id,
            log=str(head.get("log") or tlog.LOG_NAME),
            sequence=size,
            root_sha256=root.hex(),
        )
        async with self.pool.acquire() as conn, conn.transaction():
            await storing.insert(conn, [record], outbox=True)
        self._anchored = (size, root)

    async def _fetch_artifact(self, artifact_id: str) -> None:
        status, body, _ = await self._request("GET", f"/v1/artifacts/{artifact_id}")
        if status != 200:
            raise errors.UpstreamError(f"artifact {artifact_id} unavailable from the region ({status})")
        envelope = json.loads(body)
        files = await asyncio.to_thread(envelopes.verify, envelope, self.trusted)
        if envelope["artifact_id"] != artifact_id:
            raise errors.SignatureError(
                f"region answered artifact {envelope['artifact_id']} for {artifact_id}"
            )
        async with self.pool.acquire() as conn:
            await caches.cache_artifact(conn, envelope, body, {p: len(c) for p, c in files.items()})

    async def relay_once(self) -> int:
        """Relay outbox batches until it is empty; return how many records the region accepted."""
        relayed = 0
        while batch := await storing.outbox_batch(self.pool, self.config.relay_batch):
            records = [record for _, record in batch]
            key = hashlib.sha256("\n".join(r["id"] for r in records).encode()).hexdigest()
            status, body, _ = await self._request(
                "POST", "/v1/evidence", json={"records": records}, headers={"Idempotency-Key": key}
            )
            if status != 202:
                # Kept in the outbox: nothing is dropped, the next round retries.
                raise errors.UpstreamError(f"region refused an evidence batch ({status}): {body[:300]!r}")
            await storing.outbox_done(self.pool, batch[-1][0])
            relayed += len(records)
        return relayed
