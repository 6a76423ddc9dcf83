"""Benchmark: manifest validation scales linearly with the spec's size.

Generates specs of 200 and 400 entities x 30 fields (with relations between entities), loads
each through ``dap.config.load_files`` and prints the times, their ratio (target <= 2.2), and
where the time goes per stage (YAML parsing, JSON Schema, models, cross-reference rules).
``--quick`` (run by ``make test``) loads 20 and 40 entities and does not hold the ratio to its
target (at that size fixed costs dominate), to prove the benchmark runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from dap import config
from dap.config import manifests, schema, validation, yamls
from dap.config.specs import Origin, Spec

FIELDS_PER_ENTITY = 30
TYPES = ["string", "integer", "decimal", "date", "boolean", "text"]


def make_spec(entities: int) -> dict[str, str]:
    files = {"modules.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: bench}\n"}
    for n in range(entities):
        lines = [
            "apiVersion: dap.io/v1",
            "kind: Entity",
            f"metadata: {{name: entity_{n}, module: bench}}",
            "spec:",
            f"  title: Entity {n}",
            "  expose: [{type: rest}]",
            "  fields:",
        ]
        for f in range(FIELDS_PER_ENTITY - 1):
            kind = TYPES[f % len(TYPES)]
            extra = ", scale: 2, precision: 12" if kind == "decimal" else ""
            lines.append(f"    - {{name: field_{f}, type: {kind}, title: Field {f}{extra}}}")
        target = f"entity_{(n + 1) % entities}"
        lines.append(f"    - {{name: link, type: relation, relation: {{entity: bench/{target}}}}}")
        files[f"bench/entity_{n}.yaml"] = "\n".join(lines) + "\n"
    return files


def best_of(repeats: int, fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def stages(files: dict[str, str]) -> dict[str, float]:
    """Time each stage of the loader separately, on the same input."""
    out: dict[str, float] = {}
    start = time.perf_counter()
    documents = [
        (name, i, doc) for name in sorted(files) for i, doc in enumerate(yamls.load_all(files[name]), 1)
    ]
    out["yaml"] = time.perf_counter() - start
    start = time.perf_counter()
    for _, _, doc in documents:
        schema.fast_validator_for(doc["kind"])(doc)
    out["json schema"] = time.perf_counter() - start
    start = time.perf_counter()
    built = [
        (Origin(name, i), manifests.KINDS[doc["kind"]].model_validate(doc)) for name, i, doc in documents
    ]
    out["models"] = time.perf_counter() - start
    start = time.perf_counter()
    spec = Spec(
        manifests=tuple(m for _, m in built),
        origins={(m.kind, m.key): origin for origin, m in built},
    )
    problems = validation.check(spec)
    out["cross-reference rules"] = time.perf_counter() - start
    assert not problems, problems[:3]
    return out


def main(quick: bool) -> int:
    schema.fast_validator_for("Entity")  # compile the schema outside the measurement
    schema.fast_validator_for("Module")
    small, large = (20, 40) if quick else (200, 400)
    results: dict[int, float] = {}
    for size in (small, large):
        files = make_spec(size)
        spec = config.load_files(files)
        assert len(spec.entities) == size
        results[size] = best_of(3, lambda files=files: config.load_files(files))
        parts = stages(files)
        total = sum(parts.values())
        print(f"{size} entities x {FIELDS_PER_ENTITY} fields: {results[size] * 1000:.0f} ms (best of 3)")
        for stage, seconds in parts.items():
            print(f"    {stage:<22} {seconds * 1000:7.0f} ms  {seconds / total:5.1%}")
    ratio = results[large] / results[small]
    per_entity = statistics.mean([results[small] / small, results[large] / large]) * 1e6
    held = "not held with --quick" if quick else "target <= 2.2"
    print(f"ratio {large}/{small}: {ratio:.2f} ({held}, linear = 2.0); {per_entity:.0f} us per entity")
    if ratio > 2.2 and not quick:
        print("FAIL: validation grows faster than linearly")
        return 1
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="small specs: prove the benchmark runs (make test)"
    )
    sys.exit(main(parser.parse_args().quick))
