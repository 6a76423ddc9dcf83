"""The Merkle tree of the transparency log (``dap.config.tlog``): RFC 9162 vectors and properties.

The vectors are Certificate Transparency's eight-leaf test tree (the same in trillian and Go's
``sumdb/tlog`` tests). The properties check, for every pair of sizes up to 40, that the proofs
built from stored perfect subtrees equal the RFC's recursive definitions, that they verify, and
that any tampering (a flipped byte, a dropped or extra hash, a wrong index, size or root) fails.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dap.config import tlog

DATA = [
    bytes.fromhex(x)
    for x in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
HASHES = [tlog.leaf_hash(d) for d in DATA]


def stored_nodes(leaves: list[bytes]) -> dict[tlog.Node, bytes]:
    """Every perfect subtree, built the way the control stores them: at each append."""
    nodes: dict[tlog.Node, bytes] = {}
    for index, leaf in enumerate(leaves):
        nodes[(0, index)] = leaf
        for node, left, right in tlog.completed_by(index):
            nodes[node] = tlog.node_hash(nodes[left], nodes[right])
    return nodes


def leaves_of(n: int) -> list[bytes]:
    return [tlog.leaf_hash(i.to_bytes(4, "big")) for i in range(n)]


def test_empty_tree_and_the_ct_roots() -> None:
    assert tlog.tree_hash([]).hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    for n, root in enumerate(ROOTS, start=1):
        assert tlog.tree_hash(HASHES[:n]).hex() == root
        nodes = stored_nodes(HASHES[:n])
        assert tlog.hashes_for([(0, n)], nodes) == [bytes.fromhex(root)]


def test_ct_inclusion_and_consistency_vectors() -> None:
    proof = tlog.inclusion_proof(0, HASHES)
    assert [p.hex() for p in proof] == [
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ]
    assert [p.hex() for p in tlog.consistency_proof(1, HASHES)] == [p.hex() for p in proof]
    assert [p.hex() for p in tlog.consistency_proof(6, HASHES)] == [
        "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ]
    assert [p.hex() for p in tlog.consistency_proof(2, HASHES[:5])] == [
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    ]


def test_every_proof_up_to_40_leaves_matches_the_rfc_and_verifies() -> None:
    leaves = leaves_of(40)
    nodes = stored_nodes(leaves)
    roots = [tlog.tree_hash(leaves[:n]) for n in range(41)]
    for n in range(1, 41):
        assert tlog.hashes_for(tlog.range_nodes(0, n) and [(0, n)], nodes) == [roots[n]]
        for i in range(n):
            proof = tlog.hashes_for(tlog.inclusion_ranges(i, n), nodes)
            assert proof == tlog.inclusion_proof(i, leaves[:n])
            tlog.verify_inclusion(i, n, leaves[i], proof, roots[n])
            assert len(proof) <= n.bit_length()
        for m in range(0, n + 1):
            proof = tlog.hashes_for(tlog.consistency_ranges(m, n), nodes)
            assert proof == tlog.consistency_proof(m, leaves[:n])
            tlog.verify_consistency(m, n, roots[m], roots[n], proof)


def _tampered(proof: list[bytes]) -> list[list[bytes]]:
    out: list[list[bytes]] = [proof[:-1], [*proof, proof[0] if proof else bytes(32)]]
    for k in range(len(proof)):
        flipped = bytearray(proof[k])
        flipped[k % 32] ^= 1
        out.append([*proof[:k], bytes(flipped), *proof[k + 1 :]])
    if len(proof) > 1:
        out.append(list(reversed(proof)))
    return out


def test_tampered_inclusion_proofs_fail() -> None:
    leaves = leaves_of(40)
    for n in range(1, 41):
        root = tlog.tree_hash(leaves[:n])
        for i in range(n):
            proof = tlog.inclusion_proof(i, leaves[:n])
            for bad in _tampered(proof):
                if bad == proof:
                    continue
                with pytest.raises(tlog.ProofError):
                    tlog.verify_inclusion(i, n, leaves[i], bad, root)
            with pytest.raises(tlog.ProofError):
                tlog.verify_inclusion(i, n, tlog.leaf_hash(b"forged"), proof, root)
            # (a wrong tree size alone may still verify when the tree's shape agrees, as in any
            # RFC 9162 verifier: the signed tree head binds size and root together)
            if n > 1:
                with pytest.raises(tlog.ProofError):
                    tlog.verify_inclusion((i + 1) % n, n, leaves[i], proof, root)
        with pytest.raises(tlog.ProofError):
            tlog.verify_inclusion(n, n, leaves[0], [], root)


def test_tampered_consistency_proofs_and_forks_fail() -> None:
    leaves = leaves_of(40)
    fork = [*leaves[:20], tlog.leaf_hash(b"rewritten"), *leaves[21:]]
    for n in range(2, 41):
        new_root = tlog.tree_hash(leaves[:n])
        for m in range(1, n):
            old_root = tlog.tree_hash(leaves[:m])
            proof = tlog.consistency_proof(m, leaves[:n])
            for bad in _tampered(proof):
                if bad == proof:
                    continue
                with pytest.raises(tlog.ProofError):
                    tlog.verify_consistency(m, n, old_root, new_root, bad)
            with pytest.raises(tlog.ProofError):
                tlog.verify_consistency(m, n, tlog.leaf_hash(b"x"), new_root, proof)
            if m > 20:  # a log that rewrote leaf 20, which the old head covers: no proof links them
                forked = tlog.consistency_proof(m, fork[:n])
                with pytest.raises(tlog.ProofError):
                    tlog.verify_consistency(m, n, old_root, tlog.tree_hash(fork[:n]), forked)
                with pytest.raises(tlog.ProofError):
                    tlog.verify_consistency(m, n, old_root, tlog.tree_hash(fork[:n]), proof)
    with pytest.raises(tlog.ProofError):
        tlog.verify_consistency(5, 4, tlog.EMPTY_ROOT, tlog.EMPTY_ROOT, [])
    with pytest.raises(tlog.ProofError):  # same size, different roots: a split view
        tlog.verify_consistency(3, 3, leaves[0], leaves[1], [])


def test_frontier_gives_every_root() -> None:
    leaves = leaves_of(70)
    frontier: list[tuple[int, bytes]] = []
    assert tlog.frontier_root(frontier) == tlog.EMPTY_ROOT
    for n, leaf in enumerate(leaves, start=1):
        frontier = tlog.frontier_push(frontier, leaf)
        assert tlog.frontier_root(frontier) == tlog.tree_hash(leaves[:n])
        assert [lvl for lvl, _ in frontier] == [lvl for lvl, _ in tlog.range_nodes(0, n)]


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=5000), st.data())
def test_large_trees_proofs_from_nodes_verify(size: int, data: st.DataObject) -> None:
    index = data.draw(st.integers(min_value=0, max_value=size - 1))
    old = data.draw(st.integers(min_value=0, max_value=size))
    leaves = leaves_of(size)
    nodes = stored_nodes(leaves)
    root = tlog.hashes_for([(0, size)], nodes)[0]
    inclusion = tlog.hashes_for(tlog.inclusion_ranges(index, size), nodes)
    tlog.verify_inclusion(index, size, leaves[index], inclusion, root)
    consistency = tlog.hashes_for(tlog.consistency_ranges(old, size), nodes)
    old_root = tlog.hashes_for([(0, old)], nodes)[0] if old else tlog.EMPTY_ROOT
    tlog.verify_consistency(old, size, old_root, root, consistency)
    # proofs stay logarithmic, and so does the number of stored nodes a proof reads
    assert len(inclusion) <= size.bit_length() and len(consistency) <= size.bit_length() + 1
    assert len(tlog.nodes_for(tlog.inclusion_ranges(index, size))) <= 2 * size.bit_length()


def test_parse_rejects_malformed_heads_and_proofs() -> None:
    with pytest.raises(tlog.ProofError):
        tlog.parse_head({"tree_size": -1, "root_hash": "00" * 32})
    with pytest.raises(tlog.ProofError):
        tlog.parse_head({"tree_size": True, "root_hash": "00" * 32})
    with pytest.raises(tlog.ProofError):
        tlog.parse_head({"tree_size": 1, "root_hash": "zz"})
    with pytest.raises(tlog.ProofError):
        tlog.parse_proof(["00" * 31])
    with pytest.raises(tlog.ProofError):
        tlog.parse_proof("nope")
    assert tlog.parse_head({"tree_size": 2, "root_hash": "ab" * 32}) == (2, bytes.fromhex("ab" * 32))
