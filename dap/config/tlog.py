"""The transparency-log contract shared by the control (which appends) and the pod (which verifies).

An RFC 9162 (Certificate Transparency v2) Merkle tree over SHA-256, as Go's checksum database and
Sigstore's Rekor use it. Both sides must compute the same bytes, so the definitions live here
once, beside ``canonical`` (the pod may not import ``dap.control``). Everything is pure.

- a leaf's data is the canonical JSON of its entry; its hash is ``SHA-256(0x00 || data)``;
- an interior node is ``SHA-256(0x01 || left || right)``;
- the tree hash of ``n`` leaves splits at the largest power of two smaller than ``n`` (§2.1.1);
- inclusion and consistency proofs are the lists of subtree hashes of §2.1.3.1 and §2.1.4.1,
  verified with the algorithms of §2.1.3.2 and §2.1.4.2;
- a signed tree head is ``{log, tree_size, root_hash (hex), timestamp, signing_key_id,
  signature}``, signed like an envelope (``canonical.signing_message``).

Storage works with *perfect subtrees*: node ``(level, index)`` covers leaves
``[index * 2**level, (index + 1) * 2**level)``. Once written it never changes, so the control
stores each one when it becomes complete (at most ``log2 n`` per append) and any proof is a fold
of ``O(log n)`` stored nodes (``range_nodes``) instead of a walk over the leaves. The recursive
``tree_hash``/``inclusion_proof``/``consistency_proof`` are the RFC's definitions, kept as the
reference that the node-based answers are tested against.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from dap.config import canonical

HASH_BYTES = 32
LOG_NAME = "dap"

Node = tuple[int, int]  # (level, index): the perfect subtree of 2**level leaves at that index
Range = tuple[int, int]  # [start, end) of leaf indices


class ProofError(ValueError):
    """A proof or tree head that does not verify, or a request outside the tree."""


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


EMPTY_ROOT = hashlib.sha256(b"").digest()


def entry_data(entry: Mapping[str, Any]) -> bytes:
    """The leaf data of a log entry: its canonical JSON."""
    return canonical.canonical_json(dict(entry))


def entry_hash(entry: Mapping[str, Any]) -> bytes:
    return leaf_hash(entry_data(entry))


def split(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


# --- the RFC's recursive definitions (reference; O(n)) ----------------------------------------


def tree_hash(leaves: Sequence[bytes]) -> bytes:
    """MTH over leaf *hashes*."""
    if not leaves:
        return EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = split(len(leaves))
    return node_hash(tree_hash(leaves[:k]), tree_hash(leaves[k:]))


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PATH(m, D[n]) over leaf hashes."""
    return [tree_hash(leaves[a:b]) for a, b in inclusion_ranges(index, len(leaves))]


def consistency_proof(old: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) over leaf hashes."""
    return [tree_hash(leaves[a:b]) for a, b in consistency_ranges(old, len(leaves))]


# --- proofs as leaf ranges, then as stored perfect subtrees ------------------------------------


def inclusion_ranges(index: int, size: int) -> list[Range]:
    """The leaf ranges whose tree hashes make up PATH(index, D[size]), in proof order."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of size {size}")
    out: list[Range] = []
    start, end = 0, size
    while end - start > 1:
        k = split(end - start)
        if index < start + k:
            out.append((start + k, end))
            end = start + k
        else:
            out.append((start, start + k))
            start += k
    out.reverse()
    return out


def consistency_ranges(old: int, size: int) -> list[Range]:
    """The leaf ranges whose tree hashes make up PROOF(old, D[size]), in proof order."""
    if not 0 <= old <= size:
        raise ProofError(f"a tree of size {old} cannot be a prefix of one of size {size}")
    if old in (0, size):
        return []
    out: list[Range] = []
    start, end, complete = 0, size, True
    m = old
    while m != end - start:
        k = split(end - start)
        if m <= k:
            out.append((start + k, end))
            end = start + k
        else:
            out.append((start, start + k))
            start += k
            m -= k
            complete = False
    if not complete:
        out.append((start, end))
    out.reverse()
    return out


def range_nodes(start: int, end: int) -> list[Node]:
    """The perfect subtrees, left to right, whose fold is MTH(D[start:end]).

    Valid for the ranges of a tree (``start`` aligned to a power of two at least ``end - start``),
    which is every range the proofs and the root use.
    """
    out: list[Node] = []
    while start < end:
        size = end - start
        level = size.bit_length() - 1
        if size == 1 << level:
            out.append((level, start >> level))
            break
        k = split(size)
        out.append((k.bit_length() - 1, start // k))
        start += k
    return out


def fold(hashes: Sequence[bytes]) -> bytes:
    """Combine the hashes of ``range_nodes`` (left to right) into the range's tree hash."""
    if not hashes:
        return EMPTY_ROOT
    acc = hashes[-1]
    for left in reversed(hashes[:-1]):
        acc = node_hash(left, acc)
    return acc


def nodes_for(ranges: Sequence[Range]) -> set[Node]:
    return {node for a, b in ranges for node in range_nodes(a, b)}


def hashes_for(ranges: Sequence[Range], nodes: Mapping[Node, bytes]) -> list[bytes]:
    """Each range's tree hash from stored perfect subtrees; ``KeyError`` if one is missing."""
    return [fold([nodes[n] for n in range_nodes(a, b)]) for a, b in ranges]


def completed_by(index: int) -> list[tuple[Node, Node, Node]]:
    """The perfect subtrees that appending leaf ``index`` completes, as ``(node, left, right)``.

    Level 0 (the leaf itself) is not listed; each entry's children exist once the previous
    entries are stored, so the caller computes them in order.
    """
    out: list[tuple[Node, Node, Node]] = []
    level, i = 0, index
    while i % 2 == 1:
        out.append(((level + 1, i // 2), (level, i - 1), (level, i)))
        level, i = level + 1, i // 2
    return out


# --- verification (RFC 9162 §2.1.3.2 and §2.1.4.2) --------------------------------------------


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of size {size}")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("the inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the inclusion proof is too short")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    """Raise ``ProofError`` unless ``leaf`` is leaf ``index`` of the tree ``(size, root)``."""
    if root_from_inclusion(index, size, leaf, proof) != root:
        raise ProofError(f"leaf {index} is not included in the tree of size {size} with that root")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Raise ``ProofError`` unless tree ``(new_size, new_root)`` extends ``(old_size, old_root)``."""
    if not 0 <= old_size <= new_size:
        raise ProofError(f"a tree of size {new_size} cannot extend one of size {old_size}")
    if old_size == new_size:
        if proof:
            raise ProofError("a proof between trees of the same size must be empty")
        if old_root != new_root:
            raise ProofError(f"two different roots for the tree of size {old_size}")
        return
    if old_size == 0:
        if proof:
            raise ProofError("a proof from the empty tree must be empty")
        return
    if not proof:
        raise ProofError("the consistency proof is empty")
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # an exact power of two: the old root is a node of the new tree
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0 or fr != old_root or sr != new_root:
        raise ProofError(f"the tree of size {new_size} is not an extension of the tree of size {old_size}")


# --- compact ranges: a monitor's running root --------------------------------------------------


def frontier_push(frontier: list[tuple[int, bytes]], leaf: bytes) -> list[tuple[int, bytes]]:
    """Append a leaf hash to the perfect subtrees ``[(level, hash)]`` of the tree so far."""
    out = [*frontier, (0, leaf)]
    while len(out) >= 2 and out[-1][0] == out[-2][0]:
        (level, left), (_, right) = out[-2], out[-1]
        out[-2:] = [(level + 1, node_hash(left, right))]
    return out


def frontier_root(frontier: Sequence[tuple[int, bytes]]) -> bytes:
    return fold([h for _, h in frontier])


# --- signed tree heads --------------------------------------------------------------------------


def head_document(tree_size: int, root: bytes, timestamp: str, log: str = LOG_NAME) -> dict[str, Any]:
    """The unsigned tree head; sign it with the control's signer."""
    return {
        "log": log,
        "tree_size": tree_size,
        "root_hash": root.hex(),
        "timestamp": timestamp,
        "signing_key_id": "",
        "signature": "",
    }


def parse_head(document: Mapping[str, Any]) -> tuple[int, bytes]:
    """``(tree_size, root)`` of a tree head document; ``ProofError`` if malformed."""
    size = document.get("tree_size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ProofError("the tree head has no valid tree_size")
    return size, parse_hash(document.get("root_hash"), "root_hash")


def parse_hash(value: Any, what: str = "hash") -> bytes:
    try:
        raw = bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != HASH_BYTES:
        raise ProofError(f"{what} is not a hex SHA-256")
    return raw


def parse_proof(value: Any, what: str = "proof") -> list[bytes]:
    if not isinstance(value, list) or len(value) > 128:
        raise ProofError(f"the {what} is not a list of hashes")
    return [parse_hash(v, f"an element of the {what}") for v in value]
