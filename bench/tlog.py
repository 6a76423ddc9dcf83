"""Benchmark of the transparency log (``make bench``; ``make test`` runs it with ``--quick``).

The log is filled to 1k, 10k, 100k and 1M entries (``--quick``: 1k and 4k) through
``transparency.append`` in batches; at each size, measured in this run on the same database:

1. append: one entry in its own transaction with the signed tree head (what a registration adds),
   against a baseline that inserts the same leaf row into a plain table in its own transaction;
2. proof generation: an inclusion proof of a random leaf plus a consistency proof from a random
   older size (what ``GET /v1/log/proof?from_size=`` computes), against a baseline primary-key
   read of one leaf; proofs must stay logarithmic: their time at the largest size over the
   smallest is printed (target <= 2x while the log grows 1000x);
3. the pod's verification per pull that converges: the head's signature, the inclusion and the
   consistency proof (``logproof.verify_inclusion``), against the envelope verification the pod
   already did before (``verifying.verify_envelope`` of a 40-file, 200 KiB artifact).

Embedded Postgres in a temporary directory unless ``DAP_BENCH_DSN`` is set (a fresh database is
created in it either way).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from dap import embedded
from dap.config import canonical, tlog
from dap.control.storage import store
from dap.control.supply import transparency
from dap.control.trust import envelopes, signing
from dap.resource_pod import logproof, verifying

BATCH = 10_000


class Sizes(argparse.Namespace):
    sizes: list[int]
    samples: int
    quick: bool


def entry(i: int) -> dict[str, Any]:
    digest = hashlib.sha256(str(i).encode()).hexdigest()
    return {
        "type": "register",
        "app": f"app{i % 97}",
        "version": i // 97 + 1,
        "artifact_id": f"art-{digest[:24]}",
        "sha256": digest,
        "envelope_sha256": hashlib.sha256(digest.encode()).hexdigest(),
        "signing_key_id": "0123456789abcdef",
        "at": "2026-01-01T00:00:00Z",
    }


async def fill(pool: Any, upto: int, signer: signing.Signer) -> float:
    """Append entries until the log has ``upto``; return entries per second."""
    started = time.perf_counter()
    count = 0
    while (current := await transparency.size(pool)) < upto:
        n = min(BATCH, upto - current)
        async with pool.acquire() as conn, conn.transaction():
            await transparency.append(conn, [entry(current + i) for i in range(n)], signer=signer)
        count += n
    elapsed = time.perf_counter() - started
    return count / elapsed if elapsed else 0.0


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def measure_append(pool: Any, signer: signing.Signer, samples: int) -> tuple[float, float]:
    appends, baseline = [], []
    for _ in range(samples):
        e = entry(random.randrange(10**9))
        async with pool.acquire() as conn:
            started = time.perf_counter()
            async with conn.transaction():
                await transparency.append(conn, [e], signer=signer)
            appends.append(time.perf_counter() - started)
            started = time.perf_counter()
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO bench_plain (kind, data) VALUES ($1, $2)", "register", tlog.entry_data(e)
                )
            baseline.append(time.perf_counter() - started)
    return median_ms(appends), median_ms(baseline)


async def measure_proofs(pool: Any, size: int, samples: int) -> tuple[float, float, int]:
    proofs, baseline, lengths = [], [], 0
    for _ in range(samples):
        index = random.randrange(size)
        old = random.randrange(1, size)
        async with pool.acquire() as conn:
            started = time.perf_counter()
            inclusion = await transparency.inclusion(conn, index, size)
            consistency = await transparency.consistency(conn, old, size)
            proofs.append(time.perf_counter() - started)
            lengths = max(lengths, len(inclusion) + len(consistency))
            started = time.perf_counter()
            await transparency.leaf(conn, index)
            baseline.append(time.perf_counter() - started)
    return median_ms(proofs), median_ms(baseline), lengths


async def pull_answer(pool: Any, signer: signing.Signer, size: int) -> tuple[dict[str, Any], bytes, str, Any]:
    """A real proof answer for a registration of a real envelope appended at ``size``."""
    files = {f"assets/f{i}.txt": os.urandom(5 * 1024) for i in range(40)}
    hashes = {p: canonical.file_sha256(c) for p, c in files.items()}
    aggregate = canonical.aggregate_sha256(hashes)
    envelope = envelopes.build(
        app="bench",
        version=size,
        files=files,
        file_hashes=hashes,
        sha256=aggregate,
        prev_version=None,
        prev_sha256=None,
        created_at="2026-01-01T00:00:00Z",
        signer=signer,
    )
    body = signing.canonical_json(envelope)
    old = await transparency.latest_head(pool)
    assert old is not None
    async with pool.acquire() as conn, conn.transaction():
        (index,) = await transparency.append(
            conn,
            [
                transparency.registration_entry(
                    app="bench",
                    version=size,
                    artifact_id=envelope["artifact_id"],
                    sha256=aggregate,
                    envelope=body,
                    key_id=signer.key_id,
                    at=datetime.now(UTC),
                )
            ],
            signer=signer,
        )
    head = await transparency.latest_head(pool)
    assert head is not None
    answer = {
        "tree_head": head.as_json(),
        "leaf_index": index,
        "entry": json.loads((await transparency.leaf(pool, index)).data),  # type: ignore[union-attr]
        "inclusion": [h.hex() for h in await transparency.inclusion(pool, index, head.tree_size)],
        "consistency": [h.hex() for h in await transparency.consistency(pool, old.tree_size, head.tree_size)],
    }
    last = logproof.Head(old.tree_size, old.root, old.as_json())
    return answer, body, envelope["artifact_id"], (envelope, last)


def measure_pod(
    answer: dict[str, Any], body: bytes, artifact_id: str, extra: Any, signer: signing.Signer, samples: int
) -> tuple[float, float]:
    envelope, last = extra
    trusted = {signer.key_id: signer.public_key}
    deployment = {
        "workspace_id": "w",
        "artifact_id": artifact_id,
        "sha256": envelope["sha256"],
        "cluster_id": None,
    }
    checks, baseline = [], []
    for _ in range(samples):
        started = time.perf_counter()
        logproof.verify_inclusion(answer, envelope=body, artifact_id=artifact_id, trusted=trusted, last=last)
        checks.append(time.perf_counter() - started)
        started = time.perf_counter()
        verifying.verify_envelope(json.loads(body), trusted, deployment)  # type: ignore[arg-type]
        baseline.append(time.perf_counter() - started)
    return median_ms(checks), median_ms(baseline)


async def main(sizes: Sizes) -> int:
    with tempfile.TemporaryDirectory(prefix="dap-bench-tlog-") as tmp:
        server = os.environ.get("DAP_BENCH_DSN")
        handle = None
        if not server:
            server, handle = embedded.start(Path(tmp) / "pg")
        name = f"bench_tlog_{uuid.uuid4().hex[:8]}"
        admin = await asyncpg.connect(server)
        await admin.execute(f'CREATE DATABASE "{name}"')
        await admin.close()
        pool = await store.connect(embedded.dsn_for_database(server, name), min_size=1, max_size=2)
        try:
            await pool.execute("CREATE TABLE bench_plain (idx bigserial PRIMARY KEY, kind text, data bytea)")
            signer = signing.Signer.generate()
            first_proof = last_proof = 0.0
            print(
                f"{'entries':>9} {'fill/s':>9} {'append ms':>10} {'(x base)':>9} {'proof ms':>9}"
                f" {'(x base)':>9} {'hashes':>7} {'pod ms':>7} {'(x env)':>8}"
            )
            for size in sizes.sizes:
                rate = await fill(pool, size, signer)
                append_ms, insert_ms = await measure_append(pool, signer, sizes.samples)
                current = await transparency.size(pool)
                proof_ms, read_ms, hashes = await measure_proofs(pool, current, sizes.samples)
                answer, body, artifact_id, extra = await pull_answer(pool, signer, current)
                pod_ms, envelope_ms = measure_pod(answer, body, artifact_id, extra, signer, sizes.samples)
                first_proof = first_proof or proof_ms
                last_proof = proof_ms
                print(
                    f"{current:>9,} {rate:>9,.0f} {append_ms:>10.2f} {append_ms / insert_ms:>8.1f}x"
                    f" {proof_ms:>9.2f} {proof_ms / read_ms:>8.1f}x {hashes:>7} {pod_ms:>7.3f}"
                    f" {pod_ms / envelope_ms:>7.2f}x"
                )
            growth = last_proof / first_proof
            print(
                f"proof time, largest over smallest log: {growth:.2f}x while the log grew"
                f" {sizes.sizes[-1] // sizes.sizes[0]}x (target <= 2x"
                f"{'; not held with --quick' if sizes.quick else ''})"
            )
            return 0
        finally:
            await pool.close()
            admin = await asyncpg.connect(server)
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            await admin.close()
            if handle is not None:
                handle.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small and short: prove the benchmark runs")
    parser.add_argument("--max", type=int, default=1_000_000, help="largest log size (default 1M)")
    parsed = parser.parse_args(namespace=Sizes())
    if parsed.quick:
        parsed.sizes, parsed.samples = [1000, 4000], 20
    else:
        parsed.sizes = [s for s in (1000, 10_000, 100_000, 1_000_000) if s <= parsed.max]
        parsed.samples = 200
    sys.exit(asyncio.run(main(parsed)))
