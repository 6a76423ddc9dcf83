"""The pod's memory of the transparency log: the last accepted tree head, checked and kept.

The I/O shell around ``logproof`` (pure): it asks the control for an artifact's proof, lets
``logproof`` verify it against the last accepted head, and remembers the new head in memory and
in ``<state-dir>/<workspace>/log.json`` (re-verified at boot), so split-view refusal survives
restarts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from dap.resource_pod import documents, errors, fetching, logproof, persisting
from dap.resource_pod.documents import KeyId

log = logging.getLogger(__name__)


class LogKeeper:
    def __init__(
        self, client: fetching.Client, state_dir: persisting.StateDir, trusted: Mapping[KeyId, bytes]
    ) -> None:
        self.client = client
        self.state_dir = state_dir
        self.trusted = trusted  # the pod's dict: keys it learns later count here too
        self.head: logproof.Head | None = None

    async def restore(self) -> None:
        try:
            saved = await asyncio.to_thread(self.state_dir.load_log_head)
            if saved is not None:
                self.head = logproof.verify_head(saved, self.trusted)
        except (errors.StateDirError, errors.VerificationError) as exc:
            log.error(
                "the saved tree head is unusable; starting without one", extra={"ctx": {"error": str(exc)}}
            )

    async def check(self, artifact_id: str, envelope: bytes) -> logproof.Head:
        """The artifact's inclusion in the log and the log's consistency with the last head."""
        last = self.head
        try:
            body = await self.client.log_proof(artifact_id, from_size=last.tree_size if last else None)
            answer = documents.json_object(body, f"log proof of {artifact_id}")
        except errors.ProtocolError as exc:
            raise errors.LogProofInvalid(
                f"the control gives no transparency-log proof for {artifact_id}: {exc}"
            ) from exc
        return logproof.verify_inclusion(
            answer, envelope=envelope, artifact_id=artifact_id, trusted=self.trusted, last=last
        )

    async def accept(self, head: logproof.Head) -> None:
        if self.head is not None and head.tree_size == self.head.tree_size:
            return
        self.head = head
        try:
            await asyncio.to_thread(self.state_dir.save_log_head, dict(head.document))
        except errors.StateDirError as exc:
            log.warning("cannot remember the tree head", extra={"ctx": {"error": str(exc)}})
