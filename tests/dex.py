"""Dex, a real OpenID Connect provider, on loopback for the sign-in tests.

``tools/dex/build.sh`` builds Dex from the Go module proxy into ~/.cache/dap/dex once (``make
test`` starts that build in the background, and the first test that needs Dex waits for it);
without a Go toolchain the tests that need Dex skip saying so.
Dex runs with memory storage, one confidential client (``dap``) whose redirect URI is the dap
server's callback, the password grant (for API tests that need tokens without a browser) and two
static users of different groups (Dex 2.45 gives static users groups):

- ``alice`` / ``password``: group ``committee`` (the spec's ``purchase_committee``, who approve)
- ``bob`` / ``password``: group ``buyers`` (the spec's ``buyer``, who cannot approve)
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[1]
BUILD = ROOT / "tools" / "dex" / "build.sh"
CLIENT_ID, CLIENT_SECRET = "dap", "dap-test-client-secret"
SECRET_ENV = "DAP_OIDC_DEX_SECRET"
# bcrypt of "password" (the hash of Dex's own examples/config-dev.yaml)
PASSWORD, HASH = "password", "$2a$10$2b2cU8CPhOTaGrs1HRQuAueS7JTT5ZHsHSzYiFPm1leZck7Mc8T4W"
USERS = {"alice": ["committee"], "bob": ["buyers"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binary() -> str:
    """The built Dex, or a skip naming why there is none."""
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=1800)
    if done.returncode == 3:
        pytest.skip("no Go toolchain: Dex (the OpenID provider of these tests) cannot be built here")
    if done.returncode != 0:
        raise AssertionError(f"building Dex failed: {done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


def provider_yaml(issuer: str, *, name: str = "dex") -> str:
    """The workspace's provider declaration for this Dex (indented under ``providers:``)."""
    return f"""      {name}:
        title: Dex
        issuer: {issuer}
        client_id: {CLIENT_ID}
        client_secret_env: {SECRET_ENV}
        scopes: [openid, profile, email, groups, offline_access]
        username_claim: preferred_username
        roles_claim: groups
        roles: {{committee: [purchase_committee], buyers: [buyer]}}
"""


@dataclass
class Dex:
    issuer: str

    def password_grant(self, username: str) -> dict[str, Any]:
        """Tokens of ``username`` by the password grant (Dex's ``passwordConnector: local``)."""
        form = urllib.parse.urlencode(
            {
                "grant_type": "password",
                "username": f"{username}@example.com",
                "password": PASSWORD,
                "scope": "openid profile email groups",
            }
        ).encode()
        request = urllib.request.Request(f"{self.issuer}/token", data=form, method="POST")
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
        creds = f"{CLIENT_ID}:{CLIENT_SECRET}".encode()
        import base64

        request.add_header("Authorization", "Basic " + base64.b64encode(creds).decode())
        with urllib.request.urlopen(request, timeout=10) as resp:
            answer: dict[str, Any] = json.load(resp)
            return answer


@contextmanager
def running(
    redirect_uris: list[str], workdir: Path, *, id_tokens: str = "10m", rotate_keys: str = "6h"
) -> Iterator[Dex]:
    """Dex on a free loopback port; ``id_tokens`` is the ID tokens' lifetime, ``rotate_keys`` how
    often its signing key is replaced (Go durations; Dex looks every 30 s whether one is due)."""
    port = free_port()
    issuer = f"http://127.0.0.1:{port}/dex"
    users = [
        {
            "email": f"{name}@example.com",
            "hash": HASH,
            "username": name,
            "preferredUsername": name,
            "userID": f"user-{name}",
            "groups": groups,
        }
        for name, groups in USERS.items()
    ]
    cfg = {
        "issuer": issuer,
        "storage": {"type": "memory"},
        "web": {"http": f"127.0.0.1:{port}"},
        "oauth2": {"skipApprovalScreen": True, "passwordConnector": "local"},
        "expiry": {"idTokens": id_tokens},
        "signer": {"type": "local", "config": {"keysRotationPeriod": rotate_keys}},
        "logger": {"level": "warn"},
        "staticClients": [
            {"id": CLIENT_ID, "name": "dap", "secret": CLIENT_SECRET, "redirectURIs": redirect_uris}
        ],
        "enablePasswordDB": True,
        "staticPasswords": users,
    }
    path = workdir / "dex.json"  # YAML is a superset of JSON: Dex reads it
    path.write_text(json.dumps(cfg))
    log = workdir / "dex.log"
    with log.open("w") as sink:
        proc = subprocess.Popen([binary(), "serve", str(path)], stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{issuer}/.well-known/openid-configuration", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"Dex did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield Dex(issuer)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


PROCUREMENT = ROOT / "examples" / "procurement"


def procurement_files(issuer: str) -> dict[str, bytes]:
    """The procurement example with its workspace declaring this Dex as a provider."""
    from dap import config

    files = config.read_files(PROCUREMENT)
    text = files["workspace.yaml"].decode()
    anchor = "  title: Procurement demo\n"
    assert anchor in text
    files["workspace.yaml"] = text.replace(
        anchor, anchor + "  auth:\n    providers:\n" + provider_yaml(issuer)
    ).encode()
    return files


def write_spec(files: dict[str, bytes], root: Path) -> Path:
    for name, data in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root
