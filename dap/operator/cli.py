"""``dap operator`` (run the operator) and ``dap claim`` (make and check resource claims).

Every option also reads ``DAP_<OPTION>`` from the environment (click's auto_envvar_prefix is not
used by the lazy group, so each option names its variable). ``dap claim keygen`` makes an owner
key pair; ``dap claim sign`` prints the hex signature to put into a ResourceClaim's
``spec.signature`` (or, with ``--manifest``, the whole ResourceClaim YAML); ``dap claim verify``
checks one offline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import click
import yaml

from dap import listening, logs, tracing
from dap.config import names
from dap.operator import bodies, claims, running
from dap.operator.options import DEFAULT_RESOURCE_IMAGE, Options, default_resource_image


def _env(name: str) -> str:
    return f"DAP_{name.upper().replace('-', '_')}"


def dev_mode_refusal(environ: Mapping[str, str]) -> str:
    """Why ``--dev-auto-grant-claims`` may not run here ("" when it may).

    Development mode is an operator on a developer's machine (``dap dev --fleet`` starts it so);
    an operator in a pod (``KUBERNETES_SERVICE_HOST`` set, as Kubernetes does for every pod) is
    a deployed one, where a claim must wait for its owner's signature.
    """
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return (
            "--dev-auto-grant-claims (DAP_DEV_AUTO_GRANT_CLAIMS) is for development only: this "
            "operator runs in a pod (KUBERNETES_SERVICE_HOST is set), where claims wait for the "
            "datastore owner's signature. Remove the option, or run the operator on your machine "
            "(dap dev --fleet)."
        )
    return ""


@click.command("operator")
@click.option(
    "--control-cluster-url",
    envvar=_env("control-cluster-url"),
    default="",
    show_default=True,
    help="Cluster control plane URL (reports, trusted keys; pods' CONTROL_CLUSTER_URL).",
)
@click.option(
    "--leader-elect/--no-leader-elect",
    envvar=_env("leader-elect"),
    default=False,
    show_default=True,
    help="Run one active replica among several (kopf peering).",
)
@click.option(
    "--metrics-bind-address",
    envvar=_env("metrics-bind-address"),
    default=":8443",
    show_default=True,
    help="Address of /metrics; empty or 0 disables it.",
)
@click.option(
    "--health-probe-bind-address",
    envvar=_env("health-probe-bind-address"),
    default=":8081",
    show_default=True,
    help="Address of /healthz and /readyz; empty or 0 disables it.",
)
@click.option(
    "--workspace-concurrency",
    envvar=_env("workspace-concurrency"),
    default=10,
    show_default=True,
    type=click.IntRange(min=1),
    help="Workspace reconciles running at once.",
)
@click.option(
    "--namespace",
    envvar=_env("namespace"),
    default="",
    show_default=True,
    help="Watch this namespace only; empty watches all.",
)
@click.option(
    "--resource-image",
    envvar=_env("resource-image"),
    default=None,
    help="Image of the generic resource pod (pinned by tag or digest). Default: in a pod with "
    "POD_NAME and POD_NAMESPACE set, the operator's own image (what kustomize's images: sets); "
    f"else {DEFAULT_RESOURCE_IMAGE}.",
)
@click.option(
    "--pod-env-secret",
    envvar=_env("pod-env-secret"),
    default="",
    help="A Secret in each workspace's namespace that its pods read as environment (optional), "
    "e.g. DAP_DSN and DAP_JWT_SECRET.",
)
@click.option(
    "--insecure-skip-signature-verify",
    envvar=_env("insecure-skip-signature-verify"),
    is_flag=True,
    default=False,
    help="Development only: accept claims without checking signatures.",
)
@click.option(
    "--dev-auto-grant-claims",
    envvar=_env("dev-auto-grant-claims"),
    is_flag=True,
    default=False,
    help="Development mode (dap dev --fleet): grant unsigned claims on local datastores at once. "
    "Refused in a pod.",
)
@click.option(
    "--cluster-name",
    envvar=_env("cluster-name"),
    default="default",
    show_default=True,
    help="Name of this cluster in the reports to the control plane.",
)
@click.option(
    "--log-level",
    envvar=_env("log-level"),
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warn", "error"]),
)
def operator(
    control_cluster_url: str,
    leader_elect: bool,
    metrics_bind_address: str,
    health_probe_bind_address: str,
    workspace_concurrency: int,
    namespace: str,
    resource_image: str | None,
    pod_env_secret: str,
    insecure_skip_signature_verify: bool,
    dev_auto_grant_claims: bool,
    cluster_name: str,
    log_level: str,
) -> None:
    """Run the Kubernetes operator (Workspace, Datastore, ResourceClaim, ClusterClass)."""
    logs.configure(log_level)
    tracing.configure("dap-operator")  # OTEL_* variables; off (and never imported) unless they ask
    if insecure_skip_signature_verify:
        click.echo("warning: --insecure-skip-signature-verify: claims are NOT verified", err=True)
    if dev_auto_grant_claims:
        refusal = dev_mode_refusal(os.environ)
        if refusal:
            raise click.UsageError(refusal)
        click.echo(
            "warning: --dev-auto-grant-claims: unsigned claims on local datastores "
            f"({', '.join(sorted(claims.LOCAL_DRIVERS))} in the claim's namespace) are granted at once",
            err=True,
        )
    options = Options(
        control_cluster_url=control_cluster_url,
        leader_elect=leader_elect,
        metrics_bind_address=metrics_bind_address,
        health_probe_bind_address=health_probe_bind_address,
        workspace_concurrency=workspace_concurrency,
        namespace=namespace,
        resource_image=resource_image or default_resource_image(os.environ),
        pod_env_secret=pod_env_secret,
        insecure_skip_signature_verify=insecure_skip_signature_verify,
        dev_auto_grant_claims=dev_auto_grant_claims,
        cluster_name=cluster_name,
    )
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(running.run(options))
    except listening.ListenError as exc:  # a start-up that cannot succeed: the address is taken
        raise click.ClickException(str(exc)) from exc


@click.group("claim")
def claim() -> None:
    """Make, sign and verify resource claims (ed25519, by the datastore's owner)."""


@claim.command("keygen")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the private key (hex) to this file (mode 0600) instead of stdout.",
)
def keygen(out: Path | None) -> None:
    """Make an owner key pair: the public half goes into Datastore.spec.ownerPublicKey."""
    private, public = claims.keygen()
    if out is not None:
        out.touch(mode=0o600)
        out.write_text(private + "\n")
        click.echo(f"private key written to {out}", err=True)
    else:
        click.echo(f"private-key: {private}")
    click.echo(f"public-key: {public}")


def _read_key(key_file: Path | None, key_env: str) -> str:
    if key_file is not None:
        return key_file.read_text().strip()
    value = os.environ.get(key_env, "").strip()
    if not value:
        raise click.UsageError(f"give --key-file or set {key_env} to the owner's private key (hex)")
    return value


@claim.command("sign")
@click.option("--datastore", required=True, help="Datastore name (or namespace/name), as in the claim.")
@click.option("--workspace", required=True, help="Workspace name, as in the claim.")
@click.option("--permission", required=True, type=click.Choice(["read", "write", "read_write"]))
@click.option("--granted-by", required=True, help="Who grants (the datastore owner).")
@click.option("--granted-at", default=None, help="RFC 3339 time; default now (UTC).")
@click.option(
    "--key-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="File holding the owner's private key (hex); else $DAP_CLAIM_PRIVATE_KEY.",
)
@click.option(
    "--manifest",
    "name",
    default=None,
    metavar="NAME",
    help="Print a whole ResourceClaim named NAME instead of the bare signature.",
)
@click.option("--namespace", default=None, help="Namespace of the printed ResourceClaim.")
def sign(
    datastore: str,
    workspace: str,
    permission: str,
    granted_by: str,
    granted_at: str | None,
    key_file: Path | None,
    name: str | None,
    namespace: str | None,
) -> None:
    """Sign datastore|workspace|permission|grantedBy|grantedAt with the owner's private key."""
    at = granted_at or datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    grant = claims.Grant(datastore, workspace, permission, granted_by, at)
    try:
        signature = claims.sign(grant, _read_key(key_file, "DAP_CLAIM_PRIVATE_KEY"))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if name is None:
        click.echo(signature)
        return
    metadata: dict[str, str] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    manifest = {
        "apiVersion": names.CRD_API_VERSION,
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {
            "datastore": datastore,
            "workspace": workspace,
            "permission": permission,
            "grantedBy": granted_by,
            "grantedAt": at,
            "signature": signature,
        },
    }
    click.echo(yaml.safe_dump(manifest, sort_keys=False), nl=False)


@claim.command("verify")
@click.argument("claim_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--public-key", required=True, help="The datastore's ownerPublicKey (hex).")
def verify(claim_file: Path, public_key: str) -> None:
    """Check a ResourceClaim YAML's signature; exit 1 when it does not verify."""
    body = yaml.safe_load(claim_file.read_text()) or {}
    spec = body.get("spec", {}) if isinstance(body, dict) else {}
    grant = claims.Grant.from_spec(cast(bodies.ResourceClaimSpec, spec))
    if claims.verify(grant, str(spec.get("signature", "")), public_key):
        click.echo("valid")
        return
    click.echo("invalid: the signature does not verify against the public key", err=True)
    sys.exit(1)
