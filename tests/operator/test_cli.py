"""``dap operator`` options and ``dap claim`` keygen/sign/verify through the real ``dap`` group."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from click.testing import CliRunner

from dap.cli import main
from dap.operator import claims

SPEC_OPTIONS = [
    "--control-cluster-url",
    "--leader-elect",
    "--metrics-bind-address",
    "--health-probe-bind-address",
    "--workspace-concurrency",
    "--namespace",
    "--resource-image",
    "--insecure-skip-signature-verify",
]


def test_operator_has_every_option_of_the_spec_with_its_default() -> None:
    result = CliRunner().invoke(main, ["operator", "--help"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    for option in SPEC_OPTIONS:
        assert option in text
    assert "[default: :8443]" in text
    assert "[default: :8081]" in text
    assert "[default: 10; x>=1]" in text


def test_operator_refuses_a_zero_concurrency() -> None:
    result = CliRunner().invoke(main, ["operator", "--workspace-concurrency", "0"])
    assert result.exit_code == 2
    assert "workspace-concurrency" in result.output


def test_keygen_sign_verify_round_trip(tmp_path: Path) -> None:
    runner = CliRunner()
    key_file = tmp_path / "owner.key"
    made = runner.invoke(main, ["claim", "keygen", "--out", str(key_file)])
    assert made.exit_code == 0, made.output
    public = re.search(r"public-key: ([0-9a-f]{64})", made.output)
    assert public is not None
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"

    args = ["--datastore", "orders", "--workspace", "shop", "--permission", "read", "--granted-by", "alice"]
    signed = runner.invoke(
        main,
        [
            "claim",
            "sign",
            *args,
            "--granted-at",
            "2026-01-01T00:00:00Z",
            "--key-file",
            str(key_file),
            "--manifest",
            "shop-orders",
            "--namespace",
            "tenants",
        ],
    )
    assert signed.exit_code == 0, signed.output
    manifest = yaml.safe_load(signed.output)
    assert manifest["kind"] == "ResourceClaim"
    assert manifest["spec"]["grantedAt"] == "2026-01-01T00:00:00Z"
    grant = claims.Grant.from_spec(manifest["spec"])
    assert claims.verify(grant, manifest["spec"]["signature"], public.group(1))

    claim_file = tmp_path / "claim.yaml"
    claim_file.write_text(signed.output)
    ok = runner.invoke(main, ["claim", "verify", str(claim_file), "--public-key", public.group(1)])
    assert (ok.exit_code, ok.output.strip()) == (0, "valid")
    other = claims.keygen()[1]
    bad = runner.invoke(main, ["claim", "verify", str(claim_file), "--public-key", other])
    assert bad.exit_code == 1


def test_sign_reads_the_key_from_the_environment_and_prints_a_bare_signature() -> None:
    private, public = claims.keygen()
    result = CliRunner().invoke(
        main,
        [
            "claim",
            "sign",
            "--datastore",
            "d",
            "--workspace",
            "w",
            "--permission",
            "write",
            "--granted-by",
            "o",
            "--granted-at",
            "t",
        ],
        env={"DAP_CLAIM_PRIVATE_KEY": private},
    )
    assert result.exit_code == 0, result.output
    assert claims.verify(claims.Grant("d", "w", "write", "o", "t"), result.output.strip(), public)


def test_sign_without_a_key_says_what_to_do() -> None:
    result = CliRunner().invoke(
        main,
        [
            "claim",
            "sign",
            "--datastore",
            "d",
            "--workspace",
            "w",
            "--permission",
            "read",
            "--granted-by",
            "o",
        ],
        env={"DAP_CLAIM_PRIVATE_KEY": ""},
    )
    assert result.exit_code == 2
    assert "DAP_CLAIM_PRIVATE_KEY" in result.output


def test_sign_refuses_a_malformed_key(tmp_path: Path) -> None:
    key_file = tmp_path / "k"
    key_file.write_text("not hex")
    result = CliRunner().invoke(
        main,
        [
            "claim",
            "sign",
            "--datastore",
            "d",
            "--workspace",
            "w",
            "--permission",
            "read",
            "--granted-by",
            "o",
            "--key-file",
            str(key_file),
        ],
    )
    assert result.exit_code == 2
    assert "64 hex characters" in result.output


def test_dev_auto_grant_claims_is_refused_in_a_pod() -> None:
    result = CliRunner().invoke(
        main, ["operator", "--dev-auto-grant-claims"], env={"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    )
    assert result.exit_code == 2
    assert "for development only" in result.output
    assert "KUBERNETES_SERVICE_HOST" in result.output
    by_env = CliRunner().invoke(
        main, ["operator"], env={"KUBERNETES_SERVICE_HOST": "10.0.0.1", "DAP_DEV_AUTO_GRANT_CLAIMS": "1"}
    )
    assert by_env.exit_code == 2
    assert "DAP_DEV_AUTO_GRANT_CLAIMS" in by_env.output


def test_dev_mode_refusal_is_empty_off_cluster() -> None:
    from dap.operator.cli import dev_mode_refusal

    assert dev_mode_refusal({}) == ""
    assert dev_mode_refusal({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) != ""
