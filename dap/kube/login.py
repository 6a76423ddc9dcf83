"""Credentials as kopf finds them (in-cluster ServiceAccount, then ``$KUBECONFIG``/``~/.kube/config``),
or one named kubeconfig file, so a process can hold several identities side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kopf
import yaml


def from_kubeconfig(path: str) -> kopf.ConnectionInfo:
    """The current context of one kubeconfig file (token or client certificate).

    Lets one process hold two identities (a test runs the region and a cluster control side by
    side), which kopf's discovery through ``$KUBECONFIG`` cannot. The CA and the client
    certificate and key are read inline (``…-data``) or from the files a kubeconfig names
    (``certificate-authority``, ``client-certificate``, ``client-key``, as minikube and kubeadm
    write them), a relative path resolved against the kubeconfig's directory as kubectl does; inline
    data wins where both are given, as with kubectl. ``tokenFile`` is read like ``token``.
    """
    with open(path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    base = Path(path).resolve().parent
    context = _named(config, "contexts", config["current-context"])["context"]
    cluster = _named(config, "clusters", context["cluster"])["cluster"]
    user = _named(config, "users", context["user"])["user"]
    token = user.get("token") or _read(base, user.get("tokenFile"))
    return kopf.ConnectionInfo(
        server=cluster["server"],
        ca_data=cluster.get("certificate-authority-data"),
        ca_path=_file(base, cluster, "certificate-authority"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        scheme="Bearer" if token else None,
        token=token,
        certificate_data=user.get("client-certificate-data"),
        certificate_path=_file(base, user, "client-certificate"),
        private_key_data=user.get("client-key-data"),
        private_key_path=_file(base, user, "client-key"),
        default_namespace=context.get("namespace"),
    )


def resolve(base: Path, named: str) -> str:
    """A path of a kubeconfig, relative ones against its directory ``base`` (``~`` expanded). Pure."""
    given = Path(named).expanduser()
    return str(given if given.is_absolute() else base / given)


def _file(base: Path, section: dict[str, Any], key: str) -> str | None:
    """The file ``section[key]`` names, unless ``section[key + "-data"]`` holds it inline."""
    named = section.get(key)
    if not named or section.get(f"{key}-data"):
        return None
    found = resolve(base, str(named))
    if not Path(found).is_file():
        raise kopf.LoginError(f"the kubeconfig's {key} names {found}, which is no readable file")
    return found


def _read(base: Path, named: str | None) -> str | None:
    if not named:
        return None
    try:
        return Path(resolve(base, named)).read_text(encoding="utf-8").strip() or None
    except OSError as exc:
        raise kopf.LoginError(f"the kubeconfig's tokenFile {named}: {exc}") from exc


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
