"""The one error tree of ``dap.resource_pod``.

Every failure the pod can name is a :class:`PodError`. Library errors (aiohttp, PyNaCl, OS,
``dap.config``, ``dap.server``) are translated at the boundary with ``raise X from exc``, so the
pull loop decides what to do from the class alone::

    PodError
     ├── ConfigError               bad pod options: the process must not start
     ├── ControlError              talking to the control plane failed
     │    ├── ControlUnreachable   transport failure, timeout or 5xx: transient, retried
     │    └── ProtocolError        an answer we cannot use (bad JSON, 404, unexpected status)
     ├── VerificationError         the document cannot be trusted; reported as a violation
     │    ├── SignatureInvalid     unknown key, bad signature, bad hash, mismatch with the snapshot
     │    ├── RollbackRefused      snapshot version lower than the one running
     │    ├── SnapshotExpired      snapshot past ``expires_at`` (freeze)
     │    ├── LogProofInvalid      artifact not in the transparency log, or a forged proof or head
     │    ├── SplitView            a tree head that does not extend the last one accepted (fork)
     │    └── PolicyRefused        an envelope without the signatures its app's policy requires
     ├── LoadError                 verified artifact that cannot be loaded (manifests, schema)
     │    └── DestructivePending   the new version needs a destructive migration
     ├── SelfCheckFailed           the loaded version failed its self-check: rolled back
     └── StateDirError             the state directory cannot be read or written

``VerificationError.kind`` is the ``kind`` of the violation evidence it produces (``signature``,
``rollback``, ``freeze``, ``log``, ``split_view``, ``policy``), so the evidence module never has
to branch on classes.
"""

from __future__ import annotations

from typing import ClassVar, Literal

ViolationKind = Literal["rollback", "freeze", "signature", "policy", "log", "split_view"]


class PodError(Exception):
    """Root of every error raised by ``dap.resource_pod``."""


class ConfigError(PodError):
    """Invalid options; ``str(self)`` is the one-line reason printed before exiting."""


class ControlError(PodError):
    """The control plane did not give a usable answer."""


class ControlUnreachable(ControlError):  # noqa: N818 -- a condition, like aiohttp's ClientConnectionError
    """Connection refused, timeout, or a 5xx: try again later."""


class ProtocolError(ControlError):
    """The control plane answered something this pod cannot use."""


class VerificationError(PodError):
    """A snapshot or envelope failed verification; the pod refuses it and reports a violation."""

    kind: ClassVar[ViolationKind] = "signature"


class SignatureInvalid(VerificationError):  # noqa: N818 -- a condition of the document
    kind = "signature"


class RollbackRefused(VerificationError):  # noqa: N818 -- a condition of the document
    kind = "rollback"


class SnapshotExpired(VerificationError):  # noqa: N818 -- a condition of the document
    kind = "freeze"


class LogProofInvalid(VerificationError):  # noqa: N818 -- a condition of the document
    kind = "log"


class SplitView(VerificationError):  # noqa: N818 -- a condition of the log
    kind = "split_view"


class PolicyRefused(VerificationError):  # noqa: N818 -- a condition of the document
    kind = "policy"


class LoadError(PodError):
    """A verified artifact could not be loaded; the old version keeps serving."""


class DestructivePending(LoadError):  # noqa: N818 -- same name as dap.server's
    """The new version needs a destructive schema step: run ``dap migrate`` first."""


class SelfCheckFailed(PodError):  # noqa: N818 -- a condition of the new version
    """The freshly loaded version failed its self-check and was rolled back."""


class StateDirError(PodError):
    """The state directory could not be read or written."""
