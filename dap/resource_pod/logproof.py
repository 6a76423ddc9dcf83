"""The pod's check of the transparency log: the artifact is in it, and the log never forked. Pure.

Before loading an artifact the pod asks the control for ``GET /v1/log/proof?artifact_id=ID
&from_size=M`` (``M`` the size of the last tree head it accepted) and checks, with the contract
of ``dap.config.tlog`` and its own trusted keys:

1. the tree head is signed by a trusted key (the control's word is not enough: its signature is);
2. the entry is a registration of this artifact whose ``envelope_sha256`` is the SHA-256 of the
   exact envelope bytes the pod fetched, so what it loads is what the public log records;
3. the inclusion proof leads from that entry's leaf hash to the head's root;
4. the head extends the last accepted one: a consistency proof from it verifies (equal sizes need
   equal roots). A head that does not is a *split view* — the control shows this pod a history
   other than the one it showed before, the mark of a compromised or forked log.

Failures 1-3 are ``LogProofInvalid`` (violation ``log``), failure 4 is ``SplitView``
(violation ``split_view``). The accepted head is returned for the pod to remember (and persist).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dap.config import tlog
from dap.resource_pod import errors, verifying
from dap.resource_pod.documents import KeyId


@dataclass(frozen=True)
class Head:
    """A verified, signed tree head."""

    tree_size: int
    root: bytes
    document: Mapping[str, Any]


def verify_head(document: Any, trusted: Mapping[KeyId, bytes]) -> Head:
    if not isinstance(document, dict):
        raise errors.LogProofInvalid("the answer carries no tree head")
    try:
        verifying.verify_signature(document, trusted)
    except errors.SignatureInvalid as exc:
        raise errors.LogProofInvalid(f"the tree head is not signed by a trusted key: {exc}") from exc
    try:
        size, root = tlog.parse_head(document)
    except tlog.ProofError as exc:
        raise errors.LogProofInvalid(f"the tree head is malformed: {exc}") from exc
    return Head(size, root, dict(document))


def check_extends(last: Head | None, head: Head, proof: Any) -> None:
    """``SplitView`` unless ``head`` extends ``last`` by the consistency ``proof``."""
    if last is None:
        return
    if head.tree_size < last.tree_size:
        raise errors.SplitView(
            f"the log shrank: tree size {head.tree_size} after {last.tree_size} was accepted"
        )
    try:
        tlog.verify_consistency(
            last.tree_size,
            head.tree_size,
            last.root,
            head.root,
            tlog.parse_proof(proof or [], "consistency proof"),
        )
    except tlog.ProofError as exc:
        raise errors.SplitView(
            f"the tree head of size {head.tree_size} does not extend the accepted one of size "
            f"{last.tree_size}: {exc}"
        ) from exc


def verify_inclusion(
    answer: Mapping[str, Any],
    *,
    envelope: bytes,
    artifact_id: str,
    trusted: Mapping[KeyId, bytes],
    last: Head | None,
) -> Head:
    """Check a ``/v1/log/proof`` answer for ``artifact_id`` (see the module); return its head."""
    head = verify_head(answer.get("tree_head"), trusted)
    entry = answer.get("entry")
    index = answer.get("leaf_index")
    if not isinstance(entry, dict) or not isinstance(index, int) or isinstance(index, bool):
        raise errors.LogProofInvalid("the log proof has no entry or leaf index")
    if entry.get("type") != "register" or entry.get("artifact_id") != artifact_id:
        raise errors.LogProofInvalid(f"the log entry {index} is not the registration of {artifact_id}")
    if entry.get("envelope_sha256") != hashlib.sha256(envelope).hexdigest():
        raise errors.LogProofInvalid(
            f"the envelope of {artifact_id} is not the one the transparency log records"
        )
    try:
        tlog.verify_inclusion(
            index,
            head.tree_size,
            tlog.entry_hash(entry),
            tlog.parse_proof(answer.get("inclusion")),
            head.root,
        )
    except tlog.ProofError as exc:
        raise errors.LogProofInvalid(f"the inclusion proof of {artifact_id} does not verify: {exc}") from exc
    check_extends(last, head, answer.get("consistency"))
    return head
