"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager.

``start(binaries, directory)`` runs the three processes from ``tools/k8s/``'s build, each on a
free port of 127.0.0.1, with their data, certificates, kubeconfigs and logs in ``directory``, and
returns once the API server answers ``/readyz`` and the controller-manager has done visible work
(the ``default`` ServiceAccount exists). ``ControlPlane.stop()`` ends each process by its PID,
politely first; the kernel also kills the children should the test process die
(``PR_SET_PDEATHSIG``, SIGKILL), so no run leaves an API server behind.

Why these settings:

- RBAC only (no ``AlwaysAllow``): the operator runs as its ServiceAccount with the ClusterRole of
  ``kustomize/base``, so a missing rule fails a test.
- ``--endpoint-reconciler-type none``: the API server refuses to publish 127.0.0.1 as the
  endpoint of the ``kubernetes`` Service; nothing here needs that Service.
- Service IPs come from a loopback range: nothing routes to ClusterIPs without kube-proxy, and if
  anything ever tried, the packets would stay on this machine. No webhooks or aggregated APIs
  are registered, so the API server itself dials out to nothing but etcd.
- The audit log records every request of a ServiceAccount (writes with their bodies): that is how
  tests and the benchmark count the operator's API calls on a real server (the emulator logged
  them itself), and what a failing test shows of the operator's writes.
- The controller-manager runs only the controllers the operator's behaviour depends on: garbage
  collector (owner references), namespace (deletion), deployment and replicaset (Deployment
  status), serviceaccount (the ``default`` account pods need). No scheduler and no kubelet:
  pods are created and stay Pending unless a test plays the kubelet.
- etcd runs without fsync: a test database, thrown away at the end.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import dataclasses
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.kube import pki as pki_

SERVICE_CIDR = "127.16.0.0/16"  # room for the benchmark's 500 Services
READY_WITHIN = 120.0  # seconds; the API server takes 10-30 s on two busy cores
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        # Writes with their bodies, so that a failing test can show what the operator sent.
        {
            "level": "Request",
            "userGroups": ["system:serviceaccounts"],
            "verbs": ["create", "update", "patch", "delete"],
        },
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ],
}
CONTROLLERS = "garbagecollector,namespace,deployment,replicaset,serviceaccount"


class ControlPlaneError(RuntimeError):
    """A component did not start; the message carries the tail of its log."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> None:
    # Linux prctl(PR_SET_PDEATHSIG, SIGKILL): the child dies with the process that started it.
    # SIGKILL, not SIGTERM: an API server whose etcd went first hangs in its graceful shutdown.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))


@dataclasses.dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 10.0) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.terminate()
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=grace)


def kubeconfig(server: str, ca: Path, *, user: dict[str, str], name: str = "dap-test") -> dict[str, Any]:
    """A kubeconfig document for ``server`` with credentials ``user`` (cert/key data or token)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def cert_user(pair: pki_.Pair) -> dict[str, str]:
    return {
        "client-certificate-data": base64.b64encode(pair.cert.read_bytes()).decode(),
        "client-key-data": base64.b64encode(pair.key.read_bytes()).decode(),
    }


@dataclasses.dataclass
class ControlPlane:
    directory: Path
    binaries: Path
    pki: pki_.Pki
    url: str
    admin_kubeconfig: Path
    audit_log: Path
    processes: list[Process] = dataclasses.field(default_factory=list)
    startup_seconds: float = 0.0

    def ssl_context(self) -> ssl.SSLContext:
        """TLS as the administrator: trusts the test CA, presents the admin certificate."""
        context = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        context.load_cert_chain(str(self.pki.admin.cert), str(self.pki.admin.key))
        return context

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        # No proxy, whatever the environment says: this server is on loopback.
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=self.ssl_context())
        )
        try:
            with opener.open(self.url + path, timeout=timeout) as answer:
                return int(answer.status), bytes(answer.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), bytes(exc.read())

    def check_alive(self) -> None:
        for process in self.processes:
            code = process.popen.poll()
            if code is not None:
                raise ControlPlaneError(
                    f"{process.name} exited with {code}; last lines of {process.log}:\n{process.tail()}"
                )

    def wait(self, what: str, ready: Callable[[], bool], within: float = READY_WITHIN) -> None:
        deadline = time.monotonic() + within
        while True:
            self.check_alive()
            with contextlib.suppress(OSError, ValueError):
                if ready():
                    return
            if time.monotonic() > deadline:
                logs = "\n\n".join(f"== {p.name} ({p.log})\n{p.tail()}" for p in self.processes)
                raise ControlPlaneError(f"timed out after {within:.0f}s waiting for {what}\n{logs}")
            time.sleep(0.25)

    def stop(self) -> None:
        """Stop every process by its PID, the last started first."""
        for process in reversed(self.processes):
            process.stop()


def _spawn(plane: ControlPlane, name: str, args: list[str]) -> None:
    log = plane.directory / f"{name}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(  # our own binaries, fixed arguments
            [str(plane.binaries / name), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=plane.directory,
            preexec_fn=die_with_parent,  # safe: no thread holds a lock this early
        )
    plane.processes.append(Process(name, popen, log))


def _etcd_args(directory: Path, client: int, peer: int) -> list[str]:
    return [
        "--name=dap-test",
        f"--data-dir={directory / 'etcd'}",
        f"--listen-client-urls=http://127.0.0.1:{client}",
        f"--advertise-client-urls=http://127.0.0.1:{client}",
        f"--listen-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-cluster=dap-test=http://127.0.0.1:{peer}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def _apiserver_args(plane: ControlPlane, port: int, etcd: int) -> list[str]:
    pki = plane.pki
    policy = plane.directory / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    return [
        f"--etcd-servers=http://127.0.0.1:{etcd}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={plane.directory / 'apiserver-certs'}",
        f"--tls-cert-file={pki.serving.cert}",
        f"--tls-private-key-file={pki.serving.key}",
        f"--client-ca-file={pki.ca.cert}",
        "--authorization-mode=RBAC",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={pki.service_account_pub}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--endpoint-reconciler-type=none",
        f"--audit-policy-file={policy}",
        f"--audit-log-path={plane.audit_log}",
        "--audit-log-mode=blocking",
        "--profiling=false",
    ]


def _controller_manager_args(kubeconfig_path: Path) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig_path}",
        f"--controllers={CONTROLLERS}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        "--secure-port=0",
        "--concurrent-gc-syncs=5",
        # client-go's default of 20 requests/s made the controllers, not the operator, the
        # bottleneck of the benchmark (500 Deployments → ReplicaSets → pods → statuses).
        "--kube-api-qps=300",
        "--kube-api-burst=500",
        "--concurrent-deployment-syncs=10",
        "--concurrent-replicaset-syncs=10",
    ]


def start(binaries: Path, directory: Path) -> ControlPlane:
    """Start etcd, kube-apiserver and kube-controller-manager; stop them all if any fails."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = pki_.make(directory / "pki")
    port, etcd, peer = free_port(), free_port(), free_port()
    plane = ControlPlane(
        directory=directory,
        binaries=binaries,
        pki=pki,
        url=f"https://127.0.0.1:{port}",
        admin_kubeconfig=directory / "admin.kubeconfig",
        audit_log=directory / "audit.log",
    )
    plane.admin_kubeconfig.write_text(
        yaml.safe_dump(kubeconfig(plane.url, pki.ca.cert, user=cert_user(pki.admin)))
    )
    kcm_config = directory / "controller-manager.kubeconfig"
    kcm_config.write_text(
        yaml.safe_dump(kubeconfig(plane.url, pki.ca.cert, user=cert_user(pki.controller_manager)))
    )
    started = time.monotonic()
    try:
        _spawn(plane, "etcd", _etcd_args(directory, etcd, peer))
        _spawn(plane, "kube-apiserver", _apiserver_args(plane, port, etcd))
        plane.wait("kube-apiserver /readyz", lambda: plane.get("/readyz")[0] == 200)
        _spawn(plane, "kube-controller-manager", _controller_manager_args(kcm_config))
        plane.wait(
            "the controller-manager to create the default ServiceAccount",
            lambda: plane.get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
        )
    except BaseException:
        plane.stop()
        raise
    plane.startup_seconds = time.monotonic() - started
    return plane
