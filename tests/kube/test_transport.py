"""``dap.kube``, the one transport of the operator and the controls, against a real HTTP server on
loopback playing the API server: paths, verbs, error translation, the per-verb observer."""

from __future__ import annotations

import socket
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import kopf
import pytest
from aiohttp import web

from dap import kube
from dap.kube import errors
from tests.kube import loopback, pki


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        pytest.param(400, errors.InvalidObjectError, id="400"),
        pytest.param(404, errors.NotFoundError, id="404"),
        pytest.param(409, errors.ConflictError, id="409"),
        pytest.param(422, errors.InvalidObjectError, id="422"),
        pytest.param(500, errors.ApiError, id="500"),
    ],
)
def test_api_status_to_error_class(status: int, cls: type[errors.ApiError]) -> None:
    error = errors.for_status(status, "m", method="GET", path="/x")
    assert type(error) is cls
    assert error.status == status
    assert str(error) == f"GET /x: {status} m"


def test_resource_paths() -> None:
    assert kube.DEPLOYMENTS.path("ns", "d") == "/apis/apps/v1/namespaces/ns/deployments/d"
    assert kube.SECRETS.path("ns") == "/api/v1/namespaces/ns/secrets"
    assert (
        kube.WORKSPACES.path("ns", "w", "status") == "/apis/dap.io/v1alpha1/namespaces/ns/workspaces/w/status"
    )
    # cluster-scoped kinds ignore a namespace
    assert kube.CLUSTERS.path("ignored", "c") == "/apis/dap.io/v1alpha1/clusters/c"
    assert kube.NAMESPACES.path(None) == "/api/v1/namespaces"


def test_operator_and_controls_share_the_transport() -> None:
    from dap.control.kube import leases
    from dap.operator import errors as operator_errors
    from dap.operator import running

    assert running.kube is kube and leases.kube is kube
    assert operator_errors.NotFoundError is kube.NotFoundError


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[tuple[str, str, str | None]]]]:
    seen: list[tuple[str, str, str | None]] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        seen.append((request.method, request.path, request.query.get("labelSelector")))
        if request.match_info["name"] == "missing":
            return web.json_response({"kind": "Status", "message": 'leases "missing" not found'}, status=404)
        if request.method == "GET" and not request.match_info["name"]:
            return web.json_response({"items": [{"metadata": {"name": "one"}}]})
        assert request.method != "PATCH" or request.content_type == "application/merge-patch+json"
        return web.json_response(body or {"metadata": {"name": request.match_info["name"]}})

    app = web.Application()
    app.router.add_route(
        "*", "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases{slash:/?}{name:[^/]*}", handle
    )
    async with loopback.serving(app) as url:
        yield url, seen


async def test_verbs_paths_and_observer(server: tuple[str, list[tuple[str, str, str | None]]]) -> None:
    url, seen = server
    observed: list[tuple[str, int]] = []
    client = kube.Client.connect(
        kube.login(server=url), observer=lambda verb, status: observed.append((verb, status))
    )
    try:
        assert await client.list(kube.LEASES, "ns", "app=x,tier in (a)") == [{"metadata": {"name": "one"}}]
        await client.create(kube.LEASES, "ns", {"metadata": {"name": "l"}})
        await client.get(kube.LEASES, "ns", "l")
        await client.replace(kube.LEASES, "ns", "l", {"metadata": {"name": "l"}, "spec": {}})
        await client.patch(kube.LEASES, "ns", "l", {"spec": {"holderIdentity": "me"}})
        await client.delete(kube.LEASES, "ns", "l")
        with pytest.raises(
            kube.NotFoundError, match=r'GET .*/leases/missing: 404 leases "missing" not found'
        ):
            await client.get(kube.LEASES, "ns", "missing")
    finally:
        await client.close()
    base = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
    assert seen == [
        ("GET", base, "app=x,tier in (a)"),
        ("POST", base, None),
        ("GET", base + "/l", None),
        ("PUT", base + "/l", None),
        ("PATCH", base + "/l", None),
        ("DELETE", base + "/l", None),
        ("GET", base + "/missing", None),
    ]
    assert observed == [
        ("list", 200),
        ("create", 200),
        ("get", 200),
        ("replace", 200),
        ("patch", 200),
        ("delete", 200),
        ("get", 404),
    ]


async def test_no_answer_is_unavailable_and_observed_as_zero() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    observed: list[tuple[str, int]] = []
    client = kube.Client.connect(
        kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}"), observer=lambda v, s: observed.append((v, s))
    )
    try:
        with pytest.raises(kube.ApiUnavailableError, match="GET /api/v1/namespaces"):
            await client.list(kube.NAMESPACES)
    finally:
        await client.close()
    assert observed == [("list", 0)]


async def test_inline_client_credentials_leave_no_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kubeconfig's inline client certificate and key pass through files only while ssl loads
    them: every connect used to leave a copy of the private key in /tmp."""
    pki_files = pki.make(tmp_path / "pki")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    info = kopf.ConnectionInfo(
        server="https://127.0.0.1:6443",
        ca_data=pki_files.ca.cert.read_bytes(),
        certificate_data=pki_files.admin.cert.read_bytes(),
        private_key_data=pki_files.admin.key.read_bytes(),
    )
    client = kube.Client.connect(info)
    try:
        assert list(scratch.iterdir()) == []
    finally:
        await client.close()
