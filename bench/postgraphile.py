"""PostGraphile 5, the peer of ``bench/peers.py``: installed under ``.dap/bench-peers`` (with Node
22 from npm, nothing global), started in its fast configuration, and asked for the GraphQL
queries and mutations that do what dap's find, page, create and update do on ``bench__item``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import loadgen

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".dap" / "bench-peers"
PACKAGES = ["node@22", "postgraphile@5.1.5", "postgraphile-plugin-connection-filter@4.0.1"]
FIELDS = ("code", "title", "price", "qty", "category", "launched")
CONFIG = """import { PostGraphileAmberPreset } from "postgraphile/presets/amber";
import { PostGraphileConnectionFilterPreset } from "postgraphile-plugin-connection-filter";
import { makePgService } from "postgraphile/adaptors/pg";
export default {
  extends: [PostGraphileAmberPreset, PostGraphileConnectionFilterPreset],
  // price is not indexed: let it be filtered and sorted on, as dap lets it (same SQL plan)
  disablePlugins: ["PgIndexBehaviorsPlugin"],
  pgServices: [makePgService({ connectionString: process.env.PEER_DSN, schemas: ["public"],
                               poolConfig: { max: 10 } })],
  grafserv: { port: Number(process.env.PEER_PORT), host: "127.0.0.1", graphiql: false },
  grafast: { explain: false },
};
"""


def install() -> Path:
    """PostGraphile and Node 22 under the bench's cache; the ``node_modules/.bin`` to put on PATH."""
    bin_dir = CACHE / "node_modules" / ".bin"
    if not (bin_dir / "postgraphile").exists() or not (bin_dir / "node").exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        if not (CACHE / "package.json").exists():
            (CACHE / "package.json").write_text('{"private": true}\n')
        print(f"installing {' '.join(PACKAGES)} under {CACHE} ...", flush=True)
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", *PACKAGES],
            cwd=CACHE,
            check=True,
            timeout=600,
        )
    (CACHE / "graphile.config.mjs").write_text(CONFIG)
    return bin_dir


def spawn_peer(bin_dir: Path, dsn: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        {
            "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
            "PEER_DSN": dsn,
            "PEER_PORT": str(port),
            "GRAPHILE_ENV": "production",
            "NODE_ENV": "production",
        }
    )
    return subprocess.Popen(
        [str(bin_dir / "postgraphile"), "-C", str(CACHE / "graphile.config.mjs")],
        cwd=CACHE,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )


async def graphql(url: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, json={"query": query, "variables": variables or {}}) as resp,
    ):
        answer: dict[str, Any] = await resp.json()
    if answer.get("errors"):
        raise RuntimeError(f"PostGraphile answered errors: {answer['errors']}")
    return answer["data"]  # type: ignore[no-any-return]


def _tail(log: Path) -> str:
    return log.read_text()[-2000:]


async def wait_graphql(url: str, proc: subprocess.Popen[bytes], log: Path, limit: float = 120) -> None:
    started = time.perf_counter()
    while time.perf_counter() - started < limit:
        if proc.poll() is not None:
            raise RuntimeError(f"PostGraphile exited: {_tail(log)}")
        try:
            await graphql(url, "{__typename}")
            return
        except (aiohttp.ClientError, RuntimeError, ValueError):
            await asyncio.sleep(0.2)
    raise RuntimeError(f"PostGraphile did not answer within {limit}s: {_tail(log)}")


async def queries(url: str) -> tuple[str, str]:
    """The peer's find-by-id and filtered-page queries, named as its inflection names them."""
    data = await graphql(url, "{__schema{queryType{fields{name}}}}")
    names = [f["name"] for f in data["__schema"]["queryType"]["fields"]]
    # PostGraphile 5 calls an ``id`` column ``rowId`` (``id`` is its global Node id)
    by_id = next((n for n in names if n.endswith("ByTenantIdAndRowId") and "item" in n.lower()), None)
    many = next((n for n in names if n.startswith("all") and "item" in n.lower()), None)
    if by_id is None or many is None:
        raise RuntimeError(f"PostGraphile exposes no find and list of bench__item: {names}")
    selection = "{ rowId " + " ".join(FIELDS) + " }"
    find = f"query($t: UUID!, $id: UUID!) {{ {by_id}(tenantId: $t, rowId: $id) {selection} }}"
    page = (
        f'query {{ {many}(condition: {{category: "red"}}, filter: {{price: {{greaterThan: "50"}}}}, '
        f"orderBy: PRICE_DESC, first: 50) {{ nodes {selection} }} }}"
    )
    return find, page


async def mutations(url: str, tenant: str) -> tuple[str, str]:
    """The peer's create and update-by-id mutations (as its inflection names them), each as a
    one-line request body with :data:`loadgen.UNIQUE` in its code/title and ``@ID@`` for the id.

    The values travel as variables, the document stays the same text from request to request, as
    a client of PostGraphile sends it: grafast plans an operation once per document and reuses the
    plan. With the values written into the document, every request was a new document, parsed,
    validated and planned anew (4 ms of the peer's CPU per create on this machine, 8x a find)."""
    data = await graphql(
        url,
        "{__schema{mutationType{fields{name args{type{ofType{name inputFields{name}}}}}}}}",
    )
    fields = data["__schema"]["mutationType"]["fields"]

    def pick(test: Callable[[str], bool]) -> tuple[str, str, list[str]]:
        found = next((f for f in fields if test(f["name"])), None)
        if found is None:
            raise RuntimeError(f"PostGraphile exposes no such mutation: {[f['name'] for f in fields]}")
        given = found["args"][0]["type"]["ofType"]  # input: NonNull of the input object
        return found["name"], given["name"], [i["name"] for i in given["inputFields"]]

    create, create_type, create_in = pick(lambda n: n.startswith("create") and "item" in n.lower())
    update, update_type, update_in = pick(
        lambda n: n.startswith("update") and "item" in n.lower() and n.endswith("RowId")
    )
    record = next(n for n in create_in if n != "clientMutationId")
    patch = next(n for n in update_in if n.endswith("Patch"))
    selection = "{ rowId " + " ".join(FIELDS) + " }"
    new = {
        "tenantId": tenant,
        "code": f"P{loadgen.UNIQUE}",
        "title": "new",
        "price": "12.50",
        "qty": "3",
        "category": "red",
        "createdBy": "alice",
        "owner": "alice",
    }
    keys = {"tenantId": tenant, "rowId": "@ID@"} if "tenantId" in update_in else {"rowId": "@ID@"}
    create_q = f"mutation($input: {create_type}!) {{ {create}(input: $input) {{ {record} {selection} }} }}"
    update_q = f"mutation($input: {update_type}!) {{ {update}(input: $input) {{ {record} {selection} }} }}"
    create_in_vars = {"input": {record: new}}
    update_in_vars = {"input": {**keys, patch: {"title": f"P{loadgen.UNIQUE}", "qty": "7"}}}
    return (
        json.dumps({"query": create_q, "variables": create_in_vars}),
        json.dumps({"query": update_q, "variables": update_in_vars}),
    )


def same(dap: dict[str, Any], peer: dict[str, Any]) -> bool:
    def norm(v: Any) -> Any:
        return None if v is None else str(v) if not isinstance(v, str) else v

    return all(norm(dap.get(f)) == norm(peer.get(f)) for f in FIELDS)


if __name__ == "__main__":  # ``make bench`` runs every script here: this one is a helper
    print("bench/postgraphile.py: the peer of bench/peers.py; nothing to run alone")
