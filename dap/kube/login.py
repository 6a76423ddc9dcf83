"""Credentials as kopf finds them (in-cluster ServiceAccount, then ``$KUBECONFIG``/``~/.kube/config``),
or one named kubeconfig file, so a process can hold several identities side by side."""

from __future__ import annotations

from typing import Any

import kopf
import yaml


def from_kubeconfig(path: str) -> kopf.ConnectionInfo:
    """The current context of one kubeconfig file (token or client certificate, inline data).

    Lets one process hold two identities (a test runs the region and a cluster control side by
    side), which kopf's discovery through ``$KUBECONFIG`` cannot.
    """
    with open(path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    context = _named(config, "contexts", config["current-context"])["context"]
    cluster = _named(config, "clusters", context["cluster"])["cluster"]
    user = _named(config, "users", context["user"])["user"]
    return kopf.ConnectionInfo(
        server=cluster["server"],
        ca_data=cluster.get("certificate-authority-data"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        scheme="Bearer" if user.get("token") else None,
        token=user.get("token"),
        certificate_data=user.get("client-certificate-data"),
        private_key_data=user.get("client-key-data"),
        default_namespace=context.get("namespace"),
    )


def _named(config: dict[str, Any], section: str, name: str) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            found: dict[str, Any] = entry
            return found
    raise kopf.LoginError(f"kubeconfig has no {section} entry named {name!r}")


def login(server: str = "", kubeconfig: str = "") -> kopf.ConnectionInfo:
    """Credentials: ``server`` without any (tests), a given kubeconfig, else kopf's discovery."""
    if server:
        return kopf.ConnectionInfo(server=server, insecure=True)
    if kubeconfig:
        return from_kubeconfig(kubeconfig)
    settings = kopf.OperatorSettings()
    try:
        info = kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(
            settings=settings
        )
    except OSError as exc:
        raise kopf.LoginError(
            "no Kubernetes credentials: not in a pod with a service account, and no readable "
            f"kubeconfig ($KUBECONFIG or ~/.kube/config): {exc}"
        ) from exc
    if info is None:
        raise kopf.LoginError("no Kubernetes credentials found (service account or kubeconfig)")
    return info
