"""dap.resource_pod — the generic resource pod: pull, verify, load, swap atomically, report.

One pod serves one workspace. It hosts the production server (``dap.server``) and converges it
to the artifact the control plane's signed snapshot names, pulling over HTTP (it never imports
``dap.control``: it trusts the control plane's signature, not its code)::

    config = resource_pod.Settings(control_url=..., workspace="acme", state_dir=Path(...),
                                   trusted_keys=resource_pod.verifying.trusted_keys([hex]))
    running = await resource_pod.start(server_options, config)
    running.pod.status.phase          # up_to_date, fetched, verified, loaded, failed, rolled_back
    await running.stop()

Layout — pure logic: ``documents`` (wire types), ``verifying`` (the signature/hash contract,
rollback, freeze), ``converging`` (phases and decisions), ``backoff``, ``evidence`` (records,
bounded buffer), ``settings``; thin I/O shells: ``fetching`` (aiohttp client of the control
plane), ``persisting`` (state directory), ``loading`` (catalog, safe schema steps, swap,
self-check), ``reporting`` (evidence sender, health and metering measures), ``pulling`` (the
pull loop), ``pullmetrics`` (its pull and convergence state on ``/metrics``), ``hosting``
(boot, ``/health``, shutdown), ``cli`` (``dap pod``); ``logkeeping`` and ``logproof`` keep
and check the transparency log's proofs. Only the pod's job lives here: dev mode
(``dap dev``, ``dap token``) is ``dap.dev``, above this package, which never imports it.

Errors (``errors``), one tree::

    PodError
     ├── ConfigError               bad options: the process must not start
     ├── ControlError
     │    ├── ControlUnreachable   transport failure, timeout, 5xx: transient
     │    └── ProtocolError        an answer the pod cannot use
     ├── VerificationError         refused document; reported as a violation (kind)
     │    ├── SignatureInvalid     key, signature, hashes, snapshot binding   (signature)
     │    ├── RollbackRefused      snapshot older than the one running         (rollback)
     │    └── SnapshotExpired      snapshot past expires_at                    (freeze)
     ├── LoadError                 manifests or schema: the step fails, old version serves
     │    └── DestructivePending   the new version needs ``dap migrate`` first
     ├── SelfCheckFailed           the loaded version failed its check: rolled back
     └── StateDirError             the state directory cannot be read or written
"""

from dap.resource_pod import converging, errors, evidence, loading, verifying
from dap.resource_pod.converging import Phase, Status
from dap.resource_pod.errors import PodError
from dap.resource_pod.hosting import Running, start
from dap.resource_pod.pulling import Pod
from dap.resource_pod.settings import Settings

__all__ = [
    "Phase",
    "Pod",
    "PodError",
    "Running",
    "Settings",
    "Status",
    "converging",
    "errors",
    "evidence",
    "loading",
    "start",
    "verifying",
]
