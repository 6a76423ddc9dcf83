"""``--kubeconfig FILE`` (``dap.kube.from_kubeconfig``) against a real TLS server on loopback that
asks for a client certificate: the CA and the client certificate and key read from the files a
kubeconfig names (as minikube and kubeadm write them; relative paths against the kubeconfig's
directory, as kubectl resolves them), inline as ``…-data``, and a token from ``tokenFile``."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from aiohttp import web

from dap import kube
from tests.kube import pki


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> pki.Pki:
    return pki.make(tmp_path_factory.mktemp("kubeconfig") / "pki")


@pytest.fixture
async def api(certificates: pki.Pki) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """An API server's ``GET /api/v1/namespaces`` over TLS that records each caller's certificate
    subject and bearer token (a client certificate is asked for, not required: tokens work too)."""
    seen: list[dict[str, Any]] = []

    async def namespaces(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(part[0] for part in peer["subject"]) if peer else {}
        seen.append({"cn": subject.get("commonName"), "authorization": request.headers.get("Authorization")})
        return web.json_response({"items": [{"metadata": {"name": "default"}}]})

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certificates.ca.cert))
    context.load_cert_chain(str(certificates.serving.cert), str(certificates.serving.key))
    context.verify_mode = ssl.CERT_OPTIONAL
    app = web.Application()
    app.router.add_get("/api/v1/namespaces", namespaces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        yield f"https://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def _kubeconfig(path: Path, server: str, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "here",
                "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "here", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}],
            }
        )
    )
    return path


async def _namespaces(config: Path) -> list[dict[str, Any]]:
    client = kube.Client.connect(kube.from_kubeconfig(str(config)))
    try:
        return await client.list(kube.NAMESPACES)
    finally:
        await client.close()


def _inline(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


async def test_a_ca_and_client_certificate_named_as_files_relative_to_the_kubeconfig(
    api: tuple[str, list[dict[str, Any]]], certificates: pki.Pki, tmp_path: Path
) -> None:
    url, seen = api
    root = certificates.ca.cert.parent
    config = _kubeconfig(  # ../pki/… from the kubeconfig's own directory, as kubectl resolves it
        root.parent / "home" / "config",
        url,
        {"certificate-authority": "../pki/ca.crt"},
        {"client-certificate": "../pki/admin.crt", "client-key": str(certificates.admin.key)},
    )
    assert await _namespaces(config) == [{"metadata": {"name": "default"}}]
    assert seen[-1] == {"cn": "dap-test-admin", "authorization": None}


async def test_inline_data_still_works_and_a_token_file_is_read(
    api: tuple[str, list[dict[str, Any]]], certificates: pki.Pki, tmp_path: Path
) -> None:
    url, seen = api
    config = _kubeconfig(
        tmp_path / "inline",
        url,
        {"certificate-authority-data": _inline(certificates.ca.cert)},
        {
            "client-certificate-data": _inline(certificates.admin.cert),
            "client-key-data": _inline(certificates.admin.key),
        },
    )
    assert await _namespaces(config) == [{"metadata": {"name": "default"}}]
    assert seen[-1]["cn"] == "dap-test-admin"
    (tmp_path / "token").write_text("s3cret-token\n")
    config = _kubeconfig(
        tmp_path / "token-config",
        url,
        {"certificate-authority": str(certificates.ca.cert)},
        {"tokenFile": "token"},
    )
    await _namespaces(config)
    assert seen[-1] == {"cn": None, "authorization": "Bearer s3cret-token"}


async def test_without_the_ca_the_server_is_not_trusted(
    api: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, seen = api
    config = _kubeconfig(tmp_path / "config", url, {}, {"token": "t"})
    with pytest.raises(kube.ApiUnavailableError):
        await _namespaces(config)
    assert seen == []


def test_a_named_file_that_is_missing_is_a_login_error(tmp_path: Path) -> None:
    config = _kubeconfig(
        tmp_path / "config", "https://127.0.0.1:1", {"certificate-authority": "nope.crt"}, {}
    )
    with pytest.raises(kopf.LoginError, match=r"certificate-authority names .*nope\.crt"):
        kube.from_kubeconfig(str(config))
