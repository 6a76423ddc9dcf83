"""Boot options: the refusal rules (pure) and the CLI's one-line refusals (spawned ``dap serve``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dap.server import errors, options

BASE: dict[str, Any] = {
    "dsn": "postgresql://u@localhost/db",
    "jwt_secret": "s" * 32,
    "cors_origins": ["https://app.example"],
}


@pytest.mark.parametrize(
    ("overrides", "fragment", "exit_code"),
    [
        pytest.param({"dsn": None}, "no --dsn", 1, id="no-dsn"),
        pytest.param({"dsn": "  "}, "no --dsn", 1, id="blank-dsn"),
        pytest.param({"dsn": "sqlite:///tmp/x.db"}, "sqlite", 1, id="sqlite-dsn"),
        pytest.param({"dsn": "mysql://x/y"}, "postgresql://", 1, id="mysql-dsn"),
        pytest.param({"jwt_secret": None}, "no JWT configuration", 1, id="no-jwt"),
        pytest.param({"jwt_public_key": "-----BEGIN PUBLIC KEY-----"}, "not both", 1, id="both-jwt"),
        pytest.param({"cors_origins": []}, "CORS", 1, id="no-cors"),
        pytest.param({"cors_origins": ["*"]}, "'*' is refused", 1, id="star-cors"),
        pytest.param({"cors_origins": ["https://a.example\nx"]}, "is not an origin", 1, id="origin-newline"),
        pytest.param({"jwt_secret": "short-secret"}, "at least 32", 1, id="short-jwt-secret"),
        pytest.param(
            {"metrics_addr": "0.0.0.0:9102", "admin_secret": "s3cret"},
            "reachable from other hosts",
            1,
            id="admin-off-loopback",
        ),
        pytest.param({"cors_origins": ["https://a.example", "*"]}, "'*' is refused", 1, id="star-among-cors"),
        pytest.param({"cors_origins": ["not an origin"]}, "not an origin", 1, id="bad-origin"),
        pytest.param({"tls_cert": "c.pem"}, "together", 1, id="cert-without-key"),
        pytest.param({"tls_key": "k.pem"}, "together", 1, id="key-without-cert"),
        pytest.param({"mode": "dev"}, "only 'production'", 2, id="mode-dev"),
        pytest.param({"addr": "localhost"}, "invalid address", 1, id="bad-addr"),
        pytest.param({"invoke_timeout": "soon"}, "invalid duration", 1, id="bad-duration"),
        pytest.param({"log_level": "loud"}, "--log-level", 1, id="bad-log-level"),
        pytest.param({"max_body_bytes": 10}, "--max-body-bytes", 1, id="tiny-body-limit"),
    ],
)
def test_refusals(overrides: dict[str, Any], fragment: str, exit_code: int) -> None:
    with pytest.raises(errors.BootRefused) as caught:
        options.check(**{**BASE, **overrides})
    assert fragment in str(caught.value)
    assert caught.value.exit_code == exit_code
    assert "\n" not in str(caught.value)


def test_defaults_and_parsing() -> None:
    opts = options.check(**BASE, invoke_timeout="500ms", metrics_addr="")
    assert opts.addr == options.Address("0.0.0.0", 8080)
    assert opts.metrics_addr is None  # empty = admin listener off
    assert opts.invoke_timeout == 0.5
    assert opts.jwt_issuer == "svc"
    assert opts.max_body_bytes == 1024 * 1024
    assert options.check(**BASE).metrics_addr == options.Address("127.0.0.1", 9102)
    assert options.parse_address("[::1]:80") == options.Address("::1", 80)


def _dap(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DAP_")}
    full_env.update(env or {})
    return subprocess.run(
        [str(Path(sys.executable).parent / "dap"), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "env", "fragment", "code"),
    [
        pytest.param(["serve"], {}, "no --dsn", 1, id="no-dsn"),
        pytest.param(["serve", "--dsn", "sqlite:///x"], {}, "sqlite", 1, id="sqlite"),
        pytest.param(["serve"], {"DAP_DSN": "sqlite:///x"}, "sqlite", 1, id="sqlite-from-env"),
        pytest.param(["serve", "--dsn", "postgresql://x/y"], {}, "no JWT", 1, id="no-jwt"),
        pytest.param(
            ["serve", "--dsn", "postgresql://x/y", "--jwt-secret", "s" * 32, "--cors-origin", "*"],
            {},
            "'*'",
            1,
            id="star-cors",
        ),
        pytest.param(
            ["serve", "--dsn", "postgresql://x/y", "--cors-origin", "https://a.example", "--tls-cert", "c"],
            {"DAP_JWT_SECRET": "s" * 32},
            "together",
            1,
            id="tls-half",
        ),
        pytest.param(["serve", "--mode", "dev"], {}, "production", 2, id="mode"),
        pytest.param(["migrate"], {}, "no --dsn", 1, id="migrate-no-dsn"),
    ],
)
def test_cli_refusals_are_one_line(args: list[str], env: dict[str, str], fragment: str, code: int) -> None:
    done = _dap(*args, env=env)
    assert done.returncode == code, done.stderr
    assert fragment in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
