"""The operator's error tree: the transport's errors (``dap.kube.errors``) and its own.

::

    OperatorError                  the operator's own failures
    └── InvalidSpecError           a custom resource that cannot be reconciled as written
    KubeError                      the transport (``dap.kube``), re-exported here
    ├── ApiError                   the Kubernetes API answered with an error status (.status)
    │   ├── NotFoundError          404: the object (or its kind) does not exist
    │   ├── ConflictError          409: already exists, or a stale resourceVersion
    │   └── InvalidObjectError     400/422: the API server refused a body we built
    └── ApiUnavailableError        no answer at all (connection refused, timeout)

``FAILURES`` is both roots: whatever the operator raises on purpose. Handlers map it onto kopf's
retry semantics: ``InvalidSpecError`` and ``InvalidObjectError`` become ``kopf.PermanentError``
(retrying cannot help until the object is edited, and the edit triggers a new run); every other
error becomes ``kopf.TemporaryError(delay=…)`` (the API server or a dependency will come back).
"""

from __future__ import annotations

from dap.kube.errors import (
    ApiError,
    ApiUnavailableError,
    ConflictError,
    InvalidObjectError,
    KubeError,
    NotFoundError,
)


class OperatorError(Exception):
    """Base of the operator's own errors (the transport's are ``KubeError``)."""


class InvalidSpecError(OperatorError):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


FAILURES: tuple[type[Exception], ...] = (OperatorError, KubeError)

__all__ = [
    "FAILURES",
    "ApiError",
    "ApiUnavailableError",
    "ConflictError",
    "InvalidObjectError",
    "InvalidSpecError",
    "KubeError",
    "NotFoundError",
    "OperatorError",
]
