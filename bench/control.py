"""Benchmark of the control plane (``make bench``; ``make test`` runs it with ``--quick``).

1. Snapshot polls answered 304 per second by ``dap control serve`` (standalone, dev) against a
   baseline aiohttp handler that returns a constant 304, both measured in this run, each server in
   its own process, the same client load (keep-alive connections on 127.0.0.1). Target >= 0.8x.
2. Registration of a 5 MiB artifact of 200 files over HTTP (JSON body), wall time, with the share
   of it spent hashing (per-file and aggregate SHA-256) and signing (canonical JSON + ed25519),
   those two timed on the same files in this process.

Embedded Postgres in a temporary directory unless ``DAP_BENCH_DSN`` is set. ``--quick`` runs every
step on a small artifact for a fraction of a second, to prove the benchmark still runs; its ratio
is printed but not held to the target (a loaded machine would make it flaky).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import random
import socket
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from dap import embedded
from dap.config import canonical
from dap.control.trust import envelopes, signing

CONCURRENCY = 32
MIB = 1024 * 1024


class Sizes(argparse.Namespace):
    seconds: float  # per 304 measurement
    rounds: int
    files: int  # asset files of each registered artifact, 5 MiB in all (--quick: 0.25 MiB)
    mib: float
    quick: bool


BASELINE = """
import sys
from aiohttp import web
async def handler(request):
    return web.Response(status=304, headers={"ETag": '"1.1"'})
app = web.Application()
app.router.add_get("/v1/snapshot", handler)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_ready(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(300):
            try:
                async with session.get(url) as response:
                    if response.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


async def hammer(url: str, etag: str, seconds: float) -> float:
    """304 answers per second with CONCURRENCY keep-alive workers."""
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    count = 0
    async with aiohttp.ClientSession(connector=connector) as session:
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal count
            while time.perf_counter() < deadline:
                async with session.get(url, headers={"If-None-Match": etag}) as response:
                    if response.status != 304:
                        raise RuntimeError(f"expected 304, got {response.status}")
                    await response.read()
                    count += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return count / (time.perf_counter() - started)


def make_files(seed: int, sizes: Sizes) -> dict[str, bytes]:
    rnd = random.Random(seed)
    files = {
        "buying/module.yaml": b"apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: buying}\n"
        b"spec: {title: Buying}\n",
        "buying/supplier.yaml": b"apiVersion: dap.io/v1\nkind: Entity\n"
        b"metadata: {name: supplier, module: buying}\nspec: {fields: [{name: title, type: string}]}\n",
    }
    size = int(sizes.mib * MIB) // sizes.files
    for index in range(sizes.files):
        files[f"assets/file-{index:03d}.bin"] = rnd.randbytes(size)
    return files


def hash_and_sign(files: dict[str, bytes], signer: signing.Signer) -> tuple[float, float]:
    started = time.perf_counter()
    hashes = {p: canonical.file_sha256(c) for p, c in files.items()}
    aggregate = canonical.aggregate_sha256(hashes)
    hashed = time.perf_counter()
    envelope = envelopes.build(
        app="bench",
        version=1,
        files=files,
        file_hashes=hashes,
        sha256=aggregate,
        prev_version=None,
        prev_sha256=None,
        created_at="2026-01-01T00:00:00Z",
        signer=signer,
    )
    signing.canonical_json(envelope)
    return hashed - started, time.perf_counter() - hashed


async def main(sizes: Sizes) -> int:
    with tempfile.TemporaryDirectory(prefix="dap-bench-") as tmp:
        dsn = os.environ.get("DAP_BENCH_DSN")
        handle = None
        if not dsn:
            dsn, handle = embedded.start(Path(tmp) / "pg")
        control_port, baseline_port = free_port(), free_port()
        dap = str(Path(sys.executable).parent / "dap")
        env = {**os.environ, "DAP_LOG_LEVEL": "warn"}
        control = await asyncio.create_subprocess_exec(
            *(dap, "control", "serve", "--mode", "standalone", "--dev", "--db", dsn),
            *("--host", "127.0.0.1", "--port", str(control_port)),
            env=env,
        )
        baseline = await asyncio.create_subprocess_exec(sys.executable, "-c", BASELINE, str(baseline_port))
        try:
            control_url = f"http://127.0.0.1:{control_port}"
            await wait_ready(f"{control_url}/health")
            await wait_ready(f"http://127.0.0.1:{baseline_port}/v1/snapshot")

            # Registration: three distinct versions.
            times = []
            async with aiohttp.ClientSession() as session:
                for seed in range(3):
                    files = make_files(seed, sizes)
                    body = {
                        "app": "bench",
                        "workspaces": ["acme"],
                        "files": [
                            {"path": p, "content": base64.b64encode(c).decode()} for p, c in files.items()
                        ],
                    }
                    started = time.perf_counter()
                    async with session.post(f"{control_url}/v1/artifacts", json=body) as response:
                        if response.status != 200:
                            raise RuntimeError(await response.text())
                        await response.read()
                    times.append(time.perf_counter() - started)
                async with session.get(
                    f"{control_url}/v1/snapshot", params={"workspace": "acme"}
                ) as response:
                    etag = response.headers["ETag"]
            files = make_files(0, sizes)
            hash_s, sign_s = hash_and_sign(files, signing.Signer.generate())
            size = sum(len(c) for c in files.values()) / MIB
            best = min(times)
            print(
                f"registration: {len(files)} files, {size:.2f} MiB: best {best * 1000:.0f} ms"
                f" (runs: {', '.join(f'{t * 1000:.0f}' for t in times)} ms)"
            )
            print(f"  hashing {hash_s * 1000:.1f} ms ({100 * hash_s / best:.0f}%),", end="")
            print(f" canonical JSON + signing {sign_s * 1000:.1f} ms ({100 * sign_s / best:.0f}%)")

            # 304 polls: alternate baseline and control, best of ROUNDS each.
            base_rates, control_rates = [], []
            await hammer(
                f"{control_url}/v1/snapshot?workspace=acme", etag, min(1.0, sizes.seconds)
            )  # warm-up
            for _ in range(sizes.rounds):
                base_rates.append(
                    await hammer(f"http://127.0.0.1:{baseline_port}/v1/snapshot", '"1.1"', sizes.seconds)
                )
                control_rates.append(
                    await hammer(f"{control_url}/v1/snapshot?workspace=acme", etag, sizes.seconds)
                )
            base, ctl = max(base_rates), max(control_rates)
            ratio = ctl / base
            print(
                f"snapshot 304: control {ctl:,.0f}/s vs baseline {base:,.0f}/s"
                f" -> {ratio:.2f}x (target >= 0.80x{'; not held with --quick' if sizes.quick else ''})"
            )
            return 0
        finally:
            for process in (control, baseline):
                process.terminate()
                await asyncio.wait_for(process.wait(), 10)
            if handle is not None:
                handle.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small and short: prove the benchmark runs")
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("DAP_BENCH_SECONDS", "4")))
    parsed = parser.parse_args(namespace=Sizes())
    parsed.rounds, parsed.files, parsed.mib = (1, 20, 0.25) if parsed.quick else (2, 198, 5.0)
    if parsed.quick:
        parsed.seconds = 0.3
    sys.exit(asyncio.run(main(parsed)))
