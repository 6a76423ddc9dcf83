"""A client of a control's transparency log that trusts nothing but a public key.

Used by ``dap control log verify|monitor`` (and usable by anyone: it needs HTTP and a key, not
the database). The checks, with ``dap.config.tlog``:

- every tree head is signed by a trusted key;
- ``audit``: the entries, downloaded page by page and folded into a compact range (the perfect
  subtrees of the tree so far, ``tlog.frontier_push``), give exactly the signed root — so the
  entries shown are the ones the head commits to, none hidden, none changed;
- ``advance`` (the monitor's round): the new head is no smaller than the last one seen, the
  control's consistency proof between them verifies, and the new entries folded into the saved
  compact range give the new root. A control that rewrote history, or shows this monitor a fork,
  fails one of these (``ForkError``).

State (``MonitorState``) is the last verified head and its compact range: ``O(log n)`` hashes,
saved atomically between rounds, so a monitor never downloads an entry twice.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from dap.config import tlog
from dap.control import errors
from dap.control.ids import KeyId
from dap.control.trust import signing

PAGE = 1000
STATE_FORMAT = 1


ForkError = errors.LogInconsistentError  # not an extension of what was seen, or entries off the root


@dataclass
class MonitorState:
    head: dict[str, Any] | None = None
    frontier: list[tuple[int, bytes]] = field(default_factory=list)

    @property
    def tree_size(self) -> int:
        return int(self.head["tree_size"]) if self.head else 0

    def as_json(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "head": self.head,
            "frontier": [[level, digest.hex()] for level, digest in self.frontier],
        }

    @classmethod
    def load(cls, path: Path) -> MonitorState:
        try:
            document = json.loads(path.read_bytes())
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            raise errors.ControlError(f"cannot read the monitor state {path}: {exc}") from exc
        if not isinstance(document, dict) or document.get("format") != STATE_FORMAT:
            raise errors.ControlError(f"{path} is not a monitor state file")
        try:
            frontier = [(int(level), tlog.parse_hash(h)) for level, h in document["frontier"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise errors.ControlError(f"{path} is malformed: {exc}") from exc
        return cls(head=document.get("head"), frontier=frontier)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(self.as_json(), handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)


class LogClient:
    def __init__(
        self, session: aiohttp.ClientSession, control_url: str, trusted: Mapping[KeyId, bytes]
    ) -> None:
        self.session = session
        self.base = control_url.rstrip("/")
        self.trusted = dict(trusted)

    async def _get(self, path: str, **params: Any) -> Any:
        url = self.base + path
        try:
            async with self.session.get(url, params={k: str(v) for k, v in params.items()}) as response:
                text = await response.text()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise errors.UpstreamError(f"cannot reach {url}: {exc or type(exc).__name__}") from exc
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise errors.UpstreamError(f"{url} answered {status} with no JSON") from exc
        if status != 200:
            detail = body.get("detail") if isinstance(body, dict) else body
            raise errors.UpstreamError(f"{url} answered {status}: {detail}")
        return body

    async def trust_published_keys(self) -> list[KeyId]:
        """Trust on first use: the control's ``/v1/keys`` (when no key was given)."""
        body = await self._get("/v1/keys")
        for entry in body.get("keys", []):
            raw = signing.parse_public_key(str(entry.get("public_key", "")))
            self.trusted[signing.key_id(raw)] = raw
        return sorted(self.trusted)

    def check_head(self, document: Any) -> tuple[int, bytes]:
        if not isinstance(document, dict):
            raise ForkError("the control sent no tree head")
        try:
            signing.verify(document, self.trusted)
        except errors.SignatureError as exc:
            raise ForkError(f"the tree head is not signed by a trusted key: {exc.detail}") from exc
        try:
            return tlog.parse_head(document)
        except tlog.ProofError as exc:
            raise ForkError(f"the tree head is malformed: {exc}") from exc

    async def head(self) -> dict[str, Any]:
        document: dict[str, Any] = await self._get("/v1/log/head")
        self.check_head(document)
        return document

    async def entries(self, start: int, end: int, app: str | None = None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while start < end:
            params: dict[str, Any] = {"start": start, "end": end, "limit": PAGE}
            if app:
                params["app"] = app
            page = (await self._get("/v1/log/entries", **params))["entries"]
            if not page:
                if app:
                    break
                raise ForkError(f"the control withholds entries from {start} on (the head covers {end})")
            out.extend(page)
            start = int(page[-1]["index"]) + 1
        return out

    async def fold(
        self,
        frontier: list[tuple[int, bytes]],
        start: int,
        end: int,
        show: Callable[[dict[str, Any]], None],
    ) -> list[tuple[int, bytes]]:
        """Push entries ``[start, end)`` onto ``frontier``, checking their order and leaf hashes."""
        for item in await self.entries(start, end):
            if item.get("index") != start:
                raise ForkError(f"entry {item.get('index')} came where entry {start} was due")
            entry = item.get("entry")
            if not isinstance(entry, dict):
                raise ForkError(f"entry {start} is not an object")
            frontier = tlog.frontier_push(frontier, tlog.entry_hash(entry))
            show(item)
            start += 1
        return frontier

    async def audit(self, show: Callable[[dict[str, Any]], None]) -> MonitorState:
        """Download the whole log and check it against its signed head."""
        head = await self.head()
        size, root = tlog.parse_head(head)
        frontier = await self.fold([], 0, size, show)
        if tlog.frontier_root(frontier) != root:
            raise ForkError(
                f"the {size} entries do not give the signed root: the log is not what its head says"
            )
        return MonitorState(head=head, frontier=frontier)

    async def advance(self, state: MonitorState, show: Callable[[dict[str, Any]], None]) -> MonitorState:
        """One monitor round from ``state`` (a fresh state audits from the start)."""
        if state.head is None:
            return await self.audit(show)
        old_size, old_root = self.check_head(state.head)
        head = await self.head()
        size, root = tlog.parse_head(head)
        if size < old_size:
            raise ForkError(f"the log shrank from {old_size} to {size} entries: history was rewritten")
        answer = await self._get("/v1/log/consistency", first=old_size, second=size)
        try:
            tlog.verify_consistency(old_size, size, old_root, root, tlog.parse_proof(answer.get("proof")))
        except tlog.ProofError as exc:
            raise ForkError(
                f"the head of size {size} is not an extension of the head of size {old_size} "
                f"seen before: {exc}"
            ) from exc
        frontier = await self.fold(state.frontier, old_size, size, show)
        if tlog.frontier_root(frontier) != root:
            raise ForkError(f"entries {old_size}..{size - 1} do not give the signed root")
        return MonitorState(head=head, frontier=frontier)

    async def check_artifact(self, artifact_id: str) -> dict[str, Any]:
        """The artifact's registration entry, its inclusion proof and its envelope's hash."""
        answer = await self._get("/v1/log/proof", artifact_id=artifact_id)
        size, root = self.check_head(answer.get("tree_head"))
        entry = answer.get("entry")
        if not isinstance(entry, dict):
            raise ForkError("the proof has no entry")
        try:
            tlog.verify_inclusion(
                int(answer["leaf_index"]),
                size,
                tlog.entry_hash(entry),
                tlog.parse_proof(answer["inclusion"]),
                root,
            )
        except (tlog.ProofError, KeyError, TypeError, ValueError) as exc:
            raise ForkError(f"the inclusion proof of {artifact_id} does not verify: {exc}") from exc
        return {"leaf_index": answer["leaf_index"], "tree_size": size, "entry": entry}
