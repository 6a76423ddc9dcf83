"""``dap pod`` and ``dap dev`` as a person runs them: real processes, real ports, real signals."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
import pytest
from click.testing import CliRunner
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from dap.resource_pod import cli, errors
from dap.server.web import app as web_app
from tests.devsessions import dap, free_port
from tests.resource_pod.conftest import (
    MODULE,
    SECRET,
    WORKSPACE,
    Control,
    MakeDsn,
    auth,
    spec_files,
    token,
    wait_for,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "procurement"


@dataclass
class Child:
    process: asyncio.subprocess.Process
    stderr: bytearray


@contextlib.asynccontextmanager
async def process(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[Child]:
    """Run ``dap *args``; stdout is a pipe the test reads, stderr is drained into ``Child.stderr``."""
    child = await asyncio.create_subprocess_exec(
        *dap(*args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    captured = bytearray()

    async def drain() -> None:
        assert child.stderr is not None
        while chunk := await child.stderr.read(65536):
            captured.extend(chunk)

    drainer = asyncio.create_task(drain())
    try:
        yield Child(child, captured)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
        await drainer


async def test_dap_pod_serves_what_control_publishes_and_stops_on_sigterm(
    control: Control, make_dsn: MakeDsn, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    v1 = await control.register(spec_files())
    port = free_port()
    env = {
        "CONTROL_CLUSTER_URL": control.url,
        "WORKSPACE_ID": WORKSPACE,
        "DAP_TRUSTED_KEYS": control.signer.public_key.hex(),
        "DAP_DSN": await make_dsn(),
    }
    async with process(
        "pod",
        "--jwt-secret",
        SECRET,
        "--cors-origin",
        "http://ui.example",
        "--addr",
        f"127.0.0.1:{port}",
        "--metrics-addr",
        "",
        "--pull-interval",
        "200ms",
        "--state-dir",
        str(tmp_path),
        env=env,
    ) as running:
        child = running.process

        async def serving() -> bool:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"http://127.0.0.1:{port}/health") as response:
                    return (await response.json()).get("artifact_id") == v1["artifact_id"]
            return False

        await wait_for(serving, within=30, what="dap pod serving v1")
        child.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            await child.wait()
        await asyncio.sleep(0.1)
        assert child.returncode == 0, running.stderr.decode()[-2000:]
        assert b"shutting down" in running.stderr


def grpc_entity(name: str) -> str:
    return (
        f"apiVersion: dap.io/v1\nkind: Entity\nmetadata: {{name: {name}, module: shop}}\n"
        "spec:\n  fields:\n    - {name: title, type: string, required: true}\n"
        "  expose: [{type: rest}, {type: grpc}]\n"
    )


def grpc_spec(*entities: str) -> dict[str, bytes]:
    """Module ``shop`` (gRPC package ``dap.shop.v1``) with ``entities`` exposed over REST and gRPC."""
    return {"shop/module.yaml": MODULE.encode()} | {
        f"shop/{name}.yaml": grpc_entity(name).encode() for name in entities
    }


class Reflected:
    """A gRPC client that knows only what the server's reflection tells it (as grpcurl)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        self.stub = reflection_pb2_grpc.ServerReflectionStub(channel)

    async def _ask(self, **request: str) -> reflection_pb2.ServerReflectionResponse:
        async for answer in self.stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(**request)])
        ):
            return answer
        raise AssertionError("reflection gave no answer")

    async def services(self) -> set[str]:
        listed = await self._ask(list_services="")
        return {s.name for s in listed.list_services_response.service}

    async def call(self, service: str, method: str, request: dict[str, object]) -> dict[str, object]:
        """``service/method`` called with the JSON ``request``, its messages built from reflection."""
        described = await self._ask(file_containing_symbol=service)
        protos = [
            descriptor_pb2.FileDescriptorProto.FromString(raw)
            for raw in described.file_descriptor_response.file_descriptor_proto
        ]
        pool = descriptor_pool.DescriptorPool()
        while protos:  # dependencies first
            ready = [p for p in protos if all(_has(pool, d) for d in p.dependency)]
            assert ready, [p.name for p in protos]
            for proto in ready:
                pool.Add(proto)
                protos.remove(proto)
        m = pool.FindServiceByName(service).methods_by_name[method]
        answer = await self.channel.unary_unary(
            f"/{service}/{method}",
            request_serializer=lambda msg: msg.SerializeToString(),
            response_deserializer=message_factory.GetMessageClass(m.output_type).FromString,
        )(
            json_format.ParseDict(request, message_factory.GetMessageClass(m.input_type)()),
            metadata=[("dap-workspace", WORKSPACE), ("authorization", f"Bearer {token()}")],
        )
        return json_format.MessageToDict(answer, preserving_proto_field_name=True)


def _has(pool: descriptor_pool.DescriptorPool, name: str) -> bool:
    try:
        pool.FindFileByName(name)
    except KeyError:
        return False
    return True


async def test_dap_pod_serves_grpc_and_each_registration_reaches_it(
    control: Control, make_dsn: MakeDsn, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """``dap pod --grpc-addr`` serves the entities its artifact exposes over gRPC, and a new
    registration's entity is served and reflected by the same listener, with no restart."""
    v1 = await control.register(grpc_spec("item"))
    port, rpc_port = free_port(), free_port()
    env = {
        "CONTROL_CLUSTER_URL": control.url,
        "WORKSPACE_ID": WORKSPACE,
        "DAP_TRUSTED_KEYS": control.signer.public_key.hex(),
        "DAP_DSN": await make_dsn(),
    }
    async with process(
        "pod",
        *("--jwt-secret", SECRET, "--cors-origin", "http://ui.example"),
        *("--addr", f"127.0.0.1:{port}", "--metrics-addr", "", "--grpc-addr", f"127.0.0.1:{rpc_port}"),
        *("--pull-interval", "200ms", "--state-dir", str(tmp_path)),
        env=env,
    ) as running:

        def serving(artifact: dict[str, object]) -> Callable[[], Awaitable[bool]]:
            async def check() -> bool:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{port}/health") as response:
                        return bool((await response.json()).get("artifact_id") == artifact["artifact_id"])
                return False

            return check

        await wait_for(serving(v1), within=30, what="dap pod serving v1")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{rpc_port}") as channel:
            client = Reflected(channel)
            try:
                names = await asyncio.wait_for(client.services(), 10)
            except grpc.aio.AioRpcError as exc:
                pytest.fail(f"no gRPC on --grpc-addr: {exc.code()} {running.stderr.decode()[-1500:]}")
            assert "dap.shop.v1.ItemService" in names and "dap.shop.v1.LabelService" not in names
            item = await client.call("dap.shop.v1.ItemService", "Create", {"record": {"title": "one"}})
            assert item["title"] == "one" and item["version"] == "1", item
            api = f"http://127.0.0.1:{port}/{WORKSPACE}/api/shop"
            async with http.get(f"{api}/item/{item['id']}", headers=auth()) as response:
                assert response.status == 200 and (await response.json())["data"]["title"] == "one"

            v2 = await control.register(grpc_spec("item", "label"))
            await wait_for(serving(v2), within=30, what="dap pod serving v2")
            assert "dap.shop.v1.LabelService" in await client.services()
            label = await client.call("dap.shop.v1.LabelService", "Create", {"record": {"title": "new"}})
            found = await client.call("dap.shop.v1.LabelService", "Get", {"id": label["id"]})
            assert found["title"] == "new", found
            again = await client.call("dap.shop.v1.ItemService", "Get", {"id": item["id"]})
            assert again["title"] == "one", again
        running.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            await running.process.wait()
        assert running.process.returncode == 0, running.stderr.decode()[-2000:]


async def test_dap_pod_refuses_a_taken_grpc_addr_in_one_line(make_dsn: MakeDsn, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with process(
            "pod",
            *("--dsn", await make_dsn(), "--jwt-secret", SECRET, "--cors-origin", "http://ui.example"),
            *("--control-url", "http://127.0.0.1:9", "--workspace-id", WORKSPACE),
            *("--trusted-keys", "ab" * 32, "--state-dir", str(tmp_path)),
            *("--addr", "127.0.0.1:0", "--metrics-addr", "", "--grpc-addr", f"127.0.0.1:{port}"),
        ) as running:
            async with asyncio.timeout(60):
                await running.process.wait()
    stderr = running.stderr.decode()
    assert running.process.returncode == 1, stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-2000:]
    assert stderr.strip().splitlines()[-1].startswith(f"dap: cannot listen on --grpc-addr 127.0.0.1:{port}")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--trusted-keys", "abc"], "is not hex", id="bad-key"),
        pytest.param(["--trusted-keys", "ab" * 32, "--workspace-id", "_ui"], "workspace slug", id="bad-slug"),
        pytest.param(["--dev", "--pull-interval", "soon"], "--pull-interval", id="bad-interval"),
        pytest.param(["--trusted-keys", "ab" * 32, "--cors-origin", "*"], "refused", id="serve-rule"),
    ],
)
def test_dap_pod_refuses_bad_options_in_one_line(args: list[str], message: str) -> None:
    base = ["--dsn", "postgresql://nowhere/db", "--jwt-secret", "s" * 32, "--control-url", "http://control:1"]
    base += ["--workspace-id", "acme"] if "--workspace-id" not in args else []
    if "--cors-origin" not in args:
        base += ["--cors-origin", "http://ui.example"]
    result = CliRunner().invoke(cli.pod, [*base, *args])
    assert result.exit_code == 1, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_pod_settings_defaults_follow_dev() -> None:
    mine = dict.fromkeys(cli.POD_OPTIONS)
    mine.update(control_url="http://c/", dev=True, health_interval="30s", metering_interval="5m")
    dev_config = cli.pod_settings(mine)
    assert (dev_config.workspace, dev_config.pull_interval, dev_config.long_poll) == ("default", 10.0, True)
    assert dev_config.fetch_keys and dev_config.control_url == "http://c"
    mine.update(dev=False, workspace_id="acme", trusted_keys="ab" * 32)
    prod = cli.pod_settings(mine)
    assert (prod.pull_interval, prod.long_poll, prod.fetch_keys) == (300.0, False, False)
    assert prod.state_dir == cli.PROD_STATE_DIR
    with pytest.raises(errors.ConfigError, match="--workspace-id"):
        cli.pod_settings({**mine, "workspace_id": None})


async def test_dap_dev_serves_watches_and_stops_on_ctrl_c(
    make_dsn: MakeDsn, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    spec = tmp_path / "spec"
    spec.mkdir()
    for path in EXAMPLE.rglob("*"):
        if path.is_file():
            target = spec / path.relative_to(EXAMPLE)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    api, admin, control = free_port(), free_port(), free_port()
    async with process(
        "dev",
        "--spec",
        str(spec),
        "--dsn",
        await make_dsn(),
        "--data-dir",
        str(tmp_path / ".dap"),
        "--addr",
        f"127.0.0.1:{api}",
        "--admin-addr",
        f"127.0.0.1:{admin}",
        "--control-port",
        str(control),
        "--watch",
        "--log-level",
        "error",
    ) as running:
        child = running.process
        assert child.stdout is not None
        output = ""
        async with asyncio.timeout(60):
            while "watching" not in output:
                line = await child.stdout.readline()
                assert line, f"dap dev ended early: {output}"
                output += line.decode()
        token = re.search(r"export TOKEN=(\S+)", output)
        assert token is not None, output
        ui = "UI at" if web_app.find_web_dir(None) is not None else "API only"  # built by make ui or not
        assert f"http://127.0.0.1:{api}/default/api/" in output and ui in output
        headers = {"Authorization": f"Bearer {token.group(1)}"}
        suppliers = f"http://127.0.0.1:{api}/default/api/buying/supplier"
        async with http.post(suppliers, json={"name": "Acme", "phone": "1"}, headers=headers) as response:
            assert response.status == 422, "phone is not a field of v1"

        supplier = spec / "buying" / "supplier.yaml"
        supplier.write_text(
            supplier.read_text().replace(
                "    - name: rating\n", "    - name: phone\n      type: string\n    - name: rating\n"
            )
        )
        async with asyncio.timeout(30):
            while "now serving version 2" not in output:
                line = await child.stdout.readline()
                assert line, output
                output += line.decode()
        async with http.post(suppliers, json={"name": "Acme", "phone": "1"}, headers=headers) as response:
            assert response.status == 201, await response.text()

        child.send_signal(signal.SIGINT)
        async with asyncio.timeout(30):
            await child.wait()
        assert child.returncode == 0
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", control), timeout=1):
        pytest.fail("the control plane still listens after Ctrl-C")
