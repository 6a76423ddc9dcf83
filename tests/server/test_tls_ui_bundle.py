"""HTTPS with TLS 1.2 as the floor, and the UI bundle (banner and index)."""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from dap.server import errors
from dap.server.web import app

from .conftest import running


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def _client(version: ssl.TLSVersion) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = context.maximum_version = version
    return context


# the client offers the deprecated version on purpose: the server must refuse it
@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
async def test_https_refuses_tls_1_1(pg_dsn: str, tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    async with running(pg_dsn, tls_cert=cert, tls_key=key) as srv:
        assert srv.api.startswith("https://")
        context = app.tls_context(srv.server.opts)
        assert context is not None and context.minimum_version == ssl.TLSVersion.TLSv1_2
        url = f"{srv.api}/default/_ui/_meta/apps"
        async with srv.http.get(url, ssl=_client(ssl.TLSVersion.TLSv1_2)) as resp:
            assert resp.status == 200
        try:
            old = _client(ssl.TLSVersion.TLSv1_1)
        except (ValueError, ssl.SSLError):
            pytest.skip("this OpenSSL cannot even offer TLS 1.1")
        with pytest.raises(aiohttp.ClientError):
            async with srv.http.get(url, ssl=old):
                pass


async def test_unreadable_tls_material_refuses_boot(pg_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("not a certificate")
    with pytest.raises(errors.BootRefused, match="--tls-cert"):
        async with running(pg_dsn, tls_cert=tmp_path / "c.pem", tls_key=tmp_path / "c.pem"):
            pass


async def test_ui_bundle_is_served(pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "index.html").write_text("<html>dap ui</html>")
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "app.js").write_text("console.log(1)")
    async with running(pg_dsn, web_dir=tmp_path) as srv:
        assert f"UI from {tmp_path}" in srv.server.banner()
        async with srv.http.get(f"{srv.api}/default/") as resp:
            assert resp.status == 200 and "dap ui" in await resp.text()
        async with srv.http.get(f"{srv.api}/assets/app.js") as resp:
            assert resp.status == 200
        async with srv.http.get(f"{srv.api}/nowhere/") as resp:
            assert resp.status == 404
    monkeypatch.setattr(app, "BUNDLE", tmp_path / "not-built")  # as where `make ui` never ran
    async with running(pg_dsn) as srv:
        assert "API only" in srv.server.banner()
